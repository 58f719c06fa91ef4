"""The framework seam: ``backend_for(obj)`` picks the backend of a model, layer or tensor.

Only frameworks already imported by the user are considered (einops' rule), so ``import hookkit``
imports neither torch nor paddle.
"""

from __future__ import annotations

import sys
from typing import Any

from hookkit.backends.base import Backend
from hookkit.core.errors import UnsupportedModel

__all__ = ["Backend", "backend_for", "loaded_backends"]

_FRAMEWORKS = ("torch", "paddle")
_instances: dict[str, Backend] = {}
_by_type: dict[type, Backend] = {}


def _load(name: str) -> Backend:
    backend = _instances.get(name)
    if backend is None:
        if name == "torch":
            from hookkit.backends.torch import TorchBackend as cls
        else:
            from hookkit.backends.paddle import PaddleBackend as cls
        backend = _instances[name] = cls()
    return backend


def loaded_backends() -> list[Backend]:
    """Backends of the frameworks the process has imported."""
    return [_load(name) for name in _FRAMEWORKS if name in sys.modules]


def backend_for(obj: Any) -> Backend:
    """The backend owning ``obj`` (a model, layer or tensor).

    >>> backend_for(torch.nn.Linear(2, 2)).name   # doctest: +SKIP
    'torch'
    """
    kind = type(obj)
    backend = _by_type.get(kind)
    if backend is not None:
        return backend
    for backend in loaded_backends():
        if backend.owns(obj):
            _by_type[kind] = backend
            return backend
    raise UnsupportedModel(
        f"hookkit works on torch.nn.Module / paddle.nn.Layer models and their tensors; got {kind.__module__}.{kind.__qualname__}"
    )
