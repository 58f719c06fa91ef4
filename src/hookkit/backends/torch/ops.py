"""PyTorch's side of the optional Backend methods: the ops of the interventions, Grad-CAM's
gradients (see ``hookkit.backends.base`` for what each does)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F


class TorchOps:
    # -- gradients --------------------------------------------------------------------------------
    def set_requires_grad(self, t: Any) -> Any:
        return t.requires_grad_(True)

    def grads_of(self, output: Any, inputs: Sequence[Any], allow_unused: bool = False) -> tuple:
        return torch.autograd.grad(output, list(inputs), allow_unused=allow_unused)

    # -- interventions ----------------------------------------------------------------------------
    def clamp(self, t: Any, lo: float | None = None, hi: float | None = None) -> Any:
        return t.clamp(min=lo, max=hi)

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        return torch.where(cond, a, b)

    def zeros_like(self, t: Any) -> Any:
        return torch.zeros_like(t)

    def topk_mask(self, t: Any, k: int) -> Any:
        return torch.zeros_like(t).scatter(1, t.topk(k, 1)[1], 1.0)

    def assign(self, param: Any, value: Any) -> None:
        param.data.copy_(value)

    def dropout(self, t: Any, p: float) -> Any:
        return F.dropout(t, p=p, training=True)

    def channel_dropout(self, t: Any, p: float) -> Any:
        if t.ndim == 4:
            return F.dropout2d(t, p=p, training=True)
        # dropout2d warns on other ranks: drop a (N, C, 1, ...) mask of ones instead
        return t * F.dropout(t.new_ones(t.shape[:2] + (1,) * (t.ndim - 2)), p=p, training=True)

    def bernoulli(self, shape: Sequence[int], p: float, like: Any) -> Any:
        return like.new_empty(list(shape)).bernoulli_(p)

    def rand_like(self, t: Any) -> Any:
        return torch.rand_like(t)

    def randn_like(self, t: Any) -> Any:
        return torch.randn_like(t)

    def max_pool2d(self, t: Any, kernel: tuple[int, int], padding: tuple[int, int, int, int]) -> Any:
        return F.max_pool2d(F.pad(t, tuple(padding)), tuple(kernel), stride=1)
