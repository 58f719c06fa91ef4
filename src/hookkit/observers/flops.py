"""Mult-add counters for ``hookkit.summary``: a running total read before and after each layer call.

A layer's inclusive count is ``total()`` at its post event minus ``total()`` at its pre event, so a
parent includes its children and a layer called three times gets three counts.

- PyTorch: per operator, with ``torch.utils.flop_counter.FlopCounterMode`` (matmul, bmm, conv,
  attention, also from functional calls and ``@``); mult-adds = flops / 2. CPU attention
  (``_scaled_dot_product_flash_attention_for_cpu``) is missing from its registry and added here.
- Paddle: no operator-level counter, so textbook rules per layer type, added at the layer's post event.
"""

from __future__ import annotations

from typing import Any

from hookkit.backends import Backend
from hookkit.core.tree import leaves


class Counter:
    """Running mult-add total of one forward; ``label`` says how the counting is done."""

    label = ""

    def __enter__(self) -> Counter:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def total(self) -> int:
        raise NotImplementedError

    def after_call(self, layer: Any, args: tuple, kwargs: dict, output: Any) -> None:
        """Called at each layer's post event, before its inclusive count is read."""


class TorchOpCounter(Counter):
    label = "per operator (torch.utils.flop_counter: matmul, conv, attention, functional calls included; elementwise ops are free)"

    def __init__(self) -> None:
        from torch.utils.flop_counter import FlopCounterMode

        self._mode = FlopCounterMode(display=False, custom_mapping=_torch_extra_formulas())
        self._global: dict = {}

    def __enter__(self) -> TorchOpCounter:
        self._mode.__enter__()
        self._global = self._mode.flop_counts["Global"]
        return self

    def __exit__(self, *exc: Any) -> None:
        self._mode.__exit__(*exc)

    def total(self) -> int:
        # every registered formula counts 2 flops per multiply-add
        return sum(self._global.values()) // 2


def _torch_extra_formulas() -> dict:
    import torch
    from torch.utils import flop_counter

    extra: dict = {}
    op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if op is not None and op not in flop_counter.flop_registry:

        def sdpa_cpu(query_shape: Any, key_shape: Any, value_shape: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
            return flop_counter.sdpa_flop_count(query_shape, key_shape, value_shape)

        extra[op] = sdpa_cpu
    return extra


class PaddleRuleCounter(Counter):
    label = "per layer type (Paddle): Linear, Conv*, Conv*Transpose, norms (1 per output element), MultiHeadAttention matmuls; functional calls are not counted"

    def __init__(self, backend: Backend) -> None:
        self._be = backend
        self._total = 0

    def total(self) -> int:
        return self._total

    def after_call(self, layer: Any, args: tuple, kwargs: dict, output: Any) -> None:
        self._total += paddle_layer_mult_adds(layer, args, kwargs, output, self._be)


def _numel(shape: Any) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def paddle_layer_mult_adds(layer: Any, args: tuple, kwargs: dict, output: Any, be: Backend) -> int:
    """Textbook mult-adds of one Paddle layer call, its sublayers excluded."""
    import paddle.nn as nn

    out = leaves(output, be.is_tensor)
    if not out:
        return 0
    out_n = be.numel(out[0])
    if isinstance(layer, nn.Linear):
        return out_n * int(layer.weight.shape[0])  # weight is [in, out]
    if isinstance(layer, (nn.Conv1DTranspose, nn.Conv2DTranspose, nn.Conv3DTranspose)):
        x = args[0] if args else kwargs.get("x")
        return be.numel(x) * _numel(layer.weight.shape[1:])  # weight is [in, out/groups, *k]
    if isinstance(layer, (nn.Conv1D, nn.Conv2D, nn.Conv3D)):
        return out_n * _numel(layer.weight.shape[1:])  # weight is [out, in/groups, *k]
    norms = (nn.BatchNorm, nn.BatchNorm1D, nn.BatchNorm2D, nn.BatchNorm3D, nn.LayerNorm, nn.GroupNorm)
    norms += (nn.InstanceNorm1D, nn.InstanceNorm2D, nn.InstanceNorm3D, nn.SyncBatchNorm)
    if isinstance(layer, norms):
        return out_n
    if isinstance(layer, nn.MultiHeadAttention):
        q = args[0] if args else kwargs.get("query")
        k = args[1] if len(args) > 1 and args[1] is not None else kwargs.get("key")
        k = q if k is None else k
        b, lq, e = (int(s) for s in q.shape)
        lk = int(k.shape[1])
        return 2 * b * lq * lk * e  # q @ k^T and attn @ v over all heads; projections are sublayers
    return 0


def counter_for(backend: Backend) -> Counter:
    return TorchOpCounter() if backend.counts_operators else PaddleRuleCounter(backend)
