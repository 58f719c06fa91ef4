"""Notebook display (``_repr_html_``) of what users print most: a capture, a logit lens, a diff, an
extracted feature folder. Each is a small escaped table (``viz.html.html_table``); counts read
"1 layer", "2 layers".

>>> cap   # in Jupyter: a table of the captured layers, their calls and last output shapes   # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from hookkit.viz.html import html_table


def plural(n: int, word: str, many: str | None = None) -> str:
    """``"1 layer"``, ``"3 layers"``.

    >>> plural(1, "layer"), plural(2, "layer"), plural(0, "pass", "passes")
    ('1 layer', '2 layers', '0 passes')
    """
    return f"{n} {word if n == 1 else (many or word + 's')}"


def _shape(backend: Any, value: Any) -> str:
    if value is None:
        return "--"
    if backend is not None and backend.is_tensor(value):
        return f"{list(backend.shape(value))} {backend.dtype_name(value)}"
    return type(value).__name__


def capture_html(cap: Any) -> str:
    """One row per captured layer: its calls recorded and the last output's shape and dtype."""
    rows = []
    for name in cap.names[:200]:
        recs = cap._records.get(name, [])
        last = recs[-1].output if recs else None
        rows.append([name or "(root)", str(len(recs)), _shape(cap._backend, last) if recs else "never ran"])
    n = sum(len(v) for v in cap._records.values())
    state = "removed" if cap.removed else "active"
    more = [f"... and {len(cap.names) - 200} more layers"] if len(cap.names) > 200 else []
    caption = f"hookkit.capture: {plural(len(cap.names), 'layer')}, {plural(n, 'record')}, {state}"
    return html_table(["layer", "records", "last output"], rows, caption=caption, footer=more)


def lens_html(res: Any, k: int = 3, row: int = 0) -> str:
    """Points x positions of batch row ``row``: the top token id and its probability."""
    ids, probs = res.top(k=1)
    header = ["point", *[f"pos {p}" for p in res.positions]]
    rows = []
    for i, name in enumerate(res.names):
        cells = [name]
        for j in range(len(res.positions)):
            cells.append(f"{int(ids[i, row, j, 0])} ({float(probs[i, row, j, 0]):.2f})")
        rows.append(cells)
    caption = (
        f"LensResult: {plural(len(res.names), 'point')} x {plural(len(res.positions), 'position')} (top token id, probability; row {row})"
    )
    return html_table(header, rows, caption=caption)


def diff_html(d: Any) -> str:
    """The diff's table as printed, the first divergence in bold red, growing errors in amber."""
    header, body, footer = d.table()
    styles = []
    first = d.first
    for r in d.rows:
        styles.append(
            "font-weight:bold;color:#b00" if r is first else ("color:#a60" if r.grows else ("color:#b00" if r.diverged else None))
        )
    fa, fb = d.frameworks
    return html_table(header, body, caption=f"diff: a ({fa}) vs b ({fb})", footer=footer, row_styles=styles)


def features_html(f: Any) -> str:
    """One row per array of an extracted folder: its shape and dtype."""
    rows = [[k, str(list(a.shape)), str(a.dtype)] for k, a in f._arrays.items()]
    caption = f"hookkit.Features {f.path}: {plural(f.count, 'sample')}, {plural(len(rows), 'array')}"
    return html_table(["array", "shape", "dtype"], rows, caption=caption)
