"""Moved to ``hookkit.analyses.transformer.lens``; importable from here as before."""

from hookkit.analyses.transformer.lens import EMBEDDINGS, LensResult, check_positions, logit_lens

__all__ = ["EMBEDDINGS", "LensResult", "check_positions", "logit_lens"]
