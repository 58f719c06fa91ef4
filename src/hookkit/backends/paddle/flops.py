"""Mult-adds of a Paddle forward, per layer type (``PaddleBackend.mult_add_counter()``).

Paddle has no operator-level counter a forward can run under, so each observed layer call adds the
textbook count of its own work (its sublayers' calls add theirs) at its post event:

- Linear: ``out elements * in_features``; Conv*: ``out elements * in/groups * kernel``;
  Conv*Transpose: ``in elements * out/groups * kernel``; norms: 1 per output element;
- MultiHeadAttention: ``2 * B * Lq * Lk * E`` (q @ k^T and weights @ v; the projections are Linear sublayers);
- LSTM / GRU / SimpleRNN: ``tokens * (W_ih + W_hh)`` over layers and directions (Paddle runs them
  in one fused kernel, so their cells are not called); the cells (LSTMCell...) per call: ``B * (W_ih + W_hh)``.
  A recurrent layer whose cells did run (``nn.RNN(cell)``) is not counted twice.

Functional calls (``F.linear``, ``paddle.matmul``) are not seen. ``paddle.flops`` counts the same for
Linear; it does not count attention matmuls nor recurrent layers, and counts biases in convolutions.
"""

from __future__ import annotations

from typing import Any

import paddle
import paddle.nn as nn

from hookkit.backends.counting import MultAddCounter
from hookkit.core.tree import leaves

_TRANSPOSED = (nn.Conv1DTranspose, nn.Conv2DTranspose, nn.Conv3DTranspose)
_CONVS = (nn.Conv1D, nn.Conv2D, nn.Conv3D)
_NORMS = (
    nn.BatchNorm,
    nn.BatchNorm1D,
    nn.BatchNorm2D,
    nn.BatchNorm3D,
    nn.LayerNorm,
    nn.GroupNorm,
    nn.InstanceNorm1D,
    nn.InstanceNorm2D,
    nn.InstanceNorm3D,
    nn.SyncBatchNorm,
)
_CELLS = (nn.LSTMCell, nn.GRUCell, nn.SimpleRNNCell)
_RNNS = (nn.LSTM, nn.GRU, nn.SimpleRNN)


def _numel(shape: Any) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _matrices(layer: Any) -> int:
    """Elements of the layer's weight matrices (biases are 1-d: their adds are free)."""
    seen = {id(p): p for p in layer.parameters()}
    return sum(_numel(p.shape) for p in seen.values() if len(p.shape) == 2)


def _arg(args: tuple, kwargs: dict, i: int, name: str) -> Any:
    return args[i] if len(args) > i and args[i] is not None else kwargs.get(name)


class PaddleRuleCounter(MultAddCounter):
    label = (
        "per layer type (Paddle): Linear, Conv*, Conv*Transpose, norms (1 per output element), "
        "MultiHeadAttention matmuls, LSTM/GRU/SimpleRNN and their cells; functional calls are not counted"
    )

    def __init__(self) -> None:
        self._total = 0
        self._open: dict[int, list[int]] = {}  # layer id -> totals at its open calls' pre events

    def total(self) -> int:
        return self._total

    def before_call(self, layer: Any, args: tuple, kwargs: dict) -> None:
        if isinstance(layer, _RNNS):
            self._open.setdefault(id(layer), []).append(self._total)

    def after_call(self, layer: Any, args: tuple, kwargs: dict, output: Any) -> None:
        inside = 0
        if isinstance(layer, _RNNS):
            opened = self._open.get(id(layer))
            inside = self._total - opened.pop() if opened else 0
        self._total += max(0, layer_mult_adds(layer, args, kwargs, output) - inside)


def layer_mult_adds(layer: Any, args: tuple, kwargs: dict, output: Any) -> int:
    """Textbook mult-adds of one Paddle layer call, its sublayers' calls excluded."""
    out = leaves(output, lambda t: isinstance(t, paddle.Tensor))
    if not out:
        return 0
    out_n = _numel(out[0].shape)
    if isinstance(layer, nn.Linear):
        return out_n * int(layer.weight.shape[0])  # weight is [in, out]
    if isinstance(layer, _TRANSPOSED):
        x = _arg(args, kwargs, 0, "x")
        return _numel(x.shape) * _numel(layer.weight.shape[1:])  # weight is [in, out/groups, *k]
    if isinstance(layer, _CONVS):
        return out_n * _numel(layer.weight.shape[1:])  # weight is [out, in/groups, *k]
    if isinstance(layer, _NORMS):
        return out_n
    if isinstance(layer, nn.MultiHeadAttention):
        q = _arg(args, kwargs, 0, "query")
        k = _arg(args, kwargs, 1, "key")
        k = q if k is None else k
        b, lq, e = (int(s) for s in q.shape)
        return 2 * b * lq * int(k.shape[1]) * e
    if isinstance(layer, _RNNS):
        x = _arg(args, kwargs, 0, "inputs")
        tokens = _numel(x.shape[:-1])  # [B, T, I] or time-major [T, B, I]: every step of every sequence
        return tokens * _matrices(layer)
    if isinstance(layer, _CELLS):
        x = _arg(args, kwargs, 0, "inputs")
        return _numel(x.shape[:-1]) * _matrices(layer)
    return 0
