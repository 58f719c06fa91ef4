"""Renamed or changed public API keeps working for a while, with one warning that names the replacement.

``HookkitDeprecationWarning`` is a ``FutureWarning``: Python shows it by default (a plain
``DeprecationWarning`` is hidden outside ``__main__``), once per deprecated name and process.

>>> warn_deprecated("hookkit.observers.gradcam.gradcam", "hookkit.cam(..., method='gradcam')", since="0.2")   # doctest: +SKIP
>>> old_name = deprecated_alias(new_function, "old_name", since="0.2")                                       # doctest: +SKIP
>>> @renamed_argument("layer", "layers", since="0.2")                                                      # doctest: +SKIP
... def capture(model, layers): ...
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

from hookkit.core.errors import ArgumentTypeError, fail
from hookkit.core.user_frame import user_stacklevel

F = TypeVar("F", bound=Callable[..., Any])

_warned: set[str] = set()


class HookkitDeprecationWarning(FutureWarning):
    """A public name or argument of hookkit that changed; the message says what to use instead."""


def warn_deprecated(what: str, replacement: str, *, since: str, removed_in: str | None = None, stacklevel: int | None = None) -> None:
    """Warn once per process that ``what`` is deprecated since ``since`` and ``replacement`` replaces it;
    the warning names the user's line (the first frame outside hookkit), unless ``stacklevel`` is given."""
    if what in _warned:
        return
    _warned.add(what)
    until = f" and will be removed in {removed_in}" if removed_in else ""
    if stacklevel is None:
        stacklevel = user_stacklevel()
    warnings.warn(f"{what} is deprecated since hookkit {since}{until}; use {replacement}", HookkitDeprecationWarning, stacklevel=stacklevel)


def deprecated_alias(fn: F, old_name: str, *, since: str, removed_in: str | None = None, replacement: str | None = None) -> F:
    """``fn`` under its former name: calls work as before and warn once, naming ``replacement``
    (default: ``fn``'s module and name)."""
    new_name = replacement or f"{fn.__module__}.{fn.__qualname__}"

    @functools.wraps(fn)
    def alias(*args: Any, **kwargs: Any) -> Any:
        warn_deprecated(old_name, new_name, since=since, removed_in=removed_in)
        return fn(*args, **kwargs)

    alias.__doc__ = f"Deprecated alias of :func:`{new_name}` (since {since})."
    return alias  # type: ignore[return-value]


def renamed_argument(old: str, new: str, *, since: str, removed_in: str | None = None) -> Callable[[F], F]:
    """Accept keyword ``old`` as ``new`` (with one warning); giving both is an error naming them."""

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if old in kwargs:
                if new in kwargs:
                    fail(
                        fn.__name__, old, f"left out when {new}= is given ({old}= is its former name)", kwargs[old], kind=ArgumentTypeError
                    )
                warn_deprecated(f"{fn.__name__}({old}=...)", f"{fn.__name__}({new}=...)", since=since, removed_in=removed_in)
                kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """A meta path finder: ``import old.path`` returns the module now at ``new.path`` (one warning).
    The one way hookkit keeps a moved module's old path: no re-export module stays at the old path."""

    def __init__(self) -> None:
        self.moved: dict[str, tuple[str, str]] = {}  # old module name -> (new module name, since)
        self._specs: dict[str, Any] = {}  # old name -> the module's own spec, while the import runs

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in self.moved:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: Any) -> Any:
        new, since = self.moved[spec.name]
        warn_deprecated(spec.name, new, since=since, stacklevel=_importer_level())
        module = importlib.import_module(new)
        self._specs[spec.name] = module.__spec__  # the import machinery sets __spec__ to the old path's
        return module

    def exec_module(self, module: Any) -> None:
        """The module is the one at its new path, already run: its own spec put back."""
        old = module.__spec__.name
        if old in self._specs:
            module.__spec__ = self._specs.pop(old)


def _importer_level() -> int:
    """``warn_deprecated``'s stacklevel naming the line that imported: past hookkit and the import machinery
    (``warnings`` does not count the import machinery's frames)."""
    frame: FrameType | None = sys._getframe(2)
    level = 3  # warn_deprecated's caller's caller
    while frame is not None:
        root = frame.f_globals.get("__name__", "").partition(".")[0]
        if root not in ("hookkit", "importlib", "_frozen_importlib", "_frozen_importlib_external"):
            return level
        level += root == "hookkit"
        frame = frame.f_back
    return 2


_MOVED = _MovedModules()


def moved_modules(moved: dict[str, str], *, since: str) -> None:
    """Old module paths that keep importing as the modules now at the new paths, each warning once:
    ``moved_modules({"hookkit.analyses.cam_methods": "hookkit.analyses.cam.methods"}, since="0.4")``."""
    _MOVED.moved.update({old: (new, since) for old, new in moved.items()})
    if _MOVED not in sys.meta_path:
        sys.meta_path.insert(0, _MOVED)
