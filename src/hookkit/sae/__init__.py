"""Sparse autoencoders and transcoders: SAELens folders loaded on either framework (``SAE``),
spliced into a model with their features as a site (``splice``)."""

from hookkit.sae.files import SAEFileError
from hookkit.sae.model import SAE, SAE_ARCHITECTURES
from hookkit.sae.splice import FeatureStats, Splice, TopFeatures, splice

__all__ = ["SAE", "SAE_ARCHITECTURES", "SAEFileError", "FeatureStats", "Splice", "TopFeatures", "splice"]
