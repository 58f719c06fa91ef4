"""The mult-add counter interface that ``hookkit.summary`` reads; each backend supplies its own.

A counter keeps a running total of one forward's mult-adds. The summary reads ``total()`` at each
layer call's pre and post events: the difference is the call's inclusive count (a parent includes
its children, a layer called three times gets three counts). ``Backend.mult_add_counter()`` returns
a fresh one per summary; this base class counts nothing (a backend without a counter still works).
"""

from __future__ import annotations

from typing import Any


class MultAddCounter:
    """Running mult-add total of one forward; ``label`` says how the counting is done.

    >>> with backend.mult_add_counter() as counter:   # doctest: +SKIP
    ...     model(x)
    >>> counter.total()   # doctest: +SKIP
    """

    label = "not counted (this framework's backend has no mult-add counter)"

    def __enter__(self) -> MultAddCounter:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def total(self) -> int:
        """Mult-adds counted so far in this forward."""
        return 0

    def before_call(self, layer: Any, args: tuple, kwargs: dict) -> None:
        """Called at each observed layer call's pre event."""

    def after_call(self, layer: Any, args: tuple, kwargs: dict, output: Any) -> None:
        """Called at each observed layer call's post event, before its inclusive count is read."""
