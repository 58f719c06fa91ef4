"""``hookkit.report``: one self-contained HTML page from saved (or live) statistics.

A folder written by ``stats.save(DIR)`` (and by ``hookkit demo``) holds what the page needs:
``activation_stats.*`` / ``gradient_stats.*`` from hookkit, and optionally ``summary.json``
(``Summary.to_dict()``), ``dropout.json``, ``meta.json`` and ``figures.json`` listing PNGs.
The page shows the sections that the data supports.
"""

from __future__ import annotations

import os
import pathlib
import sys
from dataclasses import dataclass, field
from typing import Any

from hookkit.apps.report.render import (
    Section,
    activation_sections,
    dropout_section,
    figure_sections,
    gradient_section,
    page,
    scalars_section,
    summary_section,
    update_ratio_section,
)
from hookkit.core.errors import HookkitError

__all__ = ["FIGURE_SECTIONS", "report", "run_cli"]

#: generic headings of the sections made of ready PNGs; the figures' writer may give its own
#: ("section_title" / "section_intro" in figures.json): it knows what the figures show
FIGURE_SECTIONS = {
    "feature-maps": (
        "Feature maps",
        "Channels of layers' outputs for a few inputs, captured with hookkit.capture and drawn by hookkit.viz; each caption names the input.",
    ),
    "gradcam": (
        "Grad-CAM",
        "Where the network looked: hookkit.gradcam heatmaps over inputs, titled with the predicted and true labels (red: wrong).",
    ),
}


def report(
    source: Any,
    out: str | os.PathLike | None = None,
    *,
    title: str = "hookkit report",
    summary: Any = None,
    dropout: dict[str, Any] | None = None,
    figures: list[dict[str, Any]] | None = None,
    meta: dict[str, Any] | None = None,
    scalars: dict[str, Any] | None = None,
    graph: Any = None,
    features: Any = None,
    attributions: Any = None,
) -> pathlib.Path:
    """Write the HTML report and return its path.

    ``source``: a folder of saved statistics, or ``ActivationStats`` / ``GradientStats`` / ``WeightStats``
    objects or ``hookkit.diff`` results (one, or a list). ``out``: the HTML file (default
    ``DIR/report.html`` for a folder, else ``hookkit-report.html``). ``summary``: a
    ``hookkit.summary(...)`` result (or its ``to_dict()``); its layer classes also label the plots
    ("conv1 (Conv2d)"). ``scalars``: your own curves, ``{"loss": [...], "accuracy": [...]}`` (one value
    per step) or ``{name: {"step": [...], "value": [...]}}``; a folder's ``scalars.json`` is read the same way.
    ``graph``: a ``hookkit.graph(...)`` result, drawn as a section (coloured by the activation
    statistics given, when it has no overlay of its own); ``report([], path, graph=g)``: the graph alone.
    ``features``: a ``hookkit.feature_views(...)`` result (or a list of them), shown as an "SAE features"
    section (tokens shown as its ``tokens=`` gave them); ``report([], path, features=views)``: the features alone.
    ``attributions``: a ``hookkit.attribute_generation(...)`` result (or a list of them), each shown as its
    token heat map (targets x the tokens before them; labels from its ``tokens``, escaped); such a result
    may also be given as ``source``. ``dropout``: what plug-in dropout hooks did, ``{layer: {"kind", "p", "fraction", "calls"}}`` (the
    demo's table). ``figures``: ready PNGs to show, ``[{"section": ..., "caption": ..., "png": bytes}]``
    (as a folder's ``figures.json`` lists them). ``meta``: the header's facts, ``{"framework": ...,
    "model": ...}``, shown as "key: value".

    >>> stats.save("run1"); grads.save("run1")           # doctest: +SKIP
    >>> hookkit.report("run1")                          # doctest: +SKIP
    PosixPath('run1/report.html')
    >>> hookkit.report([stats, grads], "report.html", summary=hookkit.summary(model, (1, 3, 32, 32)))   # doctest: +SKIP
    """
    from hookkit.core.validate import ArgumentTypeError, check_str, fail

    check_str(title, fn="report", arg="title")
    if out is not None and not isinstance(out, (str, os.PathLike)):
        fail("report", "out", "None or a file path (str or os.PathLike)", out, kind=ArgumentTypeError)
    m = _Material(
        summary=summary,
        dropout=dropout,
        figures=list(figures or []),
        meta=dict(meta or {}),
        scalars=scalars,
        graph=graph,
        features=features,
        attributions=attributions,
    )
    if isinstance(source, (str, os.PathLike)):
        m.add_folder(pathlib.Path(source))
    else:
        for obj in source if isinstance(source, (list, tuple)) else [source]:
            m.add_object(obj)
    m.check()
    folder = m.folder
    path = pathlib.Path(out) if out is not None else (folder / "report.html" if folder else pathlib.Path("hookkit-report.html"))
    live = [s for s in (m.acts, m.grads, m.weights) if s is not None]
    if any(getattr(s, "rank", 0) != 0 for s in live):
        # distributed training: every rank reads (the cross-rank reduction is a collective), rank 0 writes
        for s in live:
            s.to_numpy()
        return path
    sections = m.sections()
    if not sections:
        where = f"folder {str(folder)!r}" if folder else "the objects given"
        raise HookkitError(f"nothing to report in {where}: save ActivationStats / GradientStats there first (stats.save(DIR))")
    if out is None and folder is not None:
        from hookkit.apps.report.folder import safe_output

        safe_output(path)  # a report.html planted in the folder as a link elsewhere is not written through
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page(title, m.meta, sections), encoding="utf-8")
    return path


@dataclass
class _Material:
    """What the page is made of: the statistics, diffs and extras given, and a folder's saved ones
    (what is given wins over what the folder holds)."""

    summary: Any = None
    dropout: dict[str, Any] | None = None
    figures: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    scalars: Any = None
    acts: Any = None
    grads: Any = None
    weights: Any = None
    diffs: list[Any] = field(default_factory=list)
    graph: Any = None
    features: Any = None
    attributions: Any = None
    folder: pathlib.Path | None = None

    def add_folder(self, folder: pathlib.Path) -> None:
        self.folder = folder
        saved = _load_folder(folder)
        self.acts, self.grads, self.weights = saved.pop("activations"), saved.pop("gradients"), saved.pop("weights")
        self.summary = self.summary if self.summary is not None else saved["summary"]
        self.dropout = self.dropout if self.dropout is not None else saved["dropout"]
        self.figures = (saved["figures"] or []) + self.figures
        self.meta = {**(saved["meta"] or {}), **self.meta}
        self.scalars = {**(saved["scalars"] or {}), **(self.scalars or {})}

    def add_object(self, obj: Any) -> None:
        if hasattr(obj, "update_ratios"):
            self.weights = obj
        elif hasattr(obj, "param_stats"):
            self.grads = obj
        elif hasattr(obj, "layer_stats"):
            self.acts = obj
        elif hasattr(obj, "first_in"):  # a hookkit.diff result
            self.diffs.append(obj)
        elif hasattr(obj, "token_attr"):  # a hookkit.attribute_generation result
            self.attributions = [*_as_list(self.attributions), obj]
        else:
            from hookkit.core.validate import ArgumentTypeError, fail

            kinds = "a folder, ActivationStats, GradientStats, WeightStats, a hookkit.diff or hookkit.attribute_generation result (or a list of them)"
            fail("report", "source", kinds, obj, kind=ArgumentTypeError)

    def check(self) -> None:
        if hasattr(self.summary, "to_dict"):
            self.summary = self.summary.to_dict()
        if self.scalars:
            from hookkit.apps.report.folder import check_scalars
            from hookkit.core.validate import ArgumentTypeError, fail

            if not isinstance(self.scalars, dict):
                fail(
                    "report", "scalars", '{name: [values]} or {name: {"step": [...], "value": [...]}}', self.scalars, kind=ArgumentTypeError
                )
            self.scalars = check_scalars(self.scalars, "report(): scalars")
        if self.graph is not None and not hasattr(self.graph, "all_edges"):
            from hookkit.core.validate import ArgumentTypeError, fail

            fail("report", "graph", "None or a hookkit.graph(...) result", self.graph, kind=ArgumentTypeError)
        if self.features is not None:
            from hookkit.core.validate import ArgumentTypeError, fail
            from hookkit.sae.views import FeatureViews

            given = self.features if isinstance(self.features, (list, tuple)) else [self.features]
            if not all(isinstance(v, FeatureViews) for v in given):
                fail(
                    "report",
                    "features",
                    "None or a hookkit.feature_views(...) result (or a list of them)",
                    self.features,
                    kind=ArgumentTypeError,
                )
            self.features = list(given)
        if self.attributions is not None:
            from hookkit.analyses.attribution.generation import GenerationAttribution
            from hookkit.core.validate import ArgumentTypeError, fail

            if not all(isinstance(a, GenerationAttribution) for a in _as_list(self.attributions)):
                what = "None or a hookkit.attribute_generation(...) result (or a list of them)"
                fail("report", "attributions", what, self.attributions, kind=ArgumentTypeError)
            self.attributions = _as_list(self.attributions)

    def sections(self) -> list[Section]:
        """The sections the material supports, in the page's order."""
        types = {r["name"]: r["type"] for r in (self.summary or {}).get("rows", []) if r.get("call", 0) == 0}
        sections: list[Section] = []
        if self.summary:
            sections.append(summary_section(self.summary))
        if self.scalars:
            sections.append(scalars_section(self.scalars))
        if self.acts is not None and list(self.acts.names):
            sections += activation_sections(self.acts, types)
        if self.grads is not None and list(self.grads.names):
            sections.append(gradient_section(self.grads))
        if self.weights is not None and list(self.weights.names):
            sections.append(update_ratio_section(self.weights))
        sections += figure_sections(self.figures, FIGURE_SECTIONS)
        if self.dropout:
            sections.append(dropout_section(self.dropout))
        if self.graph is not None:
            from hookkit.apps.report.graph_section import graph_section  # lazy: Graphviz only for a graph

            overlay = self.graph.overlay if self.graph.overlay is not None else self.acts
            sections.insert(1 if self.summary else 0, graph_section(self.graph, overlay))
        if self.diffs:
            from hookkit.apps.report.diff_section import diff_section

            sections += [diff_section(d) for d in self.diffs]
        if self.features:
            from hookkit.apps.report.sae_section import features_section

            sections.append(features_section(self.features))
        if self.attributions:
            from hookkit.apps.report.attribution_section import generation_section

            sections.append(generation_section(self.attributions))
        return sections


def _as_list(value: Any) -> list[Any]:
    return [] if value is None else list(value) if isinstance(value, (list, tuple)) else [value]


def _load_folder(folder: pathlib.Path) -> dict[str, Any]:
    from hookkit.apps.report.folder import load_folder  # files from elsewhere: confined, checked

    return load_folder(folder)


def run_cli(args: Any) -> int:
    """``hookkit report STATS_DIR [--out FILE]``."""
    try:
        path = report(args.stats_dir, args.out)
    except (HookkitError, OSError) as exc:
        print(f"hookkit report: error: {exc}", file=sys.stderr)
        return 2
    print(f"report written to {path}")
    return 0
