"""Handles: what every hookkit registration returns. ``remove()`` is idempotent; ``with`` removes on exit."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import TypeVar

from hookkit.core.entry import entry_name
from hookkit.core.errors import HookkitError
from hookkit.core.failures import explain

# ``with`` gives back the object itself, typed as its own class (``typing.Self`` needs Python 3.11)
HandleT = TypeVar("HandleT", bound="Handle")


class Handle:
    """Removes one registration. Idempotent; a context manager that removes on exit, errors included.

    >>> with hookkit.on_forward(model, "fc", fn):   # doctest: +SKIP
    ...     model(x)
    """

    __slots__ = ("_remove", "__weakref__")

    def __init__(self, remove: Callable[[], None] | None = None):
        self._remove = remove

    @property
    def removed(self) -> bool:
        """True once ``remove()`` has run."""
        return self._remove is None

    def remove(self) -> None:
        """Detach what this handle placed; later calls do nothing."""
        fn, self._remove = self._remove, None
        if fn is not None:
            fn()

    def __enter__(self: HandleT) -> HandleT:
        if self._remove is None and isinstance(self, HandleGroup):
            raise HookkitError(
                f"this {_verb(self) or type(self).__name__} was removed (remove() or the end of its `with` block): "
                "it records and changes nothing any more; make a new one"
            )
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc is not None:  # a framework error in a hooked forward: name the layer (core/failures)
            explain(exc, _verb(self))
        self.remove()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {'removed' if self.removed else 'active'}>"


class HandleGroup(Handle):
    """Several handles removed together, last placed first.

    >>> group = HandleGroup([h1, h2]); group.remove()   # doctest: +SKIP
    """

    __slots__ = ("handles",)

    def __init__(self, handles: Iterable[Handle] = ()):
        super().__init__(held)  # not the bound method: a group holding itself would wait for the GC
        self.handles: list[Handle] = list(handles)

    def remove(self) -> None:
        """Remove every handle of the group, last placed first; later calls do nothing."""
        if self._remove is not None:
            self._remove = None
            self._remove_all()

    def add(self, handle: HandleT) -> HandleT:
        """Adopt ``handle``; returns it."""
        self.handles.append(handle)
        return handle

    def _remove_all(self) -> None:
        first_error: BaseException | None = None
        for handle in reversed(self.handles):
            try:
                handle.remove()
            except BaseException as exc:  # keep removing the rest, then report
                first_error = first_error or exc
        if first_error is not None:
            raise first_error

    def __len__(self) -> int:
        return len(self.handles)

    def __iter__(self) -> Iterator[Handle]:
        return iter(self.handles)

    def __getitem__(self, i: int) -> Handle:
        return self.handles[i]


def held() -> None:
    """What a handle that overrides ``remove`` holds until removed (``HandleGroup``, ``placing.Placed``):
    not a bound method of its own, which would make it a cycle only the GC frees."""


def _verb(handle: Handle) -> str:
    """The hookkit call a handle came from, for messages: the public function running now, else the
    handle's own class when it is a verb's (``capture``), else ''."""
    name = entry_name("")
    if name:
        return name
    import sys

    cls = type(handle).__name__
    public = sys.modules.get("hookkit")
    return cls if cls not in ("Handle", "HandleGroup") and getattr(public, cls, None) is type(handle) else ""
