"""Sparse autoencoders and transcoders: SAELens folders loaded on either framework (``SAE``),
spliced into a model with their features as a site (``splice``), trained on streamed activations
(``train_sae``)."""

from hookkit.sae.files import SAEFileError
from hookkit.sae.model import SAE, SAE_ARCHITECTURES
from hookkit.sae.splice import FeatureStats, Splice, TopFeatures, splice
from hookkit.sae.train import Trained, train_sae
from hookkit.sae.train import read_metrics as read_sae_metrics
from hookkit.sae.views import FeatureView, FeatureViews, feature_views

__all__ = [
    "SAE",
    "SAE_ARCHITECTURES",
    "SAEFileError",
    "FeatureStats",
    "Splice",
    "TopFeatures",
    "splice",
    "Trained",
    "read_sae_metrics",
    "train_sae",
    "FeatureView",
    "FeatureViews",
    "feature_views",
]
