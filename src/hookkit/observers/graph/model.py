"""The graph as data: ``Node``, ``Edge`` and ``Graph`` (the full call tree, folded on demand).

Nodes are the calls of one forward (``kind`` "layer", or "op" for an operation site), the model's
inputs and outputs, and a layer's *own code* ("code": what its ``forward`` computes outside its
sublayers: ``x + attn(x)``, a reshape, ``torch.cat``). Edges join the producer of a tensor to each
call that received that very tensor object. The full tree is kept; ``at_depth(d)`` folds every call
deeper than ``d`` into its ancestor at depth ``d`` (edges inside one folded node disappear, parallel
edges merge).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from hookkit.core.entry import public_entry
from hookkit.core.suggest import close_matches
from hookkit.core.validate import check_int

__all__ = ["Edge", "Graph", "Node"]

KINDS = ("input", "output", "layer", "op", "code")


@dataclass(slots=True)
class Node:
    """One node: a layer call (``name`` is hookkit's layer name, ``call`` its index in the forward),
    an operation site, a layer's own code, or an input / output of the model.

    ``id``: unique in the graph (``"fc:0"``, ``"fc:1"`` for the second call, ``"input:x"``,
    ``"output:logits"``, ``"block:0/code"``); ``parent``: the id of the enclosing call (None at the
    top); ``depth``: 1 for the calls the model's forward makes itself; ``shapes``/``dtypes``: of the
    output tensors (of the tensor, for inputs and outputs); ``params``: parameters of the layer
    (sublayers included, each counted once); ``error``: the exception that ended the forward here."""

    id: str
    kind: str
    name: str
    type: str = ""
    call: int = 0
    depth: int = 1
    parent: str | None = None
    shapes: list[list[int]] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    params: int = 0
    error: str | None = None
    finished: bool = True


@dataclass(slots=True)
class Edge:
    """A tensor from node ``src`` to node ``dst`` (ids); ``shape``/``dtype`` of the tensor (the
    first one when a folded edge stands for several); ``count``: how many distinct tensors it
    stands for; ``tensor``: the tensor's number in the graph (a view shares its base's number)."""

    src: str
    dst: str
    shape: list[int] | None = None
    dtype: str = ""
    count: int = 1
    tensor: int = 0


class Graph:
    """The calls of one forward as a directed graph: ``nodes`` and ``edges`` at the depth asked,
    the full tree in ``all_nodes`` / ``all_edges``; ``error``: the message of the exception that
    ended the forward (None when it ran to the end).

    >>> g = hookkit.graph(model, x, depth=2)   # doctest: +SKIP
    >>> [n.id for n in g.nodes], [(e.src, e.dst) for e in g.edges]   # doctest: +SKIP
    >>> g.at_depth(3).save("model.svg")   # doctest: +SKIP
    """

    def __init__(
        self,
        all_nodes: list[Node],
        all_edges: list[Edge],
        depth: int,
        *,
        model_type: str = "",
        framework: str = "",
        error: str | None = None,
        overlay: Any = None,
    ):
        self.all_nodes, self.all_edges = all_nodes, all_edges
        self.depth, self.model_type, self.framework, self.error = depth, model_type, framework, error
        self.overlay = overlay
        self.nodes, self.edges = _fold(all_nodes, all_edges, depth)

    # -- data -----------------------------------------------------------------------------------
    @public_entry("Graph.at_depth")
    def at_depth(self, depth: int) -> Graph:
        """The same recorded graph folded at another depth (no forward runs).

        ``depth``: the depth to fold at, an int >= 1 (1: the calls the model's forward makes itself;
        deeper calls are drawn inside their ancestor at this depth)."""

        check_int(depth, arg="depth", low=1)
        return Graph(
            self.all_nodes,
            self.all_edges,
            depth,
            model_type=self.model_type,
            framework=self.framework,
            error=self.error,
            overlay=self.overlay,
        )

    def node(self, id: str) -> Node:
        """The node with this id (in the full tree).

        ``id``: the node's id, such as ``"fc:0"`` or ``"input:x"`` (an unknown id raises ``KeyError``
        naming close ones)."""
        for n in self.all_nodes:
            if n.id == id:
                return n

        near = close_matches(id, [n.id for n in self.all_nodes])
        raise KeyError(f"Graph.node(): no node {id!r}" + (f"; close: {', '.join(near)}" if near else ""))

    def edge_pairs(self) -> list[tuple[str, str]]:
        """``[(src, dst), ...]`` of the folded edges, in recording order."""
        return [(e.src, e.dst) for e in self.edges]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: the folded graph (``nodes``, ``edges``) and the full tree (``all_nodes``, ``all_edges``)."""
        return {
            "model_type": self.model_type,
            "framework": self.framework,
            "depth": self.depth,
            "error": self.error,
            "nodes": [asdict(n) for n in self.nodes],
            "edges": [asdict(e) for e in self.edges],
            "all_nodes": [asdict(n) for n in self.all_nodes],
            "all_edges": [asdict(e) for e in self.all_edges],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Graph:
        """A graph back from ``to_dict()`` (or its JSON).

        ``data``: the dict ``to_dict()`` returned, or ``json.loads`` of ``to_json()``: its full tree
        (``all_nodes``, ``all_edges``) is read and folded at its ``depth``."""
        nodes = [Node(**n) for n in data["all_nodes"]]
        edges = [Edge(**e) for e in data["all_edges"]]
        return cls(
            nodes,
            edges,
            int(data.get("depth", 2)),
            model_type=data.get("model_type", ""),
            framework=data.get("framework", ""),
            error=data.get("error"),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    # -- pictures (Graphviz; hookkit.viz.graph_render) --------------------------------------------
    def with_overlay(self, overlay: Any) -> Graph:
        """The same graph, drawn with ``overlay`` (by ``source``, ``svg``, ``save`` and in notebooks).

        ``overlay``: ``ActivationStats`` / ``GradientStats`` or their loaded data (each node coloured by
        the mean over records of ``std`` for activations, ``norm`` for gradients, or of the statistic
        named in ``(stats, "near_zero")``), a ``NonFiniteError`` from ``watch_nonfinite`` (its layer in
        red), or a layer name or list of names (highlighted)."""
        g = self.at_depth(self.depth)
        g.overlay = overlay
        return g

    def source(self, overlay: Any = None) -> str:
        """The Graphviz ``dot`` source (needs the ``graphviz`` package, not Graphviz's ``dot`` program).

        ``overlay``: an overlay for this drawing only, as in ``with_overlay`` (default: the graph's own)."""
        from hookkit.viz.graph_render import dot_source  # lazy: drawing is optional (Graphviz); recording needs none of it

        return dot_source(self, self.overlay if overlay is None else overlay)

    def svg(self, overlay: Any = None) -> str:
        """The picture as SVG text (needs the ``graphviz`` package and Graphviz's ``dot`` program).

        ``overlay``: an overlay for this drawing only, as in ``with_overlay`` (default: the graph's own)."""
        from hookkit.viz.graph_render import render_svg  # lazy: drawing is optional (Graphviz); recording needs none of it

        return render_svg(self, self.overlay if overlay is None else overlay)

    def save(self, path: str | os.PathLike, overlay: Any = None) -> str:
        """Write ``.svg``, ``.html`` (the SVG in a self-contained page), ``.dot`` or ``.json``; returns the path.

        ``path``: the file to write, whose extension picks the format: ``.svg``, ``.html``, ``.dot`` /
        ``.gv`` or ``.json`` (its folder is created when missing).
        ``overlay``: an overlay for this drawing only, as in ``with_overlay`` (default: the graph's own).

        >>> hookkit.graph(model, x).save("model.svg")   # doctest: +SKIP
        """
        from hookkit.viz.graph_render import save  # lazy: drawing is optional (Graphviz); recording needs none of it

        return save(self, path, self.overlay if overlay is None else overlay)

    def _repr_svg_(self) -> str | None:
        """The picture in notebooks; None (the text repr) without Graphviz, which ``svg()`` names."""
        from hookkit.viz.graph_render import GraphvizMissing  # lazy: drawing is optional (Graphviz); recording needs none of it

        try:
            return self.svg()
        except GraphvizMissing:
            return None

    def _repr_html_(self) -> str | None:
        from hookkit.viz.graph_render import (  # lazy: drawing is optional (Graphviz); recording needs none of it
            GraphvizMissing,
            html_fragment,
        )

        try:
            return html_fragment(self, self.overlay)
        except GraphvizMissing:
            return None

    def __repr__(self) -> str:
        err = f", error: {self.error}" if self.error else ""
        return f"<hookkit.Graph {self.model_type} depth={self.depth}: {len(self.nodes)} nodes, {len(self.edges)} edges{err}>"


def _fold_targets(nodes: list[Node], depth: int) -> dict[str, str]:
    """Each node's id -> the id of the node it is drawn as at ``depth`` (itself, or its ancestor there)."""
    by_id = {n.id: n for n in nodes}

    def shown(n: Node) -> str:
        while n.depth > depth and n.parent is not None:
            n = by_id[n.parent]
        return n.id

    target: dict[str, str] = {}
    for n in nodes:  # a parent is recorded before its children: its target is known (else walked up)
        parent = n.parent
        if n.depth <= depth or parent is None:
            target[n.id] = n.id
        else:
            up = target.get(parent)
            target[n.id] = up if up is not None else shown(n)  # the parent's target is its walk's end
    return target


def _fold(nodes: list[Node], edges: list[Edge], depth: int) -> tuple[list[Node], list[Edge]]:
    """Nodes shown at ``depth`` and the edges between them: a node deeper than ``depth`` becomes its
    ancestor at ``depth``; a call with sublayers above ``depth`` is expanded (its sublayers and its
    own code are shown instead of it)."""
    has_children = {n.parent for n in nodes if n.parent is not None}
    visible = [n for n in nodes if n.kind in ("input", "output") or (n.depth <= depth and (n.depth == depth or n.id not in has_children))]
    target = _fold_targets(nodes, depth)
    shown_ids = {n.id for n in visible}
    folded: dict[tuple[str, str], Edge] = {}
    tensors: dict[tuple[str, str], set[int]] = {}
    for e in edges:
        s, d = target[e.src], target[e.dst]
        if d not in shown_ids:  # into an expanded call: drawn as the edges into its sublayers and own code
            continue
        if s not in shown_ids:  # an expanded call makes nothing itself (its sublayers and own code do)
            continue
        if s == d:
            continue
        key = (s, d)
        if key in folded:
            seen = tensors[key]
            if e.tensor not in seen or not e.tensor:
                seen.add(e.tensor)
                folded[key].count += e.count
        else:
            folded[key] = Edge(s, d, e.shape, e.dtype, e.count, e.tensor)
            tensors[key] = {e.tensor}
    return visible, list(folded.values())
