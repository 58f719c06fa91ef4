"""PyTorch's ``propagation`` family (see ``hookkit.backends.families.propagation``)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from hookkit.backends.families.propagation import PropagationOps


class TorchPropagationOps(PropagationOps):
    def rescale(self, grad_in: Any, grad_out: Any, d_in: Any, d_out: Any, eps: float) -> Any:
        return torch.where(d_in.abs() < eps, grad_in, grad_out * d_out / d_in)

    def maxpool_rescale(self, layer: Any, v_in: Any, v_out: Any, grad_in: Any, grad_out: Any, eps: float) -> Any:
        dims = {torch.nn.MaxPool1d: 1, torch.nn.MaxPool2d: 2, torch.nn.MaxPool3d: 3}.get(type(layer))
        if dims is None:
            return None
        pool = getattr(F, f"max_pool{dims}d")
        unpool = getattr(F, f"max_unpool{dims}d")
        with torch.no_grad():
            x, ref = v_in.chunk(2)
            out, out_ref = v_out.chunk(2)
            d_in = torch.cat([x - ref] * 2)
            top = torch.max(out, out_ref)
            d_out = torch.cat([top - out_ref, out - top])
            _, idx = pool(v_in, layer.kernel_size, layer.stride, layer.padding, layer.dilation, layer.ceil_mode, True)
            up = unpool(grad_out * d_out, idx, layer.kernel_size, layer.stride, layer.padding, list(v_in.shape))
            a, b = up.chunk(2)
            up = torch.cat([a + b] * 2)
        return torch.where(d_in.abs() < eps, grad_in, up / d_in)

    def stabilize(self, z: Any, eps: float) -> Any:
        return z + ((z == 0).to(z.dtype) + z.sign()) * eps

    def clamp(self, t: Any, low: float | None = None, high: float | None = None) -> Any:
        return t.clamp(min=low, max=high)

    def sign(self, t: Any) -> Any:
        return t.sign()

    def can_call_with(self, layer: Any) -> bool:
        return isinstance(layer, (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d))

    def call_with(self, layer: Any, x: Any, weight: Any, bias: Any) -> Any:
        if isinstance(layer, torch.nn.Linear):
            return F.linear(x, weight, bias)
        if isinstance(layer, (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)):
            return layer._conv_forward(x, weight, bias)
        return None


OPS = TorchPropagationOps()
