"""Report sections as HTML fragments: figures become base64 PNG data URIs, tables plain HTML."""

from __future__ import annotations

import base64
import html
import io
import re
from collections.abc import Set as AbstractSet
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


def img(png: bytes, caption: str = "", alt: str = "", wide: bool = False) -> str:
    """A <figure> with the PNG embedded as a data URI (``wide``: the page's full width)."""
    data = base64.b64encode(png).decode("ascii")
    cap = f"<figcaption>{html.escape(caption)}</figcaption>" if caption else ""
    cls = ' class="wide"' if wide else ""
    return f'<figure{cls}><img alt="{html.escape(alt or caption)}" src="data:image/png;base64,{data}">{cap}</figure>'


def table(header: list[str], rows: list[list[Any]], numeric: AbstractSet[int] = frozenset()) -> str:
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
    from hookkit._version import __version__

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


def details(summary: str, items: list[str], grid: bool = True) -> str:
    """Figures shown on demand: a collapsed ``<details>`` block (no script needed)."""
    body = "\n".join(items)
    if grid:
        body = f'<div class="grid">{body}</div>'
    return f"<details><summary>{html.escape(summary)}</summary>{body}</details>"


def layer_labels(names: list[str], types: dict[str, str]) -> dict[str, str]:
    """``name (Type)`` for the layers whose class is known."""
    return {n: f"{n or '(root)'} ({types[n]})" if types.get(n) else (n or "(root)") for n in names}


def activation_sections(stats: Any, types: dict[str, str] | None = None) -> list[Section]:
    """One full-width figure per statistic with every layer overlaid (mean, std, near-zero fraction),
    each layer's own three panels on demand, and the colorful-dimension images."""
    from hookkit import viz
    from hookkit.viz.stats_plots import data_extent, range_note, trimmed_note

    labels = layer_labels(list(stats.names), types or {})
    near_zero = getattr(stats, "near_zero", 0.05)
    act = Section(
        "activations",
        "Activation statistics over training",
        "Every layer's output statistics at each recorded step, one line per layer, colored from the first layer (dark) "
        "to the last (light): mean, standard deviation and fraction of outputs <= the near-zero threshold "
        "(hookkit.ActivationStats, fastai's definitions: negative outputs count in that fraction). "
        "Each layer's own panels are under the figures.",
    )
    for key, what in (("mean", "mean"), ("std", "standard deviation"), ("near_zero", f"fraction of outputs <= {near_zero:g}")):
        fig = viz.stats_overlay(stats, key, labels=labels, figsize=(13, 3.4))
        act.items.append(img(png_bytes(fig), f"{what} of each layer's output, all layers", wide=True))
    act.items.append(
        details(
            f"Per layer ({len(labels)}): mean, std and near-zero fraction",
            [
                img(png_bytes(viz.plot_layer_stats(stats, name, figsize=(11, 2.6), label=labels[name])), labels[name])
                for name in stats.names
            ],
        )
    )
    lo, hi = (float(v) for v in getattr(stats, "hist_range", (0.0, 0.0)))
    color = Section(
        "color-dim",
        "Colorful dimension",
        "Histograms of each layer's outputs over training (x: step, y: output value, color: log(1 + count)), recorded over "
        f"[{lo:g}, {hi:g}] in {getattr(stats, 'bins', '?')} bins; each panel's y axis shows the values that occurred "
        "(symmetric around 0 when they have both signs; thin tails are trimmed and the caption says how much). A bright "
        "band at 0 means many outputs near zero; values outside the recorded range are not counted (the panel says so "
        "when the recorded mean and std show some).",
        grid=True,
    )
    for name in stats.names:
        if "hist" in stats.layer_stats(name):
            shown = data_extent(stats, name)
            notes = [n for n in (trimmed_note(stats, name, *shown), range_note(stats, name)) if n]
            caption = f"{labels[name]}: values {shown[0]:g} to {shown[1]:g} shown" + "".join(f"; {n}" for n in notes)
            color.items.append(img(png_bytes(viz.color_dim(stats, name, figsize=(6.4, 3.2), label=labels[name])), caption))
    return [act] + ([color] if color.items else [])


def scalars_section(scalars: dict[str, Any]) -> Section:
    """The user's own curves (loss, accuracy, learning rate...): ``{name: values}`` or
    ``{name: {"step": [...], "value": [...]}}``, one panel per name."""
    from hookkit.viz.figures import subplots

    sec = Section(
        "scalars", "Training curves", "Scalars logged during training, as given to hookkit.report(scalars=...) or saved in scalars.json."
    )
    names = list(scalars)
    fig, axes = subplots(1, len(names), figsize=(13, 3.2), squeeze=False)
    for ax, name in zip(axes[0], names):
        value = scalars[name]
        steps, values = (value["step"], value["value"]) if isinstance(value, dict) else (range(len(value)), value)
        ax.plot(list(steps), list(values), lw=1.4)
        ax.set_title(name)
        ax.set_xlabel("step")
    sec.items.append(img(png_bytes(fig), ", ".join(names), wide=True))
    return sec


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


def update_ratio_section(weights: Any) -> Section:
    """The update-to-weight ratio of each parameter over the steps (``hookkit.WeightStats``), log scale,
    with the usual 1e-3 guide line, and the last recorded ratio of each parameter."""
    import numpy as np

    from hookkit.viz.figures import subplots

    names, steps, ratios = weights.update_ratios()
    sec = Section(
        "update-ratio",
        "Update-to-weight ratio",
        "||w_t - w_(t-1)|| / ||w_(t-1)|| of each parameter at each optimizer step (hookkit.WeightStats). Around 1e-3 (dashed) "
        "is the usual sign of a well-set learning rate; far above, the weights churn; far below, the layer barely learns.",
    )
    fig, ax = subplots(figsize=(11, 3.6))
    for name, row in zip(names, ratios):
        ok = np.isfinite(row) & (row > 0)
        if ok.any():
            ax.plot(steps[ok], row[ok], lw=1, label=name)
    ax.axhline(1e-3, color="k", ls="--", lw=1)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("update / weight")
    if 0 < len(names) <= 12:
        ax.legend(fontsize=7, ncol=2, loc="upper right")
    sec.items.append(img(png_bytes(fig), f"{len(names)} parameters, one line each (log scale); dashed: 1e-3"))
    last = []
    for name, row in zip(names, ratios):
        finite = row[np.isfinite(row)]
        last.append([name, f"{finite[-1]:.2e}" if len(finite) else "--", f"{np.median(finite):.2e}" if len(finite) else "--"])
    sec.items.append(table(["Parameter", "Last ratio", "Median ratio"], last, numeric={1, 2}))
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
