"""Grad-CAM and Grad-CAM++ on any conv layer, for PyTorch and PaddlePaddle, built on ``capture``.

The arithmetic follows pytorch-grad-cam (``GradCAM`` / ``GradCAMPlusPlus``) step for step, so that
the heatmaps agree with it to float precision: channel weights from the layer's output gradient,
``relu(sum_c w_c * A_c)``, min-max scaled per image, bilinear upsampling with half-pixel centers
(OpenCV's ``INTER_LINEAR``), then scaled again.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hookkit.analyses.targets import Target, check_target, target_scores
from hookkit.core.select import select
from hookkit.core.tree import first_tensor
from hookkit.core.validate import InvalidArgument, check_bool, check_model, check_tensor_like, fail, shown
from hookkit.observers.capture import capture


def gradcam(model: Any, layer: Any, inputs: Any, target: Target = None, *, eval: bool = True) -> np.ndarray:
    """Grad-CAM heatmaps ``[N, H, W]`` (float32 in [0, 1]) at the input's size.

    ``layer``: a name, glob or layer object matching one layer (its output ``[N, C, h, w]``).
    ``target``: None (each sample's predicted class), an int, one int per sample, or a callable
    ``f(output) -> scores [N]`` (or a scalar). The model runs in eval mode (``eval=False`` keeps its
    mode); its training flags and its parameters' ``.grad`` are left as they were.

    >>> cams = hookkit.gradcam(model, "features.3", x)           # doctest: +SKIP
    >>> cams = hookkit.gradcam(model, "features.3", x, target=7)  # doctest: +SKIP
    """
    acts, grads, size = _activations_and_grads(model, layer, inputs, target, eval, "gradcam")
    weights = grads.mean(axis=(2, 3))
    return _finish(weights, acts, size)


def gradcam_plus_plus(model: Any, layer: Any, inputs: Any, target: Target = None, *, eval: bool = True) -> np.ndarray:
    """Grad-CAM++ heatmaps ``[N, H, W]``; same arguments as :func:`gradcam`.

    >>> cams = hookkit.gradcam_plus_plus(model, "features.3", x)   # doctest: +SKIP
    """
    acts, grads, size = _activations_and_grads(model, layer, inputs, target, eval, "gradcam_plus_plus")
    g2 = grads**2
    g3 = g2 * grads
    sum_acts = acts.sum(axis=(2, 3))
    aij = g2 / (2 * g2 + sum_acts[:, :, None, None] * g3 + 1e-6)
    aij = np.where(grads != 0, aij, 0)
    weights = (np.maximum(grads, 0) * aij).sum(axis=(2, 3))
    return _finish(weights, acts, size)


# -- the shared part ------------------------------------------------------------------------------
def _finish(weights: np.ndarray, acts: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    cam = (weights[:, :, None, None] * acts).sum(axis=1)
    cam = np.maximum(cam, 0)
    cam = np.stack([resize_bilinear(_minmax(c), size) for c in cam])
    cam = np.maximum(cam, 0)
    return np.stack([_minmax(c) for c in cam]).astype(np.float32)


def _minmax(img: np.ndarray) -> np.ndarray:
    img = img - img.min()
    return (img / (1e-7 + img.max())).astype(np.float32)


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


def _activations_and_grads(
    model: Any, layer: Any, inputs: Any, target: Target, eval: bool, fn: str = "gradcam"
) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    be = check_model(model, fn=fn)
    check_bool(eval, fn=fn, arg="eval")
    named = select(model, layer)
    if len(named) != 1:
        names = ", ".join(n or "(root)" for n, _ in named[:6]) + (", ..." if len(named) > 6 else "")
        raise InvalidArgument(f"{fn}(): layer must match exactly one layer; {shown(layer)} matched {len(named)}: {names}")
    name = named[0][0]
    inputs = check_tensor_like(inputs, be, fn=fn, arg="inputs")
    shape = be.shape(inputs)
    if len(shape) < 3:
        fail(fn, "inputs", "images [N, C, H, W] (a tensor or numpy array)", inputs)
    if be.dtype_kind(inputs) != "float":  # the gradient flows back to the input: it must be able to take one
        fail(fn, "inputs", "floating-point images (convert integer pixels with x.float() / 255)", inputs)
    check_target(target, shape[0], fn)
    size = (shape[-2], shape[-1])
    modes = [(m, be.is_training(m)) for _, m in be.named_layers(model)]
    if eval:
        be.set_training(model, False)
    try:
        x = _leaf_with_grad(be, inputs)
        # clone: the output as the layer returned it, before any in-place op after it (ReLU(inplace=True),
        # a residual ``out += identity``) changes it; its gradient comes from the tensor hook placed on
        # it then, which fires during a backward to the input even though the tensor was overwritten
        with capture(model, [named[0][1]], grads=True, clone=True) as cap:
            output = model(x)
            if name not in cap:
                raise ValueError(f"{fn}(): layer {name or '(root)'!r} did not run in the model's forward")
            act = first_tensor(cap[name], be.is_tensor)
            if act is None or len(be.shape(act)) != 4:
                got = None if act is None else list(be.shape(act))
                raise ValueError(f"{fn}(): layer {name or '(root)'!r} must output [N, C, h, w] feature maps; it gave {got}")
            score = target_scores(be, output, target, shape[0], fn)
            score = score.sum() if len(be.shape(score)) else score
            be.grads_of(score, [x])  # the whole backward to the input; the parameters' .grad are left alone
            if name not in cap.grads:
                raise ValueError(f"{fn}(): no gradient reached layer {name or '(root)'!r}: the score does not depend on its output")
            grad = first_tensor(cap.grads[name], be.is_tensor)
            acts, grads = be.to_numpy(act).astype(np.float32), be.to_numpy(grad).astype(np.float32)
    finally:
        for m, training in modes:
            if be.is_training(m) != training:
                m.training = training
    return acts, grads, size


def _leaf_with_grad(be: Any, x: Any) -> Any:
    # a fresh leaf that takes gradients, so a frozen model still yields them at the layer
    return be.set_requires_grad(be.detach(x))
