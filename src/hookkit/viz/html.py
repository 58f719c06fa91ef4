"""Small HTML pieces for notebook display (``_repr_html_``): escaped tables and inline SVG sparklines.

Everything user-controlled (layer names, types, notes) is escaped; nothing here runs scripts or
loads anything, so the output is safe to show in Jupyter and in the report.

>>> html_table(["Layer", "mean"], [["fc1", "0.12"]], caption="ActivationStats")   # doctest: +SKIP
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np

_STYLE = "border-collapse:collapse;font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px;margin:4px 0"
_CELL = "padding:2px 8px;border-bottom:1px solid #ddd;white-space:nowrap"


def html_table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    caption: str = "",
    footer: Sequence[str] = (),
    raw_columns: Sequence[int] = (),
    row_styles: Sequence[str | None] | None = None,
) -> str:
    """A table: ``rows`` of cell strings (escaped, except the columns in ``raw_columns``, which hold
    markup made here such as sparklines); the first column left-aligned, the others right-aligned."""
    raw = set(raw_columns)

    def cell(i: int, text: str, tag: str = "td") -> str:
        align = "left" if i == 0 else "right"
        body = text if (i in raw and tag == "td") else html.escape(str(text))
        return f'<{tag} style="{_CELL};text-align:{align}">{body}</{tag}>'

    parts = [f'<table style="{_STYLE}">']
    if caption:
        parts.append(f'<caption style="text-align:left;font-weight:bold;padding:2px 0">{html.escape(caption)}</caption>')
    parts.append("<thead><tr>" + "".join(cell(i, h, "th") for i, h in enumerate(header)) + "</tr></thead><tbody>")
    for k, row in enumerate(rows):
        style = row_styles[k] if row_styles is not None else None
        attr = f' style="{html.escape(style)}"' if style else ""
        parts.append(f"<tr{attr}>" + "".join(cell(i, c) for i, c in enumerate(row)) + "</tr>")
    parts.append("</tbody></table>")
    if footer:
        lines = "<br>".join(html.escape(line) for line in footer)
        parts.append(f'<div style="font-family:ui-monospace,monospace;font-size:12px;color:#444">{lines}</div>')
    return "".join(parts)


def sparkline(values: Sequence[float] | np.ndarray, *, width: int = 90, height: int = 16, color: str = "#1f77b4") -> str:
    """An inline SVG line of ``values`` (NaN and Inf skipped; empty when fewer than two finite values)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    x = np.arange(len(v), dtype=np.float64)
    keep = np.isfinite(v)
    v, x = v[keep], x[keep]
    if len(v) < 2:
        return ""
    lo, hi = float(v.min()), float(v.max())
    span = hi - lo or 1.0
    xs = (x - x[0]) / ((x[-1] - x[0]) or 1.0) * (width - 2) + 1
    ys = height - 1 - (v - lo) / span * (height - 2)
    points = " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(xs, ys))
    return (
        f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="from {lo:.3g} to {hi:.3g}" style="vertical-align:middle">'
        f'<polyline fill="none" stroke="{html.escape(color)}" stroke-width="1.2" points="{points}"/></svg>'
    )


def number(value: float) -> str:
    """A compact number for a table cell: 4 significant digits, '--' for none."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "--"
    return f"{value:.4g}"
