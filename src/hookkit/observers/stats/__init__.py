"""Streaming activation and gradient statistics (fastai's ActivationStats, and gradients), kept on
the model's device while training, reduced across ranks and bounded in memory when read.

- ``series``: the per-layer row store (mergeable rows, O(new rows) reads, the long-run policy);
- ``live``: ``ActivationStats`` / ``GradientStats``, recording through the router;
- ``weights``: ``WeightStats``, weights and update ratios at each optimizer step;
- ``loaded``: the reading API, and statistics read back from disk (``load_stats``);
- ``reduce``: the cross-rank merge, once per read.

>>> with hookkit.ActivationStats(model, hist=True) as stats:   # doctest: +SKIP
...     train(model)
>>> stats.layer_stats("0")["mean"]   # one value per recorded forward
"""

from hookkit.observers.stats.live import ActivationStats, GradientStats
from hookkit.observers.stats.loaded import ActivationData, GradientData, StatsData, load_stats
from hookkit.observers.stats.series import LIMIT
from hookkit.observers.stats.weights import WeightData, WeightStats

__all__ = [
    "LIMIT",
    "ActivationData",
    "ActivationStats",
    "GradientData",
    "GradientStats",
    "StatsData",
    "WeightData",
    "WeightStats",
    "load_stats",
]
