"""The report's section for a ``hookkit.diff`` result: where the two runs part ways."""

from __future__ import annotations

import html
from typing import Any

from hookkit.apps.report.render import Section, img, png_bytes, table

#: rows shown around the first divergence (and every row marked as growing), so a deep model's table stays readable
_AROUND = 8


def diff_section(d: Any) -> Section:
    """The first divergence in words, the error-by-depth plot, and the table's rows near it."""
    fa, fb = d.frameworks
    sec = Section("diff", "Where the two runs diverge", f"hookkit.diff of a ({fa}) and b ({fb}), paired by {d.pairing}.")
    first = d.first
    what = f"First divergence: {first}" if first is not None else "No divergence: every compared pair is within tolerance."
    sec.items.append(f"<p><b>{html.escape(what)}</b></p>")
    sec.items.append(img(png_bytes(d.plot()), "relative error by depth, forward and backward"))
    header, body, footer = d.table()
    at = d.rows.index(first) if first is not None else 0
    keep = [i for i, r in enumerate(d.rows) if abs(i - at) <= _AROUND or r.grows]
    sec.items.append(table(header, [body[i] for i in keep], numeric={0, 3, 6, 7, 8, 9, 10}))
    if len(keep) < len(body):
        sec.items.append(f"<p>{len(keep)} of {len(body)} rows: those near the first divergence and those where the error grows.</p>")
    sec.items.append('<ul class="totals">' + "".join(f"<li>{html.escape(line)}</li>" for line in footer) + "</ul>")
    return sec
