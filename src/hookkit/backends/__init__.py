"""The framework seam: one package per framework, each a ``Backend`` subclass (``base.py``), found
through the registry (``hookkit.core.registry``, re-exported here): ``backend_for(obj)`` picks the
backend of a model, layer or tensor. A third framework is one module with a ``Backend`` subclass
plus one call:

    register_backend("jax", module="jax", backend="my_pkg.jax_backend:JaxBackend")
"""

from __future__ import annotations

from hookkit.backends.base import Backend
from hookkit.core.registry import (
    backend_for,
    backend_named,
    framework_of,
    framework_roots,
    loaded_backends,
    register_backend,
    registered_backends,
    unregister_backend,
)

__all__ = [
    "Backend",
    "backend_for",
    "backend_named",
    "framework_of",
    "framework_roots",
    "loaded_backends",
    "register_backend",
    "registered_backends",
    "unregister_backend",
]
