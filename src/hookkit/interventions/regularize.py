"""Plug-in regularization: dropout, channel dropout, DropBlock, DropPath, Gaussian noise on any layer.

Each is a router consumer at INTERVENTION priority on the layer's output. It checks the layer's
training flag at every call (DESIGN rule 7): in eval mode it returns None, so the output is the
plain model's, bit for bit, and ``train()`` / ``eval()`` need no re-registration. Randomness comes
from the framework's own generator, so ``torch.manual_seed`` / ``paddle.seed`` reproduce a run.
The op applies to the first tensor of the output (the hidden state of a ``(hidden, cache)`` tuple).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from hookkit.backends import Backend, backend_for
from hookkit.core.entry import public_entry
from hookkit.core.guards import output_guard
from hookkit.core.handles import HandleGroup
from hookkit.core.router import INTERVENTION, Event, attach
from hookkit.core.select import LayerSpec, select
from hookkit.core.tree import map_tensors
from hookkit.core.types import Layer
from hookkit.core.validate import check_bool, check_model, check_number, check_probability, fail

__all__ = ["channel_dropout", "drop_block", "drop_block_2d", "drop_path", "dropout", "gaussian_noise"]


# -- shared plumbing ----------------------------------------------------------------------------
def _check_prob(p: float, arg: str) -> float:
    return check_probability(p, arg=arg)


def _map_first(output: Any, op: Callable[[Any], Any], is_tensor: Callable[[Any], bool]) -> Any:
    """``output`` with its first tensor replaced by ``op(tensor)``; None when it holds no tensor."""
    if is_tensor(output):
        return op(output)
    done = [False]

    def first(t: Any) -> Any:
        if done[0]:
            return t
        done[0] = True
        return op(t)

    new = map_tensors(output, first, is_tensor)
    return new if done[0] else None


def _train_only(model: Any, layers: LayerSpec, op: Callable[[Any], Any]) -> HandleGroup:
    """Attach ``op`` to the outputs of the selected layers, acting only while a layer is training.
    Integer, bool and complex outputs are left alone (one warning); empty ones pass through."""
    backend = backend_for(model)
    is_training, is_tensor = backend.is_training, backend.is_tensor
    guarded = output_guard(backend, op)  # named now: the warning comes at forward time

    def consume(ev: Event) -> Any:
        if not is_training(ev.layer):
            return None
        return _map_first(ev.output, partial(guarded, layer=ev.name), is_tensor)

    return attach(model, select(model, layers), "forward", consume, INTERVENTION)


# -- the ops ------------------------------------------------------------------------------------
@public_entry()
def dropout(model: Layer, layers: LayerSpec, p: float = 0.5) -> HandleGroup:
    """Element-wise dropout on the selected layers' outputs, in training only (scaled by 1/(1-p)).

    >>> h = hookkit.dropout(model, "layer3", p=0.2)   # doctest: +SKIP
    >>> h.remove()                                      # doctest: +SKIP
    """
    check_model(model)
    p = _check_prob(p, "p")
    return _train_only(model, layers, partial(backend_for(model).dropout, p=p))


@public_entry()
def channel_dropout(model: Layer, layers: LayerSpec, p: float = 0.5) -> HandleGroup:
    """Dropout2d semantics: zero whole channels (dim 1) per sample, scale the rest by 1/(1-p).
    Works on (N, C, ...) outputs of any rank; 4-D outputs use the framework's own dropout2d.

    >>> h = hookkit.channel_dropout(model, ["layer3", "layer4"], p=0.3)   # doctest: +SKIP
    """
    check_model(model)
    p = _check_prob(p, "p")
    backend = backend_for(model)

    def op(t: Any) -> Any:
        if len(backend.shape(t)) < 2:
            fail("channel_dropout", "layers", "layers whose outputs are (N, C, ...)", t)
        return backend.channel_dropout(t, p)

    return _train_only(model, layers, op)


@public_entry()
def drop_path(model: Layer, layers: LayerSpec, p: float, scale_by_keep: bool = True) -> HandleGroup:
    """Stochastic depth (timm's ``drop_path``) on the output of a residual BRANCH: zero whole samples
    with probability ``p`` and scale the kept ones by 1/(1-p). Select the branch, not the block that
    adds the shortcut, or whole samples of the trunk are dropped. ``scale_by_keep=False`` leaves the
    kept samples unscaled (timm's option).

    >>> h = hookkit.drop_path(model, "blocks.*.mlp", p=0.1)   # doctest: +SKIP
    """
    check_model(model)
    p = _check_prob(p, "p")
    scale_by_keep = check_bool(scale_by_keep, arg="scale_by_keep")
    keep = 1.0 - p
    backend = backend_for(model)

    def op(t: Any) -> Any:
        dims = backend.shape(t)
        mask = backend.bernoulli([dims[0]] + [1] * (len(dims) - 1), keep, like=t)
        if keep > 0.0 and scale_by_keep:
            mask = mask / keep
        return t * mask

    return _train_only(model, layers, op)


@public_entry()
def gaussian_noise(model: Layer, layers: LayerSpec, std: float) -> HandleGroup:
    """Add N(0, std^2) noise to the selected layers' outputs, in training only (``std``: the noise's
    standard deviation, >= 0).

    >>> h = hookkit.gaussian_noise(model, "fc1", std=0.1)   # doctest: +SKIP
    """
    check_model(model)
    std = check_number(std, arg="std", low=0)
    randn_like = backend_for(model).randn_like
    return _train_only(model, layers, lambda t: t + std * randn_like(t))


@public_entry()
def drop_block(
    model: Layer, layers: LayerSpec, p: float = 0.1, block_size: int | tuple[int, int] = 7, gamma_scale: float = 1.0
) -> HandleGroup:
    """DropBlock (timm's ``drop_block_2d``) on (N, C, H, W) outputs, in training only: zero square
    (or ``(bh, bw)``) blocks per sample and channel, then rescale by numel / kept. Any block size,
    odd or even; H != W; blocks larger than the feature map are clipped to it. ``block_size``: the
    blocks' side, or ``(bh, bw)``; ``gamma_scale``: scales the rate of block centres (timm's).

    >>> h = hookkit.drop_block(model, "layer3", p=0.1, block_size=5)   # doctest: +SKIP
    """
    check_model(model)
    p = _check_prob(p, "p")
    _block_hw(block_size, 1, 1)  # validate now, not at the first forward
    gamma_scale = check_number(gamma_scale, arg="gamma_scale", low=0)
    rand_like = backend_for(model).rand_like

    def op(t: Any) -> Any:
        return drop_block_2d(t, rand_like(t), p, block_size, gamma_scale)

    return _train_only(model, layers, op)


def _block_hw(block_size: int | tuple[int, int], h: int, w: int) -> tuple[int, int]:
    """The block's (height, width) clipped to the feature map; an int block is clipped square, as timm does."""
    if isinstance(block_size, int) and not isinstance(block_size, bool) and block_size >= 1:
        k = min(block_size, h, w)
        return k, k
    if (
        isinstance(block_size, (tuple, list))
        and len(block_size) == 2
        and all(isinstance(b, int) and not isinstance(b, bool) and b >= 1 for b in block_size)
    ):
        return min(block_size[0], h), min(block_size[1], w)
    fail("drop_block", "block_size", "an int >= 1 or a (height, width) pair of them", block_size)


def drop_block_2d(x: Any, noise: Any, p: float, block_size: int | tuple[int, int] = 7, gamma_scale: float = 1.0) -> Any:
    """DropBlock of ``x`` (N, C, H, W) given uniform ``noise`` in [0, 1) of the same shape.

    timm's formula: gamma = gamma_scale * p * H * W / (bh * bw) / ((H - bh + 1) * (W - bw + 1));
    a block is seeded where noise < gamma and the whole block fits in the map; the seeds grow into
    blocks; the result is ``x * keep * numel / (sum(keep) + 1e-7)``. For an int block no larger than
    the map this is exactly timm's ``drop_block_2d``; timm does not clip gamma's denominator for
    larger blocks (it can go negative), hookkit uses the clipped size there.
    """
    backend = backend_for(x)
    if len(backend.shape(x)) != 4:
        fail("drop_block_2d", "x", "an (N, C, H, W) tensor (drop_block acts on layers with such outputs)", x)
    n, c, h, w = backend.shape(x)
    bh, bw = _block_hw(block_size, h, w)
    gamma = gamma_scale * p * h * w / (bh * bw) / ((h - bh + 1) * (w - bw + 1))
    # A seed at (i, j) drops rows i - bh//2 .. i - bh//2 + bh - 1 (columns alike): it is valid where
    # that block fits, and an output row r is dropped by seeds in r - (bh-1)//2 .. r + bh//2, hence
    # the asymmetric padding for even blocks (timm's symmetric padding assumes an odd block).
    top, bottom, left, right = (bh - 1) // 2, bh // 2, (bw - 1) // 2, bw // 2
    dtype = backend.dtype_name(x)
    area = _seed_area(backend, h, w, bh, bw, backend.device_of(x))
    seeds = backend.cast(noise < gamma, dtype) * backend.cast(area, dtype)
    keep = 1 - backend.max_pool2d(seeds, (bh, bw), (left, right, top, bottom))
    scale = backend.cast(float(n * c * h * w) / (backend.cast(keep, "float32").sum() + 1e-7), dtype)
    return x * keep * scale


@functools.lru_cache(maxsize=64)  # one copy to the device per map size and block, not one per call
def _seed_area(backend: Backend, h: int, w: int, bh: int, bw: int, device: str) -> Any:
    """1 where a (bh, bw) block seeded there fits in an (h, w) map, 0 elsewhere; float32 on ``device``."""
    rows, cols = np.arange(h)[:, None], np.arange(w)[None, :]
    area = (rows >= bh // 2) & (rows < h - (bh - 1) // 2) & (cols >= bw // 2) & (cols < w - (bw - 1) // 2)
    return backend.to(backend.from_numpy(area.astype(np.float32)), device)
