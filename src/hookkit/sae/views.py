"""``hookkit.feature_views``: what chosen SAE features respond to, over a data set streamed batch by
batch in bounded memory: the top-activating contexts, a histogram of the non-zero activations, and
the tokens the decoder direction promotes through the unembedding; as HTML for notebooks or a file.
"""

from __future__ import annotations

import html
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hookkit.backends import backend_for
from hookkit.core.architectures import read_path, stack_family
from hookkit.core.entry import public_entry
from hookkit.core.select import select
from hookkit.core.validate import ArgumentTypeError, fail
from hookkit.observers.capture import capture
from hookkit.sae.splice import Splice


@dataclass
class Context:
    """One top-activating token: its ``activation``, ``sample`` (index in the data set), ``position``,
    and ``tokens`` (ids of the window around it; ``center`` is its index in ``tokens``)."""

    activation: float
    sample: int
    position: int
    tokens: list[int]
    center: int


@dataclass
class FeatureView:
    """The view of one feature: ``contexts`` (largest first), ``hist`` (edges, counts of non-zero
    activations), ``fired`` (tokens where it fired) of ``seen``, ``top_tokens`` [(id, logit)]."""

    feature: int
    contexts: list[Context] = field(default_factory=list)
    edges: np.ndarray | None = None
    counts: np.ndarray | None = None
    fired: int = 0
    seen: int = 0
    top_tokens: list[tuple[int, float]] | None = None


class FeatureViews(dict):
    """feature index -> ``FeatureView``; ``html(tokens=)``, ``save(path)``, shown as HTML in notebooks
    and as a section of ``hookkit.report(..., features=views)``; ``site``: the features' site name."""

    decode: Callable[[int], str] | None = None
    site: str | None = None

    def html(self, tokens: Callable[[int], str] | Sequence[str] | None = None) -> str:
        """One self-contained HTML fragment.

        ``tokens``: how token ids are shown: a function id -> text (``tokenizer.decode``), a list
        indexed by id, or None (the default) for the ``tokens=`` given to ``feature_views``, else the ids."""
        shown = _decoder(tokens if tokens is not None else self.decode)
        parts = ['<div class="hookkit-features" style="font-family:sans-serif">']
        for view in self.values():
            parts.append(_one(view, shown))
        parts.append("</div>")
        return "\n".join(parts)

    def _repr_html_(self) -> str:
        return self.html()

    def save(self, path: str | os.PathLike, tokens: Callable[[int], str] | Sequence[str] | None = None) -> str:
        """Write a standalone HTML page; returns its path.

        ``path``: the file to write (an ``.html`` name, replaced when it exists).
        ``tokens``: how token ids are shown, as in ``html`` (default: the ``tokens=`` given to
        ``feature_views``, else the ids)."""
        path = os.fspath(path)
        with open(path, "w", encoding="utf-8") as f:
            f.write(
                f"<!doctype html><html><head><meta charset='utf-8'><title>SAE features</title></head><body>{self.html(tokens)}</body></html>"
            )
        return path


def _decoder(tokens: Any) -> Callable[[int], str]:
    if tokens is None:
        return lambda i: f"[{i}]"
    if callable(tokens):
        return lambda i: str(tokens(i))
    return lambda i: str(tokens[i]) if 0 <= i < len(tokens) else f"[{i}]"


def _one(view: FeatureView, shown: Callable[[int], str]) -> str:
    out = [f"<h3>feature {html.escape(str(view.feature))}</h3><p>fired on {view.fired} of {view.seen} tokens</p>"]
    if view.top_tokens:
        toks = ", ".join(f"<code>{html.escape(shown(t))}</code> {v:+.2f}" for t, v in view.top_tokens)
        out.append(f"<p>decoder direction's top tokens: {toks}</p>")
    if view.counts is not None and view.edges is not None and view.counts.sum() > 0:
        peak = max(int(view.counts.max()), 1)
        bars = "".join(
            f'<rect x="{i * 6}" y="{40 - 40 * c / peak:.1f}" width="5" height="{40 * c / peak:.1f}" fill="#4a7"><title>{view.edges[i]:.3g}..{view.edges[i + 1]:.3g}: {c}</title></rect>'
            for i, c in enumerate(view.counts)
        )
        out.append(f'<svg width="{6 * len(view.counts)}" height="42" role="img" aria-label="activation histogram">{bars}</svg>')
    rows = []
    top = max((c.activation for c in view.contexts), default=1.0) or 1.0
    for c in view.contexts:
        cells = []
        for i, t in enumerate(c.tokens):
            text = html.escape(shown(t))
            if i == c.center:
                alpha = max(0.15, min(1.0, c.activation / top))
                cells.append(f'<b style="background:rgba(255,140,0,{alpha:.2f})">{text}</b>')
            else:
                cells.append(text)
        rows.append(f"<tr><td>{c.activation:.3f}</td><td>{c.sample}:{c.position}</td><td>{' '.join(cells)}</td></tr>")
    out.append("<table><tr><th>activation</th><th>sample:position</th><th>context</th></tr>" + "".join(rows) + "</table>")
    return "\n".join(out)


def _ids_of(be: Any, batch: Any) -> Any:
    if isinstance(batch, dict):
        return batch.get("input_ids")
    if isinstance(batch, (tuple, list)):
        return batch[0]
    return batch


@public_entry("feature_views")
def feature_views(
    model: Any,
    splice: Splice,
    data: Iterable[Any],
    features: Sequence[int],
    *,
    top: int = 10,
    window: int = 4,
    bins: int = 30,
    unembed: Any = None,
    top_tokens: int = 10,
    tokens: Callable[[int], str] | Sequence[str] | None = None,
) -> FeatureViews:
    """Views of chosen SAE features over a data set streamed batch by batch: each feature's
    top-activating contexts, a histogram of its non-zero activations, and the tokens its decoder
    direction promotes. Memory: one batch of the chosen features plus ``top`` contexts per feature.

    >>> with hookkit.splice(model, "transformer.h.6", sae) as sp:   # doctest: +SKIP
    ...     views = hookkit.feature_views(model, sp, batches, [12, 345], tokens=tokenizer.decode)
    >>> views        # HTML in a notebook; views.save("features.html")

    ``splice``: what ``hookkit.splice`` returned for ``model``, whose SAE's features are viewed.
    ``data``: an iterable of batches of token ids ``[B, T]``: tensors, tuples whose first item is the
    ids (all items passed to the model), or dicts with ``input_ids`` (passed as keywords).
    ``features``: the feature indices to view, a non-empty list of ints in ``0..d_sae - 1``.
    ``top``: how many top-activating contexts each feature keeps, largest first.
    ``window``: how many tokens of a context are shown on each side of its token.
    ``bins``: the histogram's bins, from 0 to 1.5 times the largest activation of the first batch where
    the feature fired (larger values fall in the last bin).
    ``unembed``: the layer, or its name, that maps a decoder direction to token logits (default: the
    model family's unembedding, else ``model.get_output_embeddings()``, else no top tokens).
    ``top_tokens``: how many of the tokens a decoder direction promotes most to list per feature (0: none).
    ``tokens``: how token ids are shown: a function id -> text (``tokenizer.decode``), a list indexed
    by id, or None (the default) for the ids themselves.
    """
    if not isinstance(splice, Splice):
        fail("feature_views", "splice", "what hookkit.splice returned", splice, kind=ArgumentTypeError)
    sae, be = splice.sae, backend_for(model)
    feats = [int(f) for f in features]
    if not feats or any(not 0 <= f < sae.d_sae for f in feats):
        fail("feature_views", "features", f"a non-empty list of feature indices in 0..{sae.d_sae - 1}", features)
    views = FeatureViews({f: FeatureView(f) for f in feats})
    views.decode = _decoder(tokens) if tokens is not None else None
    views.site = str(splice.features)
    idx = np.asarray(feats)
    sample0 = 0
    for batch in data:
        ids = _ids_of(be, batch)
        with be.no_grad(), capture(model, splice.features) as cap:
            model(**batch) if isinstance(batch, dict) else model(*batch) if isinstance(batch, tuple) else model(batch)
        acts = be.to_numpy(be.cast(cap[splice.features], "float32"))[..., idx]  # one host copy per batch: [B, T, F]
        ids_np = np.asarray(be.to_numpy(ids)) if ids is not None else None
        if acts.ndim == 2:
            acts = acts[:, None, :]
        B = acts.shape[0]
        for j, f in enumerate(feats):
            _add(views[f], acts[..., j], ids_np, sample0, top, window, bins)
        sample0 += B
    _top_tokens(model, be, sae, views, unembed, top_tokens)
    return views


def _add(v: FeatureView, acts: np.ndarray, ids: np.ndarray | None, sample0: int, top: int, window: int, bins: int) -> None:
    """One batch's activations ``[B, T]`` of one feature into its view."""
    T = acts.shape[1]
    a = acts.reshape(-1)
    nz = a[a > 0]
    v.fired += int(nz.size)
    v.seen += int(a.size)
    if v.edges is None and nz.size:
        v.edges = np.linspace(0.0, float(nz.max()) * 1.5, bins + 1)
        v.counts = np.zeros(bins, np.int64)
    if v.edges is not None and v.counts is not None and nz.size:
        v.counts += np.bincount(np.clip(np.searchsorted(v.edges, nz, side="right") - 1, 0, bins - 1), minlength=bins)
    n = min(top, a.size)
    for flat in np.argpartition(-a, n - 1)[:n]:
        if a[flat] <= 0:
            continue
        b, t = divmod(int(flat), T)
        lo, hi = max(0, t - window), min(T, t + window + 1)
        ctx = [int(x) for x in ids[b, lo:hi]] if ids is not None and ids.ndim == 2 else []
        v.contexts.append(Context(float(a[flat]), sample0 + b, t, ctx, t - lo))
    v.contexts.sort(key=lambda c: -c.activation)
    del v.contexts[top:]


def _top_tokens(model: Any, be: Any, sae: Any, views: FeatureViews, unembed: Any, k: int) -> None:
    layer = unembed
    if isinstance(unembed, str):
        found = select(model, unembed)
        layer = found[0][1]
    if layer is None:
        fam = stack_family(model)
        layer = read_path(model, fam.unembed) if fam is not None and fam.unembed else None
        if layer is None and callable(getattr(model, "get_output_embeddings", None)):
            layer = model.get_output_embeddings()
    if layer is None or not k:
        return
    with be.no_grad():
        W = sae.W_dec
        picked = be.from_numpy(np.asarray(list(views), dtype=np.int64), like=W)
        directions = W[picked]
        logits = np.asarray(be.to_numpy(be.cast(layer(be.cast(directions, be.dtype_name(next(iter(be.parameters(layer)))))), "float32")))
    for row, f in zip(logits, views):
        order = np.argsort(-row)[:k]
        views[f].top_tokens = [(int(i), float(row[i])) for i in order]
