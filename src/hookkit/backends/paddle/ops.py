"""PaddlePaddle's side of the optional Backend methods: the ops of the interventions, Grad-CAM's
gradients (see ``hookkit.backends.base`` for what each does)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import paddle
import paddle.nn.functional as F


class PaddleOps:
    # -- gradients --------------------------------------------------------------------------------
    # Paddle turns an exception raised inside backward into an OSError
    raises_through_backward = False
    grad_off_text = "stop_gradient=True"
    grad_on_text = "tensor.stop_gradient = False"

    def set_requires_grad(self, t: Any) -> Any:
        t.stop_gradient = False
        return t

    def grads_of(self, output: Any, inputs: Sequence[Any], allow_unused: bool = False) -> tuple:
        return tuple(paddle.grad([output], list(inputs), allow_unused=allow_unused))

    # -- interventions ----------------------------------------------------------------------------
    def clamp(self, t: Any, lo: float | None = None, hi: float | None = None) -> Any:
        return paddle.clip(t, lo, hi)

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        return paddle.where(cond, a, b)

    def zeros_like(self, t: Any) -> Any:
        return paddle.zeros_like(t)

    def topk_mask(self, t: Any, k: int) -> Any:
        zeros, idx = paddle.zeros_like(t), t.topk(k, 1)[1]
        return paddle.put_along_axis(zeros, idx, paddle.ones_like(idx).astype(zeros.dtype), 1)

    def assign(self, param: Any, value: Any) -> None:
        param.set_value(value)

    def dropout(self, t: Any, p: float) -> Any:
        return F.dropout(t, p=p, training=True)

    def channel_dropout(self, t: Any, p: float) -> Any:
        return F.dropout(t, p=p, axis=[0, 1], training=True)

    def bernoulli(self, shape: Sequence[int], p: float, like: Any) -> Any:
        return paddle.bernoulli(paddle.full(list(shape), p, dtype=like.dtype))

    def rand_like(self, t: Any) -> Any:
        return paddle.rand(t.shape, dtype=t.dtype)

    def randn_like(self, t: Any) -> Any:
        return paddle.randn(t.shape, dtype=t.dtype)

    def max_pool2d(self, t: Any, kernel: tuple[int, int], padding: tuple[int, int, int, int]) -> Any:
        return F.max_pool2d(F.pad(t, list(padding)), list(kernel), stride=1)
