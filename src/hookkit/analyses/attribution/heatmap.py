"""The token heat map of an ``attribute_generation`` result as HTML: one row per target token, one
column per token before it (the inputs, a rule, then the generated prefix), each cell coloured by its
attribution (red positive, blue negative, white zero; grey where the token is not before the target),
the exact value in its tooltip. Self-contained (inline styles, no script); every token text escaped.

>>> html = token_heatmap(res.token_attr, labels, res.n_input, "integrated_gradients")   # doctest: +SKIP
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np

POSITIVE, NEGATIVE = (178, 24, 43), (33, 102, 172)  # RdBu's ends


def token_heatmap(data: np.ndarray, labels: Sequence[str], n_input: int, method: str, scores: Sequence[float] | None = None) -> str:
    """``data [n_target, n_columns]`` (NaN: no attribution), ``labels`` the texts of the sequence's tokens
    (the inputs, then the targets), as an HTML table."""
    data = np.asarray(data, dtype=np.float64)
    finite = data[np.isfinite(data)]
    lim = float(np.abs(finite).max()) if finite.size and np.abs(finite).max() > 0 else 1.0
    cell = "padding:2px 4px;border:1px solid #eee;text-align:center;font:11px monospace;min-width:2.2em"
    head = ['<th style="text-align:right;font:11px sans-serif;padding:2px 4px">target \\ token</th>']
    for i, label in enumerate(labels[: data.shape[1]]):
        rule = "border-left:2px solid #333;" if i == n_input and i > 0 else ""
        part = "input" if i < n_input else "generated"
        head.append(
            f'<th title="{part} token {i}" style="{rule}font:11px monospace;padding:2px 4px;white-space:pre">{html.escape(label)}</th>'
        )
    rows = []
    for t in range(data.shape[0]):
        label = labels[n_input + t] if n_input + t < len(labels) else str(t)
        score = f" (score {scores[t]:.4g})" if scores is not None else ""
        cells = [
            f'<th title="target {t}{score}" style="text-align:right;font:11px monospace;padding:2px 4px;white-space:pre">{html.escape(label)}</th>'
        ]
        for i, v in enumerate(data[t]):
            rule = "border-left:2px solid #333;" if i == n_input and i > 0 else ""
            if not np.isfinite(v):
                cells.append(f'<td style="{cell};{rule}background:#f4f4f4"></td>')
                continue
            r, g, b = POSITIVE if v > 0 else NEGATIVE
            a = min(1.0, abs(v) / lim)
            ink = "#fff" if a > 0.6 else "#222"
            title = html.escape(f"{labels[i] if i < len(labels) else i} -> {label}: {v:.6g}")
            cells.append(f'<td title="{title}" style="{cell};{rule}background:rgba({r},{g},{b},{a:.3f});color:{ink}">{v:.2g}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    caption = (
        f"{html.escape(method)}: each target token's score attributed to the tokens before it "
        f"(red positive, blue negative, scale +-{lim:.3g}; the rule separates the inputs from the generated prefix)"
    )
    return (
        '<div class="hookkit-token-heatmap" style="overflow-x:auto">'
        f'<table style="border-collapse:collapse"><caption style="caption-side:bottom;font:11px sans-serif;text-align:left">{caption}</caption>'
        f"<thead><tr>{''.join(head)}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )
