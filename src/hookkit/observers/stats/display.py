"""How statistics show themselves: a compact text repr and a notebook table with sparklines.

Both read only this process's rows (never a collective read), so displaying a statistics object
under data-parallel training cannot hang the other ranks.

>>> stats            # doctest: +SKIP
<hookkit.ActivationStats: 3 layers, steps 0-9, active>
  layer   mean     std      near_zero
  0       0.0123   0.9812   0.41
"""

from __future__ import annotations

from typing import Any

import numpy as np

MAX_TEXT_ROWS = 12

# the statistics a kind of object shows, in order (the first one gets a sparkline in text too)
COLUMNS: dict[str, tuple[str, ...]] = {
    "activation_stats": ("mean", "std", "near_zero"),
    "gradient_stats": ("norm", "max_abs", "mean"),
}


def _columns(stats: Any) -> tuple[str, ...]:
    return getattr(stats, "display_columns", None) or COLUMNS.get(getattr(stats, "kind", ""), ("mean",))


def _latest(table: dict[str, np.ndarray], key: str) -> float:
    values = table.get(key)
    return float(values[-1]) if values is not None and len(values) else float("nan")


def _steps(tables: dict[str, dict[str, np.ndarray]]) -> tuple[int, int, int]:
    steps = [t["step"] for t in tables.values() if len(t.get("step", ()))]
    if not steps:
        return 0, -1, -1
    joined = np.concatenate(steps)
    return len(np.unique(joined)), int(joined.min()), int(joined.max())


def _state(stats: Any) -> str:
    removed = getattr(stats, "removed", None)
    return "" if removed is None else (", removed" if removed else ", active")


def headline(stats: Any, tables: dict[str, dict[str, np.ndarray]]) -> str:
    n, first, last = _steps(tables)
    span = "no records yet" if n == 0 else (f"step {first}" if n == 1 else f"{n} steps ({first}-{last})")
    return f"{type(stats).__name__}: {len(stats.names)} layer{'' if len(stats.names) == 1 else 's'}, {span}{_state(stats)}"


def text(stats: Any) -> str:
    """``<hookkit.ActivationStats: 3 layers, 10 steps (0-9), active>`` and the latest value of each
    statistic per layer (the first 12 layers)."""
    tables = stats._local_tables()
    cols = _columns(stats)
    lines = [f"<hookkit.{headline(stats, tables)}>"]
    if not any(len(t.get("step", ())) for t in tables.values()):
        return lines[0]
    names = list(stats.names)
    width = max(len("layer"), *(len(n or "(root)") for n in names[:MAX_TEXT_ROWS]))
    lines.append("  " + "layer".ljust(width) + "".join(f"  {c:>10}" for c in cols))
    for name in names[:MAX_TEXT_ROWS]:
        t = tables.get(name, {})
        lines.append("  " + (name or "(root)").ljust(width) + "".join(f"  {_latest(t, c):>10.4g}" for c in cols))
    if len(names) > MAX_TEXT_ROWS:
        lines.append(f"  ... and {len(names) - MAX_TEXT_ROWS} more layers (stats.names)")
    return "\n".join(lines)


def html(stats: Any) -> str:
    """A table: per layer, the latest value of each statistic with its sparkline over the records."""
    from hookkit.viz.html import html_table, number, sparkline

    tables = stats._local_tables()
    cols = _columns(stats)
    header = ["layer", "records"]
    for c in cols:
        header += [c, f"{c} over steps"]
    rows = []
    for name in stats.names:
        t = tables.get(name, {})
        row = [name or "(root)", str(len(t.get("step", ())))]
        for c in cols:
            row += [number(_latest(t, c)), sparkline(t.get(c, ()))]
        rows.append(row)
    raw = [3 + 2 * i for i in range(len(cols))]
    return html_table(header, rows, caption=headline(stats, tables), raw_columns=raw)
