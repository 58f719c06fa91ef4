"""The CAM methods: each is only its weight function over one layer's channels-first activations ``A``
``[N, C, *spatial]`` and gradients ``G`` (``template.py`` does everything else).

A method returns per-channel weights ``[N, C]`` (the map is ``relu(sum_c w_c A_c)``), weighted
activations ``[N, C, *spatial]`` (summed over channels, or projected with ``eigen_smooth``) or the
map itself. The arithmetic follows each paper as pytorch-grad-cam implements it, step for step.

``eigencam`` / ``eigengradcam`` / ``eigen_smooth`` project on the first principal component; an SVD's
sign is arbitrary, so hookkit fixes it: the projection's largest-magnitude value is positive (flipped
when ``|min| > |max|``, the correction of Seg-Eigen-CAM, Eq. 13).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

ABLATION_OFFSET = 1e7  # an ablated channel goes to 0 where the layer's minimum is 0, else to min - 1e7


@dataclass(frozen=True)
class Method:
    """``kind``: what ``weigh(p)`` returns: "weights" ``[N, C]``, "weighted" ``[N, C, *S]`` or "map" ``[N, *S]``;
    ``grads``: it reads the layer's gradient; ``forwards``: it runs the model again (ScoreCAM, AblationCAM);
    ``batch``: its rows per forward when ``batch_size`` is not given."""

    kind: str
    weigh: Callable[[Any], Any]
    grads: bool = True
    forwards: bool = False
    batch: int = 64


def spatial(t: Any) -> list[int]:
    return list(range(2, len(t.shape)))


def project(be: Any, m: Any, t: Any) -> Any:
    """``[N, C, *S]`` -> ``[N, *S]``: each sample's positions projected on the first principal component of
    its channels (positions as observations, centred per channel), sign fixed as the module says."""
    n, c, s = t.shape[0], t.shape[1], list(t.shape[2:])
    x = m.permute(m.reshape(m.nan_to_zero(t), [n, c, -1]), [0, 2, 1])  # [N, P, C]
    x = x - m.mean(x, [1], keepdim=True)
    if x.shape[1] >= c:  # the first right singular vector of x: the top eigenvector of x^T x (C x C)
        _, vecs = m.eigh(m.einsum("npc,npd->ncd", x, x))
        proj = m.einsum("npc,nc->np", x, vecs[:, :, -1])
    else:  # fewer positions than channels: x v = s u, u the top eigenvector of x x^T (P x P)
        vals, vecs = m.eigh(m.einsum("npc,nqc->npq", x, x))
        proj = vecs[:, :, -1] * m.relu(vals[:, -1:]) ** 0.5
    flip = be.cast(-m.amin(proj, [1], keepdim=True) > m.amax(proj, [1], keepdim=True), "float32")
    return m.reshape(proj * (1 - 2 * flip), [n, *s])


# -- gradient methods -----------------------------------------------------------------------------
def _gradcam(p: Any) -> Any:
    return p.m.mean(p.grads, spatial(p.grads))


def _hirescam(p: Any) -> Any:
    return p.grads * p.acts


def _gradcam_plus_plus(p: Any) -> Any:
    m, a, g = p.m, p.acts, p.grads
    g2 = g * g
    sum_a = m.sum(a, spatial(a), keepdim=True)
    aij = g2 / (2 * g2 + sum_a * g2 * g + 1e-6)
    aij = p.be.where(g != 0, aij, p.be.zeros_like(aij))
    return m.sum(m.relu(g) * aij, spatial(a))


def _xgradcam(p: Any) -> Any:
    m, a = p.m, p.acts
    return m.sum(p.grads * a / (m.sum(a, spatial(a), keepdim=True) + 1e-7), spatial(a))


def _gradcam_elementwise(p: Any) -> Any:
    return p.m.relu(p.grads * p.acts)


def _layercam(p: Any) -> Any:
    return p.m.relu(p.grads) * p.acts


def _eigencam(p: Any) -> Any:
    return project(p.be, p.m, p.acts)


def _eigengradcam(p: Any) -> Any:
    return project(p.be, p.m, p.grads * p.acts)


# -- methods that run the model again (batched, under no_grad) -------------------------------------
def _scorecam(p: Any) -> Any:
    """Softmax over channels of the target score of the input masked by each upsampled, min-max scaled channel.
    With class targets, the rows whose mask is all zero (a channel that is zero everywhere after a ReLU, or
    whose upsampled map is exactly constant) share one forward of the zero input (``LayerView.masked_scores``)."""
    m, a, x = p.m, p.acts, p.x
    n, c = a.shape[0], a.shape[1]
    mode = ("linear", "bilinear", "trilinear")[len(p.size) - 1]
    up = m.interpolate_aligned(a, p.size, mode)
    axes = spatial(up)
    lo, hi = m.amin(up, axes, keepdim=True), m.amax(up, axes, keepdim=True)
    up = (up - lo) / (hi - lo + 1e-8)
    up = p.be.cast(up, p.be.dtype_name(x))  # a half-precision model takes masked inputs in its own dtype
    if p.run.classes is not None:
        return m.softmax(p.masked_scores(up), -1)
    xs = m.reshape(x, [n, 1, *x.shape[1:]])
    scores = []
    for start in range(0, c, p.chunk):
        k = min(p.chunk, c - start)
        masks = m.reshape(up[:, start : start + k], [n, k, 1, *p.size])
        rows = m.permute(xs * masks, [1, 0, *range(2, 3 + len(p.size))])  # channel-major: row j*N + i
        scores.append(p.row_scores(m.reshape(rows, [k * n, *x.shape[1:]]), k))
    return m.softmax(m.permute(m.cat(scores, 0), [1, 0]), -1)


def _ablationcam(p: Any) -> Any:
    """(score - score with channel c ablated) / score, the ablated channel set to 0 (or min - 1e7 where the
    layer's minimum is not 0) across all positions of the layer's own output. The layers before run once
    on the N samples when the rest of the model takes the k x N ablated rows (else on k copies)."""
    m, be, raw = p.m, p.be, p.raw
    n, c = p.acts.shape[0], p.acts.shape[1]
    r = len(raw.shape)
    axis = p.layout.channel_axis(raw.shape, c)
    low = m.amin(raw, list(range(1, r)), keepdim=True)  # [N, 1, ...]
    value = be.where(low == 0, be.zeros_like(low), low - ABLATION_OFFSET)
    rows, fill = m.reshape(raw, [1, *raw.shape]), m.reshape(value, [1, *value.shape])  # [1, N, ...]
    new = []
    for start in range(0, c, p.chunk):
        k = min(p.chunk, c - start)
        hot = p.onehot(start, k, axis)  # [k, 1, ..., C at 1 + axis, ...]: channel start + j in group j
        ablated = m.reshape(be.where(hot, fill, rows), [k * n, *raw.shape[1:]])  # one pass, channel-major rows
        new.append(p.ablated_scores(ablated, k))
    new = m.permute(m.cat(new, 0), [1, 0])  # [N, C]
    orig = m.reshape(p.scores, [n, 1])
    return (orig - new) / orig


#: rows per forward of ScoreCAM (pytorch-grad-cam's 16: on a CPU, larger batches of full forwards are not faster)
#: and AblationCAM (its rows multiply at the target layer or an enclosing one: the more per forward, the fewer
#: runs of the layers before; 128 rather than 64 rows took 0.7-0.95x the time on small CNNs, a ViT and a Swin)
SCORECAM_BATCH, ABLATIONCAM_BATCH = 16, 128

#: the table of CAM methods: a method is one weight function above and one entry here (``cam``'s
#: ``method=`` choices come from it), so adding one touches this file only.
METHODS: dict[str, Method] = {
    "gradcam": Method("weights", _gradcam),
    "hirescam": Method("weighted", _hirescam),
    "gradcam++": Method("weights", _gradcam_plus_plus),
    "xgradcam": Method("weights", _xgradcam),
    "gradcam-elementwise": Method("weighted", _gradcam_elementwise),
    "layercam": Method("weighted", _layercam),
    "eigencam": Method("map", _eigencam, grads=False),
    "eigengradcam": Method("map", _eigengradcam),
    "scorecam": Method("weights", _scorecam, grads=False, forwards=True, batch=SCORECAM_BATCH),
    "ablationcam": Method("weights", _ablationcam, grads=False, forwards=True, batch=ABLATIONCAM_BATCH),
    "fullgrad": Method("fullgrad", lambda p: None),  # the template's own path: every bias layer and the input
}
