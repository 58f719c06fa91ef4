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
) -> pathlib.Path:
    """Write the HTML report and return its path.

    ``source``: a folder of saved statistics, or ``ActivationStats`` / ``GradientStats`` / ``WeightStats``
    objects or ``hookkit.diff`` results (one, or a list). ``out``: the HTML file (default
    ``DIR/report.html`` for a folder, else ``hookkit-report.html``). ``summary``: a
    ``hookkit.summary(...)`` result (or its ``to_dict()``); its layer classes also label the plots
    ("conv1 (Conv2d)"). ``scalars``: your own curves, ``{"loss": [...], "accuracy": [...]}`` (one value
    per step) or ``{name: {"step": [...], "value": [...]}}``; a folder's ``scalars.json`` is read the same way.
    ``dropout``: what plug-in dropout hooks did, ``{layer: {"kind", "p", "fraction", "calls"}}`` (the
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
    acts = grads = weights = None
    folder = None
    diffs: list[Any] = []
    if isinstance(source, (str, os.PathLike)):
        folder = pathlib.Path(source)
        saved = _load_folder(folder)
        acts, grads, weights = saved.pop("activations"), saved.pop("gradients"), saved.pop("weights")
        summary = summary if summary is not None else saved["summary"]
        dropout = dropout if dropout is not None else saved["dropout"]
        figures = (saved["figures"] or []) + list(figures or [])
        meta = {**(saved["meta"] or {}), **(meta or {})}
        scalars = {**(saved["scalars"] or {}), **(scalars or {})}
    else:
        for obj in source if isinstance(source, (list, tuple)) else [source]:
            if hasattr(obj, "update_ratios"):
                weights = obj
            elif hasattr(obj, "param_stats"):
                grads = obj
            elif hasattr(obj, "layer_stats"):
                acts = obj
            elif hasattr(obj, "first_in"):  # a hookkit.diff result
                diffs.append(obj)
            else:
                fail(
                    "report",
                    "source",
                    "a folder, ActivationStats, GradientStats, WeightStats or a hookkit.diff result (or a list of them)",
                    obj,
                    kind=ArgumentTypeError,
                )
    if hasattr(summary, "to_dict"):
        summary = summary.to_dict()
    if scalars:
        from hookkit.apps.report.folder import check_scalars

        if not isinstance(scalars, dict):
            fail("report", "scalars", '{name: [values]} or {name: {"step": [...], "value": [...]}}', scalars, kind=ArgumentTypeError)
        scalars = check_scalars(scalars, "report(): scalars")
    types = {r["name"]: r["type"] for r in (summary or {}).get("rows", []) if r.get("call", 0) == 0}
    live = [s for s in (acts, grads, weights) if s is not None]
    if any(getattr(s, "rank", 0) != 0 for s in live):
        # distributed training: every rank reads (the cross-rank reduction is a collective), rank 0 writes
        for s in live:
            s.to_numpy()
        return pathlib.Path(out) if out is not None else (folder / "report.html" if folder else pathlib.Path("hookkit-report.html"))

    sections: list[Section] = []
    if summary:
        sections.append(summary_section(summary))
    if scalars:
        sections.append(scalars_section(scalars))
    if acts is not None and list(acts.names):
        sections += activation_sections(acts, types)
    if grads is not None and list(grads.names):
        sections.append(gradient_section(grads))
    if weights is not None and list(weights.names):
        sections.append(update_ratio_section(weights))
    sections += figure_sections(figures or [], FIGURE_SECTIONS)
    if dropout:
        sections.append(dropout_section(dropout))
    if diffs:
        from hookkit.apps.report.diff_section import diff_section

        sections += [diff_section(d) for d in diffs]
    if not sections:
        where = f"folder {str(folder)!r}" if folder else "the objects given"
        raise HookkitError(f"nothing to report in {where}: save ActivationStats / GradientStats there first (stats.save(DIR))")

    path = pathlib.Path(out) if out is not None else (folder / "report.html" if folder else pathlib.Path("hookkit-report.html"))
    if out is None and folder is not None:
        from hookkit.apps.report.folder import safe_output

        safe_output(path)  # a report.html planted in the folder as a link elsewhere is not written through
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page(title, dict(meta or {}), sections), encoding="utf-8")
    return path


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
