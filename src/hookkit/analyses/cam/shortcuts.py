"""Grad-CAM and Grad-CAM++ on one layer: shortcuts for ``hookkit.cam(model, layer, x, "gradcam")``
and ``method="gradcam++"`` (every method, layout and option is there)."""

from __future__ import annotations

from typing import Any

import numpy as np

from hookkit.analyses.cam.call import CamOptions
from hookkit.analyses.cam.template import run_cam
from hookkit.analyses.targets import Target
from hookkit.core.entry import entry_name, public_entry
from hookkit.core.failures import explains_failures
from hookkit.core.select import select
from hookkit.core.types import Layer
from hookkit.core.validate import InvalidArgument, check_model, shown


@public_entry("gradcam")
@explains_failures("gradcam")
def gradcam(model: Layer, layer: Any, inputs: Any, target: Target = None, *, eval: bool = True) -> np.ndarray:
    """Grad-CAM heatmaps ``[N, H, W]`` (float32 in [0, 1]) at the input's size.

    ``layer``: a name, glob or layer object matching one layer (its output ``[N, C, h, w]``, channels-last
    or ViT tokens). ``target``: None (each sample's predicted class), an int, one int per sample, or a
    callable ``f(output) -> scores [N]`` (or a scalar). The model runs in eval mode (``eval=False`` keeps
    its mode); its training flags and its parameters' ``.grad`` are left as they were.

    >>> cams = hookkit.gradcam(model, "features.3", x)           # doctest: +SKIP
    >>> cams = hookkit.gradcam(model, "features.3", x, target=7)  # doctest: +SKIP
    """
    return _one_layer(model, layer, inputs, target, eval, "gradcam")


@public_entry("gradcam_plus_plus")
@explains_failures("gradcam_plus_plus")
def gradcam_plus_plus(model: Layer, layer: Any, inputs: Any, target: Target = None, *, eval: bool = True) -> np.ndarray:
    """Grad-CAM++ heatmaps ``[N, H, W]``; same arguments as :func:`gradcam`.

    >>> cams = hookkit.gradcam_plus_plus(model, "features.3", x)   # doctest: +SKIP
    """
    return _one_layer(model, layer, inputs, target, eval, "gradcam++")


def _one_layer(model: Any, layer: Any, inputs: Any, target: Target, eval: bool, method: str) -> np.ndarray:
    fn = entry_name()
    check_model(model)
    named = select(model, layer)
    if len(named) != 1:
        names = ", ".join(n or "(root)" for n, _ in named[:6]) + (", ..." if len(named) > 6 else "")
        raise InvalidArgument(f"{fn}(): layer must match exactly one layer; {shown(layer)} matched {len(named)}: {names}")
    return run_cam(model, named[0][1], inputs, method, target, CamOptions.of(eval=eval))
