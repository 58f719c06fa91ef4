"""Plug-in regularization: dropout, channel dropout, DropBlock, DropPath, Gaussian noise on any layer.

Each is a router consumer at INTERVENTION priority on the layer's output. It checks the layer's
training flag at every call (DESIGN rule 7): in eval mode it returns None, so the output is the
plain model's, bit for bit, and ``train()`` / ``eval()`` need no re-registration. Randomness comes
from the framework's own generator, so ``torch.manual_seed`` / ``paddle.seed`` reproduce a run.
The op applies to the first tensor of the output (the hidden state of a ``(hidden, cache)`` tuple).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hookkit.backends import Backend, backend_for
from hookkit.core.handles import HandleGroup
from hookkit.core.router import INTERVENTION, Event, attach
from hookkit.core.select import LayerSpec, select
from hookkit.core.tree import map_tensors

__all__ = ["channel_dropout", "drop_block", "drop_block_2d", "drop_path", "dropout", "gaussian_noise"]


# -- shared plumbing ----------------------------------------------------------------------------
def _check_prob(p: float, arg: str, fn: str) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise ValueError(f"{fn}(): {arg} must be a probability in [0, 1]; got {p!r}")
    return float(p)


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
    """Attach ``op`` to the outputs of the selected layers, acting only while a layer is training."""
    backend = backend_for(model)
    is_training, is_tensor = backend.is_training, backend.is_tensor

    def consume(ev: Event) -> Any:
        if not is_training(ev.layer):
            return None
        return _map_first(ev.output, op, is_tensor)

    return attach(model, select(model, layers), "forward", consume, INTERVENTION)


def _lib(backend: Backend) -> Any:
    if backend.name == "torch":
        import torch

        return torch
    import paddle

    return paddle


# -- the ops ------------------------------------------------------------------------------------
def dropout(model: Any, layers: LayerSpec, p: float = 0.5) -> HandleGroup:
    """Element-wise dropout on the selected layers' outputs, in training only (scaled by 1/(1-p)).

    >>> h = hookkit.dropout(model, "layer3", p=0.2)   # doctest: +SKIP
    >>> h.remove()                                      # doctest: +SKIP
    """
    p = _check_prob(p, "p", "dropout")
    F = _lib(backend_for(model)).nn.functional
    return _train_only(model, layers, lambda t: F.dropout(t, p=p, training=True))


def channel_dropout(model: Any, layers: LayerSpec, p: float = 0.5) -> HandleGroup:
    """Dropout2d semantics: zero whole channels (dim 1) per sample, scale the rest by 1/(1-p).
    Works on (N, C, ...) outputs of any rank; 4-D outputs use the framework's own dropout2d.

    >>> h = hookkit.channel_dropout(model, ["layer3", "layer4"], p=0.3)   # doctest: +SKIP
    """
    p = _check_prob(p, "p", "channel_dropout")
    backend = backend_for(model)
    F = _lib(backend).nn.functional

    if backend.name == "torch":

        def op(t: Any) -> Any:
            if t.ndim == 4:
                return F.dropout2d(t, p=p, training=True)
            if t.ndim < 2:
                raise ValueError(f"channel_dropout needs an (N, C, ...) output; got shape {list(t.shape)}")
            mask = F.dropout(t.new_ones(t.shape[:2] + (1,) * (t.ndim - 2)), p=p, training=True)
            return t * mask
    else:

        def op(t: Any) -> Any:
            if t.ndim < 2:
                raise ValueError(f"channel_dropout needs an (N, C, ...) output; got shape {list(t.shape)}")
            return F.dropout(t, p=p, axis=[0, 1], training=True)

    return _train_only(model, layers, op)


def drop_path(model: Any, layers: LayerSpec, p: float, scale_by_keep: bool = True) -> HandleGroup:
    """Stochastic depth (timm's ``drop_path``) on the output of a residual BRANCH: zero whole samples
    with probability ``p`` and scale the kept ones by 1/(1-p). Select the branch, not the block that
    adds the shortcut, or whole samples of the trunk are dropped.

    >>> h = hookkit.drop_path(model, "blocks.*.mlp", p=0.1)   # doctest: +SKIP
    """
    p = _check_prob(p, "p", "drop_path")
    keep = 1.0 - p
    backend = backend_for(model)
    lib = _lib(backend)

    def op(t: Any) -> Any:
        shape = [int(t.shape[0])] + [1] * (t.ndim - 1)
        if backend.name == "torch":
            mask = t.new_empty(shape).bernoulli_(keep)
        else:
            mask = lib.bernoulli(lib.full(shape, keep, dtype=t.dtype))
        if keep > 0.0 and scale_by_keep:
            mask = mask / keep
        return t * mask

    return _train_only(model, layers, op)


def gaussian_noise(model: Any, layers: LayerSpec, std: float) -> HandleGroup:
    """Add N(0, std^2) noise to the selected layers' outputs, in training only.

    >>> h = hookkit.gaussian_noise(model, "fc1", std=0.1)   # doctest: +SKIP
    """
    if isinstance(std, bool) or not isinstance(std, (int, float)) or std < 0:
        raise ValueError(f"gaussian_noise(): std must be a number >= 0; got {std!r}")
    std = float(std)
    backend = backend_for(model)
    lib = _lib(backend)
    if backend.name == "torch":
        return _train_only(model, layers, lambda t: t + std * lib.randn_like(t))
    return _train_only(model, layers, lambda t: t + std * lib.randn(t.shape, dtype=t.dtype))


def drop_block(
    model: Any, layers: LayerSpec, p: float = 0.1, block_size: int | tuple[int, int] = 7, gamma_scale: float = 1.0
) -> HandleGroup:
    """DropBlock (timm's ``drop_block_2d``) on (N, C, H, W) outputs, in training only: zero square
    (or ``(bh, bw)``) blocks per sample and channel, then rescale by numel / kept. Any block size,
    odd or even; H != W; blocks larger than the feature map are clipped to it.

    >>> h = hookkit.drop_block(model, "layer3", p=0.1, block_size=5)   # doctest: +SKIP
    """
    p = _check_prob(p, "p", "drop_block")
    _block_hw(block_size, 1, 1)  # validate now, not at the first forward
    backend = backend_for(model)
    lib = _lib(backend)

    def op(t: Any) -> Any:
        if backend.name == "torch":
            noise = lib.rand_like(t)
        else:
            noise = lib.rand(t.shape, dtype=t.dtype)
        return drop_block_2d(t, noise, p, block_size, gamma_scale)

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
    raise ValueError(f"drop_block(): block_size must be an int >= 1 or a (height, width) pair of them; got {block_size!r}")


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
        raise ValueError(f"drop_block needs an (N, C, H, W) output; got shape {list(backend.shape(x))}")
    n, c, h, w = backend.shape(x)
    bh, bw = _block_hw(block_size, h, w)
    gamma = gamma_scale * p * h * w / (bh * bw) / ((h - bh + 1) * (w - bw + 1))
    # A seed at (i, j) drops rows i - bh//2 .. i - bh//2 + bh - 1 (columns alike): it is valid where
    # that block fits, and an output row r is dropped by seeds in r - (bh-1)//2 .. r + bh//2, hence
    # the asymmetric padding for even blocks (timm's symmetric padding assumes an odd block).
    top, bottom, left, right = (bh - 1) // 2, bh // 2, (bw - 1) // 2, bw // 2
    lib = _lib(backend)
    F = lib.nn.functional
    if backend.name == "torch":
        rows = lib.arange(h, device=x.device).view(h, 1)
        cols = lib.arange(w, device=x.device).view(1, w)
        valid = (rows >= bh // 2) & (rows < h - (bh - 1) // 2) & (cols >= bw // 2) & (cols < w - (bw - 1) // 2)
        seeds = ((noise < gamma) & valid).to(x.dtype)
        dropped = F.max_pool2d(F.pad(seeds, (left, right, top, bottom)), (bh, bw), stride=1)
        keep = 1 - dropped
        scale = (keep.numel() / keep.to(lib.float32).sum().add(1e-7)).to(x.dtype)
    else:
        rows = lib.arange(h).reshape([h, 1])
        cols = lib.arange(w).reshape([1, w])
        valid = (rows >= bh // 2) & (rows < h - (bh - 1) // 2) & (cols >= bw // 2) & (cols < w - (bw - 1) // 2)
        seeds = lib.logical_and(noise < gamma, valid).astype(x.dtype)
        dropped = F.max_pool2d(F.pad(seeds, [left, right, top, bottom]), [bh, bw], stride=1)
        keep = 1 - dropped
        scale = (float(n * c * h * w) / (keep.astype("float32").sum() + 1e-7)).astype(x.dtype)
    return x * keep * scale
