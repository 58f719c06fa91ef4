"""What ``router.attach`` gives: a handle removing the consumers it placed (``PlacedLayers``: all
those of one call on layers; ``Placed``: one on a parameter), and with the last consumer of a root's
clock, the root's own hooks and clock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
        if not users:
            release_root(clock, self._root)


class PlacedLayers(Handle):
    """Removes the consumers one ``router.attach_each`` placed on layers, in one pass, last placed
    first: a consumer, the native hooks its layer no longer needs, and with the last consumer of the
    root's clock, the root's own hooks and clock. One object for all the layers of one call: what a
    short context costs is one pass at its start and one at its end."""

    __slots__ = ("placed", "_event", "_clock", "_root")

    def __init__(self, event: str, clock: Any, root: tuple):
        self._remove, self._event, self._clock, self._root = held, event, clock, root
        self.placed: list[tuple[Any, Consumer]] = []  # (the layer's LayerHooks, consumer), in placing order

    def remove(self) -> None:
        if self._remove is None:
            return
        self._remove = None
        placed, self.placed = self.placed, []  # a removed handle holds nothing (a capture's records go with it)
        event, clock = self._event, self._clock
        users = clock.users
        first_error: BaseException | None = None
        for hooks, consumer in reversed(placed):
            users.discard(id(consumer))
            try:
                native = hooks._native_post
                if hooks._count == 1 and hooks._native_pre is None and native is not None and hooks.root_clock is None:
                    # LayerHooks.drop's usual case inline: the layer's last consumer, its post-hook alone
                    cs = hooks.consumers
                    if cs[event] and cs[event][0] is consumer:
                        cs[event], hooks._count, hooks._native_post = (), 0, None
                        hooks._hot, hooks._one, hooks._stale, hooks._pre, hooks._fwd, hooks._scopes = None, None, True, (), (), ()
                        native.remove()
                        continue
                hooks.drop(event, consumer)
            except BaseException as exc:  # keep removing the rest, then report
                first_error = first_error or exc
        if not users:
            release_root(clock, self._root)
        if first_error is not None:
            raise first_error


def release_root(clock: Any, root: tuple) -> None:
    """The last consumer of ``clock`` went: the root's own hooks go, and its clock (the next
    feature counts from step 0)."""
    root_ref, root_hooks = root
    model = root_ref()
    if model is not None and root_hooks.root_clock is clock:
        root_hooks.unhook_root(model)
    clock.live = False  # what clocks.forget does to a clock nobody uses (its model's, or one remove_all replaced)
