"""Analyses that run the model: CAM methods, attribution, lenses, patching sweeps, diffs.

Each is a driver of the same router as every other feature (it captures and edits through
``capture`` / ``attach``), computes in the model's framework through the backend's op families
(``backend_for(model).family("tensor_math")``), and leaves the model as it found it
(``passes.analysis_pass``). Shared pieces: ``targets`` (what score to explain), ``passes``.
"""
