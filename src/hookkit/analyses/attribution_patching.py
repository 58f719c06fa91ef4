"""Moved to ``hookkit.analyses.transformer.attribution_patching``; importable from here as before."""

from hookkit.analyses.transformer.attribution_patching import attribution_patching

__all__ = ["attribution_patching"]
