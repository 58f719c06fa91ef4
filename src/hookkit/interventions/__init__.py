"""Interventions: hooks that change what flows. Each acts through the router at INTERVENTION priority,
so observers on the same layer see the changed value; each returns a handle that removes it."""

from hookkit.core.deprecation import moved_modules
from hookkit.interventions.clip import clip_grad
from hookkit.interventions.drophook import DropHookModel
from hookkit.interventions.mask import mask_activations
from hookkit.interventions.output_edits import ablate, edit, patch, steer
from hookkit.interventions.pruning import Pruning, prune
from hookkit.interventions.regularize import channel_dropout, drop_block, drop_path, dropout, gaussian_noise
from hookkit.interventions.stop import Stop, StopForward, run_until, stop_after

# per-head sites moved to the sites layer: the old path imports it, with one warning
moved_modules({"hookkit.interventions.heads": "hookkit.sites.heads"}, since="0.2")

__all__ = [
    "DropHookModel",
    "Pruning",
    "Stop",
    "StopForward",
    "ablate",
    "channel_dropout",
    "clip_grad",
    "drop_block",
    "drop_path",
    "dropout",
    "edit",
    "gaussian_noise",
    "mask_activations",
    "patch",
    "prune",
    "run_until",
    "steer",
    "stop_after",
]
