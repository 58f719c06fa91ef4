"""Drawing a ``hookkit.Graph`` with Graphviz: dot source, SVG, a self-contained HTML page.

Needs the ``graphviz`` Python package (``pip install hookkit[graph]``) and Graphviz's ``dot``
program (Debian/Ubuntu: ``apt-get install graphviz``; macOS: ``brew install graphviz``); the dot
source needs only the Python package. Layer names are data: every string reaches the picture through dot,
which escapes it for SVG, and the HTML page escapes what it adds.

Overlays (``overlay=``): ``ActivationStats`` / ``GradientStats`` or their loaded data (each node
coloured by the mean over records of a statistic: ``std`` for activations, ``norm`` for gradients;
``(stats, "near_zero")`` picks another, with a legend), a ``NonFiniteError`` from
``watch_nonfinite`` (the first node that produced a NaN or Inf in red), or a layer name or list of
names (highlighted: the layer a CAM or an attribution used).
"""

from __future__ import annotations

import html
import math
import os
import pathlib
import shutil
from typing import TYPE_CHECKING, Any

import numpy as np

from hookkit.core.validate import ArgumentTypeError, fail

if TYPE_CHECKING:
    from hookkit.observers.graph.model import Graph, Node

__all__ = ["GraphvizMissing", "dot_source", "html_fragment", "render_svg", "save"]


class GraphvizMissing(ImportError):
    """The ``graphviz`` package or Graphviz's ``dot`` program is not installed (the message says how to get it)."""


# a colour-blind-safe sequential scale (viridis at 8 stops), low to high
_SCALE = ["#440154", "#46327e", "#365c8d", "#277f8e", "#1fa187", "#4ac16d", "#a0da39", "#fde725"]
_RED, _HIGHLIGHT = "#d62728", "#ff7f0e"
_MAX_FAN = 4  # integer/bool edges from one node to more nodes than this are not drawn
_FILL = {"input": "#dbeafe", "output": "#dcfce7", "layer": "#f8fafc", "op": "#fef9c3", "code": "#eef0f3"}


def _esc(text: Any) -> str:
    """A string as dot reads it literally inside a quoted label (the graphviz package adds the quotes)."""
    return str(text).replace("\\", "\\\\").replace('"', '\\"')


def _shape_text(shapes: list[list[int]], dtypes: list[str]) -> str:
    parts = []
    for i, s in enumerate(shapes[:3]):
        d = dtypes[i] if i < len(dtypes) else ""
        parts.append(f"[{', '.join(str(v) for v in s)}]" + (f" {d}" if d and d != "float32" else ""))
    if len(shapes) > 3:
        parts.append(f"+{len(shapes) - 3}")
    return " ".join(parts)


def _count(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(n)


def _wrap(text: str, width: int = 48, lines: int = 4) -> list[str]:
    out = [text[i : i + width] for i in range(0, len(text), width)][:lines]
    if len(text) > width * lines:
        out[-1] = out[-1][:-1] + "…"
    return out


class _Overlay:
    """What an overlay says about each layer name: a colour value, red, or highlighted."""

    def __init__(self, overlay: Any):
        self.values: dict[str, float] = {}
        self.red: set[str] = set()
        self.highlight: set[str] = set()
        self.label = ""
        self.message = ""
        if overlay is None:
            return
        key = None
        if isinstance(overlay, tuple) and len(overlay) == 2 and isinstance(overlay[1], str) and not isinstance(overlay[0], str):
            overlay, key = overlay
        if isinstance(overlay, str):
            self.highlight = {overlay}
        elif isinstance(overlay, (list, set, frozenset)) and all(isinstance(o, str) for o in overlay):
            self.highlight = set(overlay)
        elif hasattr(overlay, "phase") and hasattr(overlay, "layer"):  # a NonFiniteError
            self.red = {overlay.layer}
            self.message = str(overlay)
        elif hasattr(overlay, "layer_stats") and hasattr(overlay, "names"):
            self._statistics(overlay, key)
        else:
            fail(
                "graph",
                "overlay",
                "ActivationStats, GradientStats (or their loaded data, optionally as (stats, 'statistic')), "
                "a NonFiniteError from watch_nonfinite, or a layer name / list of layer names",
                overlay,
                kind=ArgumentTypeError,
            )
        if self.values:
            vs = list(self.values.values())
            self.lo, self.hi = min(vs), max(vs)

    def _statistics(self, stats: Any, key: str | None) -> None:
        """One value per layer: the mean over records of statistic ``key``."""
        grads = hasattr(stats, "param_stats")
        key = key or ("norm" if grads else "std")
        self.label = f"{'output gradient' if grads else 'activation'} {key} (mean over records)"
        for name in stats.names:
            series = stats.layer_stats(name)
            if key not in series:
                keys = ", ".join(k for k in series if k not in ("step", "call", "records", "backward"))
                fail("graph", "overlay", f"a statistic among {keys}", key)
            v = np.asarray(series[key], dtype=np.float64)
            v = v[np.isfinite(v)]
            if v.size:
                self.values[name] = float(v.mean())

    def colour(self, value: float) -> str:
        span = self.hi - self.lo
        x = 0.0 if span <= 0 or not math.isfinite(span) else (value - self.lo) / span
        return _SCALE[min(len(_SCALE) - 1, int(x * len(_SCALE)))]


def _text_colour(fill: str) -> str:
    r, g, b = (int(fill[i : i + 2], 16) for i in (1, 3, 5))
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 140 else "white"


def dot_source(g: Graph, overlay: Any = None) -> str:
    """The graph at its depth as Graphviz dot source (clusters for the expanded calls)."""
    return _digraph(g, overlay).source


def _digraph(g: Graph, overlay: Any) -> Any:
    try:
        import graphviz
    except ImportError as missing:
        raise GraphvizMissing(
            "hookkit.graph pictures need the graphviz package: pip install 'hookkit[graph]' (and Graphviz's dot program)"
        ) from missing
    dot = graphviz.Digraph(
        "hookkit", graph_attr={"rankdir": "TB", "fontname": "Helvetica", "fontsize": "11", "nodesep": "0.25", "ranksep": "0.3"}
    )
    dot.attr("node", shape="box", style="rounded,filled", fontname="Helvetica", fontsize="10", margin="0.08,0.03", height="0.3")
    dot.attr("edge", fontname="Helvetica", fontsize="8", color="#6b7280", arrowsize="0.6")
    title = f"{g.model_type} ({g.framework}), depth {g.depth}"
    if g.error:
        title += "  —  the forward failed"
    dot.attr(label=_esc(title), labelloc="t", labeljust="l")
    _Drawing(g, _Overlay(overlay)).draw(dot)
    return dot


class _Drawing:
    """What the drawing derives from the graph: dot ids, clusters, folded names, own-code labels."""

    def __init__(self, g: Graph, ov: _Overlay):
        self.g, self.ov = g, ov
        self.by_id = {n.id: n for n in g.all_nodes}
        self.ids = {n.id: f"n{i}" for i, n in enumerate(g.nodes)}
        self.cluster_ids: dict[str, int] = {}
        self.folded = self._folded_names()
        self.clusters, self.children_of = self._clusters()
        self.hidden = self._hidden_side_inputs()
        self.after = self._code_labels()

    def _folded_names(self) -> dict[str, set[str]]:
        """The names folded into each shown node (a folded block holding the bad or highlighted layer is marked)."""
        folded: dict[str, set[str]] = {n.id: {n.name} for n in self.g.nodes}
        for n in self.g.all_nodes:
            m = n
            while m.id not in folded and m.parent is not None:
                m = self.by_id[m.parent]
            if m.id in folded:
                folded[m.id].add(n.name)
        return folded

    def _clusters(self) -> tuple[dict[str | None, list[Node]], dict[str | None, list[str]]]:
        """One cluster per expanded call, nested as the calls were: shown nodes per cluster, clusters per cluster."""
        clusters: dict[str | None, list[Node]] = {}
        for n in self.g.nodes:
            clusters.setdefault(n.parent if n.kind not in ("input", "output") else None, []).append(n)
        children_of: dict[str | None, list[str]] = {}
        for pid in clusters:
            chain = pid
            while chain is not None:
                parent = self.by_id[chain].parent
                siblings = children_of.setdefault(parent, [])
                if chain not in siblings:
                    siblings.append(chain)
                chain = parent
        return clusters, children_of

    def _hidden_side_inputs(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for e in self.g.edges:
            if _side(e.dtype):
                counts[e.src] = counts.get(e.src, 0) + 1
        return {k: v for k, v in counts.items() if v > _MAX_FAN}

    def _code_labels(self) -> dict[str, str]:
        """Own-code nodes say after which sublayer they ran ("code@2": after the second one)."""
        kids: dict[str | None, list[Node]] = {}
        for n in self.g.all_nodes:
            if n.kind in ("layer", "op"):
                kids.setdefault(n.parent, []).append(n)
        after: dict[str, str] = {}
        for n in self.g.nodes:
            if n.kind == "code":
                k = int(n.id.rpartition("@")[2] or 0)
                sibs = kids.get(n.parent, [])
                if 0 < k <= len(sibs):
                    after[n.id] = f"after {sibs[k - 1].name}" + (f" #{sibs[k - 1].call}" if sibs[k - 1].call else "")
                else:
                    after[n.id] = "before its sublayers"
        return after

    def emit(self, sub: Any, pid: str | None) -> None:
        for n in self.clusters.get(pid, []):
            _node(sub, self.ids[n.id], n, self.ov, self.folded[n.id], self.after.get(n.id, ""), self.hidden.get(n.id, 0))
        for cid in self.children_of.get(pid, []):
            c = self.by_id[cid]
            with sub.subgraph(name=f"cluster_c{self.cluster_ids.setdefault(cid, len(self.cluster_ids))}") as s:
                label = f"{c.name} ({c.type})" + (f" call {c.call}" if c.call else "")
                s.attr(label=_esc(label), style="rounded,dashed", color="#9ca3af", fontsize="10", fontcolor="#4b5563")
                if c.error:
                    s.attr(color=_RED, fontcolor=_RED)
                self.emit(s, cid)

    def draw(self, dot: Any) -> None:
        self.emit(dot, None)
        for e in self.g.edges:
            attrs = {"label": f"×{e.count}"} if e.count > 1 else {}
            if _side(e.dtype):
                if e.src in self.hidden:
                    continue  # one mask or position tensor handed to every block: said on its source instead
                # ids, masks, positions: side inputs, drawn light and left out of the layout's ranks
                attrs.update(style="dotted", color="#b6bcc6", constraint="false")
            tip = f"{e.src} -> {e.dst}: {e.shape} {e.dtype}"
            dot.edge(self.ids[e.src], self.ids[e.dst], tooltip=_esc(tip), **attrs)
        if self.ov.values:
            _legend(dot, self.ov)


def _side(dtype: str) -> bool:
    """Integer and boolean tensors (ids, masks, positions) are side inputs."""
    return bool(dtype) and not dtype.startswith(("float", "bfloat", "complex"))


def _node(sub: Any, nid: str, n: Node, ov: _Overlay, names: set[str], after: str = "", side: int = 0) -> None:
    import graphviz

    attrs: dict[str, str] = {"fillcolor": _FILL.get(n.kind, "#ffffff")}
    if n.kind in ("input", "output"):
        lines = [f"{n.kind}: {n.name}", _shape_text(n.shapes, n.dtypes)]
        attrs["shape"] = "oval"
    elif n.kind == "code":
        lines = ["own code" + (f" of {n.name}" if n.name else " of the model"), after]
        attrs.update(shape="box", style="rounded,filled,dotted", fontcolor="#4b5563")
    else:
        head = n.name + (f"  #{n.call}" if n.call else "")
        meta = n.type + (f" · {_count(n.params)} params" if n.params else "")
        lines = [head, meta]
        if n.shapes:
            lines.append(_shape_text(n.shapes, n.dtypes))
    if side:
        lines.append(f"→ {side} integer/bool side inputs (not drawn)")
    tip = [f"{n.name or '(model)'} · {n.type}", f"call {n.call}, depth {n.depth}"]
    if n.shapes:
        tip.append("output " + _shape_text(n.shapes, n.dtypes))
    value = ov.values.get(n.name)
    if value is not None:
        attrs["fillcolor"] = ov.colour(value)
        attrs["fontcolor"] = _text_colour(attrs["fillcolor"])
        lines.append(f"{value:.3g}")
        tip.append(f"{ov.label}: {value:.4g}")
    if ov.highlight & names:
        attrs.update(color=_HIGHLIGHT, penwidth="3")
    if ov.red & names:
        attrs.update(fillcolor=_RED, fontcolor="white", color=_RED, penwidth="2")
        lines.append("first non-finite value")
        tip.append(ov.message)
    if n.error:
        attrs.update(fillcolor="#fee2e2", color=_RED, fontcolor="#7f1d1d", penwidth="2")
        lines += _wrap(n.error)
        tip.append(n.error)
    elif not n.finished and n.kind != "code":
        attrs.update(style="rounded,filled,dashed")
    label = "\n".join(_esc(x) for x in lines if x)
    sub.node(nid, label=graphviz.nohtml(label), tooltip=_esc("\n".join(tip)), **attrs)


def _legend(dot: Any, ov: _Overlay) -> None:
    """One node: the colour scale as a row of cells (an HTML-like label of numbers and escaped text)."""
    cells = []
    steps = len(_SCALE)
    for i, c in enumerate(_SCALE):
        v = ov.lo + (ov.hi - ov.lo) * (i + 0.5) / steps
        cells.append(f'<td bgcolor="{c}"><font color="{_text_colour(c)}" point-size="8">{v:.3g}</font></td>')
    title = html.escape(ov.label)
    label = f'<<table border="0" cellspacing="0" cellborder="1"><tr><td colspan="{steps}"><font point-size="9">{title}</font></td></tr><tr>{"".join(cells)}</tr></table>>'
    dot.node("legend", label=label, shape="plaintext", style="")


def _check_dot() -> None:
    if shutil.which("dot") is None:
        raise GraphvizMissing(
            "hookkit.graph pictures need Graphviz's dot program, not found on PATH "
            "(Debian/Ubuntu: apt-get install graphviz; macOS: brew install graphviz; conda: conda install graphviz); "
            "Graph.source() and Graph.to_dict() work without it"
        )


def render_svg(g: Graph, overlay: Any = None) -> str:
    """The picture as SVG text."""
    dot = _digraph(g, overlay)
    _check_dot()
    svg: str = dot.pipe(format="svg", encoding="utf-8")
    start = svg.find("<svg")  # the XML prolog and doctype go: the SVG is embedded in pages
    return svg[start:] if start >= 0 else svg


def html_fragment(g: Graph, overlay: Any = None) -> str:
    """The SVG in a scrolling <div>, for notebooks and the report."""
    return f'<div class="hookkit-graph" style="overflow:auto;max-height:900px">{render_svg(g, overlay)}</div>'


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font:14px Helvetica,Arial,sans-serif;margin:16px}} .err{{color:#b91c1c}}</style></head>
<body><h1 style="font-size:18px">{title}</h1>{error}
{svg}
</body></html>
"""


def save(g: Graph, path: str | os.PathLike, overlay: Any = None) -> str:
    """Write the graph by the file's extension: .svg, .html, .dot/.gv or .json."""

    if not isinstance(path, (str, os.PathLike)):
        fail("Graph.save", "path", "a file path ending in .svg, .html, .dot, .gv or .json", path, kind=ArgumentTypeError)
    p = pathlib.Path(path)
    ext = p.suffix.lower()
    if ext == ".svg":
        text = render_svg(g, overlay)
    elif ext in (".html", ".htm"):
        title = f"{g.model_type} ({g.framework}): graph at depth {g.depth}"
        error = f'<p class="err">The forward failed: {html.escape(g.error)}</p>' if g.error else ""
        text = _PAGE.format(title=html.escape(title), error=error, svg=render_svg(g, overlay))
    elif ext in (".dot", ".gv"):
        text = dot_source(g, overlay)
    elif ext == ".json":
        text = g.to_json()
    else:
        fail("Graph.save", "path", "a file name ending in .svg, .html, .dot, .gv or .json", str(path))
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    return str(p)
