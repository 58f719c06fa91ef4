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
from hookkit.core.entry import entry_name, public_entry
from hookkit.core.errors import HookkitError
from hookkit.core.types import Layer
from hookkit.core.validate import check_model, fail


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


@public_entry("port_weights")
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
    fn = entry_name()
    be_s = check_model(src, arg="src")
    be_d = check_model(dst, arg="dst")
    if src is dst:
        fail(fn, "dst", "a model other than src", dst)
    check_map(map)
    if isinstance(map, str):
        fail(fn, "map", "None, a dict {src name or glob: dst name} or a callable f(src_name) -> dst_name", map)
    ops_s, ops_d = be_s.family("porting"), be_d.family("porting")
    layers_s, layers_d = _states(be_s, ops_s, src), _states(be_d, ops_d, dst)
    names_s = [n for n, _ in be_s.named_layers(src) if n]
    names_d = [n for n, _ in be_d.named_layers(dst) if n]
    pairs = name_pairs([n for n in layers_s if n], names_d, resolve(map, names_s, names_d, "src", "dst"))
    if "" in layers_s:
        pairs[""] = ""
    porting = _Porting(be_s, be_d, layers_d)
    for ns, entries in layers_s.items():
        porting.layer(ns, entries, pairs.get(ns))
    porting.unclaimed()
    if porting.problems:
        problems = porting.problems
        shown = "; ".join(problems[:6]) + (f"; and {len(problems) - 6} more" if len(problems) > 6 else "")
        raise PortError(f"port_weights(): nothing copied: {shown}. Give map={{src name or glob: dst name}} for layers named differently.")
    result = porting.result
    for e, d, name_s, name_d in porting.plan:
        value = ops_s.read(e.tensor)
        if e.transposed != d.transposed:
            value = value.T
        ops_d.write(d.tensor, value)
        result.copied.append((name_s, name_d))
    return result


def _states(be: Any, ops: Any, model: Any) -> dict[str, Any]:
    """``{layer name: its state entries}`` of the layers that hold state."""
    return {n: s for n, s in ((n, ops.layer_state(m)) for n, m in be.named_layers(model)) if s}


class _Porting:
    """The pairing of every state entry of src with one of dst, checked before anything is written:
    ``plan`` (what to copy), ``problems`` (what cannot be paired), ``result.skipped`` (bookkeeping)."""

    def __init__(self, be_s: Any, be_d: Any, layers_d: dict[str, Any]):
        self.be_s, self.be_d, self.layers_d = be_s, be_d, layers_d
        self.problems: list[str] = []
        self.plan: list[tuple[Any, Any, str, str]] = []  # (src entry, dst entry, src name, dst name)
        self.result = Ported()
        self.claimed: set[tuple[str, str]] = set()

    def layer(self, ns: str, entries: list[Any], nd: str | None) -> None:
        """Pair the entries of src layer ``ns`` with those of dst layer ``nd``."""
        if nd is None or nd not in self.layers_d:
            if all(e.bookkeeping for e in entries):
                self.result.skipped += [_dotted(ns, e.native) for e in entries]
            else:
                where = "no layer of that name in dst" if nd is None else f"dst layer {nd or '(root)'!r} holds no state"
                self.problems.append(f"src layer {ns or '(root)'!r} ({', '.join(e.native for e in entries)}): {where}")
            return
        theirs = {e.canonical: e for e in self.layers_d.get(nd, [])}
        for e in entries:
            self.entry(ns, nd, e, theirs)

    def entry(self, ns: str, nd: str, e: Any, theirs: dict[str, Any]) -> None:
        d = theirs.get(e.canonical)
        if d is None:
            if e.bookkeeping:
                self.result.skipped.append(_dotted(ns, e.native))
            else:
                self.problems.append(
                    f"{_dotted(ns, e.native)} has no counterpart in dst layer {nd or '(root)'!r} (it has: {', '.join(theirs) or 'nothing'})"
                )
            return
        self.claimed.add((nd, e.canonical))
        if _canonical_shape(self.be_s, e) != _canonical_shape(self.be_d, d):
            self.problems.append(
                f"{_dotted(ns, e.native)} {list(self.be_s.shape(e.tensor))} vs {_dotted(nd, d.native)} {list(self.be_d.shape(d.tensor))}: shapes differ{_layout_note(e, d)}"
            )
            return
        self.plan.append((e, d, _dotted(ns, e.native), _dotted(nd, d.native)))

    def unclaimed(self) -> None:
        """dst entries no src entry pairs with: bookkeeping is skipped, anything else is a problem."""
        for nd, entries in self.layers_d.items():
            for d in entries:
                if (nd, d.canonical) in self.claimed:
                    continue
                if d.bookkeeping:
                    self.result.skipped.append(_dotted(nd, d.native))
                else:
                    self.problems.append(f"dst {_dotted(nd, d.native)} would not be written: nothing in src pairs with it")


def _canonical_shape(be: Any, e: Any) -> tuple[int, ...]:
    shape = tuple(be.shape(e.tensor))
    return shape[::-1] if e.transposed else shape


def _layout_note(e: Any, d: Any) -> str:
    if e.transposed != d.transposed:
        return " (compared in the same layout: one side stores this weight transposed)"
    return ""
