"""Moved: per-head sites live in ``hookkit.sites.heads`` (``heads=`` on capture, ablate, patch,
steer and edit goes through ``hookkit.sites``). The names stay importable from here."""

from hookkit.sites.heads import HEADS, HeadTarget, check_heads, head_targets, record_of, selected

__all__ = ["HEADS", "HeadTarget", "check_heads", "head_targets", "record_of", "selected"]
