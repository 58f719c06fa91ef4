"""Per-head capture and edits of attention layers: ``heads=`` on capture, ablate, patch, steer and edit.

A head's contribution is separable at the INPUT of the attention's output projection (``z``,
``[B, T, n_heads * d_head]``): head ``h`` owns the slice ``h * d_head:(h + 1) * d_head``. Each
function here attaches one ``forward_pre`` consumer to that projection (found through
``core.architectures``) and works on the record layout ``[B, H_selected, T, d_head]``.

>>> with hookkit.ablate(model, "transformer.h.0.attn", heads=[3]):   # doctest: +SKIP
...     out = model(ids)
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hookkit.backends import Backend, backend_for
from hookkit.core.architectures import HeadLayout, head_layout, submodule
from hookkit.core.router import INTERVENTION, OBSERVER, Event, attach
from hookkit.core.select import LayerSpec, select
from hookkit.core.validate import ArgumentTypeError, check_callable, check_model, check_number, check_tensor_like, fail

if TYPE_CHECKING:
    from hookkit.interventions.output_edits import Edits

HEADS = "True (every head), an int or a list of distinct head indices"


@dataclasses.dataclass
class HeadTarget:
    """One selected attention layer: its name, its output projection and the heads acted on."""

    name: str
    layer: Any
    proj_name: str
    proj: Any
    layout: HeadLayout
    heads: list[int]

    @property
    def all_heads(self) -> bool:
        return self.heads == list(range(self.layout.n_heads))


def check_heads(heads: Any, n_heads: int, fn: str, name: str) -> list[int]:
    """``heads=`` -> a list of head indices in [0, n_heads)."""
    if heads is True:
        return list(range(n_heads))
    if isinstance(heads, bool) or heads is None or isinstance(heads, (str, bytes, float)):
        fail(fn, "heads", HEADS, heads, kind=ArgumentTypeError)
    items = [heads] if isinstance(heads, numbers.Integral) else heads
    try:
        items = list(items)
    except TypeError:
        fail(fn, "heads", HEADS, heads, kind=ArgumentTypeError)
    if not items or any(isinstance(h, bool) or not isinstance(h, numbers.Integral) for h in items):
        fail(fn, "heads", HEADS, heads, kind=ArgumentTypeError)
    out = [int(h) + n_heads if int(h) < 0 else int(h) for h in items]
    if any(not 0 <= h < n_heads for h in out) or len(set(out)) != len(out):
        fail(fn, "heads", f"distinct head indices in [0, {n_heads - 1}] (layer {name!r} has {n_heads} heads)", heads)
    return out


def head_targets(model: Any, layers: LayerSpec, heads: Any, fn: str, layout: Any = None) -> list[HeadTarget]:
    """The selected attention layers with their output projections and head lists."""
    be = backend_for(model)
    out = []
    for name, layer in select(model, layers):
        lay = head_layout(layer, name, fn, layout)
        proj = submodule(layer, lay.proj, name, fn)
        if not be.is_layer(proj):
            fail(fn, "head_layout", f"the name of a submodule of {name!r} (its output projection)", lay.proj)
        out.append(
            HeadTarget(name, layer, f"{name}.{lay.proj}" if name else lay.proj, proj, lay, check_heads(heads, lay.n_heads, fn, name))
        )
    return out


# -- the layout of z ------------------------------------------------------------------------------
def _split(be: Backend, m: Any, z: Any, t: HeadTarget, fn: str) -> tuple[Any, tuple[int, ...]]:
    """``z [..., H * d]`` -> ``[B, H, ..., d]`` (every head) and z's shape."""
    shape = tuple(be.shape(z))
    lay = t.layout
    if len(shape) < 2 or shape[-1] != lay.n_heads * lay.d_head:
        valid = f"the layout of the input of {t.proj_name!r}: [..., {lay.n_heads * lay.d_head}] ({lay.n_heads} heads x {lay.d_head})"
        fail(fn, "head_layout", valid, z)
    z4 = m.reshape(z, [*shape[:-1], lay.n_heads, lay.d_head])
    n = len(shape) + 1
    if n > 3:  # [B, T..., H, d] -> [B, H, T..., d]
        z4 = m.permute(z4, [0, n - 2, *range(1, n - 2), n - 1])
    return z4, shape


def _join(m: Any, z4: Any, shape: tuple[int, ...]) -> Any:
    n = len(shape) + 1
    if n > 3:
        z4 = m.permute(z4, [0, *range(2, n - 1), 1, n - 1])
    return m.reshape(z4, list(shape))


def selected(m: Any, z4: Any, t: HeadTarget) -> Any:
    """The selected heads of ``z4 [B, H, ...]``: ``[B, H_selected, ...]``."""
    return z4 if t.all_heads else m.index_select(z4, 1, t.heads)


def _write_back(m: Any, z4: Any, new: Any, t: HeadTarget) -> Any:
    if t.all_heads:
        return new
    where = {h: k for k, h in enumerate(t.heads)}
    pieces = [new[:, where[h] : where[h] + 1] if h in where else z4[:, h : h + 1] for h in range(t.layout.n_heads)]
    return m.cat(pieces, 1)


def record_of(be: Backend, z: Any, t: HeadTarget, fn: str) -> Any:
    """``z`` (the projection's input) as a head record ``[B, H_selected, T, d_head]``."""
    m = be.family("tensor_math")
    z4, _ = _split(be, m, z, t, fn)
    return selected(m, z4, t)


def edit_heads(
    model: Any, targets: Sequence[HeadTarget], fn: Callable[[Any, Event, HeadTarget], Any], *, calls: Any = None, name: str = "edit"
) -> Edits:
    """Attach one ``forward_pre`` consumer per target's projection replacing its selected heads'
    slices of ``z`` by ``fn(record [B, H_sel, T, d_head], ev, target)`` (same shape)."""
    from hookkit.interventions.output_edits import Edits, check_calls, shape_str

    wanted = check_calls(calls, name)
    be = backend_for(model)
    m = be.family("tensor_math")
    group = Edits()  # what every edit returns (no positions= here: nothing to check at exit)

    def consumer(t: HeadTarget) -> Callable[[Event], Any]:
        def consume(ev: Event) -> Any:
            if wanted is not None and ev.call not in wanted:
                return None
            if not ev.args or not be.is_tensor(ev.args[0]):
                valid = f"a layout whose output projection takes a tensor first ({t.proj_name!r} did not)"
                fail(name, "head_layout", valid, ev.args[0] if ev.args else None, kind=ArgumentTypeError)
            z = ev.args[0]
            z4, shape = _split(be, m, z, t, name)
            rec = selected(m, z4, t)
            new = fn(rec, ev, t)
            if new is None:
                return None
            if tuple(be.shape(new)) != tuple(be.shape(rec)):
                valid = f"a function returning the record's shape {shape_str(be.shape(rec))} ([B, H_selected, T, d_head]) at {t.name!r}"
                fail(name, "fn", valid, new)
            return (_join(m, _write_back(m, z4, new, t), shape), *ev.args[1:]), ev.kwargs

        return consume

    try:
        for t in targets:
            group.add(attach(model, [(t.proj_name, t.proj)], "forward_pre", consumer(t), INTERVENTION))
    except BaseException:
        group.remove()
        raise
    return group


# -- the public verbs' heads= paths ---------------------------------------------------------------
def ablate_heads(model: Any, layers: LayerSpec, heads: Any, mode: str, mean: Any, calls: Any, layout: Any) -> Edits:
    """``ablate(..., heads=)``: zero the selected heads' slices, or replace them by their batch mean
    (or ``mean=``, shaped ``[H_selected, T, d_head]`` or broadcasting into it)."""
    from hookkit.interventions.output_edits import Converted, broadcasts_into, per_layer, shape_str

    be = backend_for(model)
    targets = head_targets(model, layers, heads, "ablate", layout)
    means = None
    if mean is not None:
        means = {
            n: Converted(check_tensor_like(v, be, fn="ablate", arg="mean"))
            for n, v in per_layer(mean, [t.name for t in targets], be.is_tensor, fn="ablate", arg="mean").items()
        }

    def zero(rec: Any, ev: Event, t: HeadTarget) -> Any:
        return be.zeros_like(rec)

    def batch_mean(rec: Any, ev: Event, t: HeadTarget) -> Any:
        if means is None:
            return be.zeros_like(rec) + rec.mean(0, True)
        v = means[t.name].like(be, rec)
        if not broadcasts_into(tuple(be.shape(v)), tuple(be.shape(rec))[1:]):
            valid = f"shaped {shape_str(be.shape(rec)[1:])} ([H_selected, T, d_head]) for layer {t.name!r}, or broadcasting into it"
            fail("ablate", "mean", valid, v)
        return be.zeros_like(rec) + v

    return edit_heads(model, targets, zero if mode == "zero" else batch_mean, calls=calls, name="ablate")


def steer_heads(model: Any, layers: LayerSpec, vector: Any, scale: float, calls: Any, heads: Any, layout: Any) -> Edits:
    """``steer(..., heads=)``: add ``scale * vector`` (``[d_head]``, or ``[H_selected, d_head]``: one per head)."""
    from hookkit.interventions.output_edits import Converted, per_layer

    be = backend_for(model)
    targets = head_targets(model, layers, heads, "steer", layout)
    vectors = {
        n: Converted(check_tensor_like(v, be, fn="steer", arg="vector"))
        for n, v in per_layer(vector, [t.name for t in targets], be.is_tensor, fn="steer", arg="vector").items()
    }
    scale = check_number(scale, fn="steer", arg="scale")
    m = be.family("tensor_math")

    def add(rec: Any, ev: Event, t: HeadTarget) -> Any:
        v = vectors[t.name].like(be, rec)
        vs = tuple(be.shape(v))
        d, h = t.layout.d_head, len(t.heads)
        if vs == (d,):
            pass
        elif vs == (h, d):
            v = m.reshape(v, [1, h, *([1] * (len(be.shape(rec)) - 3)), d])
        else:
            fail(
                "steer",
                "vector",
                f"of shape [{d}] (one for every selected head) or [{h}, {d}] (one per selected head) for layer {t.name!r}",
                v,
            )
        return rec + v * scale if scale != 1.0 else rec + v

    return edit_heads(model, targets, add, calls=calls, name="steer")


def patch_heads(model: Any, layers: LayerSpec, values: Any, calls: Any, heads: Any, layout: Any) -> Edits:
    """``patch(..., heads=)``: ``values`` shaped like a ``capture(..., heads=)`` record
    ``[B, H_selected, T, d_head]``: such a capture, a dict name -> tensor or one tensor."""
    from hookkit.interventions.output_edits import Converted, _stored_from_capture, _stored_from_dict, shape_str
    from hookkit.observers.capture import capture as Capture

    check_model(model, fn="patch")
    be = backend_for(model)
    targets = head_targets(model, layers, heads, "patch", layout)
    names = [t.name for t in targets]
    every: dict[str, Any]
    if isinstance(values, Capture):
        per_call, every = _stored_from_capture(values, names), {}
    elif isinstance(values, Mapping) and not be.is_tensor(values):
        per_call, every = _stored_from_dict(values, names)
    else:
        per_call, every = {}, {n: check_tensor_like(values, be, fn="patch", arg="values") for n in names}
    cache: dict[int, Converted] = {}

    def replace(rec: Any, ev: Event, t: HeadTarget) -> Any:
        stored = per_call.get((t.name, ev.call), every.get(t.name))
        if stored is None:
            return None
        conv = cache.get(id(stored))
        if conv is None or conv.value is not stored:
            conv = cache[id(stored)] = Converted(stored)
        new = conv.like(be, rec)
        if tuple(be.shape(new)) != tuple(be.shape(rec)):
            valid = f"shaped {shape_str(be.shape(rec))} for layer {t.name!r} ([B, H_selected, T, d_head], as capture(..., heads=) records)"
            fail("patch", "values", valid, new)
        return new

    return edit_heads(model, targets, replace, calls=calls, name="patch")


def edit_with_heads(model: Any, layers: LayerSpec, fn: Any, calls: Any, heads: Any, layout: Any) -> Edits:
    """``edit(..., heads=)``: ``fn(record [B, H_selected, T, d_head], ev) -> new | None``."""
    check_callable(fn, fn="edit", arg="fn", signature="fn(heads, ev)")
    targets = head_targets(model, layers, heads, "edit", layout)
    return edit_heads(model, targets, lambda rec, ev, t: fn(rec, ev), calls=calls, name="edit")


def attach_capture(cap: Any, model: Any, layers: LayerSpec, heads: Any, layout: Any) -> list[str]:
    """``capture(..., heads=)``: record each call's ``[B, H_selected, T, d_head]`` under the attention
    layer's name (``cap.record_value``). Returns the names."""
    be = backend_for(model)
    targets = head_targets(model, layers, heads, "capture", layout)

    def consumer(t: HeadTarget) -> Callable[[Event], None]:
        def consume(ev: Event) -> None:
            if ev.args and be.is_tensor(ev.args[0]):
                cap.record_value(t.name, ev, record_of(be, ev.args[0], t, "capture"))

        return consume

    for t in targets:
        cap.add(attach(model, [(t.proj_name, t.proj)], "forward_pre", consumer(t), OBSERVER))
    return [t.name for t in targets]
