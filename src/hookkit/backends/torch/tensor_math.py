"""PyTorch's ``tensor_math`` family (see ``hookkit.backends.families.tensor_math``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from hookkit.backends.families.tensor_math import TensorMath


class TorchTensorMath(TensorMath):
    def sum(self, t: Any, dims: Sequence[int], keepdim: bool = False) -> Any:
        return t.sum(dim=tuple(dims), keepdim=keepdim)

    def mean(self, t: Any, dims: Sequence[int], keepdim: bool = False) -> Any:
        return t.mean(dim=tuple(dims), keepdim=keepdim)

    def amax(self, t: Any, dims: Sequence[int], keepdim: bool = False) -> Any:
        return t.amax(dim=tuple(dims), keepdim=keepdim)

    def amin(self, t: Any, dims: Sequence[int], keepdim: bool = False) -> Any:
        return t.amin(dim=tuple(dims), keepdim=keepdim)

    def argmax(self, t: Any, dim: int) -> Any:
        return t.argmax(dim=dim)

    def permute(self, t: Any, dims: Sequence[int]) -> Any:
        return t.permute(*dims)

    def reshape(self, t: Any, shape: Sequence[int]) -> Any:
        return t.reshape(*shape)

    def cat(self, ts: Sequence[Any], dim: int) -> Any:
        return torch.cat(list(ts), dim=dim)

    def stack(self, ts: Sequence[Any], dim: int = 0) -> Any:
        return torch.stack(list(ts), dim=dim)

    def relu(self, t: Any) -> Any:
        return torch.relu(t)

    def softmax(self, t: Any, dim: int) -> Any:
        return torch.softmax(t, dim=dim)

    def log_softmax(self, t: Any, dim: int) -> Any:
        return torch.log_softmax(t, dim=dim)

    def einsum(self, equation: str, *ts: Any) -> Any:
        return torch.einsum(equation, *ts)

    def flip(self, t: Any, dims: Sequence[int]) -> Any:
        return t.flip(dims=tuple(dims))

    def interpolate(self, t: Any, size: Sequence[int], mode: str) -> Any:
        corners = None if mode == "nearest" else False
        return F.interpolate(t, size=tuple(int(s) for s in size), mode=mode, align_corners=corners)

    def svd(self, t: Any) -> tuple[Any, Any, Any]:
        return tuple(torch.linalg.svd(t, full_matrices=False))

    def full(self, shape: Sequence[int], value: float, like: Any) -> Any:
        return torch.full(tuple(shape), value, dtype=like.dtype, device=like.device)

    def arange(self, n: int, like: Any) -> Any:
        return torch.arange(n, device=like.device)

    def index_select(self, t: Any, dim: int, index: Any) -> Any:
        if not isinstance(index, torch.Tensor):
            index = torch.as_tensor(list(index), dtype=torch.long, device=t.device)
        return t.index_select(dim, index)

    def gather(self, t: Any, dim: int, index: Any) -> Any:
        return t.gather(dim, index)

    def topk(self, t: Any, k: int, dim: int = -1) -> tuple[Any, Any]:
        values, indices = torch.topk(t, k, dim=dim)
        return values, indices

    def isfinite(self, t: Any) -> Any:
        return torch.isfinite(t)

    def interpolate_aligned(self, t: Any, size: Sequence[int], mode: str) -> Any:
        return F.interpolate(t, size=tuple(int(s) for s in size), mode=mode, align_corners=True)

    def nan_to_zero(self, t: Any) -> Any:
        return torch.nan_to_num(t, nan=0.0, posinf=float("inf"), neginf=float("-inf"))

    def tile_rows(self, t: Any, k: int) -> Any:
        return t.repeat(k, *([1] * (t.dim() - 1)))

    def repeat_rows(self, t: Any, k: int) -> Any:
        return t.repeat_interleave(k, dim=0)

    def abs(self, t: Any) -> Any:
        return t.abs()

    def eigh(self, t: Any) -> tuple[Any, Any]:
        return tuple(torch.linalg.eigh(t))

    def version(self, t: Any) -> int | None:
        return int(t._version)

    def norm_normalized(self, t: Any, kind: str, eps: float, scale: Any = None) -> Any:
        if kind == "layer":  # one fused pass over t, no temporaries: (t - mean) / sqrt(var + eps), no weight or bias
            return torch.nn.functional.layer_norm(t, (t.shape[-1],), eps=eps)
        return super().norm_normalized(t, kind, eps, scale)

    def seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def conv_layout(self, t: Any) -> Any:
        # oneDNN's CPU convolutions run on channels-last natively; a channels-first input is reordered at each
        # convolution (2-2.5x the time of a VGG-style forward on 32 x 32 images, one thread)
        return t.contiguous(memory_format=torch.channels_last) if t.device.type == "cpu" and t.dim() == 4 else t


OPS = TorchTensorMath()
