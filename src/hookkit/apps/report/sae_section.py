"""The report's section for ``hookkit.feature_views`` results: each chosen SAE feature's
top-activating contexts, activation histogram and decoder top tokens."""

from __future__ import annotations

import html
from typing import Any

from hookkit.apps.report.render import Section


def features_section(views: list[Any]) -> Section:
    """One section for the views given (one ``FeatureViews`` per splice); every string from the data
    (the features' site name, token texts) is escaped."""
    n = sum(len(v) for v in views)
    intro = (
        f"hookkit.feature_views of {n} SAE feature{'' if n == 1 else 's'}: the tokens where each fires most "
        "(highlighted in their context), a histogram of its non-zero activations, the tokens its decoder direction promotes."
    )
    sec = Section("sae-features", "SAE features", intro)
    for v in views:
        if getattr(v, "site", None):
            sec.items.append(f"<p>Features of <code>{html.escape(str(v.site))}</code></p>")
        sec.items.append(v.html())
    return sec
