"""``hookkit.cam_metric``: how faithful maps are to the model, as pytorch-grad-cam measures it.

ROAD (Rong et al. 2022, "A Consistent and Efficient Evaluation Strategy for Attribution Methods"):
remove the pixels a map ranks highest ("most relevant first") or lowest ("least relevant first") at
each percentile, fill them by noisy linear imputation (each removed pixel the weighted mean of its 8
neighbours, 1/6 edge- and 1/12 corner-adjacent, solved as one linear system per image, plus Gaussian
noise of std ``noise``, seeded), and report the target score after minus before, averaged over the
percentiles. "confidence-drop": the score of the input multiplied by the map minus the score of the
input (pytorch-grad-cam's ``CamMultImageConfidenceChange``).

>>> maps = hookkit.cam(model, "layer4", x)                                          # doctest: +SKIP
>>> hookkit.cam_metric(model, x, maps, metric="road-combined")   # [N] float32   # doctest: +SKIP
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from hookkit.analyses.cam.call import prepare_inputs, tensor_target
from hookkit.analyses.passes import analysis_pass
from hookkit.analyses.targets import Target, check_target, predicted_classes, target_scores
from hookkit.core.entry import entry_name, public_entry
from hookkit.core.failures import explains_failures
from hookkit.core.types import Layer
from hookkit.core.validate import ArgumentTypeError, check_bool, check_choice, check_int, check_model, check_number, check_runnable, fail

METRICS = ("road-most-relevant-first", "road-least-relevant-first", "road-combined", "confidence-drop")
PERCENTILES = (10, 20, 30, 40, 50, 60, 70, 80, 90)
NEIGHBOURS = [((1, 1), 1 / 12), ((0, 1), 1 / 6), ((-1, 1), 1 / 12), ((1, -1), 1 / 12),
              ((0, -1), 1 / 6), ((-1, -1), 1 / 12), ((1, 0), 1 / 6), ((-1, 0), 1 / 6)]  # fmt: skip


def _shift(a: np.ndarray, dy: int, dx: int) -> np.ndarray:
    """``out[..., y, x] = a[..., y + dy, x + dx]``, 0 outside the image."""
    out = np.zeros_like(a)
    H, W = a.shape[-2:]
    out[..., max(0, -dy) : H - max(0, dy), max(0, -dx) : W - max(0, dx)] = a[
        ..., max(0, dy) : H - max(0, -dy), max(0, dx) : W - max(0, -dx)
    ]
    return out


def _neighbour_sum(a: np.ndarray) -> np.ndarray:
    total = np.zeros_like(a)
    for (dy, dx), w in NEIGHBOURS:
        total = total + w * _shift(a, dy, dx)
    return total


def impute(images: np.ndarray, keep: np.ndarray, noise: float, rng: np.random.Generator) -> np.ndarray:
    """ROAD's noisy linear imputation of ``images [N, C, H, W]`` where ``keep [N, H, W]`` is 0: each removed
    pixel equals the weighted mean of its in-image neighbours (removed ones included, as unknowns), solved by
    preconditioned conjugate gradients (float64, to a relative residual of 1e-10), plus N(0, noise^2)."""
    img = images.astype(np.float64)
    keep64 = keep.astype(np.float64)[:, None]  # [N, 1, H, W]
    miss = 1.0 - keep64
    diag = _neighbour_sum(np.ones(img.shape[-2:]))  # the weight of each pixel's in-image neighbours
    b = _neighbour_sum(img * keep64) * miss
    pre = np.where(miss > 0, 1.0 / diag, 0.0)

    def apply(v: np.ndarray) -> np.ndarray:
        return miss * (diag * v - _neighbour_sum(v * miss))

    axes = (2, 3)
    x = np.zeros_like(b)
    r = b.copy()
    z = pre * r
    p = z.copy()
    rz = (r * z).sum(axes, keepdims=True)
    bnorm = np.sqrt((b * b).sum(axes, keepdims=True))
    bnorm[bnorm == 0] = 1.0
    for _ in range(20 * sum(img.shape[-2:]) + 200):
        ap = apply(p)
        pap = (p * ap).sum(axes, keepdims=True)
        alpha = np.divide(rz, pap, out=np.zeros_like(rz), where=pap > 0)
        x += alpha * p
        r -= alpha * ap
        if (np.sqrt((r * r).sum(axes, keepdims=True)) / bnorm).max() < 1e-10:
            break
        z = pre * r
        rz_new = (r * z).sum(axes, keepdims=True)
        beta = np.divide(rz_new, rz, out=np.zeros_like(rz), where=rz > 0)
        p = z + beta * p
        rz = rz_new
    filled = x.astype(np.float32) + np.float32(noise) * rng.standard_normal(x.shape).astype(np.float32)
    out = images.astype(np.float32).copy()
    where = np.broadcast_to(miss > 0, out.shape)
    out[where] = filled[where]
    return out


def _keep_mask(maps: np.ndarray, percentile: float, most_first: bool) -> np.ndarray:
    """1 where a pixel stays: below the percentile of the map (most relevant removed first) or of 1 - map."""
    ranked = maps if most_first else (np.float32(1) - maps)
    keep = np.empty(maps.shape, np.float32)
    for i, m in enumerate(ranked):
        keep[i] = m < np.float32(np.percentile(m, percentile))  # compared in float32, as a tensor would be
    return keep


def _percentiles(percentiles: float | Sequence[float]) -> list[float]:
    pcts = list(percentiles) if isinstance(percentiles, Iterable) else [percentiles]
    # numbers.Real: numpy's numbers too (np.arange(10, 100, 10) was refused)
    if not pcts or not all(isinstance(p, numbers.Real) and not isinstance(p, (bool, np.bool_)) and 0 < p < 100 for p in pcts):
        fail(entry_name(), "percentiles", "a number or a list of numbers in (0, 100)", percentiles)
    return pcts


def _maps(be: Any, x: Any, maps: Any, metric: str) -> np.ndarray:
    """``maps`` as float32 ``[N, *spatial]`` of the inputs ``x``, checked."""
    fn = entry_name()
    shape = be.shape(x)
    n, size = shape[0], tuple(shape[2:])
    if be.is_tensor(maps):
        maps = be.to_numpy(maps)
    if not isinstance(maps, np.ndarray) or maps.dtype.kind != "f":
        fail(fn, "maps", f"a float array [N, {', '.join(map(str, size))}] (what hookkit.cam returns)", maps, kind=ArgumentTypeError)
    if maps.shape != (n, *size):
        fail(fn, "maps", f"maps of shape [{n}, {', '.join(map(str, size))}], one per input at the input's size", maps)
    if metric.startswith("road") and len(size) != 2:
        fail(fn, "metric", "'confidence-drop' for inputs that are not images (ROAD imputes 2-D images)", metric)
    return maps.astype(np.float32)


@public_entry("cam_metric")
@explains_failures("cam_metric")
def cam_metric(
    model: Layer,
    inputs: Any,
    maps: Any,
    target: Target = None,
    *,
    metric: str = "road-combined",
    percentiles: float | Sequence[float] = PERCENTILES,
    noise: float = 0.01,
    seed: int = 0,
    eval: bool = True,
) -> np.ndarray:
    """One faithfulness score per sample (numpy float32 ``[N]``) for ``maps [N, *spatial]`` of ``inputs``.

    >>> hookkit.cam_metric(model, x, maps, metric="road-most-relevant-first", percentiles=[20, 50])   # doctest: +SKIP

    ``metric``: "road-most-relevant-first" (lower is better: removing the top pixels should hurt),
    "road-least-relevant-first" (higher is better), "road-combined" ((least - most) / 2, higher is
    better), "confidence-drop" (score of ``inputs * maps`` minus score of ``inputs``). ``percentiles``:
    one or several in (0, 100), averaged (ROAD on 2-D inputs only). ``target`` as for ``hookkit.cam``
    (None: each sample's predicted class on ``inputs``). ``noise``: std of the imputation noise,
    ``seed`` its generator's seed. The model runs under no_grad, in eval mode unless ``eval=False``.
    """
    fn = entry_name()
    be = check_model(model)
    check_runnable(be, model)
    check_runnable(be, model)
    check_choice(metric, METRICS, arg="metric")
    check_bool(eval, arg="eval")
    check_number(noise, arg="noise", low=0.0)
    check_int(seed, arg="seed", low=0)
    pcts = _percentiles(percentiles)
    x = prepare_inputs(be, model, inputs)
    maps = _maps(be, x, maps, metric)
    n = maps.shape[0]
    target = tensor_target(be, target)
    check_target(target, n)
    images = be.to_numpy(x).astype(np.float32)

    def like_x(a: np.ndarray) -> Any:  # float32 arrays back in the inputs' dtype (a float64 model refused float32)
        return be.cast(be.from_numpy(a, like=x), be.dtype_name(x))

    with analysis_pass(model, be, eval=eval, grad=False), be.no_grad():
        out = model(x)
        if target is None:
            target = predicted_classes(be, out, n)

        def scores(batch: Any) -> np.ndarray:
            s = be.to_numpy(target_scores(be, model(batch) if batch is not None else out, target, n))
            if s.shape != (n,):
                fail(fn, "target", f"a callable returning one score per sample ([{n}])", target)
            return s.astype(np.float32)

        base = scores(None)
        if metric == "confidence-drop":
            weighted = images * maps[:, None]
            return scores(like_x(weighted)) - base
        rng = np.random.default_rng(seed)

        def road(most_first: bool) -> np.ndarray:
            total = np.zeros(n, np.float32)
            for p in pcts:
                filled = impute(images, _keep_mask(maps, p, most_first), noise, rng)
                total += scores(like_x(filled)) - base
            return total / len(pcts)

        if metric == "road-most-relevant-first":
            return road(True)
        if metric == "road-least-relevant-first":
            return road(False)
        return (road(False) - road(True)) / 2
