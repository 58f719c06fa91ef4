"""What an analysis explains: ``target`` -> one score per sample, from the model's whole output.

``target`` is None (each sample's predicted class), an int class index, one entry per sample (class
indices or callables on that sample's logits), or a callable ``f(output) -> scores [N]`` (or a
scalar) that gets the model's whole output: a tensor, a tuple, a dict, a Hugging Face
``ModelOutput``, a detection list; so regression, segmentation (a class's pixels under a mask) and
detection (a box's score) are one callable each. Class targets read the logits: the output itself,
its ``logits`` entry, or its first tensor.

>>> check_target(target, n=8)                                 # doctest: +SKIP
>>> scores = target_scores(backend, output, target, 8)        # [8], one per sample
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from hookkit.core.entry import entry_name
from hookkit.core.tree import first_tensor
from hookkit.core.validate import ArgumentTypeError, InvalidArgument, fail

Target = int | Sequence[Any] | Callable[[Any], Any] | None
TARGETS = "None (the predicted class), an int class index, a list of one per sample, or a callable f(output) -> scores"


def check_target(target: Any, n: int) -> None:
    """What can be checked before the forward: the kind of target and, for a list, its length."""
    fn = entry_name()
    if target is None or callable(target):
        return
    if isinstance(target, (bool, np.bool_)) or isinstance(target, (str, bytes, float, dict)):
        fail(fn, "target", TARGETS, target, kind=ArgumentTypeError)
    if isinstance(target, (int, np.integer)):
        if target < 0:
            fail(fn, "target", "a class index >= 0", target)
        return
    try:
        items = list(target)
    except TypeError:
        fail(fn, "target", TARGETS, target, kind=ArgumentTypeError)
    if len(items) != n:
        fail(fn, "target", f"a list of {n} entries, one per sample (the inputs hold {n})", target)
    for c in items:
        if not (callable(c) or (isinstance(c, (int, np.integer)) and not isinstance(c, (bool, np.bool_)) and c >= 0)):
            fail(fn, "target", "a list of class indices >= 0 (or callables), one per sample", target, kind=ArgumentTypeError)


def logits_of(backend: Any, output: Any) -> Any:
    """The tensor class targets index: ``output`` itself, its ``logits`` (a ``ModelOutput``), or its first tensor."""
    if backend.is_tensor(output):
        return output
    logits = output.get("logits") if isinstance(output, dict) else getattr(output, "logits", None)
    return logits if backend.is_tensor(logits) else first_tensor(output, backend.is_tensor)


def predicted_classes(backend: Any, output: Any, n: int) -> list[int]:
    """Each sample's argmax class (one host read, before any gradient is taken)."""
    logits = logits_of(backend, output)
    return backend.to_numpy(logits).reshape(n, -1).argmax(axis=1).tolist()


def target_scores(backend: Any, output: Any, target: Target, n: int) -> Any:
    """One score per sample ``[N]`` (a framework tensor on the output's device) for ``target``;
    a callable target that returns a scalar is returned as it is."""
    if callable(target):
        return target(output)
    fn = entry_name()
    logits = logits_of(backend, output)
    if logits is None:
        raise InvalidArgument(f"{fn}(): the model returned no tensor to take a class score from; give target=f(output) -> scores")
    shape = backend.shape(logits)
    if target is None:
        classes: list[Any] = predicted_classes(backend, logits, n)
    elif isinstance(target, (int, np.integer)):
        classes = [int(target)] * n
    else:
        classes = list(target)
    if len(shape) != 2 and any(not callable(c) for c in classes):
        raise InvalidArgument(
            f"{fn}(): a class target needs model outputs [N, classes]; got {list(shape)}: give target=f(output) -> scores"
        )
    for c in classes:
        if not callable(c) and not 0 <= int(c) < shape[-1]:
            fail(fn, "target", f"a class index in [0, {shape[-1] - 1}] (the model outputs {shape[-1]} classes)", target)
    m = backend.family("tensor_math")
    if not any(callable(c) for c in classes):  # one gather, however many rows
        index = backend.from_numpy(np.asarray(classes, dtype=np.int64).reshape(-1, 1), like=logits)
        return m.reshape(m.gather(logits, 1, index), [-1])
    return m.stack([c(logits[i]) if callable(c) else logits[i, int(c)] for i, c in enumerate(classes)])


def resolve_target(backend: Any, output: Any, target: Target, n: int) -> Target:
    """``target`` with None replaced by each sample's predicted class in ``output`` (the model's
    output on the ``n`` samples), so that later forwards on changed inputs explain the same classes."""
    return predicted_classes(backend, output, n) if target is None else target


def expand_target(target: Target, samples: Sequence[int]) -> Target:
    """The target of rows made from samples ``samples[i]`` (a batch of repeated or scaled samples):
    a per-sample list picks its entries; an int or a callable on the whole output stays as it is."""
    if target is None or callable(target) or isinstance(target, (int, np.integer)):
        return target
    items = list(target)
    return [items[j] for j in samples]
