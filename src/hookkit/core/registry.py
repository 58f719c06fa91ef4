"""The backend registry: ``backend_for(obj)`` picks the backend of a model, layer or tensor.

Backends are found through registrations: (name, the module whose import activates it, where its
``Backend`` class lives). Only frameworks the process has already imported are considered
(einops' rule), so ``import hookkit`` imports neither torch nor paddle. The registry holds import
paths, so the core finds backends without importing ``hookkit.backends``; that package re-exports
these functions (``hookkit.backends.register_backend`` is the public spelling).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hookkit.core import errors
from hookkit.core.errors import ArgumentTypeError, UnsupportedModel, fail

if TYPE_CHECKING:
    from hookkit.backends.base import Backend

# what a class must have to be taken for a Backend (checked without importing hookkit.backends)
_BACKEND_METHODS = ("is_layer", "is_tensor", "named_layers", "hook_forward", "family")


@dataclass(frozen=True)
class _Registration:
    name: str
    module: str  # present in sys.modules -> the backend is considered
    backend: str | type  # "package.module:Class", or the class itself
    package: str  # what to pip install, for error messages


_registry: dict[str, _Registration] = {}
_instances: dict[str, Backend] = {}
_by_type: dict[type, Backend] = {}


def register_backend(name: str, module: str, backend: str | type, *, package: str | None = None) -> None:
    """Make hookkit work on the models and tensors of another framework.

    ``module``: the framework's module ("torch", "mlx.core"); the backend is tried only once the
    user has imported it. ``backend``: a ``Backend`` subclass or its import path ``"package.module:Class"``
    (imported on first use). ``package``: the distribution to install, for error messages.
    Registering a name again replaces the earlier registration.

    >>> hookkit.backends.register_backend("mlx", "mlx.core", "my_pkg.mlx_backend:MlxBackend")   # doctest: +SKIP
    """
    for arg, value in (("name", name), ("module", module)):
        if not isinstance(value, str) or not value:
            _refuse(arg, "a non-empty string", value)
    valid_class = isinstance(backend, type) and all(callable(getattr(backend, m, None)) for m in _BACKEND_METHODS)
    if not valid_class and not (isinstance(backend, str) and backend.count(":") == 1):
        _refuse("backend", "a Backend subclass or 'package.module:Class'", backend)
    unregister_backend(name)
    _registry[name] = _Registration(name, module, backend, package or module)


def _refuse(arg: str, valid: str, value: Any) -> None:
    fail("register_backend", arg, valid, value, kind=ArgumentTypeError)


def unregister_backend(name: str) -> None:
    """Forget backend ``name`` (no error when it is not registered); models of it are then unsupported."""
    _registry.pop(name, None)
    _instances.pop(name, None)
    for kind in [k for k, b in _by_type.items() if b.name == name]:
        del _by_type[kind]


def _load(reg: _Registration) -> Backend:
    backend = _instances.get(reg.name)
    if backend is None:
        cls = reg.backend
        if isinstance(cls, str):
            path, _, attr = cls.partition(":")
            cls = getattr(importlib.import_module(path), attr)
        backend = _instances[reg.name] = cls()
        backend.name = reg.name
    return backend


def backend_named(name: str) -> Backend:
    """The backend registered as ``name`` ("torch", "paddle"...), importing its framework.

    >>> backend_named("torch").from_numpy(array)   # doctest: +SKIP
    """
    reg = _registry.get(name)
    if reg is None:
        fail("backend_named", "name", "one of " + ", ".join(map(repr, _registry)), name)
    if importlib.util.find_spec(reg.module.partition(".")[0]) is None:
        raise ImportError(f"{reg.module} is not installed (pip install {reg.package})")
    importlib.import_module(reg.module)
    return _load(reg)


def registered_backends() -> list[str]:
    """Names of every registered backend, imported or not."""
    return list(_registry)


def framework_of(obj: Any) -> str:
    """The registered name of the framework defining ``obj``'s class (or ``obj``, a class; '' for none), from the class's
    module alone: nothing is imported, so it also names a framework the backend of which is not loaded."""
    roots = {reg.module.partition(".")[0]: reg.name for reg in _registry.values()}
    for cls in (obj if isinstance(obj, type) else type(obj)).__mro__:  # a class itself: its own framework
        name = roots.get((cls.__module__ or "").partition(".")[0])
        if name:
            return name
    return ""


def framework_roots() -> frozenset[str]:
    """The top-level module names of the registered frameworks ("torch", "paddle"...): frames in them
    are framework machinery, not user code (see ``hookkit.core.user_frame``)."""
    return frozenset(reg.module.partition(".")[0] for reg in _registry.values())


def loaded_backends() -> list[Backend]:
    """Backends of the frameworks the process has imported."""
    return [_load(reg) for reg in list(_registry.values()) if reg.module in sys.modules]


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
        f"hookkit works on the models, layers and tensors of {', '.join(_registry)} (a framework counts once imported); "
        f"got {kind.__module__}.{kind.__qualname__}"
    )


register_backend("torch", "torch", "hookkit.backends.torch:TorchBackend", package="torch")
register_backend("paddle", "paddle", "hookkit.backends.paddle:PaddleBackend", package="paddlepaddle")
errors._framework_of = framework_of  # argument errors name a tensor's framework
