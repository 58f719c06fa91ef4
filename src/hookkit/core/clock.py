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
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from threading import get_ident
from typing import Any

from hookkit.core.positions import OUTSIDE, Sequences, TokenPos
from hookkit.core.weakmap import IdentityWeakMap

_NOBODY: frozenset[int] = frozenset()
_UNREAD = object()  # ``Clock.tick``'s ``prev`` when its caller has not read the thread's forward


class Forward:
    """One forward of a root in one thread: its step and the calls counted so far, per scope."""

    # fmt: off
    __slots__ = (
        "step", "calls", "recomputed", "pending", "transformed", "hot", "pos", "done", "frame", "outer", "hidden", "thread", "prior",
    )
    # fmt: on

    def __init__(self, step: int, transformed: bool = False):
        self.step = step
        self.thread = get_ident()
        self.pos: TokenPos = OUTSIDE  # where it sits in its sequence (Clock.begin)
        self.done = False  # the root's forward returned
        # the framework's frame running the root's call, while it runs, as (id, code): a forward
        # inside it finds it among its callers; no reference to the frame and its locals
        self.frame: tuple | None = None
        self.outer: Forward | None = None
        # the forward before it, finished in its thread when it started: a scope that last counted
        # there starts from call 0 here (the router's hot paths, without Scope.first_call). Only the
        # newest forward holds one: no chain of forwards is kept alive.
        self.prior: Forward | None = None
        self.hidden: frozenset[int] = _NOBODY  # consumers (ids) this forward is hidden from: a private pass
        self.transformed = transformed  # inside a functional transform (torch.func grad, vmap...)
        # True while the root's forward runs outside a transform: a call may take the router's hot
        # path. Cleared when the root's forward returns: a later call is a checkpoint recompute or
        # a direct call of a layer, which the general path numbers.
        self.hot = not transformed
        self.calls: dict[Scope, int] = {}  # scope -> its calls so far in this forward, unless the scope holds them (Scope.fw)
        # made on first use (most forwards have no recompute and no backward consumer):
        self.recomputed: dict[Scope, int] | None = None  # scope -> calls re-run by activation checkpointing
        self.pending: dict[Scope, Any] | None = None  # scope -> grads.GradCall: backward consumers' pre-hook -> post-hook


class Clock:
    """Counts forwards of one root model (ticked by the root's pre-hook while anyone uses it).
    ``current()`` is the calling thread's forward (another thread's, else a fresh one, when the
    thread has none: autograd's device threads run backward hooks). ``solo`` is the forward in
    progress (hot) while one thread at a time runs the root, read by the router's hot path instead
    of the thread-local slot; None between forwards, and for good once two threads ran forwards
    of the root at the same time."""

    __slots__ = ("count", "local", "last", "users", "seqs", "private", "solo", "threads", "scopes", "live", "home", "away", "__weakref__")

    def __init__(self) -> None:
        self.live = True  # False once its last consumer went: the next one restarts it
        self.count = 0  # forwards started, all threads
        self.seqs = Sequences()  # token positions and generation steps of the root's forwards
        self.local = threading.local()
        # the thread that set the clock up, and whether another thread has had a forward here: if
        # not, a restart clears one slot instead of making a new thread-local (a microsecond)
        self.home, self.away = get_ident(), False
        self.last: Forward | None = None
        self.users: set[int] = set()  # ids of the consumers attached through this root
        self.private: frozenset[int] | None = None  # during a private pass: the consumers it is hidden from
        self.solo: Forward | None = None
        self.threads = False  # two threads have run forwards of the root at the same time
        self.scopes: dict[str, Scope] = {}  # layer name -> its scope, one per name

    def restart(self) -> None:
        """Count from step 0 again: the clock of a root whose consumers all went, taken up by the next
        one (cheaper than a new clock: its scopes stay, their last forward forgotten)."""
        if self.last is None and not self.count and not self.away and self.private is None and len(self.scopes) <= 64:
            # no forward since it last started: nothing to forget
            self.home = get_ident()  # no thread has a forward in ``local``: whichever restarts it is at home
            return
        self.count = 0
        self.seqs.count = 0
        if self.away or get_ident() != self.home:
            self.local = threading.local()
            self.home, self.away = get_ident(), False
        else:
            self.local.fw = None
        self.last = self.solo = self.private = None
        self.threads = False
        if len(self.scopes) > 64:  # a sweep over a few layers after a wide capture: start small again
            self.scopes = {}
        for scope in self.scopes.values():
            scope.fw, scope.n = None, 0

    def tick(self, transformed: bool = False, frame: Any = None, root: Any = None, prev: Any = _UNREAD) -> Forward:
        """Start the next forward in the calling thread. ``frame``: the framework's frame running
        the call of ``root``. A forward started inside a running one (a reference pass run from a
        hook) is numbered on its own, and the outer one continues with its step and calls when it
        returns."""
        fw = Forward(self.count, transformed)
        if self.private is not None:  # hookkit's own pass (summary): no step of the root's, seen by its own consumers only
            fw.hidden, fw.hot = self.private, False
        else:
            self.count += 1
        if prev is _UNREAD:  # not given: the thread's forward (``begin`` has read it)
            prev = getattr(self.local, "fw", None)
        if prev is not None and prev.frame is not None:
            if frame is not None and _running(prev.frame, frame.f_back, root):
                fw.outer = prev
            else:  # that forward raised (its root never returned): it is over
                prev.frame = None
        last = self.last
        if last is not None:
            last.prior = None
            if last.done and last.thread == fw.thread:
                fw.prior = last
            elif last.hot and last.thread != fw.thread:
                self.threads = True
        if fw.thread != self.home:
            self.away = True
        if frame is not None:
            fw.frame = (id(frame), frame.f_code)
        self.local.fw = self.last = fw
        self.solo = fw if fw.hot and not self.threads else None
        return fw

    def current(self) -> Forward:
        fw = getattr(self.local, "fw", None)
        if fw is None:
            self.away = True  # maybe another thread's slot (autograd's device threads): a restart makes a new local
            fw = self.last
            if fw is None:
                fw = self.last = Forward(0)
                fw.hot = False
            self.local.fw = fw
        return fw

    def begin(self, backend: Any, root: Any, args: tuple, kwargs: dict, transformed: bool, frame: Any = None) -> Forward:
        """Start the root forward called with ``args, kwargs``: ``tick``, then place it in its
        sequence (KV-cache offset, generation step: ``hookkit.core.positions``). ``frame``: the
        framework's frame running the call (see ``tick``)."""
        prev = getattr(self.local, "fw", None)
        fw = self.tick(transformed, frame, root, prev)
        fw.pos = self.seqs.begin(backend, root, args, kwargs, None if prev is None else prev.pos)
        return fw

    def finish(self) -> None:
        """The root's forward returned: later calls take the general path; a forward that ran inside
        another gives the thread back to the outer one."""
        fw = self.current()
        fw.hot = False
        fw.done = True
        fw.frame = None
        outer = fw.outer
        self.solo = None
        if outer is not None:
            fw.outer = None
            self.local.fw = outer
            if self.last is fw:
                self.last = outer
            if outer.hot and not self.threads:
                self.solo = outer

    def scope(self, name: str) -> Scope:
        """The scope of layer ``name`` under this root."""
        scope = self.scopes.get(name)
        if scope is None:
            scope = self.scopes[name] = Scope(self, name)
        return scope

    def pos(self, recompute: bool) -> TokenPos:
        """The token position of a call now: its forward's (a checkpoint recompute keeps its
        forward's); outside any root forward (after it returned, or before any), ``OUTSIDE``."""
        fw = self.current()
        return fw.pos if recompute or not fw.done else OUTSIDE


def _running(target: tuple, frame: Any, root: Any) -> bool:
    """Whether the frame ``target`` names (id, code) is among ``frame`` and its callers, still
    running the call of ``root`` (a frame made later at a freed frame's address runs another)."""
    ident, code = target
    while frame is not None:
        if id(frame) == ident and frame.f_code is code:
            owner = frame.f_locals.get("self", root)  # the framework's call frame holds the layer as self
            return owner is root
        frame = frame.f_back
    return False


class Scope:
    """Where a consumer was attached from: the root's clock and the layer's name under that root
    (one per name: ``Clock.scope``). It holds the call count of the last forward it counted in
    (``fw``, ``n``): the router's hot path counts there, without a per-forward dict."""

    __slots__ = ("clock", "name", "fw", "n", "__weakref__")

    def __init__(self, clock: Clock, name: str):
        self.clock, self.name = clock, name
        self.fw: Forward | None = None
        self.n = 0

    def first_call(self, fw: Forward) -> None:
        """The first call of this scope's layer in forward ``fw``: count there from now on, from 0
        unless ``fw`` counted calls here before (``switch``)."""
        last = self.fw
        self.n = 0 if last is None or (last.done and last.thread == fw.thread and not fw.calls) else self.switch(fw)
        self.fw = fw

    def switch(self, fw: Forward) -> int:
        """Count ``fw``'s calls here from now on; returns its calls so far. The previous forward's
        count goes to its ``calls`` when it may still be read: another thread's, or one still
        running (an outer forward around a nested one); a finished forward of this thread is never
        read again (``Clock.current`` gives the thread's newest)."""
        old = self.fw
        if old is not None and (old.thread != fw.thread or not old.done):
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
            rerun = fw.recomputed
            if rerun is None:
                rerun = fw.recomputed = {}
            done = rerun.get(scope, 0)
            if commit:
                rerun[scope] = done + 1
            out[scope] = (done % n if n else done, fw.step)
        else:
            if commit:
                if scope.fw is fw:
                    scope.n = n + 1
                else:
                    fw.calls[scope] = n + 1
            out[scope] = (n, fw.step)
    return out


_clocks: IdentityWeakMap[Clock] = IdentityWeakMap()  # root -> its clock, live or idle (its entry is made once)


def clock_of(root: Any) -> Clock | None:
    """The clock of ``root``, or None when no consumer uses it (none ever, or all removed)."""
    clock = _clocks.get(root)
    return clock if clock is not None and clock.live else None


def clock_for(root: Any) -> Clock:
    """The clock of ``root``, made on first use; an idle one counts from step 0 again."""
    clock = _clocks.get(root)
    if clock is None:
        clock = _clocks[root] = Clock()
    elif not clock.live:
        clock.restart()
    clock.live = True
    return clock


def forget(root: Any) -> None:
    """Drop ``root``'s clock (``remove_all``, the last consumer gone): its next consumer starts
    counting at step 0."""
    clock = _clocks.get(root)
    if clock is None:
        return
    if clock.users:  # remove_all: the consumers' records go; a fresh clock for what comes next
        _clocks.pop(root)
    clock.live = False


@contextmanager
def private_pass(model: Any) -> Iterator[None]:
    """The forwards of ``model`` run inside are hookkit's own (``summary``'s trial forward): the
    observers attached before (a ``capture`` or statistics left open) do not record them, and they
    count as no step of the model; interventions and user hooks still run (the model as it runs).

    >>> with private_pass(model):   # doctest: +SKIP
    ...     handles = attach(model, named, "forward", record, OBSERVER); model(x)
    """
    clock = clock_of(model)
    if clock is None or clock.private is not None:  # nobody else is attached, or already private
        yield
        return
    clock.private = frozenset(clock.users)
    try:
        yield
    finally:
        clock.private = None


def forward_count(model: Any) -> int | None:
    """How many forwards of ``model`` hookkit has counted (the ``step`` of events), or None when no
    hookkit consumer is registered with ``model`` as root.

    >>> hookkit.core.router.forward_count(model)   # doctest: +SKIP
    3
    """
    clock = clock_of(model)
    return None if clock is None else clock.count


def advance(model: Any) -> None:
    """Count one more step for ``model``: for loops that never call the root model itself (a
    LightningModule whose ``training_step`` calls ``self.net``); events' ``step`` then follows.

    >>> hookkit.core.router.advance(pl_module)   # doctest: +SKIP
    """
    clock = clock_of(model)
    if clock is not None:
        clock.tick()
