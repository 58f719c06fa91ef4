"""``Site``: where in one layer call a value is read or written, and the ONE mechanism that reads,
writes and attaches it through the router.

A site is a hooked module (``at``, ``module``), the event whose value it reads (``"forward"``: the
module's output; ``"forward_pre"``: its input), which tensor of that value (``index``: position among
the output's tensors, depth first, None for every one; among the inputs: an argument's position, a
keyword's name, or ``FIRST``, the first tensor argument or keyword) and which part of that tensor
(``part``: ``WHOLE``, or a view with its own layout such as ``heads.Heads``). ``name`` is the layer the
user selected: records and per-layer values are keyed by it (a head site hooks ``h.0.attn.c_proj``
and is named ``h.0.attn``). Calls and generation steps are filtered by ``When``; token positions stay
a property of the values (``core.positions``), applied by the verbs that take ``positions=``.

>>> found = resolve(model, "h.*.attn", heads=[0, 2])                   # doctest: +SKIP
>>> group = attach_sites(model, found, lambda s: lambda ev: print(s.read(be, ev).shape), OBSERVER)  # doctest: +SKIP

How to add a site kind (see docs/sites.md): a kind is a way to turn ``(model, layers, options)``
into Sites. Write its resolver (``model, layers, options -> list[Site]``), with a ``Part`` subclass
if the value users see is a view of a tensor (its ``get``/``put``), and add one entry to ``KINDS``:
the option that selects it. Nothing else changes: ``capture``, the edits, the patching analyses
read and write through ``Site.read`` / ``Site.write`` and ``attach_sites``. A kind that hooks
something that is not a module of the model (an operation inside a forward) makes its targets
selectable in ``core.select`` (``select.register_spec_kind``, as ``sites.operations`` does) and its
Sites point at them.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from hookkit.backends import Backend
from hookkit.core.entry import entry_name
from hookkit.core.handles import HandleGroup
from hookkit.core.router import Event, attach_each
from hookkit.core.select import LayerSpec, select
from hookkit.core.tree import leaves, map_tensors
from hookkit.core.types import Layer
from hookkit.core.validate import ArgumentTypeError, fail
from hookkit.sites.heads import Heads, head_targets
from hookkit.sites.parts import WHOLE, Part

FIRST = "first"
"""``Site.index`` of an input site: the first tensor among the positional arguments, then the keywords."""

TensorFn = Callable[[Any, int, Event], Any]


class RecordSource:
    """What a stored-values argument recognizes as a capture (``patch(values=capture)``): records
    per layer and call (``names``, ``calls(name)``, ``sequence(name)``). ``hookkit.capture`` is one;
    edits test for this base instead of importing the observer."""

    __slots__ = ()
    names: list[str]

    def calls(self, name: str) -> list[Any]:
        raise NotImplementedError

    def sequence(self, name: str, *, call: int | None = None) -> Any:
        raise NotImplementedError


# -- checks of the common options ----------------------------------------------------------------
def check_calls(calls: Any) -> frozenset[int] | None:
    """``calls=`` -> the call indices within one forward (None: every call)."""
    if calls is None:
        return None
    fn = entry_name("edit_outputs")
    valid = "None, an int >= 0 or a list of them (call indices within one forward)"
    items = [calls] if isinstance(calls, int) and not isinstance(calls, bool) else calls
    if isinstance(items, (str, bytes)) or not hasattr(items, "__iter__"):
        fail(fn, "calls", valid, calls, kind=ArgumentTypeError)
    items = list(items)
    for c in items:
        if isinstance(c, bool) or not isinstance(c, numbers.Integral):
            fail(fn, "calls", valid, calls, kind=ArgumentTypeError)
        if c < 0:
            fail(fn, "calls", valid, calls)
    return frozenset(int(c) for c in items)


def check_index(index: Any) -> None:
    """``index=``: None (every tensor of the output) or a position among its tensors."""
    if index is not None and (not isinstance(index, int) or isinstance(index, bool) or index < 0):
        valid = "None (every tensor) or an int >= 0 (position among the output's tensors)"
        fail(entry_name("edit_outputs"), "index", valid, index, kind=ArgumentTypeError)


@dataclasses.dataclass(frozen=True)
class When:
    """Which calls of a site: call indices within one forward, generation steps (None: all)."""

    calls: frozenset[int] | None = None
    steps: Any = None

    @property
    def always(self) -> bool:
        return self.calls is None and self.steps is None

    def __call__(self, ev: Event) -> bool:
        return (self.calls is None or ev.call in self.calls) and (self.steps is None or ev.pos.gen_step in self.steps)


# -- the output's tensors --------------------------------------------------------------------------
def apply_to(be: Backend, ev: Event, index: int | None, fn: TensorFn, name: str | None = None) -> Any:
    """``ev.output`` with ``fn(tensor, position, ev)`` applied to the tensor at ``index`` (or to all);
    ``name``: the public function, for the error of an output without a tensor."""
    output = ev.output
    if be.is_tensor(output):
        if index not in (None, 0):
            raise IndexError(f"layer {ev.name!r} returns one tensor; index={index} is out of range (use 0)")
        return fn(output, 0, ev)
    n = len(leaves(output, be.is_tensor))
    if n == 0:
        valid = f"layers whose output holds a tensor to change (layer {ev.name!r} returned {type(output).__name__})"
        fail(name or entry_name("edit_outputs"), "layers", valid, output, kind=ArgumentTypeError)
    if index is not None and index >= n:
        raise IndexError(f"layer {ev.name!r} returns {n} tensors ({type(output).__name__}); index={index} is out of range (0..{n - 1})")
    pos = [-1]

    def visit(t: Any) -> Any:
        pos[0] += 1
        return fn(t, pos[0], ev) if index is None or pos[0] == index else t

    return map_tensors(output, visit, be.is_tensor)


def _input_slot(be: Backend, ev: Event, index: Any) -> tuple[int | str, Any] | None:
    """``(position or keyword, tensor)`` of an input site's tensor in ``ev``, or None."""
    args, kwargs = ev.args, ev.kwargs or {}
    if isinstance(index, int):
        return (index, args[index]) if index < len(args) and be.is_tensor(args[index]) else None
    if index != FIRST:
        return (index, kwargs[index]) if be.is_tensor(kwargs.get(index)) else None
    for i, a in enumerate(args):
        if be.is_tensor(a):
            return i, a
    for k, v in kwargs.items():
        if be.is_tensor(v):
            return k, v
    return None


# -- the site ----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, eq=False)
class Site:
    """Where in one layer call a value is read or written (see the module docstring).

    >>> site = Site("h.0.mlp", "h.0.mlp", model.h[0].mlp)          # doctest: +SKIP   # its output's first tensor
    >>> site.read(be, ev)                                         # doctest: +SKIP   # inside a consumer
    """

    name: str
    at: str
    module: Any
    event: str = "forward"
    index: int | str | None = 0
    part: Part = WHOLE
    entry: str = dataclasses.field(default_factory=entry_name)  # the public function, named by errors at forward time

    @property
    def kind(self) -> str:
        """``"whole"``, ``"heads"``...: the part's kind (what a record of this site is laid out as)."""
        return self.part.kind

    def tensor(self, be: Backend, ev: Event) -> Any:
        """The tensor the site reads in ``ev`` (the whole of it, before ``part``); None if absent."""
        if self.event == "forward":
            out = ev.output
            if be.is_tensor(out):
                return out if self.index in (0, None) else None
            found = leaves(out, be.is_tensor)
            i = 0 if self.index is None else self.index
            return found[i] if isinstance(i, int) and i < len(found) else None
        slot = _input_slot(be, ev, self.index)
        return None if slot is None else slot[1]

    def read(self, be: Backend, ev: Event) -> Any:
        """The value at the site in ``ev`` (the part's record); None when the call has no such tensor."""
        t = self.tensor(be, ev)
        return None if t is None else self.part.get(be, t)[0]

    def write(self, be: Backend, ev: Event, fn: TensorFn) -> Any:
        """What a consumer of ``ev`` returns to replace the value at the site by ``fn(record, position,
        ev)`` (None from ``fn``: unchanged): the new output, ``(args, kwargs)``, or None."""
        part = self.part

        def through_part(t: Any, leaf: int, ev: Event) -> Any:
            rec, state = part.get(be, t)
            new = fn(rec, leaf, ev)
            return t if new is None or new is rec else part.put(be, t, state, new, self.at)

        if self.event == "forward":
            return apply_to(be, ev, self.index, through_part, self.entry)  # type: ignore[arg-type]  # an output site's index is an int or None
        slot = _input_slot(be, ev, self.index)
        if slot is None:  # no such input in this call: nothing to write (a part may call it an error)
            part.missing(self, ev)
            return None
        key, t = slot
        new = through_part(t, 0, ev)
        if new is t:
            return None
        if isinstance(key, int):
            return (*ev.args[:key], new, *ev.args[key + 1 :]), ev.kwargs
        return ev.args, {**(ev.kwargs or {}), key: new}


def attach_sites(
    model: Layer,
    found: Sequence[Site],
    consumer: Callable[[Site], Callable[[Event], Any]],
    priority: int,
    *,
    group: HandleGroup | None = None,
) -> HandleGroup:
    """Attach ``consumer(site)`` on each site's event of its module, all or nothing (one router
    placement per event kind); the handles join ``group`` when given."""
    group = HandleGroup() if group is None else group
    by_event: dict[str, list[tuple[str, Any, Callable | None, None]]] = {}
    for site in found:
        by_event.setdefault(site.event, []).append((site.at, site.module, consumer(site), None))
    try:
        for event, entries in by_event.items():
            group.handles += attach_each(model, entries, event, priority)
    except BaseException:
        group.remove()
        raise
    return group


# -- kinds -------------------------------------------------------------------------------------------
def _outputs(model: Layer, layers: LayerSpec, options: dict[str, Any]) -> list[Site]:
    index = options.get("index", 0)
    return [Site(n, n, m, "forward", index) for n, m in select(model, layers)]


def _inputs(model: Layer, layers: LayerSpec, options: dict[str, Any]) -> list[Site]:
    index = options.get("input", FIRST)
    return [Site(n, n, m, "forward_pre", FIRST if index is True else index) for n, m in select(model, layers)]


def _heads(model: Layer, layers: LayerSpec, options: dict[str, Any]) -> list[Site]:
    targets = head_targets(model, layers, options["heads"], options.get("head_layout"))
    return [Site(t.name, t.proj_name, t.proj, "forward_pre", 0, Heads(t)) for t in targets]


#: option -> resolver, tried in order; the first option given (not None / False) picks the kind,
#: none given: the module's output. A new site kind is one entry here (see the module docstring).
KINDS: dict[str, Callable[[Layer, LayerSpec, dict[str, Any]], list[Site]]] = {
    "heads": _heads,
    "input": _inputs,
}


def kind_of(options: dict[str, Any]) -> str | None:
    """The site kind ``options`` ask for (None: module outputs)."""
    return next((k for k in KINDS if options.get(k) is not None and options.get(k) is not False), None)


def resolve(model: Layer, layers: LayerSpec, **options: Any) -> list[Site]:
    """The sites of ``layers`` in ``model``: each layer's output (``index=``, default 0), or the kind
    an option selects: ``heads=`` (with ``head_layout=``): the heads of an attention layer;
    ``input=`` (True, a position or a keyword name): an input tensor.

    >>> resolve(gpt2, "h.0.attn", heads=[1, 3])   # doctest: +SKIP
    [Site(name='h.0.attn', at='h.0.attn.c_proj', ...)]
    """
    kind = kind_of(options)
    return (_outputs if kind is None else KINDS[kind])(model, layers, options)


def names_of(found: Iterable[Site]) -> list[str]:
    """The selected layers' names, once each, in order."""
    return list(dict.fromkeys(s.name for s in found))
