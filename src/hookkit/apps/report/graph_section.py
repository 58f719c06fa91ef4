"""The report's section for a ``hookkit.graph`` result: the picture of the model, inline SVG."""

from __future__ import annotations

import html
from typing import Any

from hookkit.apps.report.render import Section


def graph_section(g: Any, overlay: Any = None) -> Section:
    """The graph as inline SVG (layer names escaped by Graphviz), the failing call in red."""
    intro = (
        f"hookkit.graph of {g.model_type} ({g.framework}) at depth {g.depth}: layer calls, the tensors between them, their output shapes."
    )
    sec = Section("graph", "Model graph", intro)
    if g.error:
        sec.items.append(f'<p><b style="color:#b3261e">The forward failed: {html.escape(g.error)}</b></p>')
    from hookkit.viz.graph_render import html_fragment

    sec.items.append(html_fragment(g, overlay))
    return sec
