"""Heads of an attention layer as a site: the input of its output projection (``z``,
``[B, T, n_heads * d_head]``), where head ``h`` owns the slice ``h * d_head:(h + 1) * d_head``. The
projection is found through ``core.architectures``; records are laid out ``[B, H_selected, T, d_head]``.

>>> with hookkit.ablate(model, "transformer.h.0.attn", heads=[3]):   # doctest: +SKIP
...     out = model(ids)
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any

from hookkit.backends import Backend, backend_for
from hookkit.core.architectures import HeadLayout, head_layout, submodule
from hookkit.core.entry import entry_name, restored
from hookkit.core.select import LayerSpec, select
from hookkit.core.validate import ArgumentTypeError, fail
from hookkit.sites.parts import Part
from hookkit.sites.values import shape_str

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


def check_heads(heads: Any, n_heads: int, name: str) -> list[int]:
    """``heads=`` -> a list of head indices in [0, n_heads) (errors name the public entry's function)."""
    fn = entry_name()
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


def head_targets(model: Any, layers: LayerSpec, heads: Any, layout: Any = None) -> list[HeadTarget]:
    """The selected attention layers with their output projections and head lists."""
    fn = entry_name()
    be = backend_for(model)
    out = []
    for name, layer in select(model, layers):
        lay = head_layout(layer, name, layout)
        proj = submodule(layer, lay.proj, name)
        if not be.is_layer(proj):
            fail(fn, "head_layout", f"the name of a submodule of {name!r} (its output projection)", lay.proj)
        out.append(HeadTarget(name, layer, f"{name}.{lay.proj}" if name else lay.proj, proj, lay, check_heads(heads, lay.n_heads, name)))
    return out


# -- the layout of z ------------------------------------------------------------------------------
def split(be: Backend, m: Any, z: Any, t: HeadTarget) -> tuple[Any, tuple[int, ...]]:
    """``z [..., H * d]`` -> ``[B, H, ..., d]`` (every head) and z's shape."""
    shape = tuple(be.shape(z))
    lay = t.layout
    if len(shape) < 2 or shape[-1] != lay.n_heads * lay.d_head:
        valid = f"the layout of the input of {t.proj_name!r}: [..., {lay.n_heads * lay.d_head}] ({lay.n_heads} heads x {lay.d_head})"
        fail(None, "head_layout", valid, z)
    z4 = m.reshape(z, [*shape[:-1], lay.n_heads, lay.d_head])
    n = len(shape) + 1
    if n > 3:  # [B, T..., H, d] -> [B, H, T..., d]
        z4 = m.permute(z4, [0, n - 2, *range(1, n - 2), n - 1])
    return z4, shape


def join(m: Any, z4: Any, shape: tuple[int, ...]) -> Any:
    """``split``'s inverse: ``[B, H, T..., d]`` -> ``shape`` (``[B, T..., H * d]``)."""
    n = len(shape) + 1
    if n > 3:
        z4 = m.permute(z4, [0, *range(2, n - 1), 1, n - 1])
    return m.reshape(z4, list(shape))


def selected(m: Any, z4: Any, t: HeadTarget) -> Any:
    """The selected heads of ``z4 [B, H, ...]``: ``[B, H_selected, ...]``."""
    return z4 if t.all_heads else m.index_select(z4, 1, t.heads)


def write_back(m: Any, z4: Any, new: Any, t: HeadTarget) -> Any:
    """``z4`` with the selected heads replaced by ``new`` (``[B, H_selected, ...]``)."""
    if t.all_heads:
        return new
    where = {h: k for k, h in enumerate(t.heads)}
    pieces = [new[:, where[h] : where[h] + 1] if h in where else z4[:, h : h + 1] for h in range(t.layout.n_heads)]
    return m.cat(pieces, 1)


def record_of(be: Backend, z: Any, t: HeadTarget) -> Any:
    """``z`` (the projection's input) as a head record ``[B, H_selected, T, d_head]``."""
    m = be.family("tensor_math")
    z4, _ = split(be, m, z, t)
    return selected(m, z4, t)


class Heads(Part):
    """The selected heads' slices of the output projection's input, as ``[B, H_selected, T, d_head]``."""

    __slots__ = ("target", "name")
    kind = "heads"

    def __init__(self, target: HeadTarget):
        self.target = target
        self.name = entry_name()  # errors at forward time name the function that placed it

    def get(self, be: Backend, t: Any) -> tuple[Any, Any]:
        m = be.family("tensor_math")
        with restored(self.name):
            z4, shape = split(be, m, t, self.target)
        return selected(m, z4, self.target), (z4, shape)

    def put(self, be: Backend, t: Any, state: Any, new: Any, where: str) -> Any:
        z4, shape = state
        m = be.family("tensor_math")
        rec_shape = tuple(be.shape(z4))
        want = (rec_shape[0], len(self.target.heads), *rec_shape[2:])
        if tuple(be.shape(new)) != want:
            valid = f"a function returning the record's shape {shape_str(want)} ([B, H_selected, T, d_head]) at {self.target.name!r}"
            fail(self.name, "fn", valid, new)
        return join(m, write_back(m, z4, new, self.target), shape)

    def missing(self, site: Any, ev: Any) -> None:
        given = ev.args[0] if ev.args else None
        valid = f"a layout whose output projection takes a tensor first ({site.at!r} did not)"
        fail(self.name, "head_layout", valid, given, kind=ArgumentTypeError)

    def shaped_like(self, be: Backend, rec: Any, layer: str, call: int) -> str:
        return f"shaped {shape_str(be.shape(rec))} for layer {layer!r} ([B, H_selected, T, d_head], as capture(..., heads=) records)"

    def mean_shape(self, be: Backend, rec: Any, layer: str) -> str:
        return f"shaped {shape_str(be.shape(rec)[1:])} ([H_selected, T, d_head]) for layer {layer!r}, or broadcasting into it"

    def vector(self, be: Backend, v: Any, rec: Any) -> Any | None:
        vs, d, h = tuple(be.shape(v)), self.target.layout.d_head, len(self.target.heads)
        if vs == (d,):
            return v
        if vs == (h, d):
            return be.family("tensor_math").reshape(v, [1, h, *([1] * (len(be.shape(rec)) - 3)), d])
        return None

    def vector_shape(self, be: Backend, rec: Any, layer: str) -> str:
        d, h = self.target.layout.d_head, len(self.target.heads)
        return f"of shape [{d}] (one for every selected head) or [{h}, {d}] (one per selected head) for layer {layer!r}"
