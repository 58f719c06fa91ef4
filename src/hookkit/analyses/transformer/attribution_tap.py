"""The attributed layer's tap: one router consumer that, at each forward, records the layer's value
(its output's first tensor, or its first tensor input with ``where="input"``) and may replace it,
or end the forward right after the layer. The attribution methods set ``replace`` / ``stop`` before
each forward; the tap is removed when the attribution ends, also on error.

>>> tap = LayerTap(model, "encoder.3", layer, backend, "output")   # doctest: +SKIP
>>> tap.replace = lambda value: scaled                            # doctest: +SKIP
>>> out = tap.run(model, x); tap.value                            # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hookkit.core.handles import HandleGroup
from hookkit.core.router import INTERVENTION, Event, Halt
from hookkit.sites import FIRST, Site, attach_sites


class _Stopped(Halt):
    """Ends a forward once the tapped layer ran (neuron methods need nothing after it)."""


class LayerTap(HandleGroup):
    """Records (``value``, ``calls``) and replaces (``replace``: value -> new value or None) one layer's value."""

    def __init__(self, model: Any, name: str, layer: Any, backend: Any, where: str):
        super().__init__()
        self.be, self.name, self.where = backend, name, where
        self.value: Any = None
        self.calls = 0
        self.replace: Callable[[Any], Any] | None = None
        self.stop = False
        event, index = ("forward", 0) if where == "output" else ("forward_pre", FIRST)
        self.site = Site(name, name, layer, event, index)
        self.add(attach_sites(model, [self.site], lambda _: self._on_call, INTERVENTION))

    def run(self, model: Any, x: Any, kwargs: dict | None = None) -> Any:
        """``model(x, **kwargs)`` with this tap; None when the tap ended the forward (``stop``)."""
        self.value, self.calls = None, 0
        try:
            return model(x, **(kwargs or {}))
        except _Stopped:
            return None

    def _swap(self, t: Any, leaf: int, ev: Event) -> Any:
        self.value = t
        new = self.replace(t) if self.replace is not None else None
        return t if new is None else new

    def _on_call(self, ev: Event) -> Any:
        self.calls += 1
        if self.calls > 1:
            return None
        out = None
        if self.replace is not None:
            out = self.site.write(self.be, ev, self._swap)
        else:
            self.value = self.site.tensor(self.be, ev)
        if self.stop:
            raise _Stopped()
        return out
