"""PaddlePaddle's ``tensor_math`` family (see ``hookkit.backends.families.tensor_math``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import paddle
import paddle.nn.functional as F

from hookkit.backends.families.tensor_math import TensorMath

_LAYOUTS = {1: "NCW", 2: "NCHW", 3: "NCDHW"}


class PaddleTensorMath(TensorMath):
    def sum(self, t: Any, dims: Sequence[int], keepdim: bool = False) -> Any:
        return paddle.sum(t, axis=list(dims), keepdim=keepdim)

    def mean(self, t: Any, dims: Sequence[int], keepdim: bool = False) -> Any:
        return paddle.mean(t, axis=list(dims), keepdim=keepdim)

    def amax(self, t: Any, dims: Sequence[int], keepdim: bool = False) -> Any:
        return paddle.amax(t, axis=list(dims), keepdim=keepdim)

    def amin(self, t: Any, dims: Sequence[int], keepdim: bool = False) -> Any:
        return paddle.amin(t, axis=list(dims), keepdim=keepdim)

    def argmax(self, t: Any, dim: int) -> Any:
        return paddle.argmax(t, axis=dim)

    def permute(self, t: Any, dims: Sequence[int]) -> Any:
        return paddle.transpose(t, perm=list(dims))

    def reshape(self, t: Any, shape: Sequence[int]) -> Any:
        return paddle.reshape(t, list(shape))

    def cat(self, ts: Sequence[Any], dim: int) -> Any:
        return paddle.concat(list(ts), axis=dim)

    def stack(self, ts: Sequence[Any], dim: int = 0) -> Any:
        return paddle.stack(list(ts), axis=dim)

    def relu(self, t: Any) -> Any:
        return F.relu(t)

    def softmax(self, t: Any, dim: int) -> Any:
        return F.softmax(t, axis=dim)

    def log_softmax(self, t: Any, dim: int) -> Any:
        return F.log_softmax(t, axis=dim)

    def einsum(self, equation: str, *ts: Any) -> Any:
        return paddle.einsum(equation, *ts)

    def flip(self, t: Any, dims: Sequence[int]) -> Any:
        return paddle.flip(t, axis=list(dims))

    def interpolate(self, t: Any, size: Sequence[int], mode: str) -> Any:
        size = [int(s) for s in size]
        layout = _LAYOUTS[len(size)]
        if mode == "nearest":
            return F.interpolate(t, size=size, mode="nearest", data_format=layout)
        # align_mode=0 with align_corners=False: half-pixel centres, as torch and OpenCV
        return F.interpolate(t, size=size, mode=mode, align_corners=False, align_mode=0, data_format=layout)

    def svd(self, t: Any) -> tuple[Any, Any, Any]:
        return tuple(paddle.linalg.svd(t, full_matrices=False))

    def full(self, shape: Sequence[int], value: float, like: Any) -> Any:
        return paddle.full(list(shape), value, dtype=like.dtype).to(like.place)

    def arange(self, n: int, like: Any) -> Any:
        return paddle.arange(n, dtype="int64").to(like.place)

    def index_select(self, t: Any, dim: int, index: Any) -> Any:
        if not isinstance(index, paddle.Tensor):
            index = paddle.to_tensor(list(index), dtype="int64", place=t.place)
        return paddle.index_select(t, index, axis=dim)

    def gather(self, t: Any, dim: int, index: Any) -> Any:
        return paddle.take_along_axis(t, index, axis=dim)

    def topk(self, t: Any, k: int, dim: int = -1) -> tuple[Any, Any]:
        values, indices = paddle.topk(t, k, axis=dim)
        return values, indices

    def isfinite(self, t: Any) -> Any:
        return paddle.isfinite(t)

    def interpolate_aligned(self, t: Any, size: Sequence[int], mode: str) -> Any:
        size = [int(s) for s in size]
        return F.interpolate(t, size=size, mode=mode, align_corners=True, data_format=_LAYOUTS[len(size)])

    def nan_to_zero(self, t: Any) -> Any:
        return paddle.where(paddle.isnan(t), paddle.zeros_like(t), t)

    def tile_rows(self, t: Any, k: int) -> Any:
        return paddle.tile(t, [k] + [1] * (t.ndim - 1))

    def repeat_rows(self, t: Any, k: int) -> Any:
        return paddle.repeat_interleave(t, k, axis=0)

    def abs(self, t: Any) -> Any:
        return paddle.abs(t)

    def eigh(self, t: Any) -> tuple[Any, Any]:
        return tuple(paddle.linalg.eigh(t))

    def version(self, t: Any) -> int | None:
        return int(t.inplace_version)

    def seed(self, seed: int) -> None:
        paddle.seed(seed)

    def conv_layout(self, t: Any) -> Any:
        return t  # a Paddle layer's data_format fixes its layout


OPS = PaddleTensorMath()
