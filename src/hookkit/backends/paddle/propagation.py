"""PaddlePaddle's ``propagation`` family (see ``hookkit.backends.families.propagation``)."""

from __future__ import annotations

from typing import Any

import paddle
import paddle.nn.functional as F

from hookkit.backends.families.propagation import PropagationOps


class PaddlePropagationOps(PropagationOps):
    grad_in_backward = False  # paddle.grad inside a PyLayer's backward crashes the process (Paddle 3.3)

    def rescale(self, grad_in: Any, grad_out: Any, d_in: Any, d_out: Any, eps: float) -> Any:
        small = d_in.abs() < eps
        safe = paddle.where(small, paddle.ones_like(d_in), d_in)
        return paddle.where(small, grad_in, grad_out * d_out / safe)

    def maxpool_rescale(self, layer: Any, v_in: Any, v_out: Any, grad_in: Any, grad_out: Any, eps: float) -> Any:
        if not isinstance(layer, paddle.nn.MaxPool2D):
            return None
        with paddle.no_grad():
            x, ref = paddle.chunk(v_in, 2)
            out, out_ref = paddle.chunk(v_out, 2)
            d_in = paddle.concat([x - ref] * 2)
            top = paddle.maximum(out, out_ref)
            d_out = paddle.concat([top - out_ref, out - top])
            args = dict(kernel_size=layer.ksize, stride=layer.stride, padding=layer.padding, data_format=layer.data_format)
            _, idx = F.max_pool2d(v_in, return_mask=True, ceil_mode=layer.ceil_mode, **args)
            up = F.max_unpool2d(grad_out * d_out, idx, output_size=list(v_in.shape), **args)
            a, b = paddle.chunk(up, 2)
            up = paddle.concat([a + b] * 2)
            small = d_in.abs() < eps
            safe = paddle.where(small, paddle.ones_like(d_in), d_in)
        return paddle.where(small, grad_in, up / safe)

    def stabilize(self, z: Any, eps: float) -> Any:
        return z + ((z == 0).astype(z.dtype) + paddle.sign(z)) * eps

    def clamp(self, t: Any, low: float | None = None, high: float | None = None) -> Any:
        return paddle.clip(t, min=low, max=high)

    def sign(self, t: Any) -> Any:
        return paddle.sign(t)

    def can_call_with(self, layer: Any) -> bool:
        return isinstance(layer, (paddle.nn.Linear, paddle.nn.Conv2D))

    def call_with(self, layer: Any, x: Any, weight: Any, bias: Any) -> Any:
        if isinstance(layer, paddle.nn.Linear):
            return F.linear(x, weight, bias)
        if isinstance(layer, paddle.nn.Conv2D):
            return F.conv2d(
                x, weight, bias, stride=layer._stride, padding=layer._padding, dilation=layer._dilation,
                groups=layer._groups, data_format=layer._data_format,
            )  # fmt: skip
        return None


OPS = PaddlePropagationOps()
