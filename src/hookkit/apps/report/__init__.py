"""``hookkit.report``: one self-contained HTML page from saved (or live) statistics.

A folder written by ``stats.save(DIR)`` (and by ``hookkit demo``) holds what the page needs:
``activation_stats.*`` / ``gradient_stats.*`` from hookkit, and optionally ``summary.json``
(``Summary.to_dict()``), ``dropout.json``, ``meta.json`` and ``figures.json`` listing PNGs.
The page shows the sections that the data supports.
"""

from __future__ import annotations

import json
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
    summary_section,
)
from hookkit.core.errors import HookkitError

__all__ = ["FIGURE_SECTIONS", "report", "run_cli"]

#: titles and explanations of the sections made of ready PNGs (written by the demo)
FIGURE_SECTIONS = {
    "feature-maps": (
        "Feature maps",
        "Every channel of each conv layer for a few held-out digits, captured with hookkit.capture and drawn by hookkit.viz.feature_maps.",
    ),
    "gradcam": (
        "Grad-CAM",
        "Where the network looked: hookkit.gradcam heatmaps over held-out digits, titled with the predicted and true labels (red: wrong).",
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
) -> pathlib.Path:
    """Write the HTML report and return its path.

    ``source``: a folder of saved statistics, or ``ActivationStats`` / ``GradientStats`` objects
    (one, or a list). ``out``: the HTML file (default ``DIR/report.html`` for a folder, else
    ``hookkit-report.html``). ``summary``: a ``hookkit.summary(...)`` result (or its ``to_dict()``).

    >>> stats.save("run1"); grads.save("run1")           # doctest: +SKIP
    >>> hookkit.report("run1")                          # doctest: +SKIP
    PosixPath('run1/report.html')
    >>> hookkit.report([stats, grads], "report.html", summary=hookkit.summary(model, (1, 3, 32, 32)))   # doctest: +SKIP
    """
    acts = grads = None
    folder = None
    if isinstance(source, (str, os.PathLike)):
        folder = pathlib.Path(source)
        saved = _load_folder(folder)
        acts, grads = saved.pop("activations"), saved.pop("gradients")
        summary = summary if summary is not None else saved["summary"]
        dropout = dropout if dropout is not None else saved["dropout"]
        figures = (saved["figures"] or []) + list(figures or [])
        meta = {**(saved["meta"] or {}), **(meta or {})}
    else:
        for obj in source if isinstance(source, (list, tuple)) else [source]:
            if hasattr(obj, "param_stats"):
                grads = obj
            elif hasattr(obj, "layer_stats"):
                acts = obj
            else:
                raise TypeError(f"report(): expected a folder, ActivationStats or GradientStats; got {type(obj).__name__}")
    if hasattr(summary, "to_dict"):
        summary = summary.to_dict()

    sections: list[Section] = []
    if summary:
        sections.append(summary_section(summary))
    if acts is not None and list(acts.names):
        sections += activation_sections(acts)
    if grads is not None and list(grads.names):
        sections.append(gradient_section(grads))
    sections += figure_sections(figures or [], FIGURE_SECTIONS)
    if dropout:
        sections.append(dropout_section(dropout))
    if not sections:
        where = f"folder {str(folder)!r}" if folder else "the objects given"
        raise HookkitError(f"nothing to report in {where}: save ActivationStats / GradientStats there first (stats.save(DIR))")

    path = pathlib.Path(out) if out is not None else (folder / "report.html" if folder else pathlib.Path("hookkit-report.html"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page(title, dict(meta or {}), sections), encoding="utf-8")
    return path


def _load_folder(folder: pathlib.Path) -> dict[str, Any]:
    if not folder.is_dir():
        raise HookkitError(f"report(): {str(folder)!r} is not a folder of saved statistics")
    from hookkit.observers.stats import load_stats

    def read_json(name: str) -> Any:
        p = folder / name
        return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None

    try:
        stats = load_stats(folder)
    except FileNotFoundError:
        stats = {}
    out: dict[str, Any] = {
        "activations": stats.get("activation_stats"),
        "gradients": stats.get("gradient_stats"),
        "summary": read_json("summary.json"),
        "dropout": read_json("dropout.json"),
        "meta": read_json("meta.json"),
        "figures": [],
    }
    for f in read_json("figures.json") or []:
        png = folder / f["file"]
        if png.is_file():
            out["figures"].append({**f, "png": png.read_bytes()})
    return out


def run_cli(args: Any) -> int:
    """``hookkit report STATS_DIR [--out FILE]``."""
    try:
        path = report(args.stats_dir, args.out)
    except (HookkitError, OSError) as exc:
        print(f"hookkit report: error: {exc}", file=sys.stderr)
        return 2
    print(f"report written to {path}")
    return 0
