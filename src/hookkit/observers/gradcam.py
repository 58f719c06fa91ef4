"""Grad-CAM and Grad-CAM++ on one layer: shortcuts for ``hookkit.cam(model, layer, x, "gradcam")``
and ``method="gradcam++"`` (every method, layout and option is there)."""

from __future__ import annotations

from typing import Any

import numpy as np

from hookkit.analyses.cam import run_cam
from hookkit.analyses.targets import Target
from hookkit.core.failures import explains_failures
from hookkit.core.select import select
from hookkit.core.types import Layer
from hookkit.core.validate import InvalidArgument, check_model, shown


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
    return _one_layer(model, layer, inputs, target, eval, "gradcam", "gradcam")


@explains_failures("gradcam_plus_plus")
def gradcam_plus_plus(model: Layer, layer: Any, inputs: Any, target: Target = None, *, eval: bool = True) -> np.ndarray:
    """Grad-CAM++ heatmaps ``[N, H, W]``; same arguments as :func:`gradcam`.

    >>> cams = hookkit.gradcam_plus_plus(model, "features.3", x)   # doctest: +SKIP
    """
    return _one_layer(model, layer, inputs, target, eval, "gradcam++", "gradcam_plus_plus")


def _one_layer(model: Any, layer: Any, inputs: Any, target: Target, eval: bool, method: str, fn: str) -> np.ndarray:
    check_model(model, fn=fn)
    named = select(model, layer)
    if len(named) != 1:
        names = ", ".join(n or "(root)" for n, _ in named[:6]) + (", ..." if len(named) > 6 else "")
        raise InvalidArgument(f"{fn}(): layer must match exactly one layer; {shown(layer)} matched {len(named)}: {names}")
    return run_cam(fn, model, named[0][1], inputs, method, target, eval=eval)


def resize_bilinear(img: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Bilinear resize of a 2-D array to ``size=(H, W)`` with half-pixel centers, edges clamped:
    OpenCV's ``INTER_LINEAR`` and ``interpolate(mode="bilinear", align_corners=False)``."""
    img = np.asarray(img, dtype=np.float32)
    (h, w), (H, W) = img.shape, size

    def axis(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        src = (np.arange(n_out, dtype=np.float64) + 0.5) * (n_in / n_out) - 0.5
        src = np.clip(src, 0, n_in - 1)
        lo = np.floor(src).astype(int)
        hi = np.minimum(lo + 1, n_in - 1)
        return lo, hi, (src - lo).astype(np.float32)

    y0, y1, fy = axis(h, H)
    x0, x1, fx = axis(w, W)
    top = img[y0][:, x0] * (1 - fx) + img[y0][:, x1] * fx
    bottom = img[y1][:, x0] * (1 - fx) + img[y1][:, x1] * fx
    return (top * (1 - fy)[:, None] + bottom * fy[:, None]).astype(np.float32)
