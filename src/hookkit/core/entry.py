"""Which public function the user called: set once at the public entry, read where an error is made.

Errors name the function the user called (``capture(): ...``), not the helper that found the
fault. Rather than thread ``fn="capture"`` through every signature, the public entry point is
decorated once and any check below it asks ``entry_name()``. The outermost entry wins: ``cam``
calling ``capture`` inside still reports ``cam()``, the function the user wrote.

>>> @public_entry("gaussian_noise")
... def gaussian_noise(model, std=0.1):
...     return entry_name()
>>> gaussian_noise(None)
'gaussian_noise'
>>> entry_name()
'hookkit'

Work done later, in a hook at forward time, runs outside the entry: a consumer that may warn or
raise at forward time keeps the name it was built under (``self.name = entry_name()`` in its
``__init__``) and runs that work ``with restored(self.name):``, so the same checks below it name it.
No helper takes the function's name as an argument.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

__all__ = ["entry_name", "public_entry", "entered", "restored"]

F = TypeVar("F", bound=Callable[..., Any])

_CURRENT: ContextVar[str | None] = ContextVar("hookkit_entry", default=None)


def entry_name(default: str = "hookkit") -> str:
    """The public function the user called (``"capture"``), or ``default`` outside any entry."""
    return _CURRENT.get() or default


@contextmanager
def entered(name: str) -> Iterator[None]:
    """Run the block as inside the public function ``name`` (kept if an outer entry is active)."""
    if _CURRENT.get() is not None:
        yield
        return
    token = _CURRENT.set(name)
    try:
        yield
    finally:
        _CURRENT.reset(token)


class restored:
    """Run the block under ``name``, the entry a consumer was built under (work at forward time, outside
    any entry; an entry active meanwhile, another function the user called, does not name it).

    >>> with restored("steer"):
    ...     entry_name()
    'steer'
    """

    __slots__ = ("name", "token")

    def __init__(self, name: str):
        self.name = name

    def __enter__(self) -> None:
        self.token = _CURRENT.set(self.name)

    def __exit__(self, *exc: object) -> None:
        _CURRENT.reset(self.token)


def public_entry(name: str | None = None) -> Callable[[F], F]:
    """Decorate a public function (or a class's ``__init__``) so that checks below it name it.

    ``name`` defaults to the function's name; for ``__init__`` to its class's name.
    """

    def wrap(func: F) -> F:
        shown = name or (func.__qualname__.split(".")[0] if func.__name__ == "__init__" else func.__name__)

        @functools.wraps(func)
        def inner(*args: Any, **kwargs: Any) -> Any:
            if _CURRENT.get() is not None:  # an inner public call: the outer entry is what the user wrote
                return func(*args, **kwargs)
            token = _CURRENT.set(shown)
            try:
                return func(*args, **kwargs)
            finally:
                _CURRENT.reset(token)

        return inner  # type: ignore[return-value]

    return wrap
