"""Gradient plumbing: how a layer's "grad" and "backward" consumers, and parameters' "param_grad"
consumers, are fed.

A layer's output gradients come from tensor hooks placed on its output inside the forward hook
(``GradPlumbing.plumb_outputs``); its input gradients from an identity with a backward placed on its
inputs in the pre-hook (``GradPlumbing.wrap_inputs``). One ``GradCall`` per forward call carries
the call's numbers and the gradients gathered so far, as long as its autograd graph lives.
A parameter gets one ``ParamHooks`` (one native tensor hook), found through an id-keyed registry.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from hookkit.core.events import Consumer, GradEvent, ordered, run
from hookkit.core.handles import Handle
from hookkit.core.registry import backend_for
from hookkit.core.tree import leaves

if TYPE_CHECKING:
    from hookkit.backends.base import Backend
    from hookkit.core.clock import Scope


class GradCall:
    """One forward call's gradient bookkeeping, alive as long as its autograd graph."""

    __slots__ = ("_layer", "calls", "grad_outputs", "n_args", "positions")

    def __init__(self, layer: Any, calls: dict[Scope, tuple[int, int]]):
        # weak: a forward that raised may leave its GradCall behind, and a strong reference would
        # keep the layer (a weak key of the router's registry) alive for ever
        self._layer = weakref.ref(layer)
        self.calls = calls  # scope -> (call, step)
        self.grad_outputs: list[Any] = []
        self.n_args = 0
        self.positions: list[int] = []  # the positional inputs that take a gradient

    @property
    def layer(self) -> Any:
        return self._layer()

    def event(self, c: Consumer) -> GradEvent:
        call, step = self.calls.get(c.scope) or (0, c.scope.clock.current().step)
        return GradEvent(self.layer, c.scope.name, call, step)


class GradPlumbing:
    """The gradient half of ``router.LayerHooks`` (which provides ``backend``, ``consumers``,
    ``_scopes``, ``_has_backward`` and ``_wants_grads``)."""

    __slots__ = ()
    backend: Backend
    consumers: dict[str, tuple[Consumer, ...]]
    _scopes: tuple[Scope, ...]
    _has_backward: bool
    _wants_grads: bool

    def _pending(self) -> dict[Scope, GradCall]:
        fw = self._scopes[0].clock.current()
        pending = fw.pending
        if pending is None:
            pending = fw.pending = {}
        return pending

    def wrap_inputs(self, layer: Any, args: tuple, numbers: dict[Scope, tuple[int, int]]) -> tuple[tuple, bool]:
        """Pre-hook: route the inputs that take a gradient through an identity whose backward fires
        the "backward" event; returns the new args and whether any was wrapped."""
        be = self.backend
        positions = [i for i, a in enumerate(args) if be.is_tensor(a) and be.requires_grad(a)]
        pending = self._pending()
        pending.pop(self._scopes[0], None)
        if not positions:
            return args, False
        g = GradCall(layer, numbers)
        g.n_args, g.positions = len(args), positions
        copies = be.identity_with_backward([args[i] for i in positions], partial(self._on_input_grads, g))
        new = list(args)
        for i, t in zip(positions, copies):
            new[i] = t
        pending[self._scopes[0]] = g
        return tuple(new), True

    def plumb_outputs(self, layer: Any, n_args: int, output: Any, numbers: dict[Scope, tuple[int, int]]) -> None:
        """Post-hook: hook each output tensor that takes a gradient ("grad" event; "backward" once
        all are in when no input takes a gradient)."""
        be = self.backend
        g = self._pending().pop(self._scopes[0], None) if self._has_backward else None
        if g is None or g.layer is not layer:
            g = GradCall(layer, numbers)
        else:
            g.calls = numbers
        outs = leaves(output, be.is_tensor)
        g.grad_outputs = [None] * len(outs)
        tracked = [i for i, t in enumerate(outs) if be.requires_grad(t)]
        for i in tracked:
            be.hook_tensor(outs[i], partial(self._on_output_grad, g, i))
        if self._has_backward and not g.positions and tracked:
            be.when_all_grads([outs[i] for i in tracked], lambda _: self._fire_backward(g, (None,) * n_args))

    def _place_grad_hooks(self, layer: Any, n_args: int, numbers: dict, output: Any) -> None:
        """Place the layer's gradient hooks on ``output`` if any are wanted: after the forward
        consumers, or when one raised ``Halt``, before it propagates."""
        if self._wants_grads and self.backend.grad_enabled():
            self.plumb_outputs(layer, n_args, output, numbers)

    def _on_output_grad(self, g: GradCall, index: int, grad: Any) -> Any:
        def event_for(c: Consumer) -> GradEvent:
            ev = g.event(c)
            ev.index = index
            return ev

        grad, changed = run(self.consumers["grad"], "grad", grad, event_for)
        g.grad_outputs[index] = grad
        return grad if changed else None

    def _on_input_grads(self, g: GradCall, grads: tuple) -> Any:
        full: list[Any] = [None] * g.n_args
        for i, gr in zip(g.positions, grads):
            full[i] = gr
        new = self._fire_backward(g, tuple(full))
        return None if new is None else tuple(new[i] for i in g.positions)

    def _fire_backward(self, g: GradCall, grad_inputs: tuple) -> tuple | None:
        grad_outputs = tuple(g.grad_outputs)

        def event_for(c: Consumer) -> GradEvent:
            ev = g.event(c)
            ev.grad_outputs = grad_outputs
            return ev

        grad_inputs, changed = run(self.consumers["backward"], "backward", grad_inputs, event_for)
        return grad_inputs if changed else None


# -- parameters -------------------------------------------------------------------------------------
class ParamHooks:
    """The consumers of one parameter's gradient and the one native tensor hook serving them."""

    __slots__ = ("backend", "consumers", "_native", "__weakref__")

    def __init__(self, backend: Backend | None):
        self.backend = backend
        self.consumers: tuple[tuple[Consumer, Any, str], ...] = ()  # (consumer, layer ref, param name)
        self._native: Any = None

    # a deep copy or pickle of the model gets one that feeds nothing of the original
    def __reduce__(self) -> tuple:
        return (ParamHooks, (None,))

    def __deepcopy__(self, memo: dict) -> ParamHooks:
        return ParamHooks(None)

    def add(self, param: Any, consumer: Consumer, layer: Any, param_name: str) -> None:
        self.consumers = ordered((*self.consumers, (consumer, weakref.ref(layer), param_name)), key=lambda e: e[0])
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
            assert self.backend is not None  # the inert copy (backend None) never gets consumers
            self._native = self.backend.hook_tensor(param, partial(self._on_grad, weakref.ref(param)))
        elif not self.consumers and self._native is not None:
            self._native.remove()
            self._native = None

    def _on_grad(self, param_ref: Any, grad: Any) -> Any:
        param = param_ref()
        entries = {c: (layer_ref, pname) for c, layer_ref, pname in self.consumers}

        def event_for(c: Consumer) -> GradEvent:
            layer_ref, pname = entries[c]
            ev = GradEvent(layer_ref(), c.scope.name, 0, c.scope.clock.current().step)
            ev.param, ev.param_name = param, pname
            return ev

        grad, changed = run([c for c, _, _ in self.consumers], "param_grad", grad, event_for)
        return grad if changed else None


# Keyed by id: tensors compare elementwise, so they cannot be WeakKeyDictionary keys. Each entry
# holds a weak reference whose callback drops the entry when the parameter dies.
_param_registry: dict[int, tuple[weakref.ref, ParamHooks]] = {}


def param_hooks(param: Any) -> ParamHooks | None:
    """The ``ParamHooks`` of ``param``, or None."""
    entry = _param_registry.get(id(param))
    return entry[1] if entry is not None and entry[0]() is param else None


def param_hooks_for(param: Any, backend: Backend) -> ParamHooks:
    """The ``ParamHooks`` of ``param``, made on first use."""
    hooks = param_hooks(param)
    if hooks is None:
        key = id(param)
        hooks = ParamHooks(backend)

        def forget(_: Any, key: int = key) -> None:
            _param_registry.pop(key, None)

        _param_registry[key] = (weakref.ref(param, forget), hooks)
    return hooks


def param_consumer(backend: Backend, target: tuple, consumer: Consumer) -> tuple:
    """For ``router.attach_params``: ``(hooks, parameter, add args, discard args)`` of ``consumer``
    on ``target`` = (layer, parameter name, parameter)."""
    layer, pname, p = target
    return param_hooks_for(p, backend), p, (consumer, layer, pname), (consumer,)


def hook_tensor(tensor: Any, fn: Callable[[Any], Any]) -> Handle:
    """One native gradient hook ``fn(grad) -> None | grad`` on a tensor (``hookkit.on_grad``)."""

    return Handle(backend_for(tensor).hook_tensor(tensor, fn).remove)
