"""``hookkit.port_weights``: copy the weights of a model into the same architecture written in another
framework (or the same one), the usual first step of a port checked with ``hookkit.diff``.

Layers pair by name (``map`` renames: the same dict / callable as ``diff``'s); inside a layer, state
pairs by its canonical name (the ``porting`` op family: Paddle's BatchNorm ``_mean`` is PyTorch's
``running_mean``, a Paddle ``Linear`` weight is stored transposed, decided by the layer's type).
Every pair's shape is checked first; nothing is copied unless everything pairs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hookkit.analyses.diff.pairing import Map, check_map, name_pairs, resolve
from hookkit.core.errors import HookkitError
from hookkit.core.types import Layer
from hookkit.core.validate import check_model, fail

FN = "port_weights"


class PortError(HookkitError, ValueError):
    """Some state of the source or the destination has no counterpart, or shapes differ: nothing was copied."""


@dataclass
class Ported:
    """What ``port_weights`` did: ``copied`` ``(src name, dst name)`` pairs (dotted, native names), and
    ``skipped``: bookkeeping state with no counterpart on the other side (``num_batches_tracked``)."""

    copied: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        extra = f"; skipped (no counterpart): {', '.join(self.skipped)}" if self.skipped else ""
        return f"Ported({len(self.copied)} tensors copied{extra})"


def _dotted(layer: str, name: str) -> str:
    return f"{layer}.{name}" if layer else name


def port_weights(src: Layer, dst: Layer, map: Map = None) -> Ported:
    """Copy every parameter and buffer of ``src`` into ``dst`` (PyTorch <-> PaddlePaddle, or within one
    framework): linear weights transposed where the layer types store them differently, BatchNorm's
    running statistics under each side's names, embeddings and convolutions as they are. Every
    shape is checked before anything is written; state that cannot be paired raises ``PortError``
    naming it, and then nothing is copied. Bookkeeping with no counterpart (``num_batches_tracked``)
    is reported in ``.skipped``.

    >>> hookkit.port_weights(torch_model, paddle_model)   # doctest: +SKIP
    Ported(38 tensors copied; skipped (no counterpart): bn1.num_batches_tracked)
    >>> hookkit.port_weights(torch_model, paddle_model, map={"blocks.*.fc": "layers.*.linear"})   # doctest: +SKIP
    """
    be_s = check_model(src, fn=FN, arg="src")
    be_d = check_model(dst, fn=FN, arg="dst")
    if src is dst:
        fail(FN, "dst", "a model other than src", dst)
    check_map(map, FN)
    if isinstance(map, str):
        fail(FN, "map", "None, a dict {src name or glob: dst name} or a callable f(src_name) -> dst_name", map)
    ops_s, ops_d = be_s.family("porting"), be_d.family("porting")
    layers_s = {n: ops_s.layer_state(m) for n, m in be_s.named_layers(src)}
    layers_d = {n: ops_d.layer_state(m) for n, m in be_d.named_layers(dst)}
    layers_s = {n: s for n, s in layers_s.items() if s}
    layers_d = {n: s for n, s in layers_d.items() if s}
    names_s = [n for n, _ in be_s.named_layers(src) if n]
    names_d = [n for n, _ in be_d.named_layers(dst) if n]
    covered = resolve(map, names_s, names_d, FN, "src", "dst")
    pairs = name_pairs([n for n in layers_s if n], names_d, covered)
    if "" in layers_s:
        pairs[""] = ""

    problems: list[str] = []
    plan: list[tuple[Any, Any, str, str]] = []  # (src entry, dst entry, src name, dst name)
    result = Ported()
    claimed: set[tuple[str, str]] = set()
    for ns, entries in layers_s.items():
        nd = pairs.get(ns)
        if nd is None or nd not in layers_d:
            if all(e.bookkeeping for e in entries):
                result.skipped += [_dotted(ns, e.native) for e in entries]
            else:
                where = "no layer of that name in dst" if nd is None else f"dst layer {nd or '(root)'!r} holds no state"
                problems.append(f"src layer {ns or '(root)'!r} ({', '.join(e.native for e in entries)}): {where}")
            continue
        theirs = {e.canonical: e for e in layers_d.get(nd, [])}
        for e in entries:
            d = theirs.get(e.canonical)
            if d is None:
                if e.bookkeeping:
                    result.skipped.append(_dotted(ns, e.native))
                else:
                    problems.append(
                        f"{_dotted(ns, e.native)} has no counterpart in dst layer {nd or '(root)'!r} (it has: {', '.join(theirs) or 'nothing'})"
                    )
                continue
            claimed.add((nd, e.canonical))
            shape_s = _canonical_shape(be_s, e)
            shape_d = _canonical_shape(be_d, d)
            if shape_s != shape_d:
                problems.append(
                    f"{_dotted(ns, e.native)} {list(be_s.shape(e.tensor))} vs {_dotted(nd, d.native)} {list(be_d.shape(d.tensor))}: shapes differ{_layout_note(e, d)}"
                )
                continue
            plan.append((e, d, _dotted(ns, e.native), _dotted(nd, d.native)))
    for nd, entries in layers_d.items():
        for d in entries:
            if (nd, d.canonical) in claimed:
                continue
            if d.bookkeeping:
                result.skipped.append(_dotted(nd, d.native))
            else:
                problems.append(f"dst {_dotted(nd, d.native)} would not be written: nothing in src pairs with it")
    if problems:
        shown = "; ".join(problems[:6]) + (f"; and {len(problems) - 6} more" if len(problems) > 6 else "")
        raise PortError(f"port_weights(): nothing copied: {shown}. Give map={{src name or glob: dst name}} for layers named differently.")
    for e, d, name_s, name_d in plan:
        value = ops_s.read(e.tensor)
        if e.transposed != d.transposed:
            value = value.T
        ops_d.write(d.tensor, value)
        result.copied.append((name_s, name_d))
    return result


def _canonical_shape(be: Any, e: Any) -> tuple[int, ...]:
    shape = tuple(be.shape(e.tensor))
    return shape[::-1] if e.transposed else shape


def _layout_note(e: Any, d: Any) -> str:
    if e.transposed != d.transposed:
        return " (compared in the same layout: one side stores this weight transposed)"
    return ""
