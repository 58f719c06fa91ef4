"""``capture``: per-call records of layers' inputs, outputs and output gradients."""

from __future__ import annotations

import copy
import dataclasses
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from enum import Enum
from functools import partial
from itertools import count
from types import FunctionType, MethodType, ModuleType
from typing import Any, Literal, NamedTuple

from hookkit.core.entry import entered, public_entry, restored
from hookkit.core.handles import HandleGroup, held
from hookkit.core.positions import Positions, check_steps, token_dim_of
from hookkit.core.router import OBSERVER, Event, attach_each
from hookkit.core.select import LayerSpec, select, select_checked
from hookkit.core.sequences import select_output, stitch, tensor_at
from hookkit.core.suggest import close_matches
from hookkit.core.tree import leaves, map_tensors
from hookkit.core.types import Layer
from hookkit.core.validate import InvalidArgument, check_bool, check_model, fail
from hookkit.sites import RecordSource, Site, attach_sites, names_of, resolve

_SLOT = object()
_NO_GRADS: list[Any] = []  # shared by records of captures without grads=True (nobody reads or writes it)
Keep = Literal["all", "last"] | int
_ATOMS = (str, bytes, int, float, bool, complex, type, FunctionType, MethodType, ModuleType)


def _map_deep(obj: Any, fn: Callable[[Any], Any], be: Any, memo: dict[int, Any], depth: int = 0) -> Any:
    """``map_tensors`` that also reaches into plain objects (cache objects such as transformers'
    ``DynamicCache`` and its layers): each is shallow-copied with its attributes mapped, so a
    detached capture holds no tensor of the graph however the output is packed, and a cache the
    model fills in place later (its empty layers included) does not change what was captured.
    Layers, classes, functions and objects that cannot be copied are kept as they are."""
    if be.is_tensor(obj):
        return fn(obj)
    if obj is None or isinstance(obj, _ATOMS) or depth > 32:
        return obj
    key = id(obj)
    if key in memo:
        return memo[key]
    memo[key] = obj  # a cycle comes back to the original object: terminates
    if be.is_layer(obj) or isinstance(obj, Enum):
        return obj

    def inner(o: Any) -> Any:
        return _map_deep(o, fn, be, memo, depth + 1)

    if isinstance(obj, tuple):
        new = _map_tuple(obj, inner)
    elif isinstance(obj, list):
        items = [inner(o) for o in obj]
        new = items if any(a is not b for a, b in zip(items, obj)) else obj
    elif isinstance(obj, dict):
        new = _map_dict(obj, inner)
    else:
        new = _map_object(obj, inner)
    memo[key] = new
    return new


def _map_tuple(obj: tuple, inner: Callable[[Any], Any]) -> Any:
    items = [inner(o) for o in obj]
    if all(a is b for a, b in zip(items, obj)):
        return obj
    return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)


def _map_dict(obj: dict, inner: Callable[[Any], Any]) -> Any:
    values = {k: inner(v) for k, v in obj.items()}
    if all(values[k] is v for k, v in obj.items()):
        return obj
    if type(obj) is dict:
        return values
    try:  # Hugging Face ModelOutput is an OrderedDict dataclass: rebuild it from keywords
        return type(obj)(**values)
    except TypeError:
        new = type(obj)()
        new.update(values)
        return new


def _map_object(obj: Any, inner: Callable[[Any], Any]) -> Any:
    """A shallow copy of ``obj`` with its attributes (fields, ``__dict__``, slots) mapped; ``obj``
    itself when it cannot be copied."""
    try:
        new = copy.copy(obj)
    except Exception:  # noqa: BLE001 - locks, handles...: not ours to copy
        return obj
    fields = [f.name for f in dataclasses.fields(obj)] if dataclasses.is_dataclass(obj) else []
    names = fields or list(getattr(obj, "__dict__", {}))
    names += [n for c in type(obj).__mro__ for n in getattr(c, "__slots__", ()) if isinstance(n, str)]
    for n in dict.fromkeys(names):
        if n.startswith("__"):
            continue
        try:
            value = getattr(obj, n)
        except AttributeError:
            continue
        mapped = inner(value)
        if mapped is not value:
            object.__setattr__(new, n, mapped)  # also frozen dataclasses
    return new


class TopK(NamedTuple):
    """What ``capture(..., top_k=k)`` records per call: the ``k`` largest ``values`` along the last
    axis (largest first) and their ``indices`` there, two tensors on the output's device."""

    values: Any
    indices: Any


class Record:
    """One call of one layer: ``name``, ``call`` (index within the forward), ``step`` (forward count),
    ``inputs``, ``kwargs``, ``output``, and ``grad`` (mirrors ``output``'s structure after backward);
    ``pos``: where the forward sat in its sequence (``offset``, ``gen_step``: see ``Event``);
    ``positions``: the absolute positions the output holds when the capture selected some."""

    __slots__ = ("name", "call", "step", "inputs", "kwargs", "output", "grad", "pos", "positions", "_grads", "_structure", "_seq")

    def __init__(self, name: str, call: int, step: int, output: Any = None, pos: Any = None, seq: int = 0):
        self.name: str = name  # the layer's dotted name under the captured model
        self.call: int = call  # which call of the layer in its forward (0, 1, ...)
        self.step: int = step  # which forward of the model
        self.output: Any = output  # what the layer returned (detached unless detach=False)
        self.pos: Any = pos  # where the forward sat in its sequence (offset, gen_step)
        self._seq = seq  # when the call happened, among all the capture's records
        self.inputs = self.kwargs = self.grad = self._structure = self.positions = None
        self._grads: list[Any] = _NO_GRADS

    @property
    def offset(self) -> int:
        """The first absolute token position of the output (positions a KV cache held before the call)."""
        return self.pos.offset

    @property
    def gen_step(self) -> int:
        """The generation step of the call (0 = the forward that started the sequence)."""
        return self.pos.gen_step

    def __repr__(self) -> str:
        return f"Record(name={self.name!r}, call={self.call}, step={self.step})"


class CapturedGrads:
    """``cap.grads[name]``: the most recent gradient w.r.t. that layer's output (per call: ``cap.calls(name)[i].grad``)."""

    def __init__(self, cap: capture):
        self._cap = cap

    def __getitem__(self, name: str) -> Any:
        if not self._cap._grads:
            raise KeyError(f"no gradients are kept for layer {name!r}: create the capture with grads=True")
        last = self._cap._last(name)  # raises for unknown layers and layers that have not run
        for rec in reversed(self._cap._records[name]):
            if rec.grad is not None:
                return rec.grad
        raise KeyError(f"no gradient reached layer {last.name!r} yet: run backward() on a loss that depends on its output")

    def __contains__(self, name: str) -> bool:
        return any(r.grad is not None for r in self._cap._records.get(name, ()))

    def keys(self) -> list[str]:
        return [n for n in self._cap._records if n in self]


def _check_top_k(top_k: Any, outputs: bool) -> int | None:
    if top_k is None:
        return None
    if type(top_k) is not int or top_k < 1:
        fail("capture", "top_k", "None or an int >= 1 (how many of the last axis's largest values to keep)", top_k)
    if not outputs:
        fail("capture", "top_k", "None with outputs=False (top_k= keeps the largest values of the outputs)", top_k)
    return top_k


def _keep_limit(keep: Any) -> int | None:
    """``keep`` -> how many forwards to hold (None: all)."""
    if keep == "all" and isinstance(keep, str):
        return None
    if keep == "last" and isinstance(keep, str):
        return 1
    if isinstance(keep, int) and not isinstance(keep, bool) and keep >= 1:
        return keep
    fail("capture", "keep", "'all', 'last' or a number of forwards >= 1", keep)


class capture(HandleGroup, RecordSource):
    """Record what selected layers see, per call. A context manager; also usable with ``.remove()``.

    >>> with hookkit.capture(model, "h.*.attn", grads=True) as cap:   # doctest: +SKIP
    ...     model(x).sum().backward()
    >>> cap["h.0.attn"]          # last output of that layer
    >>> cap.calls("h.0.attn")    # every call's Record, in order
    >>> cap.grads["h.0.attn"]    # gradient w.r.t. that output

    ``grads=True`` also keeps the gradient w.r.t. each recorded output (``cap.grads[name]``);
    ``inputs=True`` also keeps each call's inputs (``Record.inputs``, ``Record.kwargs``);
    ``outputs=False`` keeps no outputs (with ``inputs=True``: the inputs only).

    ``detach`` keeps outputs out of the graph (default), whatever holds them (tuples, dicts,
    dataclasses, Hugging Face ``ModelOutput`` and cache objects); ``clone`` copies them (needed when
    a later in-place op would change them); ``to="cpu"`` moves what is kept. ``keep`` bounds what is
    held: ``"all"`` (default), ``"last"`` (the last forward of the model) or ``N`` (the last N
    forwards), so a capture left on in a loop holds a fixed amount:

    >>> with hookkit.capture(model, "fc", keep="last") as cap:   # doctest: +SKIP
    ...     for x in loader: model(x)
    >>> len(cap.calls("fc"))     # the calls of the last forward only

    Generation (``model.generate``, incremental decoding with a KV cache): each step gives one
    record per call, covering only the new positions; ``cap.sequence(name)`` joins them into the
    whole sequence. ``positions=`` records only some absolute token positions (ints, a list, a slice,
    ``"prompt"``, ``"generated"``, ``"all"``, ``"last"``; see ``hookkit.steer``) of the output's
    tensor at ``index``; ``steps=`` only some generation steps (0 = the prompt forward);
    ``token_dim=`` overrides the model's token axis:

    >>> with hookkit.capture(model, "transformer.h.*") as cap:   # doctest: +SKIP
    ...     model.generate(ids, max_new_tokens=8)
    >>> cap.sequence("transformer.h.0")    # [B, prompt + 7, D]: the whole processed sequence

    Distributed training (DDP, FSDP): each process captures its own tensors, per rank (unlike the
    statistics, nothing is gathered across ranks); a data-parallel wrapper's ``module.`` prefix
    may be given or left out of layer names.

    ``heads=True`` (or a list of head indices) on attention layers of a known family records each
    call's per-head input of the output projection, ``[B, H, T, d_head]`` (see ``hookkit.ablate``).

    ``top_k=k`` keeps, of each output (its tensor at ``index``), only the ``k`` largest values along
    the last axis and their indices: ``cap[name]`` is a ``TopK(values, indices)``, two ``[..., k]``
    tensors on the output's device (no host copy), instead of the dense output. For SAE features,
    ``[..., d_sae]`` becomes ``[..., k]``:

    >>> with hookkit.capture(model, sp.features, top_k=8) as cap:   # doctest: +SKIP
    ...     model(ids)
    >>> values, indices = cap[sp.features]      # [B, T, 8] each

    ``top_k``: None (default: the dense output), or an int >= 1: the number of largest values along
    the last axis kept per output, with their indices.
    """

    @public_entry()
    def __init__(
        self,
        model: Layer,
        layers: LayerSpec = ":leaves",
        *,
        inputs: bool = False,
        outputs: bool = True,
        grads: bool = False,
        detach: bool = True,
        to: Any = None,
        clone: bool = False,
        keep: Keep = "all",
        heads: Any = None,
        head_layout: Any = None,
        positions: Any = None,
        steps: Any = None,
        token_dim: int | None = None,
        index: int = 0,
        top_k: int | None = None,
    ):
        self._remove, self.handles = held, []  # HandleGroup.__init__, without its two keyword-checking wrappers
        self._backend = self._options(model, keep, positions, steps, token_dim, index)
        self._check_flags(inputs, outputs, grads, detach, clone, to)
        self._top_k = None if top_k is None else _check_top_k(top_k, outputs)
        self._model = weakref.ref(model)
        self._inputs, self._outputs, self._grads = inputs, outputs, grads
        self._detach, self._to, self._clone = detach, to, clone
        # outputs only, detached, kept where they are: each layer's consumer is a closure without lookups
        self._plain_records = (
            outputs and not (inputs or grads or clone) and detach and to is None and self._limit is None
            and self._positions is None and self._gen_steps is None and self._top_k is None
        )  # fmt: skip
        self._records: dict[str, list[Record]] = {}
        self._seq = count()  # numbers records in the order the calls happened, across layers
        if heads is not None and heads is not False:  # per-head records [B, H, T, d_head] of attention layers
            with entered("capture"):
                found = resolve(model, layers, heads=heads, head_layout=head_layout)
            self._attach_views(model, found, "heads", heads)
        else:
            self._attach_layers(model, layers, grads)

    def _options(self, model: Any, keep: Any, positions: Any, steps: Any, token_dim: Any, index: Any) -> Any:
        """Check the options that shape the records; the model's backend."""
        self._limit = None if keep == "all" and isinstance(keep, str) else _keep_limit(keep)
        self._positions = None if positions is None else Positions(positions)
        self._gen_steps = None if steps is None else check_steps(steps)
        self._token_dim = None if token_dim is None else token_dim_of(model, token_dim)
        self._dim_given = token_dim is not None  # else a layer with its own token axis (a pattern's queries) uses it
        if type(index) is not int or index < 0:  # bool and numpy ints refused as before
            fail("capture", "index", "an int >= 0 (the position of the tensor among the output's tensors)", index)
        self._index = index
        self._steps: deque[int] = deque()
        backend = check_model(model)
        if self._positions is not None and self._token_dim is None:
            self._token_dim = token_dim_of(model)
        return backend

    def _attach_layers(self, model: Any, layers: LayerSpec, grads: bool) -> None:
        """One forward consumer per selected layer (and one on its output's gradient with ``grads``)."""
        named = select_checked(model, layers, self._backend)
        self._hooked: dict[str, Any] = {}  # to tell a layer swapped in later
        entries = self._forward_consumers(named)
        self.names: list[str] = list(self._records)  # the selected names, in order (each once)
        try:
            # the placements join this capture's own handles (one level to remove, not two)
            attach_each(model, entries, "forward", OBSERVER, self)
            if grads:
                attach_each(model, [(name, layer, partial(self._on_grad, name), None) for name, layer in named], "grad", OBSERVER, self)
        except BaseException:
            self.remove()
            raise

    def _check_flags(self, inputs: Any, outputs: Any, grads: Any, detach: Any, clone: Any, to: Any) -> None:
        flags = (inputs, outputs, grads, detach, clone)
        for f in flags:  # the usual case costs one pass
            if f is not True and f is not False:
                for arg, value in zip(("inputs", "outputs", "grads", "detach", "clone"), flags):
                    check_bool(value, arg=arg)
                break
        if to is not None:
            problem = self._backend.device_problem(to)
            if problem:
                fail("capture", "to", f"None or a device tensors can be moved to ({problem})", to)

    @property
    def grads(self) -> CapturedGrads:
        """``cap.grads[name]``: the last gradient w.r.t. layer ``name``'s output (``grads=True``)."""
        return CapturedGrads(self)  # made per access: a capture holds no reference to itself

    def _attach_views(self, model: Any, found: list[Site], kind: str, given: Any) -> None:
        """Sites whose value is a view of a tensor (``heads=``: ``[B, H, T, d_head]``): each call's
        ``site.read`` recorded as the layer's output."""
        if self._inputs or self._grads or not self._outputs:
            fail("capture", kind, f"None with inputs=True, grads=True or outputs=False ({kind[:-1]} records are outputs)", given)
        if self._positions is not None or self._gen_steps is not None:
            fail("capture", kind, f"None with positions= or steps= ({kind[:-1]} records hold every position)", given)
        self.names = names_of(found)
        be, record = self._backend, self.record_value

        def consumer(site: Site) -> Callable[[Event], None]:
            def consume(ev: Event) -> None:
                value = site.read(be, ev)
                if value is not None:
                    record(site.name, ev, value)

            return consume

        try:
            attach_sites(model, found, consumer, OBSERVER, group=self)
        except BaseException:
            self.remove()
            raise

    def record_value(self, name: str, ev: Event, value: Any) -> None:
        """Record ``value`` as layer ``name``'s output at ``ev``'s call (consumers computing what they record)."""
        if self._limit is not None and (not self._steps or self._steps[-1] != ev.step):
            self._new_step(ev.step, self._limit)
        kept = self._keep(value if self._top_k is None else self._top(name, value, 0 if self._backend.is_tensor(value) else self._index))
        self._records.setdefault(name, []).append(Record(name, ev.call, ev.step, kept, ev.pos))

    # -- hot path -------------------------------------------------------------------------------
    def _forward_consumers(self, named: list[tuple[str, Any]]) -> list[tuple[str, Any, Any, None]]:
        """``attach_each``'s entries: each selected layer's forward consumer (its list of records and
        its weak reference made on the way). For the default settings (outputs only, detached, kept
        where they are) a closure doing exactly what ``_on_forward`` does, without lookups."""
        records, hooked, ref = self._records, self._hooked, weakref.ref
        entries: list[tuple[str, Any, Any, None]] = []
        add = entries.append
        if not self._plain_records:
            general = self._on_forward
            for name, layer in named:
                records[name], hooked[name] = [], ref(layer)
                add((name, layer, partial(general, name), None))
            return entries
        # bound once per capture: the backend's functions; per layer: its list, never replaced
        # (clear() empties it in place)
        is_tensor, detach, keep, seq = self._backend.is_tensor, self._backend.detach, self._keep, self._seq
        for name, layer in named:
            kept: list[Record] = []
            records[name] = kept
            hooked[name] = ref(layer)

            # bound through defaults (one function object per layer, no factory call): called as fn(ev) only
            def on_forward(ev: Event, name: str = name, append: Callable = kept.append) -> None:
                out = ev.output
                append(Record(name, ev.call, ev.step, detach(out) if is_tensor(out) else keep(out), ev.pos, next(seq)))

            add((name, layer, on_forward, None))
        return entries

    def _keep(self, value: Any) -> Any:
        be = self._backend
        detach, to, clone = self._detach, self._to, self._clone
        if detach and not clone and to is None and be.is_tensor(value):
            return be.detach(value)

        def keep(t: Any) -> Any:
            if detach:
                t = be.detach(t)
            if to is not None:
                t = be.to(t, to)
            if clone:
                t = be.clone(t)
            return t

        return _map_deep(value, keep, be, {})

    def _top(self, name: str, output: Any, index: int) -> TopK:
        """``top_k=``: the ``k`` largest values along the last axis of the output's tensor at
        ``index``, and their indices (on its device: no host sync)."""
        be, k = self._backend, self._top_k
        with restored("capture"):  # at forward time, outside the entry
            t = tensor_at(be, output, index, name)
        width = t.shape[-1] if len(t.shape) else 0
        if k > width:  # type: ignore[operator]  # set: top_k= given
            raise InvalidArgument(
                f"capture(): top_k={k} is larger than the last axis of {name!r}'s output (shape {list(t.shape)}); give top_k in 1..{width}"
            )
        values, indices = be.family("tensor_math").topk(be.detach(t) if self._detach else t, k)
        return TopK(values, indices)

    def _new_step(self, step: int, limit: int) -> None:
        """A record of a forward not seen yet: forget the forwards beyond ``keep`` (``limit``)."""
        steps = self._steps
        steps.append(step)
        if len(steps) > limit:
            steps.popleft()
            oldest = steps[0]
            for recs in self._records.values():
                k = 0
                while k < len(recs) and recs[k].step < oldest:
                    k += 1
                if k:
                    del recs[:k]

    def _on_forward(self, name: str, ev: Event) -> None:
        if self._gen_steps is not None and ev.pos.gen_step not in self._gen_steps:
            return
        output = ev.output
        selected = None
        if self._positions is not None:
            dim = self._token_dim if self._dim_given else getattr(ev.layer, "token_axis", None) or self._token_dim
            found = select_output(self._backend, ev, self._positions, dim, self._index)  # type: ignore[arg-type]  # set with positions=
            if found is None:
                return
            output, selected = found
        if self._limit is not None and (not self._steps or self._steps[-1] != ev.step):
            self._new_step(ev.step, self._limit)
        rec = Record(name, ev.call, ev.step, None, ev.pos, next(self._seq))
        rec.positions = selected
        if self._outputs:
            top = None if self._top_k is None else self._top(name, output, self._index if selected is None else 0)
            rec.output = self._keep(output if top is None else top)
        if self._inputs:
            rec.inputs = self._keep(ev.args)
            rec.kwargs = self._keep(ev.kwargs) if ev.kwargs else {}
        if self._grads:
            n = len(leaves(ev.output, self._backend.is_tensor))
            rec._grads = [None] * n
            # a skeleton of the output, so that no reference to the graph is kept
            rec._structure = map_tensors(ev.output, lambda _: _SLOT, self._backend.is_tensor) if n > 1 else None
        self._records[name].append(rec)

    def _on_grad(self, name: str, ev: Event) -> None:
        recs = self._records[name]
        rec = next((r for r in reversed(recs) if r.call == ev.call and r.step == ev.step), None)
        if rec is None:
            return
        g = self._keep(ev.grad)
        rec._grads[ev.index] = g  # type: ignore[index]  # grad events always carry the output's index
        structure = rec._structure
        if structure is None:
            rec.grad = g
        else:
            it = iter(rec._grads)
            rec.grad = map_tensors(structure, lambda _: next(it), lambda x: x is _SLOT)

    # -- reading --------------------------------------------------------------------------------
    def _last(self, name: str) -> Record:
        recs = self._records.get(name)
        if recs is None:
            raise KeyError(f"layer {name!r} is not captured; captured: {', '.join(close_matches(name, self.names) or self.names[:8])}")
        if not recs:
            raise KeyError(f"layer {name!r} has not run since the capture started{self._swapped(name)}")
        return recs[-1]

    def _swapped(self, name: str) -> str:
        """A hint when the model now holds another layer under ``name`` than the one hooked."""
        model = self._model()
        try:
            now = dict(select(model, name)).get(name) if model is not None else None
        except (LookupError, ValueError):
            now = None
        if now is None or now is self._hooked[name]():
            return ""
        return (
            f": the model's {name!r} was replaced after the capture started, and the new layer is not hooked "
            "(hooks stay on the layer object they were placed on); start the capture after swapping layers"
        )

    # A capture reads as a mapping of layer name -> output; its handles are ``.handles``.
    def __getitem__(self, name: str) -> Any:  # type: ignore[override]
        """The last output (or inputs, if outputs=False) of layer ``name``."""
        rec = self._last(name)
        return rec.output if self._outputs else rec.inputs

    def __contains__(self, name: str) -> bool:
        return bool(self._records.get(name))

    def __iter__(self) -> Iterator[str]:  # type: ignore[override]  # layer names, as a mapping
        return (n for n in self.names if self._records[n])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def keys(self) -> list[str]:
        return list(self)

    def items(self) -> list[tuple[str, Any]]:
        return [(n, self[n]) for n in self]

    def calls(self, name: str) -> list[Record]:
        """Every call's record of layer ``name``, in call order."""
        if name not in self._records:
            self._last(name)
        return list(self._records[name])

    @public_entry("capture.sequence")
    def sequence(self, name: str, *, call: int | None = None) -> Any:
        """The output of layer ``name`` over the whole sequence of the latest ``generate()`` call (or
        incremental decoding loop), joined along the token axis from the per-step records, with no
        second forward: ``[B, prompt + new - 1, ...]`` for a causal LM (the last new token is never
        fed back), equal to one forward without cache over those tokens. Positions are along the
        padded axis as the model saw them (left padding included). A layer run outside the root's
        forward (an encoder-decoder's encoder) has one record, returned as is. Beam search: the rows
        are the beam slots as processed at each step (the cache is reordered between steps, so a row
        is not one final beam's history). ``call``: which call of a layer run several times per
        forward. A capture made with ``positions=`` joins the positions it kept.

        >>> with hookkit.capture(model, "transformer.h.0") as cap:   # doctest: +SKIP
        ...     out = model.generate(ids, max_new_tokens=8)
        >>> cap.sequence("transformer.h.0").shape     # [B, ids.shape[1] + 7, D]
        """
        if name not in self._records:
            self._last(name)
        if self._top_k is not None:
            fail("capture.sequence", "name", "a layer of a capture made without top_k= (top-k records are not joined)", name)
        dim = self._token_dim
        if dim is None:
            model = self._model()
            if model is None:
                fail(
                    "capture.sequence",
                    "name",
                    "a layer of a model that still exists (the captured model is gone: its token axis is unknown)",
                    name,
                )
            dim = self._token_dim = token_dim_of(model)
        return stitch(self._backend, name, self._records[name], dim, self._index, call, self._positions is not None)

    def records(self) -> list[Record]:
        """All records of all layers, in the order the calls happened (interleaved calls of several
        layers included; a forward run inside another comes where it ran)."""
        out = [r for recs in self._records.values() for r in recs]
        return sorted(out, key=lambda r: r._seq)

    def clear(self) -> None:
        """Forget what was recorded; keep recording."""
        for recs in self._records.values():
            recs.clear()
        self._steps.clear()

    def __repr__(self) -> str:
        n, k = sum(len(v) for v in self._records.values()), len(self.names)
        return f"<hookkit.capture {k} layer{'' if k == 1 else 's'}, {n} record{'' if n == 1 else 's'}, {'removed' if self.removed else 'active'}>"

    def _repr_html_(self) -> str:
        from hookkit.viz.display import capture_html  # lazy: HTML for notebooks, loaded when displayed

        return capture_html(self)
