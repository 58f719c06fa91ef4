"""Report sections as HTML fragments: figures become base64 PNG data URIs, tables plain HTML."""

from __future__ import annotations

import base64
import html
import io
import re
from dataclasses import dataclass, field
from typing import Any

from hookkit.apps.report.template import CSS, PAGE


@dataclass
class Section:
    """One part of the report: an anchor id, a heading, a line of explanation, and HTML items."""

    id: str
    title: str
    intro: str = ""
    items: list[str] = field(default_factory=list)
    grid: bool = False  # items side by side, wrapping

    def html(self) -> str:
        intro = f'<p class="intro">{html.escape(self.intro)}</p>' if self.intro else ""
        body = "\n".join(self.items)
        if self.grid:
            body = f'<div class="grid">{body}</div>'
        return f'<section id="{anchor(self.id)}"><h2>{html.escape(self.title)}</h2>{intro}\n{body}</section>'


def anchor(text: str) -> str:
    """An HTML id from any string (section names come from files): letters, digits, '-' and '_' only."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", str(text)) or "section"


def png_bytes(fig: Any, dpi: int = 90) -> bytes:
    """The PNG of a matplotlib Figure (one of pyplot's is closed afterwards; hookkit's own are not in pyplot)."""
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    finally:
        if getattr(fig.canvas, "manager", None) is not None:  # registered with pyplot: release it
            import matplotlib.pyplot as plt

            plt.close(fig)
    return buf.getvalue()


def img(png: bytes, caption: str = "", alt: str = "") -> str:
    """A <figure> with the PNG embedded as a data URI."""
    data = base64.b64encode(png).decode("ascii")
    cap = f"<figcaption>{html.escape(caption)}</figcaption>" if caption else ""
    return f'<figure><img alt="{html.escape(alt or caption)}" src="data:image/png;base64,{data}">{cap}</figure>'


def table(header: list[str], rows: list[list[Any]], numeric: set[int] = frozenset()) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="num">{html.escape(str(c))}</td>' if i in numeric else f"<td>{html.escape(str(c))}</td>" for i, c in enumerate(r)
        )
        + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def page(title: str, meta: dict[str, Any], sections: list[Section]) -> str:
    from hookkit import __version__

    meta_html = " &middot; ".join(f"{html.escape(str(k))}: <b>{html.escape(str(v))}</b>" for k, v in meta.items())
    nav = "".join(f'<a href="#{anchor(s.id)}">{html.escape(s.title)}</a>' for s in sections)
    return PAGE.format(
        title=html.escape(title), css=CSS, meta=meta_html, nav=nav, sections="\n".join(s.html() for s in sections), version=__version__
    )


# -- sections from data ---------------------------------------------------------------------------
def summary_section(summary: dict[str, Any]) -> Section:
    """The model's layer table from ``Summary.to_dict()``: the same columns and cells as ``print(summary)``."""
    from hookkit.observers.summary import Summary

    s = Summary.from_dict(summary)
    header, body, footer = s.table()
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    rows = []
    for r, cells in zip(s.rows, body):
        label = cells[0].lstrip(" ")  # the text table indents with spaces; HTML indents with padding
        first = f'<td style="padding-left:{12 + 18 * r.depth}px">{html.escape(label)}</td>'
        rest = "".join(f'<td class="num">{html.escape(c)}</td>' for c in cells[1:])
        cls = ' class="failed"' if r.failed else (' class="static"' if r.static else "")
        rows.append(f"<tr{cls}>{first}{rest}</tr>")
    sec = Section("summary", "Model summary", f"{s.model_type} ({s.framework}), from hookkit.summary().")
    sec.items.append(f'<table class="summary"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>')
    sec.items.append('<ul class="totals">' + "".join(f"<li>{html.escape(line)}</li>" for line in footer) + "</ul>")
    return sec


def activation_sections(stats: Any) -> list[Section]:
    """Mean / std / near-zero over training, and the colorful-dimension images, one figure per layer."""
    from hookkit import viz
    from hookkit.viz.stats_plots import data_extent, range_note

    act = Section(
        "activations",
        "Activation statistics over training",
        "Per layer: mean, standard deviation and fraction of outputs <= the near-zero threshold at each recorded step "
        "(hookkit.ActivationStats, fastai's definitions: negative outputs count in that fraction).",
    )
    lo, hi = (float(v) for v in getattr(stats, "hist_range", (0.0, 0.0)))
    color = Section(
        "color-dim",
        "Colorful dimension",
        "Histograms of each layer's outputs over training (x: step, y: output value, color: log(1 + count)), recorded over "
        f"[{lo:g}, {hi:g}] in {getattr(stats, 'bins', '?')} bins; each panel's y axis shows the values that occurred "
        "(symmetric around 0 when they have both signs). A bright band at 0 means many outputs near zero; "
        "values outside the recorded range are not counted (the panel says so when the recorded mean and std show some).",
        grid=True,
    )
    for name in stats.names:
        act.items.append(
            img(
                png_bytes(viz.plot_layer_stats(stats, name, figsize=(11, 2.6))),
                f"{name}: mean, std, fraction <= {getattr(stats, 'near_zero', 0.05):g}",
            )
        )
        if "hist" in stats.layer_stats(name):
            shown = data_extent(stats, name)
            note = range_note(stats, name)
            caption = f"{name}: values {shown[0]:g} to {shown[1]:g} shown" + (f"; {note}" if note else "")
            color.items.append(img(png_bytes(viz.color_dim(stats, name, figsize=(6.4, 3.2))), caption))
    return [act] + ([color] if color.items else [])


def gradient_section(grads: Any) -> Section:
    from hookkit import viz

    sec = Section(
        "gradient-flow",
        "Gradient flow",
        "Norm of the gradient w.r.t. each layer's output, and of its parameters' gradients, over training (hookkit.GradientStats). "
        "Vanishing gradients show as lines falling towards zero in the early layers.",
    )
    sec.items.append(img(png_bytes(viz.gradient_flow(grads, "norm")), "gradient norm w.r.t. each layer's output (log scale)"))
    sec.items.append(img(png_bytes(viz.gradient_flow(grads, "norm", style="heatmap")), "the same as a layers x steps heatmap (log10)"))
    try:
        sec.items.append(
            img(png_bytes(viz.gradient_flow(grads, "norm", source="params")), "norm of each layer's parameter gradients (log scale)")
        )
    except Exception:  # no parameter gradients recorded: the output-gradient views stand alone
        pass
    return sec


def dropout_section(dropout: dict[str, Any]) -> Section:
    """What the plug-in dropout hooks did: ``{layer: {"kind", "p", "fraction", "calls"}}``."""
    sec = Section(
        "dropout",
        "Plug-in dropout",
        "Dropout placed on layers' outputs with hooks (active in training only). Fraction dropped: of the values that were "
        "non-zero before the hook, the share it set to zero, over all training steps.",
    )
    rows = [
        [
            name,
            d.get("kind", ""),
            f"{float(d.get('p', 0)):.2f}",
            f"{float(d.get('fraction', 0)):.3f}",
            d.get("calls", ""),
            d.get("eval_fraction", ""),
        ]
        for name, d in dropout.items()
    ]
    sec.items.append(
        table(["Layer", "Hook", "p", "Fraction dropped (train)", "Training calls", "Fraction dropped (eval)"], rows, numeric={2, 3, 4, 5})
    )
    return sec


def figure_sections(figures: list[dict[str, Any]], titles: dict[str, tuple[str, str]]) -> list[Section]:
    """Sections of ready-made PNGs: ``figures`` items have "section", "caption" and "png" (bytes), and
    may carry "section_title" / "section_intro" (what the figures show: their writer knows it);
    otherwise ``titles[section]`` gives a generic heading and explanation."""
    out: dict[str, Section] = {}
    for f in figures:
        sid = f["section"]
        if sid not in out:
            title, intro = titles.get(sid, (sid, ""))
            out[sid] = Section(sid, f.get("section_title") or title, f.get("section_intro") or intro, grid=True)
        out[sid].items.append(img(f["png"], f.get("caption", "")))
    return list(out.values())
