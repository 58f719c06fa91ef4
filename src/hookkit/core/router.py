"""ONE native hook per (layer, event), whatever the number of hookkit consumers.

Each hooked layer gets a ``LayerHooks``: ordered consumer lists for four events (forward_pre,
forward, grad = gradient w.r.t. one output tensor, backward = grad_inputs + grad_outputs) and at
most one native pre-hook and one native post-hook. Consumers run in (priority, arrival) order:
interventions (``INTERVENTION``) before observers (``OBSERVER``), so observers see changed values.
Gradients are taken with tensor hooks placed during the forward (DESIGN rule 2); ``backward``
consumers also get their inputs' gradients through one identity node placed in the pre-hook.

Nothing here holds the model: the registry is keyed weakly and native handles hold weak refs.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from hookkit.backends import Backend, backend_for
from hookkit.core.errors import annotate
from hookkit.core.handles import Handle, HandleGroup
from hookkit.core.tree import leaves

INTERVENTION = 0
OBSERVER = 100
EVENTS = ("forward_pre", "forward", "grad", "backward")


class Halt(BaseException):
    """Raised by a "forward" consumer to end the model's forward right after this layer (early stop).

    A BaseException, so model code's ``except Exception`` lets it through; the router places the
    layer's gradient hooks before it propagates, so gradient consumers of the halted layer still work."""


class Event:
    """What a consumer sees at one call of one layer. ``call`` counts calls of the layer within
    the current forward of the model it was registered on; ``step`` counts those forwards."""

    __slots__ = ("layer", "name", "call", "step", "args", "kwargs", "output", "grad", "index", "grad_inputs", "grad_outputs")

    def __init__(self, layer: Any, name: str, call: int, step: int, args: Any = None, kwargs: Any = None, output: Any = None):
        self.layer, self.name, self.call, self.step = layer, name, call, step
        self.args, self.kwargs, self.output = args, kwargs, output
        self.grad = self.index = self.grad_inputs = self.grad_outputs = None

    def __repr__(self) -> str:
        return f"<Event {self.name!r} call={self.call} step={self.step}>"


class Consumer:
    __slots__ = ("fn", "priority", "seq", "clock")

    def __init__(self, fn: Callable[[Event], Any], priority: int, seq: int, clock: Clock):
        self.fn, self.priority, self.seq, self.clock = fn, priority, seq, clock


class Clock:
    """Counts forwards of one root model; ticked by the root's pre-hook while anyone uses it."""

    __slots__ = ("step", "users", "__weakref__")

    def __init__(self) -> None:
        self.step = -1
        self.users: set[int] = set()


class _GradCall:
    """One forward call's gradient bookkeeping, alive as long as its autograd graph."""

    __slots__ = ("_layer", "call", "step", "grad_outputs", "n_args", "positions")

    def __init__(self, layer: Any, call: int, step: int):
        # weak: a forward that raised leaves its _GradCall in LayerHooks._pending, and a strong
        # reference there would keep the layer (a weak key of the registry) alive for ever
        self._layer, self.call, self.step = weakref.ref(layer), call, step
        self.grad_outputs: list[Any] = []
        self.n_args = 0
        self.positions: list[int] = []

    @property
    def layer(self) -> Any:
        return self._layer()


_registry: weakref.WeakKeyDictionary[Any, LayerHooks] = weakref.WeakKeyDictionary()
_clocks: weakref.WeakKeyDictionary[Any, Clock] = weakref.WeakKeyDictionary()
_seq = [0]


class LayerHooks:
    """The consumers of one layer and the native hooks that serve them."""

    __slots__ = (
        "name",
        "backend",
        "ticks",
        "consumers",
        "_native_pre",
        "_native_post",
        "_step",
        "_call",
        "_pending",
        # hot-path caches, rebuilt by _sync_native after every change of consumers or ticks
        "_pre_fns",
        "_fwd_fns",
        "_wants_grads",
        "_clock_src",
        "__weakref__",
    )

    def __init__(self, name: str, backend: Backend):
        self.name = name
        self.backend = backend
        self.ticks: Clock | None = None
        self.consumers: dict[str, tuple[Consumer, ...]] = {e: () for e in EVENTS}
        self._native_pre: Any = None
        self._native_post: Any = None
        self._step = -2
        self._call = -1
        self._pending: _GradCall | None = None
        self._pre_fns: tuple[Callable[[Event], Any], ...] = ()
        self._fwd_fns: tuple[Callable[[Event], Any], ...] = ()
        self._wants_grads = False
        self._clock_src: Clock | None = None

    # -- bookkeeping ----------------------------------------------------------------------------
    def add(self, layer: Any, event: str, consumer: Consumer) -> None:
        self.consumers[event] = tuple(sorted((*self.consumers[event], consumer), key=lambda c: (c.priority, c.seq)))
        self._sync_native(layer)

    def discard(self, layer: Any, event: str, consumer: Consumer) -> None:
        self.consumers[event] = tuple(c for c in self.consumers[event] if c is not consumer)
        self._sync_native(layer)

    def clear(self, layer: Any) -> None:
        for clock in {c.clock for cs in self.consumers.values() for c in cs}:
            clock.users.difference_update(id(c) for cs in self.consumers.values() for c in cs)
        self.consumers = {e: () for e in EVENTS}
        self.ticks = None
        self._sync_native(layer)

    @property
    def active(self) -> bool:
        return any(self.consumers.values()) or self.ticks is not None

    def _sync_native(self, layer: Any) -> None:
        c = self.consumers
        # The dispatchers read these instead of the dict: no per-call lookups, no attribute hops.
        self._pre_fns = tuple(x.fn for x in c["forward_pre"])
        self._fwd_fns = tuple(x.fn for x in c["forward"])
        self._wants_grads = bool(c["grad"] or c["backward"])
        self._clock_src = next((c[e][0].clock for e in EVENTS if c[e]), self.ticks)
        want_pre = bool(c["forward_pre"] or c["backward"]) or self.ticks is not None
        want_post = bool(c["forward"] or c["grad"] or c["backward"])
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

    def _tick(self, clock_step: int) -> int:
        if clock_step != self._step:
            self._step = clock_step
            self._call = 0
        else:
            self._call += 1
        return self._call

    def _clock_step(self) -> int:
        # the clock of the first consumer (in EVENTS order), else the root's own ticks
        src = self._clock_src
        return src.step if src is not None else 0

    # -- dispatch -------------------------------------------------------------------------------
    def _on_pre(self, layer: Any, args: tuple, kwargs: dict) -> Any:
        if self.ticks is not None:
            self.ticks.step += 1
        src = self._clock_src
        step = src.step if src is not None else 0
        if step != self._step:
            self._step, self._call = step, 0
        else:
            self._call += 1
        call = self._call
        changed = False
        fns = self._pre_fns
        if fns:
            ev = Event(layer, self.name, call, step, args, kwargs)
            for fn in fns:
                try:
                    r = fn(ev)
                except Exception as exc:
                    raise annotate(exc, self.name, call, "forward pre") from None
                if r is not None:
                    if not (isinstance(r, tuple) and len(r) == 2 and isinstance(r[1], dict)):
                        raise TypeError(
                            f"a forward pre hook on layer {self.name!r} must return None or (args, kwargs); got {type(r).__name__}"
                        )
                    ev.args, ev.kwargs = r
                    changed = True
            args, kwargs = ev.args, ev.kwargs
        if self.consumers["backward"] and self.backend.grad_enabled():
            args, wrapped = self._wrap_inputs(layer, tuple(args), call, step)
            changed = changed or wrapped
        return (tuple(args), kwargs) if changed else None

    def _on_post(self, layer: Any, args: tuple, kwargs: dict, output: Any) -> Any:
        # The hot path: runs at every call of every hooked layer. _tick and _clock_step inlined.
        if self._native_pre is not None:
            call, step = self._call, self._step
        else:
            src = self._clock_src
            step = src.step if src is not None else 0
            if step != self._step:
                self._step = step
                call = self._call = 0
            else:
                call = self._call = self._call + 1
        changed = False
        fns = self._fwd_fns
        if fns:
            ev = Event(layer, self.name, call, step, args, kwargs, output)
            for fn in fns:
                try:
                    r = fn(ev)
                except Halt:
                    if self._wants_grads and self.backend.grad_enabled():
                        self._plumb_outputs(layer, len(args), ev.output, call, step)
                    raise
                except Exception as exc:
                    raise annotate(exc, self.name, call, "forward") from None
                if r is not None:
                    ev.output = r
                    changed = True
            output = ev.output
        if self._wants_grads and self.backend.grad_enabled():
            self._plumb_outputs(layer, len(args), output, call, step)
        return output if changed else None

    # -- gradients ------------------------------------------------------------------------------
    def _wrap_inputs(self, layer: Any, args: tuple, call: int, step: int) -> tuple[tuple, bool]:
        be = self.backend
        positions = [i for i, a in enumerate(args) if be.is_tensor(a) and be.requires_grad(a)]
        self._pending = None
        if not positions:
            return args, False
        g = _GradCall(layer, call, step)
        g.n_args, g.positions = len(args), positions
        copies = be.identity_with_backward([args[i] for i in positions], partial(self._on_input_grads, g))
        new = list(args)
        for i, t in zip(positions, copies):
            new[i] = t
        self._pending = g
        return tuple(new), True

    def _plumb_outputs(self, layer: Any, n_args: int, output: Any, call: int, step: int) -> None:
        be = self.backend
        g = self._pending if self.consumers["backward"] else None
        self._pending = None
        if g is None or g.call != call:
            g = _GradCall(layer, call, step)
        outs = leaves(output, be.is_tensor)
        g.grad_outputs = [None] * len(outs)
        tracked = [i for i, t in enumerate(outs) if be.requires_grad(t)]
        for i in tracked:
            be.hook_tensor(outs[i], partial(self._on_output_grad, g, i))
        if self.consumers["backward"] and not g.positions and tracked:
            # No input takes a gradient: the backward event fires once all output grads are in.
            be.when_all_grads([outs[i] for i in tracked], lambda _: self._fire_backward(g, (None,) * n_args))

    def _on_output_grad(self, g: _GradCall, index: int, grad: Any) -> Any:
        consumers = self.consumers["grad"]
        changed = False
        if consumers:
            ev = Event(g.layer, self.name, g.call, g.step)
            ev.index = index
            for c in consumers:
                ev.grad = grad
                try:
                    r = c.fn(ev)
                except Exception as exc:
                    raise annotate(exc, self.name, g.call, "gradient") from None
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
        ev = Event(g.layer, self.name, g.call, g.step)
        ev.grad_outputs = tuple(g.grad_outputs)
        ev.grad_inputs = grad_inputs
        changed = False
        for c in consumers:
            try:
                r = c.fn(ev)
            except Exception as exc:
                raise annotate(exc, self.name, g.call, "backward") from None
            if r is not None:
                r = tuple(r) if isinstance(r, (tuple, list)) else (r,)
                if len(r) != len(grad_inputs):
                    raise ValueError(
                        f"a backward hook on layer {self.name!r} returned {len(r)} grad_inputs; the layer has {len(grad_inputs)} positional inputs"
                    )
                ev.grad_inputs, changed = r, True
        return ev.grad_inputs if changed else None


def _clock_for(root: Any, backend: Backend) -> tuple[Clock, LayerHooks]:
    clock = _clocks.get(root)
    if clock is None:
        clock = _clocks[root] = Clock()
    root_hooks = _hooks_for(root, "", backend)
    return clock, root_hooks


def _hooks_for(layer: Any, name: str, backend: Backend) -> LayerHooks:
    hooks = _registry.get(layer)
    if hooks is None:
        hooks = _registry[layer] = LayerHooks(name, backend)
    return hooks


def attach(
    model: Any, named: Iterable[tuple[str, Any]], event: str, fn: Callable[[Event], Any], priority: int = INTERVENTION
) -> HandleGroup:
    """Add consumer ``fn(event) -> None | replacement`` on ``event`` of each (name, layer).

    Internal entry point of every feature; returns one handle removing all it placed."""
    if event not in EVENTS:
        raise ValueError(f"unknown event {event!r}; valid events: {', '.join(EVENTS)}")
    backend = backend_for(model)
    named = list(named)
    backend.check_hookable(model, named)
    clock, root_hooks = _clock_for(model, backend)
    group = HandleGroup()
    try:
        for name, layer in named:
            hooks = _hooks_for(layer, name, backend)
            _seq[0] += 1
            consumer = Consumer(fn, priority, _seq[0], clock)
            clock.users.add(id(consumer))
            group.add(Handle(partial(_detach, weakref.ref(layer), weakref.ref(model), hooks, root_hooks, event, consumer)))
            if root_hooks.ticks is not clock:
                root_hooks.ticks = clock
                root_hooks._sync_native(model)
            hooks.add(layer, event, consumer)
    except BaseException:
        group.remove()
        raise
    return group


def _detach(layer_ref: Any, root_ref: Any, hooks: LayerHooks, root_hooks: LayerHooks, event: str, consumer: Consumer) -> None:
    layer, root = layer_ref(), root_ref()
    if layer is not None:
        hooks.discard(layer, event, consumer)
    clock = consumer.clock
    clock.users.discard(id(consumer))
    if not clock.users and root is not None and root_hooks.ticks is clock:
        root_hooks.ticks = None
        root_hooks._sync_native(root)


def forward_count(model: Any) -> int | None:
    """How many forwards of ``model`` hookkit has counted (the ``step`` of events), or None when no
    hookkit consumer is registered with ``model`` as root."""
    clock = _clocks.get(model)
    return None if clock is None else clock.step + 1


def advance(model: Any) -> None:
    """Count one more step for ``model``: for loops that never call the root model itself (a
    LightningModule whose ``training_step`` calls ``self.net``); events' ``step`` then follows."""
    clock = _clocks.get(model)
    if clock is not None:
        clock.step += 1


def remove_all(model: Any) -> int:
    """Remove every hook hookkit placed on ``model`` and its layers; returns how many layers had some.
    Hooks placed by the user or other libraries stay.

    >>> hookkit.remove_all(model)   # doctest: +SKIP
    """
    backend = backend_for(model)
    count = 0
    for _, layer in backend.named_layers(model):
        hooks = _registry.get(layer)
        if hooks is not None and (hooks.active or hooks._native_pre or hooks._native_post):
            hooks.clear(layer)
            count += 1
    _clocks.pop(model, None)
    return count


def attached(layer: Any) -> dict[str, int]:
    """How many hookkit consumers each event of ``layer`` has (for tests and debugging)."""
    hooks = _registry.get(layer)
    if hooks is None:
        return {e: 0 for e in EVENTS}
    return {e: len(hooks.consumers[e]) for e in EVENTS}
