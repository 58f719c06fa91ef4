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
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

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
        from hookkit.core.user_frame import user_stacklevel

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
                    from hookkit.core.validate import ArgumentTypeError, fail

                    fail(
                        fn.__name__, old, f"left out when {new}= is given ({old}= is its former name)", kwargs[old], kind=ArgumentTypeError
                    )
                warn_deprecated(f"{fn.__name__}({old}=...)", f"{fn.__name__}({new}=...)", since=since, removed_in=removed_in)
                kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
