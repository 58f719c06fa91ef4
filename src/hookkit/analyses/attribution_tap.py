"""Moved to ``hookkit.analyses.transformer.attribution_tap``; importable from here as before."""

from hookkit.analyses.transformer.attribution_tap import LayerTap

__all__ = ["LayerTap"]
