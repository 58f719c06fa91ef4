"""``logit_lens``: the residual stream after the embeddings and after each block, read through the
model's own final norm and unembedding (nostalgebraist's logit lens; TransformerLens's
``accumulated_resid`` + ``apply_ln_to_stack``).

The norm is recomputed on each point (its own mean and scale, not the last layer's), by calling the
model's final norm module itself, so LayerNorm and RMSNorm models are treated alike; the last point
(the last block's output) gives exactly the model's logits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hookkit.analyses.inputs import call_model, check_inputs, first_input
from hookkit.analyses.passes import analysis_pass
from hookkit.core.architectures import _MISSING, known_stacks, read_path, stack_family
from hookkit.core.entry import entry_name, public_entry
from hookkit.core.errors import UnsupportedModel
from hookkit.core.failures import explains_failures
from hookkit.core.router import OBSERVER, Event
from hookkit.core.select import LayerSpec, select
from hookkit.core.tree import first_tensor
from hookkit.core.types import Layer
from hookkit.core.validate import ArgumentTypeError, check_int, check_model, check_runnable, fail
from hookkit.sites import FIRST, Site, attach_sites

EMBEDDINGS = "embeddings"


class LensResult:
    """What ``logit_lens`` returns. ``names``: the points (``"embeddings"``, then block names);
    ``positions``: the token positions read; ``logits``: ``[n_points, B, n_positions, V]`` (a
    framework tensor; None when ``top_k`` was given, then only the top entries are kept)."""

    def __init__(self, names: list[str], positions: list[int], logits: Any, backend: Any, top: tuple[Any, Any] | None = None):
        self.names, self.positions, self.logits = names, positions, logits
        self._backend, self._top = backend, top

    @public_entry("LensResult.top")
    def top(self, k: int = 5) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` most likely tokens at each point and position: ``(ids, probs)``, numpy arrays
        ``[n_points, B, n_positions, k]``, most likely first.

        >>> ids, probs = lens.top(3)   # doctest: +SKIP
        """
        k = check_int(k, arg="k", low=1)
        if self.logits is None:
            assert self._top is not None  # a result without logits holds the top entries
            ids, probs = self._top
            if k > ids.shape[-1]:
                fail("LensResult.top", "k", f"at most {ids.shape[-1]} (logit_lens was run with top_k={ids.shape[-1]})", k)
            return ids[..., :k], probs[..., :k]
        m = self._backend.family("tensor_math")
        probs = m.softmax(m_float(self._backend, self.logits), -1)
        values, ids = m.topk(probs, min(k, self._backend.shape(probs)[-1]), -1)
        return self._backend.to_numpy(ids), self._backend.to_numpy(values)

    def plot(self, row: int = 0, tokens: Any = None, ax: Any = None) -> Any:
        """Points x positions for batch row ``row``: colour = probability of the top token, text = the
        top token (``tokens``: a list of strings indexed by token id, or a callable id -> str)."""
        from hookkit.viz.lens import plot_lens  # lazy: viz loads matplotlib, needed only to plot

        return plot_lens(self, row=row, tokens=tokens, ax=ax)

    def __repr__(self) -> str:
        n, p = len(self.names), len(self.positions)
        return f"<LensResult {n} point{'' if n == 1 else 's'} x {p} position{'' if p == 1 else 's'}>"

    def _repr_html_(self) -> str:
        from hookkit.viz.display import lens_html  # lazy: plots and HTML load only when displayed

        return lens_html(self)


def m_float(be: Any, t: Any) -> Any:
    return t if be.dtype_name(t) in ("float32", "float64") else be.cast(t, "float32")


def _layer_arg(model: Any, be: Any, value: Any, path: str | None, arg: str, fallback: Any = None) -> Any:
    """``norm=`` / ``unembed=``: a layer, a layer name, False (none) or None (the registry's)."""
    if value is False:
        return None
    if value is None:
        layer = read_path(model, path) if path else _MISSING
        if layer is _MISSING or layer is None:
            layer = fallback() if fallback is not None else None
        if layer is None and arg == "unembed":
            raise UnsupportedModel(
                f"logit_lens(): no unembedding found on {type(model).__name__}; pass unembed= (a layer or its name). Known layouts: {known_stacks()}"
            )
        if layer is None and arg == "norm" and path:
            raise UnsupportedModel(f"logit_lens(): no final norm found on {type(model).__name__} at {path!r}; pass norm= (or norm=False)")
        return layer
    if isinstance(value, str):
        found = select(model, value)
        if len(found) != 1:
            fail("logit_lens", arg, "the name of one layer", value)
        return found[0][1]
    if be.is_layer(value) or callable(value):
        return value
    fail("logit_lens", arg, "a layer, a layer name, False or None", value, kind=ArgumentTypeError)


def check_positions(positions: Any, n: int) -> list[int]:
    """``positions``: "all"/None -> every position; an int or list of ints (negative from the end) in range."""
    fn = entry_name()
    if positions is None or (isinstance(positions, str) and positions == "all"):
        return list(range(n))
    valid = f'"all" or token positions in [-{n}, {n - 1}] (the sequence has {n} tokens)'
    items = [positions] if isinstance(positions, (int, np.integer)) and not isinstance(positions, bool) else positions
    if isinstance(items, (str, bytes)) or not hasattr(items, "__iter__"):
        fail(fn, "positions", valid, positions, kind=ArgumentTypeError)
    items = list(items)
    if not items or any(isinstance(p, bool) or not isinstance(p, (int, np.integer)) for p in items):
        fail(fn, "positions", valid, positions, kind=ArgumentTypeError)
    if any(not -n <= int(p) < n for p in items):
        fail(fn, "positions", valid, positions)
    return [int(p) % n for p in items]


def _points(model: Any, be: Any, layers: LayerSpec, blocks_path: str | None) -> tuple[list[tuple[str, Any]], bool]:
    """The layers whose outputs are read, and whether the embeddings (block 0's input) are a point."""
    if layers is None:
        blocks: Any = read_path(model, blocks_path) if blocks_path else _MISSING
        if blocks is _MISSING:
            raise UnsupportedModel(
                f"logit_lens(): no known block list on {type(model).__name__}; pass layers= (the blocks). Known layouts: {known_stacks()}"
            )
        names = [f"{blocks_path}.{i}" for i in range(len(blocks))]
        return select(model, names), True
    spec: LayerSpec = [layers] if isinstance(layers, str) else layers
    embeddings = False
    if isinstance(spec, (list, tuple)) and EMBEDDINGS in spec:
        embeddings = True
        spec = [s for s in spec if s != EMBEDDINGS]
    named = select(model, spec) if spec else []
    return named, embeddings


@explains_failures("logit_lens")
@public_entry()
def logit_lens(
    model: Layer,
    inputs: Any,
    layers: LayerSpec = None,
    positions: Any = None,
    top_k: int | None = None,
    *,
    norm: Any = None,
    unembed: Any = None,
) -> LensResult:
    """Each point of the residual stream through the final norm and the unembedding.

    ``layers``: None (the embeddings' output and every block's output, found from the model's
    layout), or a spec of layers whose outputs are read (``"embeddings"`` among them adds the
    embeddings). ``positions``: "all"/None or token positions. ``norm`` / ``unembed``: the final
    norm and unembedding (a layer or its name; ``norm=False``: none), found on known causal LMs.
    ``top_k``: keep only the ``top_k`` most likely tokens (``.logits`` is then None).

    >>> lens = hookkit.logit_lens(model, ids)      # doctest: +SKIP
    >>> lens.logits.shape                          # [n_layers + 1, B, T, V]
    >>> ids, probs = lens.top(5)
    """
    be = check_model(model)
    check_runnable(be, model)
    check_inputs(be, inputs)
    if top_k is not None:
        top_k = check_int(top_k, arg="top_k", low=1)
    fam = stack_family(model)
    named, embeddings = _points(model, be, layers, fam.blocks if fam else None)
    norm_layer = _layer_arg(model, be, norm, fam.final_norm if fam else None, "norm")
    out_embeddings = getattr(model, "get_output_embeddings", None)
    unembed_layer = _layer_arg(model, be, unembed, fam.unembed if fam else None, "unembed", fallback=out_embeddings)
    n_tokens = be.shape(first_input(be, inputs))
    if len(n_tokens) < 2:
        fail("logit_lens", "inputs", "token sequences [B, T, ...]", inputs)
    axis = fam.token_axis if fam else 1
    pos = check_positions(positions, int(n_tokens[axis]))
    if embeddings and not named and fam is None:
        fail("logit_lens", "layers", "at least one layer besides 'embeddings' on a model of unknown layout", layers)
    found = [Site(n, n, layer) for n, layer in named]
    if embeddings:
        first = select(model, f"{fam.blocks}.0")[0] if fam else named[0]
        found.insert(0, Site(EMBEDDINGS, first[0], first[1], "forward_pre", FIRST))
    m = be.family("tensor_math")
    with analysis_pass(model, be, grad=False), be.no_grad():
        points = _read_points(model, be, found, inputs)
        names = [site.name for site in found]
        outs = [_unembedded(be, m, points[n], pos, axis, norm_layer, unembed_layer, top_k) for n in names]
    if top_k is None:
        return LensResult(names, pos, m.stack(outs, 0), be)
    return LensResult(names, pos, None, be, (np.stack([t[0] for t in outs]), np.stack([t[1] for t in outs])))


def _read_points(model: Any, be: Any, found: list[Site], inputs: Any) -> dict[str, Any]:
    """Each site's first value in one forward of ``inputs`` (the embeddings: block 0's hidden-states input)."""
    points: dict[str, Any] = {}

    def keep(site: Site) -> Any:
        def on_call(ev: Event) -> None:
            if site.event == "forward_pre":  # the embeddings, as block 0 takes them
                if site.name not in points:
                    points[site.name] = ev.args[0] if ev.args else ev.kwargs.get("hidden_states")
            else:
                points[site.name] = site.tensor(be, ev)

        return on_call

    group = attach_sites(model, found, keep, OBSERVER)
    try:
        call_model(model, inputs)
    finally:
        group.remove()
    missing = [s.name for s in found if not be.is_tensor(points.get(s.name))]
    if missing:
        raise RuntimeError(f"logit_lens(): no tensor output was seen for {', '.join(missing)}")
    return points


def _unembedded(be: Any, m: Any, h: Any, pos: list[int], axis: int, norm_layer: Any, unembed_layer: Any, top_k: int | None) -> Any:
    """The logits of one point at ``pos`` (or, with ``top_k``, its top ids and probabilities)."""
    if pos != list(range(int(be.shape(h)[axis]))):
        h = m.index_select(h, axis, pos)
    out = h if norm_layer is None else norm_layer(h)
    logits = first_tensor(unembed_layer(out), be.is_tensor)
    if top_k is None:
        return logits
    probs = m.softmax(m_float(be, logits), -1)
    values, ids = m.topk(probs, min(top_k, be.shape(probs)[-1]), -1)
    return be.to_numpy(ids), be.to_numpy(values)


__all__: Sequence[str] = ["LensResult", "logit_lens"]
