"""What a consumer sees and how consumers run: ``Event`` and its fields per event, ``Consumer``, the
two priorities, ``Halt``, and ``run``, the one consumer loop of the router's general paths (the
forward hot path in ``router.LayerHooks`` keeps its own, shorter loop).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from hookkit.core.errors import annotate
from hookkit.core.positions import OUTSIDE, TokenPos
from hookkit.core.user_frame import user_stacklevel
from hookkit.core.validate import ArgumentTypeError, InvalidArgument

if TYPE_CHECKING:
    from hookkit.core.clock import Scope

INTERVENTION = 0
OBSERVER = 100
LAYER_EVENTS = ("forward_pre", "forward", "grad", "backward")
EVENTS = (*LAYER_EVENTS, "param_grad")

# Every event fills layer, name, call and step; these are the fields each fills besides (the others
# stay None), the first of them being what a consumer's non-None return replaces.
FIELDS = {
    "forward_pre": ("args", "kwargs"),  # returns None or (args, kwargs)
    "forward": ("output", "args", "kwargs"),
    "grad": ("grad", "index"),  # the gradient w.r.t. output tensor number ``index``
    "backward": ("grad_inputs", "grad_outputs"),  # returns one gradient per positional input
    "param_grad": ("grad", "param", "param_name"),
}
# How an error raised in a consumer names the hook it came from.
_WHERE = {
    "forward_pre": "forward pre",
    "forward": "forward",
    "grad": "gradient",
    "backward": "backward",
    "param_grad": "parameter gradient",
}


class Halt(BaseException):
    """Raised by a "forward" consumer to end the model's forward right after this layer (early stop).

    A BaseException, so model code's ``except Exception`` lets it through; the router places the
    layer's gradient hooks before it propagates, so gradient consumers of the halted layer still work."""


class Event:
    """What a consumer sees at one call of one layer. ``call`` counts calls of the layer within
    the current forward of the root it was attached through; ``step`` counts those forwards.
    Which other fields an event fills: ``FIELDS``; the others read None (gradient events are a
    ``GradEvent``, which can hold them). Token positions (``hookkit.core.positions``), read once
    per forward of the root: ``offset`` (positions a KV cache held before this forward),
    ``gen_step`` (0 for the forward starting a sequence, +1 per cached forward after it), ``tokens``
    (tokens the forward feeds); ``selected``: the absolute positions of the slice an edit with
    ``positions=`` is handed (None: the whole output).

    >>> attach(model, select(model, "fc"), "forward", lambda ev: print(ev.name, ev.call, ev.output.shape))   # doctest: +SKIP
    """

    __slots__ = ("layer", "name", "call", "step", "args", "kwargs", "output", "pos", "selected")
    # the gradient fields: None here, held by a GradEvent
    grad: Any = None
    index: int | None = None
    grad_inputs: tuple[Any, ...] | None = None
    grad_outputs: tuple[Any, ...] | None = None
    param: Any = None
    param_name: str | None = None

    def __init__(
        self, layer: Any, name: str, call: int, step: int, args: Any = None, kwargs: Any = None, output: Any = None, pos: TokenPos = OUTSIDE
    ):
        self.layer, self.name, self.call, self.step = layer, name, call, step
        self.args, self.kwargs, self.output, self.pos = args, kwargs, output, pos
        self.selected: Sequence[int] | None = None

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
        return f"<{type(self).__name__} {self.name!r} call={self.call} step={self.step}>"


class GradEvent(Event):
    """The event of "grad", "backward" and "param_grad" consumers (an ``Event`` with the gradient fields)."""

    __slots__ = ("grad", "index", "grad_inputs", "grad_outputs", "param", "param_name")

    def __init__(self, layer: Any, name: str, call: int, step: int):
        super().__init__(layer, name, call, step)
        self.grad = self.index = self.grad_inputs = self.grad_outputs = self.param = self.param_name = None


class Consumer:
    """One registered ``fn(event)``: run in (priority, seq) order, numbered through its ``scope``.
    A "forward" consumer may also be ``plain``: ``plain(layer, args, output)``, what a plain forward
    hook takes, called without building an Event when every forward consumer of a layer is plain
    (``fn`` is then the same call, reading the event)."""

    __slots__ = ("fn", "priority", "seq", "scope", "observer", "plain")

    def __init__(self, fn: Callable[[Event], Any] | None, priority: int, seq: int, scope: Scope, plain: Callable | None = None):
        if plain is not None:
            fn = partial(call_plain, plain)
        assert fn is not None  # attach() refuses neither fn nor plain
        self.fn, self.priority, self.seq, self.scope, self.plain = fn, priority, seq, scope, plain
        self.observer = priority >= OBSERVER


def call_plain(plain: Callable, ev: Event) -> Any:
    return plain(ev.layer, ev.args, ev.output)


def ordered(consumers: Sequence[Any], key: Callable[[Any], Consumer] = lambda c: c) -> tuple:
    """``consumers`` in running order: interventions before observers, then by arrival."""
    return tuple(sorted(consumers, key=lambda c: (key(c).priority, key(c).seq)))


def _check_inputs(r: Any, value: Any, name: str) -> Any:
    if not (isinstance(r, tuple) and len(r) == 2 and isinstance(r[1], dict)):
        raise ArgumentTypeError(f"a forward pre hook on layer {name!r} must return None or (args, kwargs); got {type(r).__name__}")
    return r


def _check_grad_inputs(r: Any, value: Any, name: str) -> Any:
    r = tuple(r) if isinstance(r, (tuple, list)) else (r,)
    if len(r) != len(value):
        raise InvalidArgument(
            f"a backward hook on layer {name!r} returned {len(r)} grad_inputs; the layer has {len(value)} positional inputs"
        )
    return r


_CHECKS = {"forward_pre": _check_inputs, "backward": _check_grad_inputs}


def run(
    consumers: Sequence[Consumer],
    event: str,
    value: Any,
    event_for: Callable[[Consumer], Event | None],
    on_halt: Callable[[Any], None] | None = None,
) -> tuple[Any, bool]:
    """Run ``consumers`` on ``event``: each sees ``value`` as the consumers before it left it, in the
    event's first field (``FIELDS``); ``event_for(consumer)`` gives its Event, or None to skip it.
    Returns the final value and whether any consumer replaced it. An exception gets the layer name
    and call added (``errors.annotate``); on ``Halt``, ``on_halt(value)`` runs before it propagates."""
    field = FIELDS[event][0]
    check = _CHECKS.get(event)
    changed = False
    for c in consumers:
        ev = event_for(c)
        if ev is None:
            continue
        if event == "forward_pre":
            ev.args, ev.kwargs = value
        else:
            setattr(ev, field, value)
        try:
            r = c.fn(ev)
        except Halt:
            if on_halt is not None:
                on_halt(value)
            raise
        except Exception as exc:
            raise annotate(exc, _label(ev), ev.call, _WHERE[event]) from None
        if r is not None:
            value = r if check is None else check(r, value, c.scope.name)
            changed = True
    return value, changed


def events_per_scope(layer: Any, numbers: dict, recompute: bool, transformed: bool, *fields: Any) -> Callable[[Consumer], Event | None]:
    """``event_for`` of ``run`` for a layer's call: one Event per scope (``numbers``: scope -> (call,
    step); ``fields``: args, kwargs[, output]), observers skipped on a checkpoint recompute, inside a
    transform (with one warning) or in a private pass."""
    made: dict[Scope, Event] = {}
    skip_observers = recompute or transformed

    def event_for(c: Consumer) -> Event | None:
        if c.observer and skip_observers:
            if transformed:
                warn_transformed(c.scope.name)
            return None
        if c.observer and c.scope.clock.private is not None and id(c) in c.scope.clock.current().hidden:
            return None  # a private pass: not a forward this observer records
        ev = made.get(c.scope)
        if ev is None:
            ev = made[c.scope] = Event(layer, c.scope.name, *numbers[c.scope], *fields)
            ev.pos = c.scope.clock.pos(recompute)
        return ev

    return event_for


def _label(ev: Event) -> str:
    if ev.param_name is None:
        return ev.name
    return f"{ev.name}.{ev.param_name}" if ev.name else ev.param_name


warned: set[str] = set()  # the warnings given once per process, by key


def warn_transformed(name: str) -> None:
    """Warn once that observers skip calls under a functional transform."""
    if "transformed" not in warned:
        warned.add("transformed")
        warnings.warn(
            f"hookkit: layer {name!r} ran under a torch.func transform (grad, vmap, jacrev...): observers (capture, "
            "statistics, non-finite checks) skip such calls and gradient hooks are not placed; interventions still run. "
            "Run the model outside the transform to observe it.",
            RuntimeWarning,
            stacklevel=user_stacklevel(),  # the user's line, not the framework's call machinery
        )
