"""What ``router.attach`` gives per consumer: a handle removing it from the layer or parameter it
was placed on, and with the last consumer of a root's clock, the root's own hooks and clock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hookkit.core import clock as clocks
from hookkit.core.events import Consumer
from hookkit.core.handles import Handle, held


class Placed(Handle):
    """Removes one consumer from the layer or parameter it was placed on (held weakly); with the
    last consumer of a root's clock, the root's own hooks go too."""

    __slots__ = ("_discard", "_target", "_args", "_consumer", "_root")

    def __init__(self, discard: Callable, target: Any, args: tuple, consumer: Consumer, root: tuple):
        self._remove, self._discard, self._target, self._args, self._consumer, self._root = held, discard, target, args, consumer, root

    def remove(self) -> None:
        if self._remove is None:
            return
        self._remove = None
        target = self._target()
        if target is not None:
            self._discard(target, *self._args)
        consumer = self._consumer
        # a removed handle holds nothing: what the consumer kept (a capture's records) goes with its owner
        self._discard = self._args = self._consumer = None  # type: ignore[assignment]
        clock = consumer.scope.clock
        users = clock.users
        users.discard(id(consumer))
        if users:
            return
        root_ref, root_hooks = self._root
        model = root_ref()
        if model is not None and root_hooks.root_clock is clock:
            root_hooks.root_clock = None
            root_hooks._sync_native(model)
            if clocks.clock_of(model) is clock:  # the last feature on this root is gone: the next one counts from step 0
                clocks.forget(model)
