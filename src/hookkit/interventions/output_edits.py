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

from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

from hookkit.backends import Backend, backend_for
from hookkit.core.entry import entered, entry_name, public_entry, restored
from hookkit.core.handles import HandleGroup
from hookkit.core.positions import Positions, Reach, check_steps, token_dim_of
from hookkit.core.router import INTERVENTION, Event
from hookkit.core.select import LayerSpec, shown_name
from hookkit.core.sequences import edit_at_positions, token_length
from hookkit.core.tree import leaves
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
from hookkit.sites import (
    Converted,
    RecordSource,
    Site,
    When,
    apply_to,
    attach_sites,
    broadcasts_into,
    cast_like,
    check_calls,
    check_index,
    kind_of,
    names_of,
    resolve,
    shape_str,
    to_tensor,
)

__all__ = [  # the value helpers moved to hookkit.sites; importable from here as before
    "Converted",
    "Edits",
    "ablate",
    "apply_to",
    "broadcasts_into",
    "cast_like",
    "check_calls",
    "check_index",
    "edit",
    "edit_outputs",
    "edit_sites",
    "patch",
    "per_layer",
    "shape_str",
    "steer",
    "to_tensor",
]

TensorFn = Callable[[Any, int, Event], Any]
SiteFn = Callable[[Any, int, Event, Site], Any]


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


def positions_args(model: Layer, positions: Any, steps: Any, token_dim: Any) -> tuple[Positions | None, Any, int | None]:
    """Checked ``(positions, steps, token axis)`` of an edit or capture."""
    spec = None if positions is None else Positions(positions)
    gen_steps = check_steps(steps)
    dim = token_dim_of(model, token_dim) if spec is not None else None
    if spec is None and token_dim is not None:
        token_dim_of(model, token_dim)  # checked all the same
    return spec, gen_steps, dim


def sites_of(model: Layer, layers: LayerSpec, positions: Any, steps: Any, index: Any, **options: Any) -> list[Site]:
    """The sites an edit acts on: the layers' outputs, or the kind an option names (``heads=``);
    those hold every position: ``positions=`` / ``steps=`` are refused with them."""
    kind = kind_of(options)
    if kind is not None and (positions is not None or steps is not None):
        fail(entry_name(), kind, f"None with positions= or steps= (per-{kind.rstrip('s')} edits act on every position)", options[kind])
    return resolve(model, layers, index=index, **options)


def edit_sites(
    model: Layer,
    found: Sequence[Site],
    fn: SiteFn,
    *,
    calls: Any = None,
    kinds: Any = None,
    positions: Any = None,
    steps: Any = None,
    token_dim: int | None = None,
) -> Edits:
    """Attach one forward consumer per site applying ``fn(record, position, ev, site) -> new`` to
    the value at each site, on the selected calls, generation steps and token positions (``fn`` then
    gets the slice of those positions, ``ev.selected`` their absolute positions). ``kinds``: the
    dtype kinds ``fn`` works on (others are left alone with one warning; see ``output_guard``)."""
    with entered(entry_name("edit_outputs")):  # named "edit_outputs" when no entry is active
        when = When(check_calls(calls), None)
        spec, gen_steps, dim = positions_args(model, positions, steps, token_dim)
        when = When(when.calls, gen_steps)
        be = backend_for(model)
        if kinds is not None:
            fn = _guarded(be, fn, kinds)
    reach = Reach(spec) if spec is not None and spec.explicit else None

    def consumer(site: Site) -> Callable[[Event], Any]:
        def op(t: Any, leaf: int, ev: Event) -> Any:
            return fn(t, leaf, ev, site)

        if spec is not None:
            assert dim is not None  # positions_args gives the token axis with positions=
            whole = op
            # a site with its own token axis (a pattern's query positions) uses it unless token_dim= was given
            axis = dim if token_dim is not None else getattr(site.module, "token_axis", None) or dim

            def op(t: Any, leaf: int, ev: Event) -> Any:
                return edit_at_positions(be, t, ev, spec, axis, reach, whole, leaf)

        write = site.write
        if when.always:
            return lambda ev: write(be, ev, op)

        def consume(ev: Event) -> Any:
            return write(be, ev, op) if when(ev) else None

        return consume

    return attach_sites(model, found, consumer, INTERVENTION, group=Edits(reach))  # type: ignore[return-value]


def _guarded(be: Backend, fn: SiteFn, kinds: Any) -> SiteFn:
    guarded = output_guard(be, fn, kinds=kinds)

    def op(t: Any, pos: int, ev: Event, site: Site) -> Any:
        return guarded(t, pos, ev, site, layer=ev.name)

    return op


def edit_outputs(
    model: Layer,
    layers: LayerSpec,
    fn: TensorFn,
    *,
    calls: Any = None,
    index: int | None = 0,
    kinds: Any = None,
    positions: Any = None,
    steps: Any = None,
    token_dim: int | None = None,
) -> Edits:
    """Attach one forward consumer applying ``fn(tensor, position, ev) -> new tensor`` to the
    selected tensors of each selected layer's output (``edit_sites`` on the layers' output sites);
    errors name the public entry's function ("edit_outputs" when none is active)."""
    with entered("edit_outputs"):
        check_index(index)
        check_calls(calls)
        found = resolve(model, layers, index=index)
        return edit_sites(
            model,
            found,
            lambda t, pos, ev, site: fn(t, pos, ev),
            calls=calls,
            kinds=kinds,
            positions=positions,
            steps=steps,
            token_dim=token_dim,
        )


def per_layer(values: Any, names: list[str], is_tensor: Callable[[Any], bool], *, arg: str) -> dict[str, Any]:
    """One value for every layer, or a dict name -> value covering exactly the selected layers."""
    if isinstance(values, Mapping) and not is_tensor(values):
        missing = [n for n in names if n not in values]
        extra = [k for k in values if k not in names]
        if missing or extra:
            detail = f"selected: {', '.join(map(shown_name, names))}"
            detail += f"; missing: {', '.join(missing)}" if missing else ""
            detail += f"; not selected: {', '.join(map(str, extra))}" if extra else ""
            valid = f"one value for every layer, or a dict with one entry per selected layer ({detail})"
            fail(None, arg, valid, list(values))
        return dict(values)
    return {n: values for n in names}


def converted_per_layer(be: Backend, values: Any, names: list[str], arg: str) -> dict[str, Converted]:
    """``per_layer`` of user tensors (``mean=``, ``vector=``), each checked and converted once."""
    return {
        n: Converted(check_tensor_like(v, be, arg=arg if v is values else f"{arg}[{n!r}]"))
        for n, v in per_layer(values, names, be.is_tensor, arg=arg).items()
    }


# -- patching -----------------------------------------------------------------------------------
def _check_captured(cap: Any, name: str) -> None:
    """``cap`` (the ``values`` of a patch) holds records of layer ``name``."""
    fn = entry_name("patch")
    if not getattr(cap, "_outputs", True):
        fail(fn, "values", "a capture that kept outputs (this one was made with outputs=False)", cap)
    if name not in cap.names:
        fail(fn, "values", f"a capture of every selected layer; {name!r} is not captured (captured: {', '.join(cap.names[:8])})", cap)
    if name not in cap:
        fail(fn, "values", f"a capture holding records of {name!r}: run the clean forward inside the capture first", cap)


def _stored_from_capture(cap: Any, names: list[str]) -> dict[tuple[str, int], Any]:
    stored: dict[tuple[str, int], Any] = {}
    for name in names:
        _check_captured(cap, name)
        recs = cap.calls(name)
        last = recs[-1].step
        for r in recs:
            if r.step == last:  # the latest forward only
                stored[(name, r.call)] = r.output
    return stored


def _stored_from_dict(values: Mapping, names: list[str]) -> tuple[dict[tuple[str, int], Any], dict[str, Any]]:
    fn = entry_name("patch")
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
        valid = f"keyed by selected layers only ({selected}): values for layers that are not selected: {', '.join(unknown)}"
        fail(fn, "values", valid, list(values))
    missing = [n for n in names if n not in every and not any(k[0] == n for k in per_call)]
    if missing:
        fail(fn, "values", f"a value for every selected layer; none for {', '.join(missing)}", list(values))
    return per_call, every


def _stored(be: Backend, values: Any, names: list[str], by_position: bool) -> tuple[dict[tuple[str, int], Any], dict[str, Any]]:
    """``patch``'s values as ``(per (layer, call), per layer)``."""
    if isinstance(values, RecordSource) and by_position:
        return {}, {n: _sequence_of(values, n) for n in names}
    if isinstance(values, RecordSource):
        return _stored_from_capture(values, names), {}
    if isinstance(values, Mapping) and not be.is_tensor(values):
        return _stored_from_dict(values, names)
    if values is None or isinstance(values, (str, bytes, int, float, bool)):  # a structure of tensors is kept as given
        valid = "a capture, a dict name -> tensor, or a tensor (or a tuple of them) for every layer"
        fail("patch", "values", valid, values, kind=ArgumentTypeError)
    return {}, {n: values for n in names}


def _stored_leaf(stored: Any, pos: int, ev: Event, be: Backend, index: int | None) -> Any:
    """The tensor of a stored value that replaces the output's tensor at ``pos``."""
    found = [] if be.is_tensor(stored) else leaves(stored, be.is_tensor)
    if not found:  # one tensor or array
        if index is None and pos > 0:
            fail("patch", "index", f"given: the stored value for layer {ev.name!r} is one tensor and the output has several", index)
        return stored
    if pos >= len(found):
        valid = f"a stored output with a tensor at position {pos}, as layer {ev.name!r} outputs ({len(found)} here)"
        fail("patch", "values", valid, stored)
    return found[pos]


@public_entry()
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
    be = check_model(model)
    check_index(index)
    found = sites_of(model, layers, positions, steps, index, heads=heads, head_layout=head_layout)
    names = names_of(found)
    per_call, every = _stored(be, values, names, positions is not None)
    cache: dict[int, Converted] = {}
    dim = token_dim_of(model, token_dim) if positions is not None else None

    def replace(t: Any, pos: int, ev: Event, site: Site) -> Any:
        stored = per_call.get((site.name, ev.call))
        if stored is None:
            stored = every.get(site.name)
        if stored is None:
            if isinstance(values, RecordSource):
                have = sorted(c for n, c in per_call if n == site.name)
                valid = (
                    f"given: no stored output for layer {site.name!r} call {ev.call}; the captured run has calls {have} (patch only those)"
                )
                fail("patch", "calls", valid, calls)
            return t  # a dict keyed by (name, call) patches only the calls it names
        leaf = _stored_leaf(stored, pos, ev, be, index)
        conv = cache.get(id(leaf))
        if conv is None or conv.value is not leaf:
            conv = cache[id(leaf)] = Converted(leaf)
        new = conv.like(be, t)
        if ev.selected is not None:
            assert dim is not None  # events carry selected positions only under positions=
            axis = dim if token_dim is not None else getattr(site.module, "token_axis", None) or dim  # a pattern: its queries
            new = _at_absolute(be, new, ev, ev.selected, axis)
        if be.shape(new) != be.shape(t):
            fail("patch", "values", site.part.shaped_like(be, t, site.name, ev.call), new)
        return new

    return edit_sites(model, found, replace, calls=calls, steps=steps, positions=positions, token_dim=token_dim)


def _sequence_of(cap: Any, name: str) -> Any:
    _check_captured(cap, name)
    return cap.sequence(name)


def _at_absolute(be: Backend, value: Any, ev: Event, want: Sequence[int], dim: int) -> Any:
    """The entries of a patch value at the absolute positions ``want`` (``ev.selected``) along the token axis."""
    with restored("patch"):  # at forward time, outside the entry
        have = token_length(be, value, dim, ev.name)
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


@public_entry()
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
    be = check_model(model)
    check_choice(mode, ABLATIONS, arg="mode")
    if mean is not None and mode != "mean":
        fail("ablate", "mean", "None with mode='zero' (mean= is only used with mode='mean')", mean)
    check_index(index)
    found = sites_of(model, layers, positions, steps, index, heads=heads, head_layout=head_layout)
    means = None if mean is None else converted_per_layer(be, mean, names_of(found), "mean")

    def zero(t: Any, pos: int, ev: Event, site: Site) -> Any:
        return be.zeros_like(t)

    def batch_mean(t: Any, pos: int, ev: Event, site: Site) -> Any:
        if means is None:
            return be.zeros_like(t) + t.mean(0, True)  # broadcast: Paddle has no complex expand_as
        m = means[site.name].like(be, t)
        if not broadcasts_into(be.shape(m), be.shape(t)[1:]):
            fail("ablate", "mean", site.part.mean_shape(be, t, site.name), m)
        return be.zeros_like(t) + m

    op, kinds = (zero, None) if mode == "zero" else (batch_mean, ("float", "complex"))
    return edit_sites(model, found, op, kinds=kinds, calls=calls, steps=steps, positions=positions, token_dim=token_dim)


@public_entry()
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
    be = check_model(model)
    check_index(index)
    found = sites_of(model, layers, positions, steps, index, heads=heads, head_layout=head_layout)
    vectors = converted_per_layer(be, vector, names_of(found), "vector")
    scale = check_number(scale, arg="scale")

    def add(t: Any, pos: int, ev: Event, site: Site) -> Any:
        v = site.part.vector(be, vectors[site.name].like(be, t), t)
        if v is None:
            fail("steer", "vector", site.part.vector_shape(be, t, site.name), vectors[site.name].like(be, t))
        return t + v * scale if scale != 1.0 else t + v

    return edit_sites(model, found, add, kinds=("float", "complex"), calls=calls, steps=steps, positions=positions, token_dim=token_dim)


@public_entry()
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
    check_model(model)
    check_index(index)
    found = sites_of(model, layers, positions, steps, index, heads=heads, head_layout=head_layout)
    check_callable(fn, arg="fn", signature="fn(heads, ev)" if kind_of({"heads": heads}) else "fn(output, ev)")

    def apply(t: Any, pos: int, ev: Event, site: Site) -> Any:
        new = fn(t, ev)
        return t if new is None else new

    return edit_sites(model, found, apply, calls=calls, steps=steps, positions=positions, token_dim=token_dim)
