"""Clocks and call numbering: which forward of which root a call belongs to, and which call it is.

Names and clocks belong to the root a consumer was attached through, not to the layer: a consumer
holds a ``Scope`` (root clock + the layer's name under that root). ``step`` counts forwards of the
root, ``call`` counts calls of the layer within one forward, both per thread (a ``Forward`` lives in
the root clock's thread-local slot), so two threads serving one model never mix their indices.

Activation checkpointing re-runs forwards during backward; ``number`` gives such a recompute the
number of the original call it recomputes.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from threading import get_ident
from typing import Any


class Forward:
    """One forward of a root in one thread: its step and the calls counted so far, per scope."""

    __slots__ = ("step", "calls", "recomputed", "pending", "transformed", "hot", "thread")

    def __init__(self, step: int, transformed: bool = False):
        self.step = step
        self.thread = get_ident()
        self.transformed = transformed  # inside a functional transform (torch.func grad, vmap...)
        # True while the root's forward runs outside a transform: a call may take the router's hot
        # path. Cleared when the root's forward returns: a later call is a checkpoint recompute or
        # a direct call of a layer, which the general path numbers.
        self.hot = not transformed
        self.calls: dict[Scope, int] = {}  # scope -> its calls so far in this forward, unless the scope holds them
        self.recomputed: dict[Scope, int] = {}  # scope -> calls re-run by activation checkpointing
        self.pending: dict[Scope, Any] = {}  # scope -> grads.GradCall: backward consumers' pre-hook -> post-hook


class Clock:
    """Counts forwards of one root model (ticked by the root's pre-hook while anyone uses it).
    ``current()`` is the calling thread's forward (another thread's, else a fresh one, when the
    thread has none: autograd's device threads run backward hooks). ``solo`` is the forward in
    progress (hot) while one thread at a time runs the root, read by the router's hot path instead
    of the thread-local slot; None between forwards, and for good once two threads ran forwards
    of the root at the same time."""

    __slots__ = ("count", "local", "last", "solo", "threads", "users", "scopes", "__weakref__")

    def __init__(self) -> None:
        self.count = 0  # forwards started, all threads
        self.local = threading.local()
        self.last: Forward | None = None
        self.solo: Forward | None = None
        self.threads = False  # two threads have run forwards of the root at the same time
        self.users: set[int] = set()  # ids of the consumers attached through this root
        self.scopes: dict[str, Scope] = {}  # layer name -> its scope, one per name

    def tick(self, transformed: bool = False) -> Forward:
        """Start the next forward in the calling thread."""
        fw = Forward(self.count, transformed)
        self.count += 1
        last = self.last
        if last is not None and last.hot and last.thread != fw.thread:
            self.threads = True
        self.local.fw = self.last = fw
        self.solo = None if self.threads or transformed else fw
        return fw

    def current(self) -> Forward:
        fw = getattr(self.local, "fw", None)
        if fw is None:
            fw = self.last
            if fw is None:
                fw = self.last = Forward(0)
                fw.hot = False
            self.local.fw = fw
        return fw

    def finish(self) -> None:
        """The root's forward returned: later calls take the general path."""
        fw = self.solo
        if fw is None:
            fw = self.current()
        self.solo = None
        fw.hot = False

    def scope(self, name: str) -> Scope:
        """The scope of layer ``name`` under this root."""
        scope = self.scopes.get(name)
        if scope is None:
            scope = self.scopes[name] = Scope(self, name)
        return scope


class Scope:
    """Where a consumer was attached from: the root's clock and the layer's name under that root
    (one per name: ``Clock.scope``). It holds the call count of the last forward it counted in
    (``fw``, ``n``): the router's hot path counts there, without a per-forward dict."""

    __slots__ = ("clock", "name", "fw", "n", "__weakref__")

    def __init__(self, clock: Clock, name: str):
        self.clock, self.name = clock, name
        self.fw: Forward | None = None
        self.n = 0

    def switch(self, fw: Forward) -> int:
        """Count ``fw``'s calls here from now on; returns its calls so far. The previous forward's
        count goes to its ``calls`` when another thread may still read it (a same-thread one is
        never read again: ``Clock.current`` gives the thread's newest)."""
        old = self.fw
        if old is not None and old.thread != fw.thread:
            old.calls[self] = self.n
        self.fw = fw
        return fw.calls.get(self, 0)


def calls_of(scope: Scope, fw: Forward) -> int:
    """How many calls of ``scope`` forward ``fw`` has counted."""
    return scope.n if scope.fw is fw else fw.calls.get(scope, 0)


def number(scopes: Iterable[Scope], recompute: bool, commit: bool) -> dict[Scope, tuple[int, int]]:
    """``{scope: (call, step)}`` of the running call of a layer. A pre-hook peeks (``commit=False``);
    the post-hook counts the call (``commit=True``). A checkpoint recompute (``recompute``) re-runs
    the calls of the forward being differentiated, in order, and gets their numbers again."""
    out: dict[Scope, tuple[int, int]] = {}
    for scope in scopes:
        fw = scope.clock.current()
        n = calls_of(scope, fw)
        if recompute:
            done = fw.recomputed.get(scope, 0)
            if commit:
                fw.recomputed[scope] = done + 1
            out[scope] = (done % n if n else done, fw.step)
        else:
            if commit:
                if scope.fw is fw:
                    scope.n = n + 1
                else:
                    fw.calls[scope] = n + 1
            out[scope] = (n, fw.step)
    return out


_clocks: weakref.WeakKeyDictionary[Any, Clock] = weakref.WeakKeyDictionary()


def clock_of(root: Any) -> Clock | None:
    """The clock of ``root``, or None when no consumer was ever attached through it."""
    return _clocks.get(root)


def clock_for(root: Any) -> Clock:
    """The clock of ``root``, made on first use."""
    clock = _clocks.get(root)
    if clock is None:
        clock = _clocks[root] = Clock()
    return clock


def forget(root: Any) -> None:
    """Drop ``root``'s clock (``remove_all``): its next consumer starts counting at step 0."""
    _clocks.pop(root, None)
