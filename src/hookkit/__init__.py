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
# -- monitoring (issue 5) --
# -- interventions (issue 6) --
# -- figures, report, demo (issue 7) --

__version__ = "0.1.0"

__all__ = [
    "ALL",
    "INTERVENTION",
    "LEAVES",
    "OBSERVER",
    "WITH_PARAMS",
    "GradientNotTracked",
    "Handle",
    "HandleGroup",
    "Hook",
    "HookkitError",
    "Hooks",
    "LayerNotFound",
    "Record",
    "UnsupportedModel",
    "capture",
    "dummy_eval",
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
    "total_params",
]
