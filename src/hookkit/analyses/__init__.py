"""Analyses that run the model: CAM methods, attribution, lenses, patching sweeps, diffs.

Each is a driver of the same router as every other feature (it captures and edits through
``capture`` / ``attach``), computes in the model's framework through the backend's op families
(``backend_for(model).family("tensor_math")``), and leaves the model as it found it
(``passes.analysis_pass``). One package per workflow, each with one template: ``cam``,
``attribution``, ``diff`` (and the transformer analyses); a CAM or attribution method is one function
and one table entry in its package's ``methods``. Shared pieces: ``targets`` (what score to explain),
``passes``, ``inputs``; ``port`` copies weights across frameworks (pairing layers as ``diff`` does).
"""

from hookkit.core.deprecation import moved_modules

# the flat modules of 0.2's development line, now in packages: old imports keep working, with one
# warning naming the new path (the one mechanism for a moved module: no re-export module is left behind)
moved_modules(
    {
        **{f"hookkit.analyses.cam_{m}": f"hookkit.analyses.cam.{m}" for m in ("forwards", "layouts", "methods", "metrics", "stream")},
        **{
            f"hookkit.analyses.attribution_{m}": f"hookkit.analyses.attribution.{m}" for m in ("budget", "job", "methods", "rules", "steps")
        },
        **{f"hookkit.analyses.diff_{m}": f"hookkit.analyses.diff.{m}" for m in ("inputs", "metrics", "pairing", "result", "sides")},
        "hookkit.observers.gradcam": "hookkit.analyses.cam.shortcuts",
        **{
            f"hookkit.analyses.{m}": f"hookkit.analyses.transformer.{m}"
            for m in ("attribution_patching", "attribution_tap", "lens", "patching", "patterns")
        },
    },
    since="0.2",
)
