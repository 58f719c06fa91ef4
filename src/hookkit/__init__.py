"""hookkit: one hook API for PyTorch and PaddlePaddle models.

>>> import hookkit
>>> with hookkit.capture(model, "h.*.attn") as cap:   # doctest: +SKIP
...     model(x)
>>> cap["h.0.attn"]
"""

from hookkit.capture import Record, capture
from hookkit.compat import (
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
from hookkit.errors import GradientNotTracked, HookkitError, LayerNotFound, UnsupportedModel
from hookkit.handles import Handle, HandleGroup
from hookkit.hooks import on_backward, on_forward, on_forward_pre, on_grad, on_output_grad
from hookkit.router import INTERVENTION, OBSERVER, remove_all
from hookkit.select import ALL, LEAVES, WITH_PARAMS, select

# Feature modules are imported eagerly and must stay cheap to import: no torch, paddle or
# matplotlib at module level (a lazily imported submodule would shadow a same-named function).
# -- summary (issue 4) --
from hookkit.summary import Summary, summary
# -- monitoring (issue 5) --
from hookkit.errors import NonFiniteError
from hookkit.nonfinite import GradientWarning, watch_nonfinite
from hookkit.stats import ActivationStats, GradientStats, load_stats
# -- interventions (issue 6) --
from hookkit.interventions import Pruning, Stop, StopForward, ablate, edit, mask_activations, patch, prune, run_until, steer, stop_after
from hookkit.interventions import DropHookModel, channel_dropout, clip_grad, drop_block, drop_path, dropout, gaussian_noise
# -- figures, report, demo (issue 7) --
from hookkit.gradcam import gradcam, gradcam_plus_plus
from hookkit.report import report  # the function; `hookkit report` finds the package via sys.modules

__version__ = "0.1.0"

__all__ = [
    # monitoring (issue 5)
    "ActivationStats",
    "GradientStats",
    "GradientWarning",
    "NonFiniteError",
    "load_stats",
    "watch_nonfinite",
    "gradcam",
    "gradcam_plus_plus",
    "report",
    "ALL",
    "INTERVENTION",
    "LEAVES",
    "OBSERVER",
    "WITH_PARAMS",
    "DropHookModel",
    "GradientNotTracked",
    "Handle",
    "HandleGroup",
    "Hook",
    "HookkitError",
    "Hooks",
    "LayerNotFound",
    "Record",
    "Summary",
    "UnsupportedModel",
    "capture",
    "channel_dropout",
    "clip_grad",
    "drop_block",
    "drop_path",
    "dropout",
    "dummy_eval",
    "gaussian_noise",
    "has_params",
    "hook_output",
    "hook_outputs",
    "in_channels",
    "model_sizes",
    "num_features_model",
    "on_backward",
    "on_forward",
    "on_forward_pre",
    "on_grad",
    "on_output_grad",
    "remove_all",
    "select",
    "Pruning",
    "Stop",
    "StopForward",
    "ablate",
    "edit",
    "mask_activations",
    "patch",
    "prune",
    "run_until",
    "steer",
    "stop_after",
    "summary",
    "total_params",
]
