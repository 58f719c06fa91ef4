"""``analysis_pass``: run a model for an analysis and leave it exactly as it was found."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def analysis_pass(model: Any, backend: Any, *, eval: bool = True, grad: bool = True) -> Iterator[None]:
    """Inside: the model in eval mode (unless ``eval=False``) and autograd recording (``grad=True``,
    also under the caller's ``no_grad``); after, also when the body raises: every layer's training
    flag as it was. Gradients should be taken with ``backend.grads_of`` (never ``backward``), so the
    parameters' ``.grad`` stay as they were too.

    >>> with analysis_pass(model, backend_for(model)):   # doctest: +SKIP
    ...     out = model(x)
    """
    modes = [(layer, backend.is_training(layer)) for _, layer in backend.named_layers(model)]
    if eval:
        backend.set_training(model, False)
    try:
        with backend.enable_grad() if grad else contextlib.nullcontext():
            yield
    finally:
        # one flag at a time: set_training recurses, and a model may hold layers in mixed modes
        for layer, training in modes:
            if backend.is_training(layer) != training:
                layer.training = training
