"""Moved to ``hookkit.analyses.transformer.patching``; importable from here as before."""

from hookkit.analyses.transformer.patching import Metric, Setup, capture_clean, check_pair, metric_rows, patching_sweep

__all__ = ["Metric", "Setup", "capture_clean", "check_pair", "metric_rows", "patching_sweep"]
