"""The report's section for ``hookkit.attribute_generation`` results: each one's token heat map
(target tokens x the tokens before them), token texts escaped."""

from __future__ import annotations

import html
from typing import Any

from hookkit.apps.report.render import Section


def generation_section(results: list[Any]) -> Section:
    """One section, one heat map per result (its ``tokens`` label the axes; default the ids)."""
    intro = (
        "hookkit.attribute_generation: each generated (or given) target token's score, row by row, attributed to every "
        "token before it, column by column (the input tokens, then the generated prefix)."
    )
    sec = Section("generation-attribution", "Attribution of generated text", intro)
    for res in results:
        n = len(res.target_ids)
        what = f"{n} target token{'' if n == 1 else 's'} after {res.n_input} input tokens, {res.method}"
        if res.contrast_ids is not None:
            what += ", contrasted with alternative tokens (p(target) - p(contrast))"
        sec.items.append(f"<p>{html.escape(what)}</p>")
        sec.items.append(res.html())
    return sec
