"""ONE native hook per (layer or parameter, event), whatever the number of hookkit consumers.

Each hooked layer gets a ``LayerHooks``: its consumers for four events (forward_pre, forward,
grad = gradient w.r.t. one output tensor, backward = grad_inputs + grad_outputs) and at most one
native pre-hook and one native post-hook. Each hooked parameter gets a ``ParamHooks`` with one
native tensor hook for the ``param_grad`` event. Consumers run in (priority, arrival) order:
interventions (``INTERVENTION``) before observers (``OBSERVER``), so observers see changed values.

Names and clocks belong to the root a consumer was attached through, not to the layer: a consumer
holds a ``Scope`` (root clock + the layer's name under that root). ``step`` counts forwards of the
root, ``call`` counts calls of the layer within one forward, both per thread (a ``Forward`` lives in
the root clock's thread-local slot), so two threads serving one model never mix their indices.

Activation checkpointing re-runs forwards during backward; such a call is recognized
(``Backend.in_backward``) and numbered as the original call it recomputes: interventions run again
(the recomputed values equal the edited ones), observers do not record it twice. Calls inside a
functional transform (torch.func grad/vmap: ``Backend.in_transform``, read once per root forward)
are skipped by observers, with one warning: their wrapped tensors must not escape.

Nothing here holds the model: registries are keyed weakly, native hooks hold weak references, and
a deep copy or pickle of a hooked model gets inert hooks (``LayerHooks.__reduce__``), never ours.
"""

from __future__ import annotations

import threading
import warnings
import weakref
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from hookkit.backends import Backend, backend_for
from hookkit.core.errors import annotate
from hookkit.core.handles import Handle, HandleGroup
from hookkit.core.positions import OUTSIDE, Sequences, TokenPos
from hookkit.core.tree import leaves

INTERVENTION = 0
OBSERVER = 100
LAYER_EVENTS = ("forward_pre", "forward", "grad", "backward")
EVENTS = (*LAYER_EVENTS, "param_grad")


class Halt(BaseException):
    """Raised by a "forward" consumer to end the model's forward right after this layer (early stop).

    A BaseException, so model code's ``except Exception`` lets it through; the router places the
    layer's gradient hooks before it propagates, so gradient consumers of the halted layer still work."""


class Event:
    """What a consumer sees at one call of one layer. ``call`` counts calls of the layer within
    the current forward of the root it was attached through; ``step`` counts those forwards.
    ``param_grad`` events also carry ``param`` and ``param_name`` (the parameter's name in its layer).
    Token positions (``hookkit.core.positions``): ``offset`` (positions a KV cache held before this
    forward), ``gen_step`` (0 for the forward starting a sequence, +1 per cached forward after it),
    ``tokens`` (tokens the forward feeds); ``selected``: the absolute positions of the slice an edit
    with ``positions=`` is handed (None: the whole output)."""

    __slots__ = (
        "layer",
        "name",
        "call",
        "step",
        "args",
        "kwargs",
        "output",
        "grad",
        "index",
        "grad_inputs",
        "grad_outputs",
        "param",
        "param_name",
        "pos",
        "selected",
    )

    def __init__(
        self, layer: Any, name: str, call: int, step: int, args: Any = None, kwargs: Any = None, output: Any = None, pos: TokenPos = OUTSIDE
    ):
        self.layer, self.name, self.call, self.step = layer, name, call, step
        self.args, self.kwargs, self.output, self.pos = args, kwargs, output, pos
        self.grad = self.index = self.grad_inputs = self.grad_outputs = self.selected = None  # param and param_name: param_grad only

    @property
    def offset(self) -> int:
        """Positions the KV cache held before this forward: the output's first position along the token axis."""
        return self.pos.offset

    @property
    def gen_step(self) -> int:
        """Generation step: 0 for the forward that starts a sequence, +1 per cached forward after it."""
        return self.pos.gen_step

    @property
    def tokens(self) -> int | None:
        """Tokens this forward feeds (None when the root's token input was not found)."""
        return self.pos.tokens

    def __repr__(self) -> str:
        return f"<Event {self.name!r} call={self.call} step={self.step}>"


# -- clocks: one per root model, per-thread forwards -----------------------------------------------
class Forward:
    """One forward of a root in one thread: its step and the calls counted so far, per scope."""

    __slots__ = ("step", "calls", "recomputed", "pending", "transformed", "slow", "pos", "done")

    def __init__(self, step: int, transformed: bool = False):
        self.step = step
        self.pos: TokenPos = OUTSIDE  # set by the root's pre-hook (hookkit.core.positions)
        self.done = False  # the root's forward returned
        # The dispatchers' general path: inside a transform, or once the root's forward returned
        # (a later call is a checkpoint recompute, or a direct call of a layer).
        self.slow = transformed
        self.calls: dict[Scope, int] = {}  # scope -> index of its last call in this forward
        self.recomputed: dict[Scope, int] = {}  # scope -> calls re-run by activation checkpointing
        self.pending: dict[Scope, _GradCall] = {}  # backward consumers: pre-hook -> post-hook
        self.transformed = transformed


class Clock:
    """Counts forwards of one root model (ticked by the root's pre-hook while anyone uses it).
    ``current()`` is the calling thread's forward (another thread's, else a fresh one, when the
    thread has none: autograd's device threads run backward hooks)."""

    __slots__ = ("count", "local", "last", "users", "seqs", "__weakref__")

    def __init__(self) -> None:
        self.count = 0  # forwards started, all threads
        self.seqs = Sequences()  # token positions and generation steps of the root's forwards
        self.local = threading.local()
        self.last: Forward | None = None
        self.users: set[int] = set()

    def tick(self, transformed: bool = False) -> Forward:
        fw = Forward(self.count, transformed)
        self.count += 1
        self.local.fw = self.last = fw
        return fw

    def current(self) -> Forward:
        fw = getattr(self.local, "fw", None)
        if fw is None:
            fw = self.last
            if fw is None:
                fw = self.last = Forward(0)
                fw.slow = True
            self.local.fw = fw
        return fw


class Scope:
    """Where a consumer was attached from: the root's clock and the layer's name under that root."""

    __slots__ = ("clock", "name", "__weakref__")

    def __init__(self, clock: Clock, name: str):
        self.clock, self.name = clock, name


class Consumer:
    __slots__ = ("fn", "priority", "seq", "scope", "observer")

    def __init__(self, fn: Callable[[Event], Any], priority: int, seq: int, scope: Scope):
        self.fn, self.priority, self.seq, self.scope = fn, priority, seq, scope
        self.observer = priority >= OBSERVER


class _GradCall:
    """One forward call's gradient bookkeeping, alive as long as its autograd graph."""

    __slots__ = ("_layer", "calls", "grad_outputs", "n_args", "positions")

    def __init__(self, layer: Any, calls: dict[Scope, tuple[int, int]]):
        # weak: a forward that raised may leave its _GradCall behind, and a strong reference would
        # keep the layer (a weak key of the registry) alive for ever
        self._layer = weakref.ref(layer)
        self.calls = calls  # scope -> (call, step)
        self.grad_outputs: list[Any] = []
        self.n_args = 0
        self.positions: list[int] = []

    @property
    def layer(self) -> Any:
        return self._layer()


_registry: weakref.WeakKeyDictionary[Any, LayerHooks] = weakref.WeakKeyDictionary()
# Keyed by id: tensors compare elementwise, so they cannot be WeakKeyDictionary keys. Each entry
# holds a weak reference whose callback drops the entry when the parameter dies.
_param_registry: dict[int, tuple[weakref.ref, ParamHooks]] = {}
_clocks: weakref.WeakKeyDictionary[Any, Clock] = weakref.WeakKeyDictionary()
_seq = [0]
_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def _inert(*args: Any, **kwargs: Any) -> None:
    """What a copied or unpickled model gets in place of hookkit's native hooks: nothing to do."""


class LayerHooks:
    """The consumers of one layer and the native hooks that serve them."""

    __slots__ = (
        "backend",
        "ticks",
        "consumers",
        "_native_pre",
        "_native_post",
        # hot-path caches, rebuilt by _sync_native after every change of consumers or ticks
        "_pre",
        "_fwd",
        "_fwd_fns",
        "_scopes",
        "_single",
        "_local",
        "_wants_grads",
        "_has_backward",
        "_in_backward",
        "__weakref__",
    )

    def __init__(self, backend: Backend):
        self.backend = backend
        self.ticks: Clock | None = None  # set on a root: its pre-hook counts the root's forwards
        self.consumers: dict[str, tuple[Consumer, ...]] = {e: () for e in LAYER_EVENTS}
        self._native_pre: Any = None
        self._native_post: Any = None
        self._pre: tuple[Consumer, ...] = ()
        self._fwd: tuple[Consumer, ...] = ()
        self._fwd_fns: tuple[Callable[[Event], Any], ...] = ()
        self._scopes: tuple[Scope, ...] = ()
        self._single: Scope | None = None
        self._local: Any = None
        self._wants_grads = False
        self._has_backward = False
        self._in_backward = backend.in_backward

    # A deep copy or pickle of the model copies its hook dicts, and with them these bound methods:
    # the copy gets an inert object instead, so it never feeds this model's consumers.
    def __reduce__(self) -> tuple:
        return (_inert_layer_hooks, ())

    def __deepcopy__(self, memo: dict) -> LayerHooks:
        return _inert_layer_hooks()

    # -- bookkeeping ----------------------------------------------------------------------------
    def add(self, layer: Any, event: str, consumer: Consumer) -> None:
        self.consumers[event] = tuple(sorted((*self.consumers[event], consumer), key=lambda c: (c.priority, c.seq)))
        self._sync_native(layer)

    def discard(self, layer: Any, event: str, consumer: Consumer) -> None:
        self.consumers[event] = tuple(c for c in self.consumers[event] if c is not consumer)
        self._sync_native(layer)

    def clear(self, layer: Any) -> None:
        for cs in self.consumers.values():
            for c in cs:
                c.scope.clock.users.discard(id(c))
        self.consumers = {e: () for e in LAYER_EVENTS}
        self.ticks = None
        self._sync_native(layer)

    @property
    def active(self) -> bool:
        return any(self.consumers.values()) or self.ticks is not None

    def _sync_native(self, layer: Any) -> None:
        c = self.consumers
        # The dispatchers read these instead of the dict: no per-call lookups, no attribute hops.
        self._pre, self._fwd = c["forward_pre"], c["forward"]
        scopes: dict[Scope, None] = {}
        for e in LAYER_EVENTS:
            for x in c[e]:
                scopes[x.scope] = None
        self._fwd_fns = tuple(x.fn for x in c["forward"])
        self._scopes = tuple(scopes)
        self._single = self._scopes[0] if len(self._scopes) == 1 else None
        self._local = self._single.clock.local if self._single is not None else None
        self._wants_grads = bool(c["grad"] or c["backward"])
        self._has_backward = bool(c["backward"])
        # a root's post-hook marks its forward finished (see Forward.slow)
        want_pre = bool(c["forward_pre"] or c["backward"]) or self.ticks is not None
        want_post = bool(c["forward"] or c["grad"] or c["backward"]) or self.ticks is not None
        if want_pre and self._native_pre is None:
            self._native_pre = self.backend.hook_forward_pre(layer, self._on_pre)
        elif not want_pre and self._native_pre is not None:
            self._native_pre.remove()
            self._native_pre = None
        if want_post and self._native_post is None:
            self._native_post = self.backend.hook_forward(layer, self._on_post)
        elif not want_post and self._native_post is not None:
            self._native_post.remove()
            self._native_post = None

    # -- call numbering -------------------------------------------------------------------------
    def _number(self, commit: bool) -> tuple[dict[Scope, tuple[int, int]], bool]:
        """``{scope: (call, step)}`` of the running call, and whether it is a checkpoint recompute.
        The pre-hook peeks (commit=False); the post-hook counts the call (commit=True)."""
        recompute = bool(self._in_backward())
        out: dict[Scope, tuple[int, int]] = {}
        for scope in self._scopes:
            fw = scope.clock.current()
            if recompute:
                # a recompute re-runs the calls of the forward being differentiated, in order
                done = fw.recomputed.get(scope, -1) + 1
                if commit:
                    fw.recomputed[scope] = done
                n = fw.calls.get(scope, -1) + 1
                out[scope] = (done % n if n else done, fw.step)
            else:
                call = fw.calls.get(scope, -1) + 1
                if commit:
                    fw.calls[scope] = call
                out[scope] = (call, fw.step)
        return out, recompute

    # -- dispatch -------------------------------------------------------------------------------
    def _on_pre(self, layer: Any, args: tuple, kwargs: dict) -> Any:
        if self.ticks is not None and not self._in_backward():
            clock = self.ticks
            prev = getattr(clock.local, "fw", None)
            clock.tick(self.backend.in_transform()).pos = clock.seqs.begin(self.backend, layer, args, kwargs, prev and prev.pos)
        if not self._scopes:
            return None
        numbers, recompute = self._number(commit=False)
        fw_transformed = self._transformed()
        changed = False
        if self._pre:
            events: dict[Scope, Event] = {}
            for c in self._pre:
                if c.observer and (recompute or fw_transformed):
                    continue
                ev = events.get(c.scope)
                if ev is None:
                    call, step = numbers[c.scope]
                    ev = events[c.scope] = Event(layer, c.scope.name, call, step, args, kwargs, None, _pos(c.scope, recompute))
                ev.args, ev.kwargs = args, kwargs
                try:
                    r = c.fn(ev)
                except Exception as exc:
                    raise annotate(exc, c.scope.name, ev.call, "forward pre") from None
                if r is not None:
                    if not (isinstance(r, tuple) and len(r) == 2 and isinstance(r[1], dict)):
                        raise TypeError(
                            f"a forward pre hook on layer {c.scope.name!r} must return None or (args, kwargs); got {type(r).__name__}"
                        )
                    args, kwargs = r
                    changed = True
        if self._has_backward and not fw_transformed and self.backend.grad_enabled():
            args, wrapped = self._wrap_inputs(layer, tuple(args), numbers)
            changed = changed or wrapped
        return (tuple(args), kwargs) if changed else None

    def _transformed(self) -> bool:
        return any(scope.clock.current().transformed for scope in self._scopes)

    def _on_post(self, layer: Any, args: tuple, kwargs: dict, output: Any) -> Any:
        # The hot path: runs at every call of every hooked layer. One root, in its forward: the
        # call is counted inline; anything else (several roots, a recompute, a transform) is slow.
        single = self._single
        if single is not None:
            try:
                fw = self._local.fw
            except AttributeError:
                fw = single.clock.current()
            if not fw.slow:
                calls = fw.calls
                call = calls[single] = calls.get(single, -1) + 1
                changed = False
                fns = self._fwd_fns
                if fns:
                    ev = Event(layer, single.name, call, fw.step, args, kwargs, output, fw.pos)
                    for fn in fns:
                        try:
                            r = fn(ev)
                        except Halt:
                            if self._wants_grads and self.backend.grad_enabled():
                                self._plumb_outputs(layer, len(args), ev.output, {single: (call, fw.step)})
                            raise
                        except Exception as exc:
                            raise annotate(exc, single.name, call, "forward") from None
                        if r is not None:
                            ev.output = r
                            changed = True
                    output = ev.output
                if self._wants_grads and self.backend.grad_enabled():
                    self._plumb_outputs(layer, len(args), output, {single: (call, fw.step)})
                if self.ticks is not None:
                    _finish(self.ticks)
                return output if changed else None
        return self._on_post_general(layer, args, kwargs, output)

    def _on_post_general(self, layer: Any, args: tuple, kwargs: dict, output: Any) -> Any:
        numbers, recompute = self._number(commit=True) if self._scopes else ({}, False)
        transformed = self._transformed()
        changed = False
        if self._fwd:
            events: dict[Scope, Event] = {}
            for c in self._fwd:
                if c.observer and (recompute or transformed):
                    if transformed:
                        _warn_transformed(c.scope.name)
                    continue
                ev = events.get(c.scope)
                if ev is None:
                    call, step = numbers[c.scope]
                    ev = events[c.scope] = Event(layer, c.scope.name, call, step, args, kwargs, output, _pos(c.scope, recompute))
                ev.output = output
                try:
                    r = c.fn(ev)
                except Halt:
                    if self._wants_grads and not transformed and self.backend.grad_enabled():
                        self._plumb_outputs(layer, len(args), output, numbers)
                    raise
                except Exception as exc:
                    raise annotate(exc, c.scope.name, ev.call, "forward") from None
                if r is not None:
                    output = r
                    changed = True
        if self._wants_grads and self.backend.grad_enabled():
            if transformed:
                _warn_transformed(self._scopes[0].name)
            else:
                self._plumb_outputs(layer, len(args), output, numbers)
        if self.ticks is not None and not recompute:
            _finish(self.ticks)
        return output if changed else None

    # -- gradients ------------------------------------------------------------------------------
    def _pending(self) -> dict[Scope, _GradCall]:
        return self._scopes[0].clock.current().pending

    def _wrap_inputs(self, layer: Any, args: tuple, numbers: dict[Scope, tuple[int, int]]) -> tuple[tuple, bool]:
        be = self.backend
        positions = [i for i, a in enumerate(args) if be.is_tensor(a) and be.requires_grad(a)]
        pending = self._pending()
        pending.pop(self._scopes[0], None)
        if not positions:
            return args, False
        g = _GradCall(layer, numbers)
        g.n_args, g.positions = len(args), positions
        copies = be.identity_with_backward([args[i] for i in positions], partial(self._on_input_grads, g))
        new = list(args)
        for i, t in zip(positions, copies):
            new[i] = t
        pending[self._scopes[0]] = g
        return tuple(new), True

    def _plumb_outputs(self, layer: Any, n_args: int, output: Any, numbers: dict[Scope, tuple[int, int]]) -> None:
        be = self.backend
        g = self._pending().pop(self._scopes[0], None) if self._has_backward else None
        if g is None or g.layer is not layer:
            g = _GradCall(layer, numbers)
        else:
            g.calls = numbers
        outs = leaves(output, be.is_tensor)
        g.grad_outputs = [None] * len(outs)
        tracked = [i for i, t in enumerate(outs) if be.requires_grad(t)]
        for i in tracked:
            be.hook_tensor(outs[i], partial(self._on_output_grad, g, i))
        if self._has_backward and not g.positions and tracked:
            # No input takes a gradient: the backward event fires once all output grads are in.
            be.when_all_grads([outs[i] for i in tracked], lambda _: self._fire_backward(g, (None,) * n_args))

    def _event(self, g: _GradCall, scope: Scope) -> Event:
        call, step = g.calls.get(scope) or (0, scope.clock.current().step)
        return Event(g.layer, scope.name, call, step)

    def _on_output_grad(self, g: _GradCall, index: int, grad: Any) -> Any:
        consumers = self.consumers["grad"]
        changed = False
        for c in consumers:
            ev = self._event(g, c.scope)
            ev.index, ev.grad = index, grad
            try:
                r = c.fn(ev)
            except Exception as exc:
                raise annotate(exc, c.scope.name, ev.call, "gradient") from None
            if r is not None:
                grad, changed = r, True
        g.grad_outputs[index] = grad
        return grad if changed else None

    def _on_input_grads(self, g: _GradCall, grads: tuple) -> Any:
        full: list[Any] = [None] * g.n_args
        for i, gr in zip(g.positions, grads):
            full[i] = gr
        new = self._fire_backward(g, tuple(full))
        if new is None:
            return None
        return tuple(new[i] for i in g.positions)

    def _fire_backward(self, g: _GradCall, grad_inputs: tuple) -> tuple | None:
        consumers = self.consumers["backward"]
        if not consumers:
            return None
        changed = False
        for c in consumers:
            ev = self._event(g, c.scope)
            ev.grad_outputs = tuple(g.grad_outputs)
            ev.grad_inputs = grad_inputs
            try:
                r = c.fn(ev)
            except Exception as exc:
                raise annotate(exc, c.scope.name, ev.call, "backward") from None
            if r is not None:
                r = tuple(r) if isinstance(r, (tuple, list)) else (r,)
                if len(r) != len(grad_inputs):
                    raise ValueError(
                        f"a backward hook on layer {c.scope.name!r} returned {len(r)} grad_inputs; the layer has {len(grad_inputs)} positional inputs"
                    )
                grad_inputs, changed = r, True
        return grad_inputs if changed else None


def _finish(clock: Clock) -> None:
    """The root's forward returned."""
    fw = clock.current()
    fw.slow = fw.done = True


def _pos(scope: Scope, recompute: bool) -> TokenPos:
    """The token position of a call in ``scope``'s current forward (a recompute keeps its forward's;
    a call after the root's forward returned, or before any, is outside)."""
    fw = scope.clock.current()
    return fw.pos if recompute or not fw.done else OUTSIDE


def _no(*args: Any) -> bool:
    return False


def _inert_layer_hooks() -> LayerHooks:
    """What a copied or unpickled model's hook dicts get instead of a ``LayerHooks``: one with no
    consumers and no clock, so its hooks return at once and feed nothing of the original."""
    hooks = LayerHooks.__new__(LayerHooks)
    hooks.backend, hooks.ticks, hooks.consumers = None, None, {e: () for e in LAYER_EVENTS}
    hooks._native_pre = hooks._native_post = hooks._single = hooks._local = None
    hooks._pre = hooks._fwd = hooks._fwd_fns = hooks._scopes = ()
    hooks._wants_grads = hooks._has_backward = False
    hooks._in_backward = _no
    return hooks


def _inert_param_hooks() -> ParamHooks:
    hooks = ParamHooks.__new__(ParamHooks)
    hooks.backend, hooks.consumers, hooks._native = None, (), None
    return hooks


def _warn_transformed(name: str) -> None:
    _warn_once(
        "transformed",
        f"hookkit: layer {name!r} ran under a torch.func transform (grad, vmap, jacrev...): observers (capture, "
        "statistics, non-finite checks) skip such calls and gradient hooks are not placed; interventions still run. "
        "Run the model outside the transform to observe it.",
    )


class ParamHooks:
    """The consumers of one parameter's gradient and the one native tensor hook serving them."""

    __slots__ = ("backend", "consumers", "_native", "__weakref__")

    def __init__(self, backend: Backend):
        self.backend = backend
        self.consumers: tuple[tuple[Consumer, Any, str], ...] = ()  # (consumer, layer ref, param name)
        self._native: Any = None

    def __reduce__(self) -> tuple:
        return (_inert_param_hooks, ())

    def __deepcopy__(self, memo: dict) -> ParamHooks:
        return _inert_param_hooks()

    def add(self, param: Any, consumer: Consumer, layer: Any, param_name: str) -> None:
        entry = (consumer, weakref.ref(layer), param_name)
        self.consumers = tuple(sorted((*self.consumers, entry), key=lambda e: (e[0].priority, e[0].seq)))
        self._sync_native(param)

    def discard(self, param: Any, consumer: Consumer) -> None:
        self.consumers = tuple(e for e in self.consumers if e[0] is not consumer)
        self._sync_native(param)

    def clear(self, param: Any) -> None:
        for c, _, _ in self.consumers:
            c.scope.clock.users.discard(id(c))
        self.consumers = ()
        self._sync_native(param)

    def _sync_native(self, param: Any) -> None:
        if self.consumers and self._native is None:
            self._native = self.backend.hook_tensor(param, partial(self._on_grad, weakref.ref(param)))
        elif not self.consumers and self._native is not None:
            self._native.remove()
            self._native = None

    def _on_grad(self, param_ref: Any, grad: Any) -> Any:
        changed = False
        param = param_ref()
        for c, layer_ref, param_name in self.consumers:
            scope = c.scope
            ev = Event(layer_ref(), scope.name, 0, scope.clock.current().step)
            ev.param, ev.param_name, ev.grad = param, param_name, grad
            try:
                r = c.fn(ev)
            except Exception as exc:
                raise annotate(exc, f"{scope.name}.{param_name}" if scope.name else param_name, 0, "parameter gradient") from None
            if r is not None:
                grad, changed = r, True
        return grad if changed else None


def _root_hooks(root: Any, backend: Backend) -> tuple[Clock, LayerHooks]:
    clock = _clocks.get(root)
    if clock is None:
        clock = _clocks[root] = Clock()
    return clock, _hooks_for(root, backend)


def _hooks_for(layer: Any, backend: Backend) -> LayerHooks:
    hooks = _registry.get(layer)
    if hooks is None:
        hooks = _registry[layer] = LayerHooks(backend)
    return hooks


def _param_hooks(param: Any) -> ParamHooks | None:
    entry = _param_registry.get(id(param))
    return entry[1] if entry is not None and entry[0]() is param else None


def _param_hooks_for(param: Any, backend: Backend) -> ParamHooks:
    hooks = _param_hooks(param)
    if hooks is None:
        key = id(param)
        hooks = ParamHooks(backend)
        _param_registry[key] = (weakref.ref(param, lambda _, key=key: _param_registry.pop(key, None)), hooks)
    return hooks


def attach(
    model: Any, named: Iterable[tuple[str, Any]], event: str, fn: Callable[[Event], Any], priority: int = INTERVENTION
) -> HandleGroup:
    """Add consumer ``fn(event) -> None | replacement`` on ``event`` of each (name, layer) of ``model``.

    ``event``: "forward_pre", "forward", "grad" (gradient w.r.t. an output tensor), "backward", or
    "param_grad" (the gradient of each direct parameter of the layer that requires one; a parameter
    shared by several layers gets one native hook, and ``fn`` runs once per (layer, parameter)).
    Internal entry point of every feature; returns one handle removing all it placed.

    >>> attach(model, select(model, "fc"), "forward", lambda ev: print(ev.name, ev.call))   # doctest: +SKIP
    """
    if event not in EVENTS:
        raise ValueError(f"unknown event {event!r}; valid events: {', '.join(EVENTS)}")
    backend = backend_for(model)
    named = list(named)
    if event == "param_grad":
        params = [
            (name, layer, pname, p)
            for name, layer in named
            for pname, p in backend.named_parameters(layer, recurse=False)
            if backend.requires_grad(p)
        ]
        return attach_params(model, params, fn, priority)
    backend.check_hookable(model, named)
    backend.check_not_compiled(model, [layer for _, layer in named])
    clock, root_hooks = _root_hooks(model, backend)
    group = HandleGroup()
    try:
        for name, layer in named:
            hooks = _hooks_for(layer, backend)
            consumer = _consumer(fn, priority, clock, name)
            group.add(Handle(partial(_detach, weakref.ref(layer), weakref.ref(model), hooks, root_hooks, event, consumer)))
            _start_clock(model, root_hooks, clock)
            hooks.add(layer, event, consumer)
    except BaseException:
        group.remove()
        raise
    return group


def attach_params(
    model: Any, params: Iterable[tuple[str, Any, str, Any]], fn: Callable[[Event], Any], priority: int = INTERVENTION
) -> HandleGroup:
    """Add ``fn(event) -> None | new gradient`` on the gradient of each ``(layer name, layer,
    parameter name, parameter)``: one native hook per parameter whatever the number of consumers;
    ``event.step`` is the root's forward whose backward this is.

    >>> attach_params(model, [("fc", model.fc, "weight", model.fc.weight)], clip)   # doctest: +SKIP
    """
    backend = backend_for(model)
    clock, root_hooks = _root_hooks(model, backend)
    group = HandleGroup()
    try:
        for name, layer, pname, p in params:
            hooks = _param_hooks_for(p, backend)
            consumer = _consumer(fn, priority, clock, name)
            group.add(Handle(partial(_detach_param, weakref.ref(p), weakref.ref(model), hooks, root_hooks, consumer)))
            _start_clock(model, root_hooks, clock)
            hooks.add(p, consumer, layer, pname)
    except BaseException:
        group.remove()
        raise
    return group


def hook_tensor(tensor: Any, fn: Callable[[Any], Any]) -> Handle:
    """One native gradient hook ``fn(grad) -> None | grad`` on a tensor (``hookkit.on_grad``)."""
    return Handle(backend_for(tensor).hook_tensor(tensor, fn).remove)


def _consumer(fn: Callable[[Event], Any], priority: int, clock: Clock, name: str) -> Consumer:
    _seq[0] += 1
    consumer = Consumer(fn, priority, _seq[0], Scope(clock, name))
    clock.users.add(id(consumer))
    return consumer


def _start_clock(model: Any, root_hooks: LayerHooks, clock: Clock) -> None:
    if root_hooks.ticks is not clock:
        root_hooks.ticks = clock
        root_hooks._sync_native(model)


def _stop_clock(root_ref: Any, root_hooks: LayerHooks, consumer: Consumer) -> None:
    clock = consumer.scope.clock
    clock.users.discard(id(consumer))
    root = root_ref()
    if not clock.users and root is not None and root_hooks.ticks is clock:
        root_hooks.ticks = None
        root_hooks._sync_native(root)


def _detach(layer_ref: Any, root_ref: Any, hooks: LayerHooks, root_hooks: LayerHooks, event: str, consumer: Consumer) -> None:
    layer = layer_ref()
    if layer is not None:
        hooks.discard(layer, event, consumer)
    _stop_clock(root_ref, root_hooks, consumer)


def _detach_param(param_ref: Any, root_ref: Any, hooks: ParamHooks, root_hooks: LayerHooks, consumer: Consumer) -> None:
    param = param_ref()
    if param is not None:
        hooks.discard(param, consumer)
    _stop_clock(root_ref, root_hooks, consumer)


def forward_count(model: Any) -> int | None:
    """How many forwards of ``model`` hookkit has counted (the ``step`` of events), or None when no
    hookkit consumer is registered with ``model`` as root.

    >>> hookkit.core.router.forward_count(model)   # doctest: +SKIP
    3
    """
    clock = _clocks.get(model)
    return None if clock is None else clock.count


def advance(model: Any) -> None:
    """Count one more step for ``model``: for loops that never call the root model itself (a
    LightningModule whose ``training_step`` calls ``self.net``); events' ``step`` then follows.

    >>> hookkit.core.router.advance(pl_module)   # doctest: +SKIP
    """
    clock = _clocks.get(model)
    if clock is not None:
        clock.tick()


def remove_all(model: Any) -> int:
    """Remove every hook hookkit placed on ``model``, its layers and their parameters; returns how
    many layers had some. Hooks placed by the user or other libraries stay.

    >>> hookkit.remove_all(model)   # doctest: +SKIP
    """
    from hookkit.core.validate import check_model  # validate imports backends only; kept local all the same

    backend = check_model(model, fn="remove_all")
    count = 0
    for _, layer in backend.named_layers(model):
        hooks = _registry.get(layer)
        if hooks is not None and (hooks.active or hooks._native_pre or hooks._native_post):
            hooks.clear(layer)
            count += 1
    for p in backend.parameters(model, recurse=True):
        phooks = _param_hooks(p)
        if phooks is not None and phooks.consumers:
            phooks.clear(p)
    _clocks.pop(model, None)
    return count


def attached(layer: Any) -> dict[str, int]:
    """How many hookkit consumers each event of ``layer`` has (for tests and debugging); the
    ``param_grad`` count sums the consumers of the layer's direct parameters."""
    hooks = _registry.get(layer)
    out = {e: 0 for e in EVENTS}
    if hooks is not None:
        out.update({e: len(hooks.consumers[e]) for e in LAYER_EVENTS})
    backend = backend_for(layer)
    for p in backend.parameters(layer, recurse=False):
        phooks = _param_hooks(p)
        if phooks is not None:
            out["param_grad"] += sum(1 for _, ref, _ in phooks.consumers if ref() is layer)
    return out
