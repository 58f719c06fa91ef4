"""ONE native hook per (layer or parameter, event), whatever the number of hookkit consumers.

Each hooked layer gets a ``LayerHooks``: its consumers for four events (forward_pre, forward, grad,
backward) and at most one native pre-hook and one native post-hook; each hooked parameter a
``grads.ParamHooks``. Consumers run in (priority, arrival) order: interventions before observers.
Beside it: ``events`` (Event, Consumer, the consumer loop), ``clock`` (steps and call numbers),
``grads`` (gradient plumbing, parameter hooks). A checkpoint recompute is numbered as the call it
recomputes (interventions run again, observers do not record it twice); observers skip calls inside
a functional transform, with one warning. Registries are keyed weakly, native hooks hold weak
references, and a copy or pickle of a hooked model gets inert hooks (``LayerHooks(None)``).
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable, Iterable
from functools import partial
from itertools import count
from typing import TYPE_CHECKING, Any

from hookkit.core import clock as clocks
from hookkit.core import failures
from hookkit.core.clock import Clock, Scope, advance, forward_count, number, private_pass  # noqa: F401 (re-exported)
from hookkit.core.entry import public_entry
from hookkit.core.errors import annotate
from hookkit.core.events import (  # noqa: F401
    EVENTS,
    INTERVENTION,
    LAYER_EVENTS,
    OBSERVER,
    Consumer,
    Event,
    Halt,
    _check_inputs,
    call_plain,
    events_per_scope,
    ordered,
    run,
    warn_transformed,
)
from hookkit.core.grads import GradPlumbing, hook_tensor, param_consumer, param_hooks  # noqa: F401 (hook_tensor re-exported)
from hookkit.core.handles import HandleGroup, held
from hookkit.core.placing import Placed, PlacedLayers
from hookkit.core.registry import backend_for
from hookkit.core.types import Layer
from hookkit.core.validate import check_choice, check_model, fail
from hookkit.core.weakmap import IdentityWeakMap

if TYPE_CHECKING:
    from hookkit.backends.base import Backend

_seq = count(1)  # arrival order of consumers
_PRE_EVENTS = ("forward_pre", "backward")  # the events a layer's native pre-hook serves (and a root's)
_new = object.__new__


class LayerHooks(GradPlumbing):
    """The consumers of one layer and the native hooks that serve them (``LayerHooks(None)``: the
    inert one of a copied or unpickled model)."""

    # fmt: off
    __slots__ = (
        "backend", "root_clock", "consumers", "_count", "_native_pre", "_native_post", "_in_backward", "__weakref__",
        # read by the dispatchers instead of ``consumers``; derived again at the first call after a change
        "_pre", "_fwd", "_scopes", "_hot", "_one", "_wants_grads", "_has_backward", "_stale",
    )
    # fmt: on

    def __init__(self, backend: Backend | None):
        self.backend = backend  # type: ignore[assignment]  # None only in the inert copy, which feeds nothing
        self.root_clock: Clock | None = None  # set on a root: its pre-hook counts the root's forwards
        self.consumers: dict[str, tuple[Consumer, ...]] = {e: () for e in LAYER_EVENTS}
        self._count = 0  # consumers of all events
        self._native_pre: Any = None
        self._native_post: Any = None
        # tuples of consumers, their functions, scopes
        self._pre: tuple[Consumer, ...] = ()
        self._fwd: tuple[Consumer, ...] = ()
        self._scopes: tuple[Scope, ...] = ()
        # the hot path's case, one scope: (scope, clock, forward functions, plain functions when all
        # are, the plain one when alone, whether gradients are wanted or the layer is a root)
        self._hot: tuple | None = None
        # the commonest case of all, kept apart: (scope, clock, the plain function) of a layer whose
        # one forward consumer is plain, in one scope, with no gradients wanted, not a root
        self._one: tuple | None = None
        self._wants_grads = False
        self._has_backward = False
        self._stale = False
        self._in_backward = backend.in_backward if backend is not None else bool  # bool() is False

    # A deep copy or pickle of the model copies its hook dicts, and with them these bound methods:
    # the copy gets an inert object instead, so it never feeds this model's consumers.
    def __reduce__(self) -> tuple:
        return (LayerHooks, (None,))

    def __deepcopy__(self, memo: dict) -> LayerHooks:
        return LayerHooks(None)

    def add(self, layer: Any, event: str, consumer: Consumer) -> None:
        c = self.consumers
        cs = c[event]
        # arrival numbers only grow: a consumer of no higher priority than the last goes last
        c[event] = (consumer,) if not cs else (*cs, consumer) if cs[-1].priority <= consumer.priority else ordered((*cs, consumer))
        self._count += 1
        # derived again at the next call (what was derived holds live consumers only: it stays until then)
        self._hot, self._one, self._stale = None, None, True
        # a consumer only adds needs: the native hook its event needs, if not there yet; the post-hook
        # for every event, forward_pre too: a call is counted when it ends (else every call would be call 0)
        if self._native_post is None:
            self._native_post = self.backend.hook_forward(layer, self._on_post)
        if event in _PRE_EVENTS and self._native_pre is None:
            self._native_pre = self.backend.hook_forward_pre(layer, self._on_pre)

    def discard(self, layer: Any, event: str, consumer: Consumer) -> None:
        self.drop(event, consumer)

    def drop(self, event: str, consumer: Consumer) -> None:
        """Remove ``consumer`` from ``event``, and the native hooks no consumer needs any more (a
        removal only removes: the layer itself is not needed)."""
        c = self.consumers
        cs = c[event]
        if len(cs) == 1 and cs[0] is consumer:
            c[event] = ()
        else:
            left = tuple([x for x in cs if x is not consumer])
            if len(left) == len(cs):
                return  # not here (removed by remove_all meanwhile)
            c[event] = left
        self._hot, self._one, self._stale, self._pre, self._fwd, self._scopes = None, None, True, (), (), ()
        self._count -= 1
        if self.root_clock is not None:
            return
        if self._count == 0:  # the usual case: the layer's last consumer
            pre, post, self._native_pre, self._native_post = self._native_pre, self._native_post, None, None
            if pre is not None:
                pre.remove()
            if post is not None:
                post.remove()
            return
        if self._native_pre is not None and not (c["forward_pre"] or c["backward"]):
            self._native_pre = self._native_pre.remove()

    def clear(self, layer: Any) -> None:
        for cs in self.consumers.values():
            for c in cs:
                c.scope.clock.users.discard(id(c))
        self.consumers = {e: () for e in LAYER_EVENTS}
        self._count = 0
        self.root_clock = None
        self._sync_native(layer)

    @property
    def active(self) -> bool:
        return self._count > 0 or self.root_clock is not None

    def hook_root(self, root: Any, clock: Clock) -> None:
        """Make this layer ``clock``'s root: its pre-hook counts the forwards, its post-hook ends them."""
        self.root_clock = clock
        self._hot, self._one, self._stale = None, None, True
        if self._native_pre is None:
            self._native_pre = self.backend.hook_forward_pre(root, self._on_pre)
        if self._native_post is None:
            self._native_post = self.backend.hook_forward(root, self._on_post)

    def unhook_root(self, root: Any) -> None:
        """This layer is no clock's root any more: the native hooks its own consumers do not need go."""
        self.root_clock = None
        if self._count:
            self._sync_native(root)
            return
        pre, post, self._native_pre, self._native_post = self._native_pre, self._native_post, None, None
        self._hot, self._one, self._stale, self._pre, self._fwd, self._scopes = None, None, True, (), (), ()
        if pre is not None:
            pre.remove()
        if post is not None:
            post.remove()

    def _sync_native(self, layer: Any) -> None:
        """Place or remove the native hooks the consumers need. What the dispatchers read is derived
        at the layer's next call: a context opened and closed before it pays nothing for that."""
        c = self.consumers
        root = self.root_clock is not None
        # the dispatch state is derived again at the next call; until then nothing derived keeps a
        # removed consumer (and what it holds) alive
        self._hot, self._one, self._stale, self._pre, self._fwd, self._scopes = None, None, True, (), (), ()
        if (root or bool(c["forward_pre"] or c["backward"])) is (self._native_pre is None):
            self._native_pre = self.backend.hook_forward_pre(layer, self._on_pre) if self._native_pre is None else self._native_pre.remove()
        # a root's post-hook marks its forward finished (see Forward.hot); a layer's counts its calls
        if (root or bool(c["forward_pre"] or c["forward"] or c["grad"] or c["backward"])) is (self._native_post is None):
            self._native_post = self.backend.hook_forward(layer, self._on_post) if self._native_post is None else self._native_post.remove()

    def _derive(self) -> None:
        c = self.consumers
        pre, fwd, grad, bwd = c["forward_pre"], c["forward"], c["grad"], c["backward"]
        every = pre + fwd + grad + bwd
        fns = tuple([x.fn for x in fwd])
        scopes = (every[0].scope,) if len(every) == 1 else tuple(dict.fromkeys([x.scope for x in every]))
        hot = None
        if len(scopes) == 1:
            plains = tuple([x.plain for x in fwd])
            plain = None if None in plains else plains
            single = plain[0] if plain is not None and len(plain) == 1 else None
            hot = (scopes[0], scopes[0].clock, fns, plain, single, bool(grad or bwd) or self.root_clock is not None)
        self._pre, self._fwd, self._scopes = pre, fwd, scopes
        self._wants_grads, self._has_backward = bool(grad or bwd), bool(bwd)
        self._one = (hot[0], hot[1], hot[4]) if hot is not None and hot[4] is not None and not hot[5] else None
        self._hot, self._stale = hot, False

    def _transformed(self) -> bool:
        return any(scope.clock.current().transformed for scope in self._scopes)

    def _on_pre(self, layer: Any, args: tuple, kwargs: dict) -> Any:
        if not self._count:  # a root with no consumers of its own: its forward starts
            clock = self.root_clock
            if clock is not None and not self._in_backward():
                # the framework's frame calling the root: a forward started inside it is a nested one
                clock.begin(self.backend, layer, args, kwargs, self.backend.in_transform(), sys._getframe(1))
            return None
        if self._stale:
            self._derive()
        hot = self._hot
        if hot is not None and self._pre and self.root_clock is None and not self._has_backward:
            fw = hot[1].solo
            if fw is not None:  # inside the root's forward, one thread, no transform: no recompute either
                return self._on_pre_hot(layer, args, kwargs, hot[0], fw)
        recompute = self._in_backward()
        if self.root_clock is not None and not recompute:
            # the framework's frame calling the root: a forward started inside it is a nested one
            self.root_clock.begin(self.backend, layer, args, kwargs, self.backend.in_transform(), sys._getframe(1))
        if not self._scopes:
            return None
        numbers = number(self._scopes, recompute, commit=False)
        transformed = self._transformed()
        changed = False
        if self._pre:
            event_for = events_per_scope(layer, numbers, recompute, transformed, args, kwargs)
            (args, kwargs), changed = run(self._pre, "forward_pre", (args, kwargs), event_for)
        if self._has_backward and not transformed and self.backend.grad_enabled():
            args, wrapped = self.wrap_inputs(layer, tuple(args), numbers)
            changed = changed or wrapped
        return (tuple(args), kwargs) if changed else None

    def _on_pre_hot(self, layer: Any, args: tuple, kwargs: dict, scope: Scope, fw: Any) -> Any:
        """The pre-hook's hot path (the case of ``_on_post``'s): one scope, a forward in progress;
        the call's number peeked as ``number`` does, one Event for every pre consumer, no ``run``."""
        ev = _new(Event)  # Event(layer, scope.name, call, fw.step, args, kwargs), without its frame
        ev.layer, ev.name, ev.step, ev.output, ev.pos, ev.selected = layer, scope.name, fw.step, None, fw.pos, None
        ev.call = scope.n if scope.fw is fw else fw.calls.get(scope, 0)
        ev.args, ev.kwargs = args, kwargs
        changed = False
        for c in self._pre:
            try:
                r = c.fn(ev)
            except Halt:
                raise
            except Exception as exc:
                raise annotate(exc, ev.name, ev.call, "forward pre") from None
            if r is not None:
                ev.args, ev.kwargs = _check_inputs(r, None, ev.name)
                changed = True
        return (tuple(ev.args), ev.kwargs) if changed else None

    def _on_post(self, layer: Any, args: tuple, kwargs: dict, output: Any) -> Any:
        # The hot path: runs at every call of every hooked layer. One root, one thread in its
        # forward: the call is counted on the scope and the consumers run (``_run_hot``); anything
        # else (several roots or threads, a recompute, a transform, a call after the root's
        # forward) takes the general path.
        one = self._one
        if one is not None:  # a plain hook that counts its calls (what follows, for that case)
            scope, clock, fn = one
            fw = clock.solo
            if fw is not None:
                last = scope.fw
                if last is fw:
                    call = scope.n
                elif last is fw.prior:  # the first call in this forward, after the forward before: call 0
                    call, scope.fw = 0, fw
                else:
                    scope.first_call(fw)
                    call = scope.n
                scope.n = call + 1
                try:
                    return fn(layer, args, output)  # Halt goes through: no gradients wanted, nothing to place
                except Exception as exc:
                    raise annotate(exc, scope.name, call, "forward") from None
        hot = self._hot
        if hot is None:  # also a root with no consumers of its own
            return self._on_post_cold(layer, args, kwargs, output)
        scope, clock, fns, plain, one, after = hot
        fw = clock.solo
        if fw is None:
            return self._on_post_general(layer, args, kwargs, output)
        last = scope.fw
        if last is not fw:  # the first call in this forward; from 0 after the forward before
            if last is fw.prior:
                scope.n, scope.fw = 0, fw
            else:
                scope.first_call(fw)
        call = scope.n
        scope.n = call + 1
        try:
            result = self._run_hot(layer, args, kwargs, output, call, fw, hot)
        except Halt:
            self._place_grad_hooks(layer, len(args), {scope: (call, fw.step)}, output)
            raise
        except Exception as exc:
            raise annotate(exc, scope.name, call, "forward") from None
        if after:  # gradients wanted, or the root's forward ends here
            self._after_hot(layer, len(args), scope, call, fw, output if result is None else result)
        return result

    def _on_post_cold(self, layer: Any, args: tuple, kwargs: dict, output: Any) -> Any:
        """The post-hook without a hot tuple: a root with no consumers of its own (its forward ends),
        or the first call after the consumers changed (derive what the hot paths read, then take
        the path that applies)."""
        if not self._count:  # a root with no consumers of its own: its forward ends
            return self._end_root()
        if self._stale:
            self._derive()
            if self._hot is not None:
                return self._on_post(layer, args, kwargs, output)
        return self._on_post_general(layer, args, kwargs, output)

    def _after_hot(self, layer: Any, n_args: int, scope: Scope, call: int, fw: Any, output: Any) -> None:
        """After the hot path's consumers: the gradient hooks on the output; a root's forward ends."""
        self._place_grad_hooks(layer, n_args, {scope: (call, fw.step)}, output)
        if self.root_clock is not None:
            self.root_clock.finish()

    @staticmethod
    def _run_hot(layer: Any, args: tuple, kwargs: dict, output: Any, call: int, fw: Any, hot: tuple) -> Any:
        """The forward consumers of the hot path in order, each seeing the output the previous one
        returned; the last replacement, or None."""
        scope, _, fns, plain, _, _ = hot
        result = None
        if plain is not None:  # plain consumers only: no Event to build
            for fn in plain:
                r = fn(layer, args, output)
                if r is not None:
                    result = output = r
            return result
        ev = _new(Event)  # Event(layer, scope.name, call, fw.step, args, kwargs, output), without its frame
        ev.layer, ev.name, ev.call, ev.step = layer, scope.name, call, fw.step
        ev.args, ev.kwargs, ev.output, ev.pos, ev.selected = args, kwargs, output, fw.pos, None
        for fn in fns:
            r = fn(ev)
            if r is not None:
                result = ev.output = output = r
        return result

    def _end_root(self) -> None:
        """The post-hook of a root with no consumers of its own: its forward ends (not a recompute's)."""
        clock = self.root_clock
        if clock is not None and not self._in_backward():
            clock.finish()

    def _on_post_general(self, layer: Any, args: tuple, kwargs: dict, output: Any) -> Any:
        if not self._scopes:  # a root with no consumers of its own
            return self._end_root()
        recompute = bool(self._in_backward())
        numbers = number(self._scopes, recompute, commit=True)
        transformed = self._transformed()
        changed = False
        if self._fwd:
            event_for = events_per_scope(layer, numbers, recompute, transformed, args, kwargs, output)
            on_halt = None if transformed else partial(self._place_grad_hooks, layer, len(args), numbers)
            output, changed = run(self._fwd, "forward", output, event_for, on_halt)
        if self._wants_grads and self.backend.grad_enabled():
            if transformed:
                warn_transformed(self._scopes[0].name)
            else:
                self.plumb_outputs(layer, len(args), output, numbers)
        if self.root_clock is not None and not recompute:
            self.root_clock.finish()
        return output if changed else None


_registry: IdentityWeakMap[LayerHooks] = IdentityWeakMap()
failures.hooks_of = _registry.get  # core/failures reads which layers are hooked (it cannot import the router)


def _hooks_for(layer: Any, backend: Backend) -> LayerHooks:
    hooks = _registry.get(layer)
    if hooks is None:
        site_backend = getattr(type(layer), "site_backend", None)  # an operation site (hookkit.sites) places its own hooks
        if site_backend is not None:
            backend = site_backend(layer, backend)
        backend.drop_forward_hooks(layer, _inert)  # a copy's inert hooks go before it gets its own
        hooks = _registry[layer] = LayerHooks(backend)
    return hooks


def _inert(fn: Any) -> bool:
    """Whether a native hook is an inert one a deep copy or unpickled model carries."""
    owner = getattr(fn, "__self__", None)
    return isinstance(owner, LayerHooks) and owner.backend is None


@public_entry()
def attach(
    model: Layer,
    named: Iterable[tuple[str, Any]],
    event: str,
    fn: Callable[[Event], Any] | None,
    priority: int = INTERVENTION,
    *,
    plain: Callable[[Any, tuple, Any], Any] | None = None,
) -> HandleGroup:
    """Add consumer ``fn(event) -> None | replacement`` on ``event`` of each (name, layer) of ``model``.

    ``event``: "forward_pre", "forward", "grad" (gradient w.r.t. an output tensor), "backward", or
    "param_grad" (the gradient of each direct parameter of the layer that requires one; a parameter
    shared by several layers gets one native hook, and ``fn`` runs once per (layer, parameter)).
    ``plain`` (with ``fn=None``, "forward" only): ``plain(layer, args, output)`` instead, what a plain
    forward hook takes; no Event is built for it (the cheapest forward consumer).
    Internal entry point of every feature; returns one handle removing all it placed.

    >>> attach(model, select(model, "fc"), "forward", lambda ev: print(ev.name, ev.call))   # doctest: +SKIP
    """
    check_choice(event, EVENTS, arg="event")
    if (fn is None) == (plain is None) or (plain is not None and event != "forward"):
        fail("attach", "fn", 'a function of the event, or fn=None and plain=f(layer, args, output) for event "forward"', fn)
    if event == "param_grad":
        backend = backend_for(model)
        params = [
            (name, layer, pname, p)
            for name, layer in named
            for pname, p in backend.named_parameters(layer, recurse=False)
            if backend.requires_grad(p)
        ]
        assert fn is not None  # plain= is refused for every event but "forward"
        return attach_params(model, params, fn, priority)
    return attach_each(model, [(name, layer, fn, plain) for name, layer in named], event, priority)


def attach_each(
    model: Layer,
    entries: Iterable[tuple[str, Any, Callable | None, Callable | None]],
    event: str,
    priority: int = INTERVENTION,
    group: HandleGroup | None = None,
) -> HandleGroup:
    """``attach`` with a function per layer, all placed at once: ``entries`` are ``(name, layer, fn,
    plain)``, one of ``fn``/``plain`` None (a capture of many layers checks the model once). One
    handle (``placing.PlacedLayers``) removes them all in one pass; it joins ``group`` when given (a
    capture's own), else a new group holding it alone.

    >>> attach_each(model, [("fc", model.fc, record_fc, None)], "forward", OBSERVER)   # doctest: +SKIP
    """
    if event not in LAYER_EVENTS:
        check_choice(event, LAYER_EVENTS, arg="event")
    backend = backend_for(model)
    if type(entries) is not list:
        entries = list(entries)
    named = [(e[0], e[1]) for e in entries]
    backend.check_hookable(model, named)
    backend.check_not_compiled(model, [layer for _, layer in named])
    placed = _attach_layers(model, backend, entries, event, priority)
    if group is None:  # HandleGroup([placed]), without the keyword-checking wrappers of its __init__
        group = _new(HandleGroup)
        group._remove, group.handles = held, [placed]
        return group
    group.handles.append(placed)
    return group


def _attach_layers(model: Any, backend: Backend, entries: list, event: str, priority: int) -> PlacedLayers:
    """One consumer per ``(name, layer, fn, plain)`` on ``event`` of the layer, one handle removing
    them all. The root's clock starts with the first. All or nothing: an error removes what was placed."""
    clock = clocks.clock_for(model)
    hooks_of = _registry.by_id.get
    root_hooks = hooks_of(id(model)) or _hooks_for(model, backend)
    handle = PlacedLayers(event, clock, (weakref.ref(model), root_hooks))
    if not entries:
        return handle
    placed, users, scopes, scope_of = handle.placed.append, clock.users.add, clock.scopes.get, clock.scope
    observer = priority >= OBSERVER
    try:
        if root_hooks.root_clock is not clock:
            root_hooks.hook_root(model, clock)
        pre, fwd = event in _PRE_EVENTS, event == "forward"
        for name, layer, fn, plain in entries:
            consumer = _new(Consumer)  # Consumer(fn, priority, seq, scope, plain), its checks done by attach
            consumer.fn = fn if plain is None else partial(call_plain, plain)
            consumer.priority, consumer.seq, consumer.plain, consumer.observer = priority, next(_seq), plain, observer
            consumer.scope = scopes(name) or scope_of(name)
            users(id(consumer))
            hooks = hooks_of(id(layer)) or _hooks_for(layer, backend)
            placed((hooks, consumer))
            if hooks._count or pre:
                hooks.add(layer, event, consumer)
                continue
            # LayerHooks.add's usual case inline: the layer's first consumer, a post-hook to place
            hooks.consumers[event], hooks._count, hooks._hot, hooks._one, hooks._stale = (consumer,), 1, None, None, True
            if plain is not None and fwd and hooks.root_clock is None:
                # what ``_derive`` gives this case, known now: the post-hook's plain path from the first
                # call (the rest is derived if another path is taken: ``_stale`` stays set)
                hooks._one = (consumer.scope, consumer.scope.clock, plain)
            if hooks._native_post is None:
                hooks._native_post = hooks.backend.hook_forward(layer, hooks._on_post)
    except BaseException:
        handle.remove()
        raise
    return handle


def attach_params(
    model: Layer, params: Iterable[tuple[str, Any, str, Any]], fn: Callable[[Event], Any], priority: int = INTERVENTION
) -> HandleGroup:
    """Add ``fn(event) -> None | new gradient`` on the gradient of each ``(layer name, layer,
    parameter name, parameter)``: one native hook per parameter whatever the number of consumers;
    ``event.step`` is the root's forward whose backward this is. A frozen parameter
    (``requires_grad=False`` / ``stop_gradient=True``) takes no gradient: it is skipped, no hook.

    >>> attach_params(model, [("fc", model.fc, "weight", model.fc.weight)], clip)   # doctest: +SKIP
    """
    backend = backend_for(model)
    targets = [(name, (layer, pname, p), fn, None) for name, layer, pname, p in params if backend.requires_grad(p)]
    return _attach_each(model, backend, targets, priority, partial(param_consumer, backend))


def _attach_each(model: Any, backend: Backend, entries: list, priority: int, place: Callable) -> HandleGroup:
    """One consumer per ``(name, target, fn, plain)``, placed where ``place(target, consumer)`` says,
    ``(hooks, object, add args, discard args)`` (a parameter: ``grads.param_consumer``), one handle
    each. The root's clock starts with the first. All or nothing: an error removes what was placed."""
    clock = clocks.clock_for(model)
    root_hooks = _hooks_for(model, backend)
    root = (weakref.ref(model), root_hooks)
    done: list[Placed] = []
    placed, users, scope_of, ref = done.append, clock.users.add, clock.scope, weakref.ref
    try:
        for name, target, fn, plain in entries:
            consumer = Consumer(fn, priority, next(_seq), scope_of(name), plain)
            users(id(consumer))
            hooks, obj, add_args, discard_args = place(target, consumer)
            placed(Placed(hooks.discard, ref(obj), discard_args, consumer, root))
            if root_hooks.root_clock is not clock:
                root_hooks.hook_root(model, clock)
            hooks.add(obj, *add_args)
    except BaseException:
        HandleGroup(done).remove()
        raise
    return HandleGroup(done)


#: functions ``layer -> hook targets inside it`` that layers above core add (operation sites)
_INNER_TARGETS: list[Callable[[Any], Iterable[Any]]] = []


def register_inner_targets(targets_of: Callable[[Any], Iterable[Any]]) -> None:
    """Let ``remove_all`` find hook targets that live inside a layer (``targets_of(layer)``), such
    as the operation sites of ``hookkit.sites``, without core importing them."""
    if targets_of not in _INNER_TARGETS:
        _INNER_TARGETS.append(targets_of)


def _inner_targets(layer: Any) -> list[Any]:
    return [t for targets_of in _INNER_TARGETS for t in targets_of(layer)]


@public_entry()
def remove_all(model: Layer) -> int:
    """Remove every hook hookkit placed on ``model``, its layers and their parameters; returns how
    many layers had some. A deep copy or an unpickled copy of a hooked model carries inert hooks
    (they feed nothing): those are removed too. Hooks placed by the user or other libraries stay.

    >>> hookkit.remove_all(model)   # doctest: +SKIP
    """
    backend = check_model(model)
    removed = 0
    for layer in [x for _, m in backend.named_layers(model) for x in (m, *_inner_targets(m))]:  # operation sites too
        hooks = _registry.get(layer)
        had = hooks is not None and (hooks.active or hooks._native_pre or hooks._native_post)
        if had and hooks is not None:
            hooks.clear(layer)
        if backend.drop_forward_hooks(layer, _inert) or had:  # a copy's inert hooks too
            removed += 1
    for p in backend.parameters(model, recurse=True):
        phooks = param_hooks(p)
        if phooks is not None and phooks.consumers:
            phooks.clear(p)
    clocks.forget(model)
    return removed


def attached(layer: Any) -> dict[str, int]:
    """How many hookkit consumers each event of ``layer`` has (for tests and debugging); the
    ``param_grad`` count sums the consumers of the layer's direct parameters."""
    hooks = _registry.get(layer)
    out = {e: 0 for e in EVENTS}
    if hooks is not None:
        out.update({e: len(hooks.consumers[e]) for e in LAYER_EVENTS})
    for p in backend_for(layer).parameters(layer, recurse=False):
        phooks = param_hooks(p)
        if phooks is not None:
            out["param_grad"] += sum(1 for _, ref, _ in phooks.consumers if ref() is layer)
    return out
