"""Patching, ablation, steering and user edits of layer outputs (activation patching à la
TransformerLens / baukit). Each is one forward consumer at INTERVENTION priority, so a ``capture`` on
the same layer records the changed output.

Output structures (tuples, lists, ModelOutputs) are handled by ``index``: the position of the tensor
to change among the output's tensors, depth first (default 0, the first one); ``index=None`` changes
every tensor of the output. ``calls`` limits an intervention to some calls of a layer that runs
several times in one forward.

Sequence models (``hookkit.core.positions``): ``positions`` limits it to some absolute token
positions (counted from the start of the sequence, with the KV cache's offset: position 7 is the 8th
token whether the prompt forward or a later generation step processes it), ``steps`` to some
generation steps (0 = the prompt forward), ``token_dim`` overrides the model's token axis.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

import numpy as np

from hookkit.backends import Backend, backend_for
from hookkit.core.handles import HandleGroup
from hookkit.core.positions import Positions, Reach, check_steps, token_dim_of
from hookkit.core.router import INTERVENTION, Event, attach
from hookkit.core.select import LayerSpec, select, shown_name
from hookkit.core.sequences import edit_at_positions, token_length
from hookkit.core.tree import leaves, map_tensors
from hookkit.core.types import Layer
from hookkit.core.validate import (
    ArgumentTypeError,
    check_callable,
    check_choice,
    check_model,
    check_number,
    check_tensor_like,
    fail,
    output_guard,
)

TensorFn = Callable[[Any, int, Event], Any]


# -- small helpers --------------------------------------------------------------------------------
def shape_str(shape: Iterable[int]) -> str:
    return "[" + ", ".join(str(int(s)) for s in shape) + "]"


def cast_like(be: Backend, t: Any, like: Any) -> Any:
    """``t`` on ``like``'s device with ``like``'s dtype (no copy when both already match)."""
    if be.device_of(t) != be.device_of(like):
        t = be.to(t, be.device_of(like))
    if t.dtype != like.dtype:
        t = be.cast(t, be.dtype_name(like))
    return t


def to_tensor(be: Backend, value: Any, like: Any) -> Any:
    """A tensor, array or nested list as a tensor matching ``like`` (device, dtype)."""
    if not be.is_tensor(value):
        value = be.from_numpy(np.ascontiguousarray(np.asarray(value, dtype=np.float32)), like=like)
    return cast_like(be, value, like)


def broadcasts_into(small: tuple[int, ...], big: tuple[int, ...]) -> bool:
    """True when ``small`` broadcasts to ``big`` without changing ``big``'s shape."""
    if len(small) > len(big):
        return False
    return all(s in (1, b) for s, b in zip(reversed(small), reversed(big)))


class Converted:
    """A user value converted once per (device, dtype) of the tensors it meets."""

    __slots__ = ("value", "_cache")

    def __init__(self, value: Any):
        self.value = value
        self._cache: dict[tuple[str, str], Any] = {}

    def like(self, be: Backend, t: Any) -> Any:
        key = (be.device_of(t), str(t.dtype))
        out = self._cache.get(key)
        if out is None:
            out = self._cache[key] = to_tensor(be, self.value, t)
        return out


# -- the shared machinery -----------------------------------------------------------------------
def check_calls(calls: Any, fn: str = "edit_outputs") -> frozenset[int] | None:
    if calls is None:
        return None
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


def check_index(index: Any, fn: str = "edit_outputs") -> None:
    if index is not None and (not isinstance(index, int) or isinstance(index, bool) or index < 0):
        fail(fn, "index", "None (every tensor) or an int >= 0 (position among the output's tensors)", index, kind=ArgumentTypeError)


def apply_to(be: Backend, ev: Event, index: int | None, fn: TensorFn, name: str = "edit_outputs") -> Any:
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
        fail(name, "layers", valid, output, kind=ArgumentTypeError)
    if index is not None and index >= n:
        raise IndexError(f"layer {ev.name!r} returns {n} tensors ({type(output).__name__}); index={index} is out of range (0..{n - 1})")
    pos = [-1]

    def visit(t: Any) -> Any:
        pos[0] += 1
        return fn(t, pos[0], ev) if index is None or pos[0] == index else t

    return map_tensors(output, visit, be.is_tensor)


class Edits(HandleGroup):
    """What ``patch``, ``ablate``, ``steer``, ``edit`` return: removes the edit; with ``positions=``
    naming positions, the end of its ``with`` block raises for those a generation never reached
    (``missing()`` lists them without raising).

    >>> with hookkit.steer(model, "h.1", v, positions=[9]):   # doctest: +SKIP
    ...     model.generate(ids, max_new_tokens=2)   # the prompt has 5 tokens: ends at position 6
    InvalidArgument: steer: position 9 of positions=[9] never reached on layer 'h.1' ...
    """

    __slots__ = ("reach",)

    def __init__(self, reach: Reach | None = None):
        super().__init__()
        self.reach = reach

    def missing(self) -> dict[str, list[int]]:
        """Layer -> the positions named in ``positions=`` that its latest generation never reached."""
        return {} if self.reach is None else self.reach.missing()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        super().__exit__(exc_type, exc, tb)  # removes; a framework error gets the failing layer's note
        if exc_type is None and self.reach is not None:
            self.reach.check()


def positions_args(model: Layer, positions: Any, steps: Any, token_dim: Any, fn: str) -> tuple[Positions | None, Any, int | None]:
    """Checked ``(positions, steps, token axis)`` of an edit or capture."""
    spec = None if positions is None else Positions(positions, fn)
    gen_steps = check_steps(steps, fn)
    dim = token_dim_of(model, token_dim, fn=fn) if spec is not None else None
    if spec is None and token_dim is not None:
        token_dim_of(model, token_dim, fn=fn)  # checked all the same
    return spec, gen_steps, dim


def edit_outputs(
    model: Layer,
    layers: LayerSpec,
    fn: TensorFn,
    *,
    calls: Any = None,
    index: int | None = 0,
    name: str = "",
    kinds: Any = None,
    positions: Any = None,
    steps: Any = None,
    token_dim: int | None = None,
) -> Edits:
    """Attach one forward consumer applying ``fn(tensor, position, ev) -> new tensor`` to the
    selected tensors of each selected layer's output, on the selected calls, generation steps and
    token positions (``fn`` then gets the slice of those positions, ``ev.selected`` their absolute
    positions). ``kinds``: the dtype kinds ``fn`` works on (others are left alone with one warning;
    see ``output_guard``)."""
    label = name or "edit_outputs"
    check_index(index, label)
    wanted = check_calls(calls, label)
    spec, gen_steps, dim = positions_args(model, positions, steps, token_dim, label)
    be = backend_for(model)
    if kinds is not None:
        guarded = output_guard(be, fn, fn=name, kinds=kinds)

        def fn(t: Any, pos: int, ev: Event) -> Any:  # noqa: F811 - the guarded op
            return guarded(t, pos, ev, layer=ev.name)

    reach = Reach(spec) if spec is not None and spec.explicit else None
    op = fn
    if spec is not None:
        assert dim is not None  # positions_args gives the token axis with positions=

        def op(t: Any, leaf: int, ev: Event) -> Any:
            return edit_at_positions(be, t, ev, spec, dim, reach, fn, leaf)

    def consume(ev: Event) -> Any:
        if wanted is not None and ev.call not in wanted:
            return None
        if gen_steps is not None and ev.pos.gen_step not in gen_steps:
            return None
        return apply_to(be, ev, index, op, label)

    group = Edits(reach)
    group.add(attach(model, select(model, layers), "forward", consume, INTERVENTION))
    return group


def per_layer(values: Any, names: list[str], is_tensor: Callable[[Any], bool], *, fn: str, arg: str) -> dict[str, Any]:
    """One value for every layer, or a dict name -> value covering exactly the selected layers."""
    if isinstance(values, Mapping) and not is_tensor(values):
        missing = [n for n in names if n not in values]
        extra = [k for k in values if k not in names]
        if missing or extra:
            detail = f"selected: {', '.join(map(shown_name, names))}"
            detail += f"; missing: {', '.join(missing)}" if missing else ""
            detail += f"; not selected: {', '.join(map(str, extra))}" if extra else ""
            fail(fn, arg, f"one value for every layer, or a dict with one entry per selected layer ({detail})", list(values))
        return dict(values)
    return {n: values for n in names}


# -- patching -----------------------------------------------------------------------------------
def _check_captured(cap: Any, name: str, fn: str) -> None:
    """``cap`` (the ``values`` of a patch) holds records of layer ``name``."""
    if not getattr(cap, "_outputs", True):
        fail(fn, "values", "a capture that kept outputs (this one was made with outputs=False)", cap)
    if name not in cap.names:
        fail(fn, "values", f"a capture of every selected layer; {name!r} is not captured (captured: {', '.join(cap.names[:8])})", cap)
    if name not in cap:
        fail(fn, "values", f"a capture holding records of {name!r}: run the clean forward inside the capture first", cap)


def _stored_from_capture(cap: Any, names: list[str], fn: str = "patch") -> dict[tuple[str, int], Any]:
    stored: dict[tuple[str, int], Any] = {}
    for name in names:
        _check_captured(cap, name, fn)
        recs = cap.calls(name)
        last = recs[-1].step
        for r in recs:
            if r.step == last:  # the latest forward only
                stored[(name, r.call)] = r.output
    return stored


def _stored_from_dict(values: Mapping, names: list[str], fn: str = "patch") -> tuple[dict[tuple[str, int], Any], dict[str, Any]]:
    per_call: dict[tuple[str, int], Any] = {}
    every: dict[str, Any] = {}
    for key, v in values.items():
        if isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str) and isinstance(key[1], int):
            per_call[key] = v
        elif isinstance(key, str):
            every[key] = v
        else:
            fail(fn, "values", "a dict keyed by layer names or (name, call) pairs", key, kind=ArgumentTypeError)
    unknown = sorted(({k[0] for k in per_call} | set(every)) - set(names))
    if unknown:
        selected = ", ".join(map(shown_name, names))
        fail(
            fn,
            "values",
            f"keyed by selected layers only ({selected}): values for layers that are not selected: {', '.join(unknown)}",
            list(values),
        )
    missing = [n for n in names if n not in every and not any(k[0] == n for k in per_call)]
    if missing:
        fail(fn, "values", f"a value for every selected layer; none for {', '.join(missing)}", list(values))
    return per_call, every


def patch(
    model: Layer,
    layers: LayerSpec,
    values: Any,
    *,
    calls: Any = None,
    steps: Any = None,
    positions: Any = None,
    token_dim: int | None = None,
    index: int | None = 0,
    heads: Any = None,
    head_layout: Any = None,
) -> Edits:
    """Replace selected layers' outputs with stored ones (activation patching).

    ``values``: a ``hookkit.capture`` of a clean run (each call gets the record of the same call of
    the capture's latest forward), a dict ``name -> tensor`` (every call) or ``(name, call) -> tensor``
    (those calls only), or one tensor for every selected layer. Shapes must match the output's.

    With ``positions=`` a value is indexed by absolute token position: ``[B, T, ...]`` along the
    token axis, covering every position patched (a capture gives its ``sequence(name)``: a clean
    run's whole sequence), and only the selected positions are replaced, at whatever generation
    step reaches them.

    >>> with hookkit.capture(model, "h.*") as clean:   # doctest: +SKIP
    ...     model(clean_ids)
    >>> with hookkit.patch(model, "h.1", clean):
    ...     patched = model(corrupt_ids)
    >>> with hookkit.patch(model, "h.1", clean, positions=[4]):   # only token 4
    ...     patched = model.generate(corrupt_ids, max_new_tokens=5)

    ``heads=`` (attention layers): the values are per-head records ``[B, H_selected, T, d_head]``,
    e.g. a ``capture(..., heads=)`` of the clean run.
    """
    if heads is not None and heads is not False:
        from hookkit.interventions.heads import patch_heads

        if positions is not None or steps is not None:
            fail("patch", "heads", "None with positions= or steps= (per-head edits act on every position)", heads)
        return patch_heads(model, layers, values, calls, heads, head_layout)
    check_model(model, fn="patch")
    be = backend_for(model)
    names = [n for n, _ in select(model, layers)]
    from hookkit.observers.capture import capture as Capture

    if isinstance(values, Capture) and positions is not None:
        per_call, every = {}, {n: _sequence_of(values, n) for n in names}
    elif isinstance(values, Capture):
        per_call, every = _stored_from_capture(values, names), {}
    elif isinstance(values, Mapping) and not be.is_tensor(values):
        per_call, every = _stored_from_dict(values, names)
    else:
        if values is None or isinstance(values, (str, bytes, int, float, bool)):  # a structure of tensors is kept as given
            fail(
                "patch",
                "values",
                "a capture, a dict name -> tensor, or a tensor (or a tuple of them) for every layer",
                values,
                kind=ArgumentTypeError,
            )
        per_call, every = {}, {n: values for n in names}
    cache: dict[int, Converted] = {}

    def stored_leaf(stored: Any, pos: int, ev: Event) -> Any:
        found = [] if be.is_tensor(stored) else leaves(stored, be.is_tensor)
        if not found:  # one tensor or array
            if index is None and pos > 0:
                fail("patch", "index", f"given: the stored value for layer {ev.name!r} is one tensor and the output has several", index)
            return stored
        if pos >= len(found):
            fail(
                "patch",
                "values",
                f"a stored output with a tensor at position {pos}, as layer {ev.name!r} outputs ({len(found)} here)",
                stored,
            )
        return found[pos]

    def replace(t: Any, pos: int, ev: Event) -> Any:
        stored = per_call.get((ev.name, ev.call))
        if stored is None:
            stored = every.get(ev.name)
        if stored is None:
            if isinstance(values, Capture):
                have = sorted(c for n, c in per_call if n == ev.name)
                valid = (
                    f"given: no stored output for layer {ev.name!r} call {ev.call}; the captured run has calls {have} (patch only those)"
                )
                fail("patch", "calls", valid, calls)
            return t  # a dict keyed by (name, call) patches only the calls it names
        leaf = stored_leaf(stored, pos, ev)
        conv = cache.get(id(leaf))
        if conv is None or conv.value is not leaf:
            conv = cache[id(leaf)] = Converted(leaf)
        new = conv.like(be, t)
        if ev.selected is not None:
            assert dim is not None  # events carry selected positions only under positions=
            new = _at_absolute(be, new, ev, ev.selected, dim)
        if be.shape(new) != be.shape(t):
            fail("patch", "values", f"shaped like the outputs: layer {ev.name!r} (call {ev.call}) outputs {shape_str(be.shape(t))}", new)
        return new

    dim = token_dim_of(model, token_dim, fn="patch") if positions is not None else None
    return edit_outputs(
        model, layers, replace, name="patch", calls=calls, index=index, steps=steps, positions=positions, token_dim=token_dim
    )


def _sequence_of(cap: Any, name: str) -> Any:
    _check_captured(cap, name, "patch")
    return cap.sequence(name)


def _at_absolute(be: Backend, value: Any, ev: Event, want: Sequence[int], dim: int) -> Any:
    """The entries of a patch value at the absolute positions ``want`` (``ev.selected``) along the token axis."""
    have = token_length(be, value, dim, "patch", ev.name)
    if want[-1] >= have:
        valid = (
            f"covering every position patched (e.g. a clean run's capture.sequence(name)): the value for layer {ev.name!r} "
            f"has {have} positions along the token axis (0..{have - 1}); position {want[-1]} is patched at generation step {ev.gen_step}"
        )
        fail("patch", "values", valid, value)
    index = slice(want.start, want.stop) if isinstance(want, range) else list(want)
    return be.family("tokens").take(value, dim, index)


# -- ablation, steering, user edits -------------------------------------------------------------
ABLATIONS = ("zero", "mean")


def ablate(
    model: Layer,
    layers: LayerSpec,
    mode: str = "zero",
    *,
    mean: Any = None,
    calls: Any = None,
    steps: Any = None,
    positions: Any = None,
    token_dim: int | None = None,
    index: int | None = 0,
    heads: Any = None,
    head_layout: Any = None,
) -> Edits:
    """Zero or mean ablation of selected layers' outputs. ``mode="mean"`` replaces each sample by the
    mean over the batch (dim 0), or by ``mean=`` (shape ``output.shape[1:]``; a dict name -> mean
    per layer). ``positions=`` / ``steps=``: only those token positions / generation steps (see ``steer``).

    >>> h = hookkit.ablate(model, "h.0.mlp", mode="mean")   # doctest: +SKIP

    ``heads=`` (a list of head indices) on an attention layer of a known family ablates those heads'
    slices of the output projection's input (``head_layout=`` describes another layer):

    >>> h = hookkit.ablate(model, "transformer.h.0.attn", heads=[1, 3])   # doctest: +SKIP
    """
    check_model(model, fn="ablate")
    check_choice(mode, ABLATIONS, fn="ablate", arg="mode")
    if mean is not None and mode != "mean":
        fail("ablate", "mean", "None with mode='zero' (mean= is only used with mode='mean')", mean)
    if heads is not None and heads is not False:
        from hookkit.interventions.heads import ablate_heads

        if positions is not None or steps is not None:
            fail("ablate", "heads", "None with positions= or steps= (per-head edits act on every position)", heads)
        return ablate_heads(model, layers, heads, mode, mean, calls, head_layout)
    be = backend_for(model)
    names = [n for n, _ in select(model, layers)]
    means = None
    if mean is not None:
        means = {
            n: Converted(check_tensor_like(v, be, fn="ablate", arg="mean" if v is mean else f"mean[{n!r}]"))
            for n, v in per_layer(mean, names, be.is_tensor, fn="ablate", arg="mean").items()
        }

    def zero(t: Any, pos: int, ev: Event) -> Any:
        return be.zeros_like(t)

    def batch_mean(t: Any, pos: int, ev: Event) -> Any:
        if means is None:
            return be.zeros_like(t) + t.mean(0, True)  # broadcast: Paddle has no complex expand_as
        m = means[ev.name].like(be, t)
        want = be.shape(t)[1:]
        if not broadcasts_into(be.shape(m), want):
            valid = (
                f"shaped like the output without the batch dim: {shape_str(want)} for layer {ev.name!r} (output {shape_str(be.shape(t))})"
            )
            fail("ablate", "mean", valid, m)
        return be.zeros_like(t) + m

    if mode == "zero":
        return edit_outputs(
            model, layers, zero, name="ablate", calls=calls, index=index, steps=steps, positions=positions, token_dim=token_dim
        )
    return edit_outputs(
        model,
        layers,
        batch_mean,
        name="ablate",
        kinds=("float", "complex"),
        calls=calls,
        index=index,
        steps=steps,
        positions=positions,
        token_dim=token_dim,
    )


def steer(
    model: Layer,
    layers: LayerSpec,
    vector: Any,
    scale: float = 1.0,
    *,
    calls: Any = None,
    steps: Any = None,
    positions: Any = None,
    token_dim: int | None = None,
    index: int | None = 0,
    heads: Any = None,
    head_layout: Any = None,
) -> Edits:
    """Add ``scale * vector`` to selected layers' outputs; ``vector`` has the size of the last dim
    (broadcast over the others) or any shape that broadcasts into the output; a dict name -> vector
    gives one per layer.

    Sequence models, ``model.generate`` included: ``positions=`` adds it only at those absolute
    token positions along the model's token axis, counted from the start of the sequence through
    the KV cache (ints, a list, a slice such as ``slice(8, None)``, ``"prompt"``, ``"generated"``
    (every new token, no prompt token), ``"all"``, ``"last"`` (the newest position of each forward));
    ``steps=`` only at those generation steps (0 = the prompt forward; ints, a list, a range);
    ``token_dim=`` overrides the model's token axis (1: batch-first). A named position that a plain
    forward does not have is an error at once; one a generation never reached, at the end of the
    ``with`` block.

    >>> h = hookkit.steer(model, "h.1", direction, scale=4.0)   # doctest: +SKIP
    >>> with hookkit.steer(model, "transformer.h.1", direction, positions="generated"):   # doctest: +SKIP
    ...     out = model.generate(ids, max_new_tokens=20)

    ``heads=``: add a ``[d_head]`` vector (or ``[H_selected, d_head]``) to each selected head's slice.
    """
    check_model(model, fn="steer")
    if heads is not None and heads is not False:
        from hookkit.interventions.heads import steer_heads

        if positions is not None or steps is not None:
            fail("steer", "heads", "None with positions= or steps= (per-head edits act on every position)", heads)
        return steer_heads(model, layers, vector, scale, calls, heads, head_layout)
    be = backend_for(model)
    names = [n for n, _ in select(model, layers)]
    vectors = {
        n: Converted(check_tensor_like(v, be, fn="steer", arg="vector" if v is vector else f"vector[{n!r}]"))
        for n, v in per_layer(vector, names, be.is_tensor, fn="steer", arg="vector").items()
    }
    scale = check_number(scale, fn="steer", arg="scale")

    def add(t: Any, pos: int, ev: Event) -> Any:
        v = vectors[ev.name].like(be, t)
        if not broadcasts_into(be.shape(v), be.shape(t)):
            valid = f"of shape [{be.shape(t)[-1]}] for layer {ev.name!r} (the last dim of its output, {shape_str(be.shape(t))})"
            fail("steer", "vector", valid, v)
        return t + v * scale if scale != 1.0 else t + v

    return edit_outputs(
        model,
        layers,
        add,
        name="steer",
        kinds=("float", "complex"),
        calls=calls,
        index=index,
        steps=steps,
        positions=positions,
        token_dim=token_dim,
    )


def edit(
    model: Layer,
    layers: LayerSpec,
    fn: Callable[[Any, Event], Any],
    *,
    calls: Any = None,
    steps: Any = None,
    positions: Any = None,
    token_dim: int | None = None,
    index: int | None = 0,
    heads: Any = None,
    head_layout: Any = None,
) -> Edits:
    """Apply ``fn(output, ev) -> new | None`` to selected layers' outputs (the tensor at ``index``;
    ``ev`` has ``name``, ``call``, ``step``, ``args``, ``offset``, ``gen_step``). None keeps the output.
    With ``positions=`` (see ``steer``) ``fn`` gets the slice of the selected positions along the
    token axis and returns its replacement (same shape); ``ev.selected`` lists their absolute positions.

    >>> h = hookkit.edit(model, "fc", lambda out, ev: out * 2)   # doctest: +SKIP

    ``heads=``: ``fn`` gets and returns the selected heads' record ``[B, H_selected, T, d_head]``.
    """
    check_model(model, fn="edit")
    if heads is not None and heads is not False:
        from hookkit.interventions.heads import edit_with_heads

        if positions is not None or steps is not None:
            fail("edit", "heads", "None with positions= or steps= (per-head edits act on every position)", heads)
        return edit_with_heads(model, layers, fn, calls, heads, head_layout)
    check_callable(fn, fn="edit", arg="fn", signature="fn(output, ev)")

    def apply(t: Any, pos: int, ev: Event) -> Any:
        new = fn(t, ev)
        return t if new is None else new

    return edit_outputs(model, layers, apply, name="edit", calls=calls, index=index, steps=steps, positions=positions, token_dim=token_dim)
