"""Transformer analyses: the logit lens (``lens``), attention patterns (``patterns``), activation
patching sweeps (``patching``), attribution patching (``attribution_patching``) and the attributed
layer's tap (``attribution_tap``). They read and write through ``hookkit.sites``."""

from hookkit.analyses.transformer.attribution_patching import attribution_patching
from hookkit.analyses.transformer.lens import LensResult, logit_lens
from hookkit.analyses.transformer.patching import patching_sweep
from hookkit.analyses.transformer.patterns import attention_patterns

__all__ = ["LensResult", "attention_patterns", "attribution_patching", "logit_lens", "patching_sweep"]
