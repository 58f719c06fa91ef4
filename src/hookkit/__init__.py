"""hookkit: one hook API for PyTorch and PaddlePaddle models.

>>> import hookkit
>>> with hookkit.capture(model, "h.*.attn") as cap:   # doctest: +SKIP
...     model(x)
>>> cap["h.0.attn"]
"""

# Every module here is cheap to import: torch, paddle and matplotlib are imported inside functions,
# only for the framework of the user's model. The apps (``report``) load on first use: __getattr__.
from typing import TYPE_CHECKING

from hookkit._version import __version__
from hookkit.analyses.attribution import attribute
from hookkit.analyses.attribution.generation import GenerationAttribution, attribute_generation  # issue 44
from hookkit.analyses.cam import cam, gradcam, gradcam_plus_plus
from hookkit.analyses.cam.metrics import cam_metric
from hookkit.analyses.diff import diff
from hookkit.analyses.diff.result import Diff
from hookkit.analyses.port import Ported, PortError, port_weights
from hookkit.analyses.transformer.attribution_patching import attribution_patching
from hookkit.analyses.transformer.cache import ActivationCache, LogitAttribution, logit_attribution, run_with_cache
from hookkit.analyses.transformer.lens import LensResult, logit_lens
from hookkit.analyses.transformer.patching import patching_sweep
from hookkit.analyses.transformer.patterns import attention_patterns
from hookkit.core.errors import GradientNotTracked, HookkitError, LayerNotFound, NonFiniteError, UnsupportedModel
from hookkit.core.handles import Handle, HandleGroup
from hookkit.core.router import INTERVENTION, OBSERVER, remove_all
from hookkit.core.select import ALL, LEAVES, WITH_PARAMS, select
from hookkit.interventions import (
    DropHookModel,
    Pruning,
    Stop,
    StopForward,
    ablate,
    channel_dropout,
    clip_grad,
    drop_block,
    drop_path,
    dropout,
    edit,
    gaussian_noise,
    mask_activations,
    patch,
    prune,
    run_until,
    steer,
    stop_after,
)
from hookkit.observers.capture import Record, capture
from hookkit.observers.compat import (
    Hook,
    Hooks,
    dummy_eval,
    has_params,
    hook_output,
    hook_outputs,
    in_channels,
    model_sizes,
    num_features_model,
    total_params,
)
from hookkit.observers.extract import extract
from hookkit.observers.features import ExtractError, FeatureArray, Features, FeaturesError, load_features
from hookkit.observers.graph import Graph, GraphWarning, graph  # graph of one forward (issue 45)
from hookkit.observers.hooks import on_backward, on_forward, on_forward_pre, on_grad, on_output_grad
from hookkit.observers.nonfinite import GradientWarning, watch_nonfinite
from hookkit.observers.stats import ActivationStats, GradientStats, WeightStats, load_stats
from hookkit.observers.summary import Summary, summary
from hookkit.observers.summary.plan import MemoryPlan
from hookkit.sae import (  # sparse autoencoders (issue 42)
    SAE,
    FeatureStats,
    FeatureViews,
    SAEFileError,
    Splice,
    TopFeatures,
    Trained,
    feature_views,
    read_sae_metrics,
    splice,
    train_sae,
)
from hookkit.sites.names import names
from hookkit.sites.operations import Operation, Operations, SourceUnavailable, ops

if TYPE_CHECKING:  # loaded on first use at run time (__getattr__); typed for checkers
    from hookkit.apps.report import report

__all__ = [
    "__version__",
    "ALL",
    "INTERVENTION",
    "LEAVES",
    "OBSERVER",
    "WITH_PARAMS",
    "ablate",
    "ActivationStats",
    "attention_patterns",
    "attribution_patching",
    "cam",
    "cam_metric",
    "attribute",
    "capture",
    "channel_dropout",
    "clip_grad",
    "drop_block",
    "drop_path",
    "DropHookModel",
    "diff",
    "Diff",
    "dropout",
    "dummy_eval",
    "edit",
    "extract",
    "ExtractError",
    "FeatureArray",
    "Features",
    "FeaturesError",
    "gaussian_noise",
    "gradcam",
    "gradcam_plus_plus",
    "GradientNotTracked",
    "GradientStats",
    "GradientWarning",
    "Handle",
    "HandleGroup",
    "has_params",
    "Hook",
    "hook_output",
    "hook_outputs",
    "HookkitError",
    "Hooks",
    "in_channels",
    "LayerNotFound",
    "LensResult",
    "load_features",
    "load_stats",
    "logit_lens",
    "mask_activations",
    "model_sizes",
    "NonFiniteError",
    "num_features_model",
    "on_backward",
    "on_forward",
    "on_forward_pre",
    "on_grad",
    "on_output_grad",
    "patch",
    "patching_sweep",
    "port_weights",
    "Ported",
    "PortError",
    "prune",
    "Pruning",
    "Record",
    "remove_all",
    "report",
    "run_until",
    "select",
    "steer",
    "Stop",
    "stop_after",
    "StopForward",
    "Summary",
    "summary",
    "total_params",
    "UnsupportedModel",
    "watch_nonfinite",
    "WeightStats",
    "ops",
    "Operation",
    "Operations",
    "SourceUnavailable",
    # graph of one forward (issue 45)
    "graph",
    "Graph",
    "GraphWarning",
    # sparse autoencoders (issue 42)
    "SAE",
    "SAEFileError",
    "FeatureStats",
    "Splice",
    "TopFeatures",
    "splice",
    "Trained",
    "read_sae_metrics",
    "train_sae",
    "FeatureViews",
    "feature_views",
    "MemoryPlan",
    # standard names, activation cache, direct logit attribution (issue 41)
    "names",
    "run_with_cache",
    "ActivationCache",
    "logit_attribution",
    "LogitAttribution",
    # attribution of generated text (issue 44)
    "attribute_generation",
    "GenerationAttribution",
]

# an unknown keyword argument of a public function or class gets "did you mean" (core/keywords.py)
from hookkit.core.keywords import suggest_keywords_of  # noqa: E402

globals().update(suggest_keywords_of({n: globals()[n] for n in __all__ if n in globals()}))
del suggest_keywords_of


def __getattr__(name: str) -> object:
    if name == "report":
        from hookkit.apps.report import report  # lazy: an app (it loads matplotlib), on first use

        globals()["report"] = report
        return report
    raise AttributeError(f"module 'hookkit' has no attribute {name!r}")
