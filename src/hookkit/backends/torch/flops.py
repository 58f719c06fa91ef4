"""Mult-adds of a PyTorch forward, per operator (``TorchBackend.mult_add_counter()``).

``torch.utils.flop_counter.FlopCounterMode`` counts matmul, bmm, convolution and the SDPA kernels
(flash, efficient, cuDNN) wherever they are called from: layers, ``F.linear``, ``@``, scripted code.
Its registry misses kernels that PyTorch picks on its own for whole layers; they would count 0:

- recurrent layers: ``mkldnn_rnn_layer`` (the CPU LSTM), ``_cudnn_rnn``, ``miopen_rnn``, ``_lstm_mps``
  (GRU/RNN on CPU, packed sequences and the cells decompose into ``addmm``, already counted; the
  CUDA cells ``_thnn_fused_*_cell`` take precomputed gates and only do elementwise work);
- the inference fast paths of ``nn.MultiheadAttention`` (``_native_multi_head_attention``) and
  ``nn.TransformerEncoderLayer`` (``_transformer_encoder_layer_fwd``), on dense or nested tensors;
- ``_scaled_dot_product_flash_attention_for_cpu`` and ``_scaled_dot_product_fused_attention_overrideable``.

The formulas here count the textbook mult-adds (every multiply-accumulate of the layer's matrix
products; bias adds and elementwise gates are free, as in the registry): a recurrent layer costs
``tokens * (W_ih + W_hh [+ W_hr])`` per layer and direction, attention ``q, k, v and output
projections + 2 * Lq * Lk * E``. The registry counts 2 flops per mult-add; so do these.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import flop_counter

from hookkit.backends.counting import MultAddCounter

aten = torch.ops.aten


def _raw(fn: Any) -> Any:
    """Formulas that need the tensors (nested sizes, tensor lists), not only shapes."""
    fn._get_raw = True
    return fn


def _tokens(t: torch.Tensor) -> int:
    """Rows of a recurrent input: time x batch, or the packed length (``sum(batch_sizes)``)."""
    return t.numel() // int(t.shape[-1]) if t.dim() else 0


def _weights(ts: Any) -> int:
    """Elements of the weight matrices in ``ts`` (biases are 1-d: free)."""
    return sum(t.numel() for t in ts if isinstance(t, torch.Tensor) and t.dim() == 2)


def _lengths(t: torch.Tensor) -> list[int]:
    """Sequence length of each batch element of a [B, L, E] / [L, E] / nested tensor."""
    if t.is_nested:
        return [int(s[0]) for s in t._nested_tensor_size().tolist()]
    if t.dim() == 2:
        return [int(t.shape[0])]
    return [int(t.shape[-2])] * (t.numel() // (int(t.shape[-2]) * int(t.shape[-1])))


def _attention(query: torch.Tensor, key: torch.Tensor, embed_dim: int, with_projections: bool) -> int:
    lq, lk = _lengths(query), _lengths(key)
    scores = sum(a * b for a, b in zip(lq, lk)) * embed_dim  # q @ k^T; attn @ v costs the same
    total = 2 * scores
    if with_projections:
        e2 = embed_dim * embed_dim
        total += 2 * sum(lq) * e2 + 2 * sum(lk) * e2  # q and output projections; k and v projections
    return total


@_raw
def _rnn_layer_flops(input: Any, weight0: Any, weight1: Any, *args: Any, out_val: Any = None, **kwargs: Any) -> int:
    return 2 * _tokens(input) * _weights([weight0, weight1])


@_raw
def _fused_rnn_flops(input: Any, weights: Any, *args: Any, out_val: Any = None, **kwargs: Any) -> int:
    # one kernel for every layer and direction: each sees every token once
    return 2 * _tokens(input) * _weights(weights)


@_raw
def _lstm_mps_flops(input: Any, hx: Any, params: Any, *args: Any, out_val: Any = None, **kwargs: Any) -> int:
    return 2 * _tokens(input) * _weights(params)


@_raw
def _native_mha_flops(query: Any, key: Any, value: Any, embed_dim: int, *args: Any, out_val: Any = None, **kwargs: Any) -> int:
    return 2 * _attention(query, key, int(embed_dim), with_projections=True)


@_raw
def _encoder_layer_flops(src: Any, embed_dim: int, *args: Any, out_val: Any = None, **kwargs: Any) -> int:
    ffn = [kwargs.get("ffn_weight_1"), kwargs.get("ffn_weight_2")] if "ffn_weight_1" in kwargs else [args[12], args[14]]
    tokens = sum(_lengths(src))
    return 2 * (_attention(src, src, int(embed_dim), with_projections=True) + tokens * _weights(ffn))


@_raw
def _linear_flops(input: Any, weight: Any, *args: Any, out_val: Any = None, **kwargs: Any) -> int:
    # registered so that linear is not decomposed: its decomposition fails on nested tensors, which
    # an nn.TransformerEncoder hands its layers in eval when they cannot take their fast path
    rows = sum(_lengths(input)) if input.is_nested else input.numel() // max(1, int(input.shape[-1]))
    return 2 * rows * weight.numel()


@_raw
def _free(*args: Any, out_val: Any = None, **kwargs: Any) -> int:
    return 0  # elementwise work; registered so that it is not decomposed (nested tensors, see above)


def _sdpa_flops(query_shape: Any, key_shape: Any, value_shape: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    return flop_counter.sdpa_flop_count(query_shape, key_shape, value_shape)


def _int_mm_flops(a_shape: Any, b_shape: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    return 2 * int(a_shape[0]) * int(a_shape[1]) * int(b_shape[1])  # int8 x int8 -> int32 (torchao's dynamic int8)


def _int8pack_mm_flops(x_shape: Any, w_shape: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    rows = 1
    for d in x_shape[:-1]:
        rows *= int(d)
    return 2 * rows * int(w_shape[0]) * int(w_shape[1])  # int8 weights [N, K], float input [..., K]


_EXTRA = {
    "_int_mm": _int_mm_flops,
    "_weight_int8pack_mm": _int8pack_mm_flops,
    "mkldnn_rnn_layer": _rnn_layer_flops,
    "_cudnn_rnn": _fused_rnn_flops,
    "miopen_rnn": _fused_rnn_flops,
    "_lstm_mps": _lstm_mps_flops,
    "_native_multi_head_attention": _native_mha_flops,
    "_transformer_encoder_layer_fwd": _encoder_layer_flops,
    "linear": _linear_flops,
    "native_layer_norm": _free,
    "native_dropout": _free,
    "_scaled_dot_product_flash_attention_for_cpu": _sdpa_flops,
    "_scaled_dot_product_fused_attention_overrideable": _sdpa_flops,
}


#: kernels of quantization libraries, counted once the library has registered them
#: (optimum-quanto's int8 matmul: activations [..., K] x int8 weights [N, K])
_LIBRARY = {("quanto", "qbytes_mm"): _int8pack_mm_flops}


def _library_ops() -> dict:
    found = {}
    for (namespace, name), fn in _LIBRARY.items():
        try:
            op = getattr(getattr(torch.ops, namespace), name)
        except (AttributeError, RuntimeError):
            continue  # the library is not loaded
        found[op] = fn
        for overload in op.overloads():
            found[getattr(op, overload)] = fn
    return found


def extra_formulas() -> dict:
    """Formulas for the kernels the registry misses, keyed by op packet (only ops this build has)."""
    formulas = _library_ops()
    for name, fn in _EXTRA.items():
        op = getattr(aten, name, None)
        if op is not None and op not in flop_counter.flop_registry:
            formulas[op] = fn  # counting looks up the packet
            for overload in op.overloads():  # the mode decomposes an overload absent from the registry
                formulas[getattr(op, overload)] = fn
    return formulas


class TorchOpCounter(MultAddCounter):
    label = (
        "per operator (torch.utils.flop_counter: matmul, conv, attention and recurrent kernels, "
        "functional calls included; elementwise ops are free)"
    )

    def __init__(self) -> None:
        self._mode = flop_counter.FlopCounterMode(display=False, custom_mapping=extra_formulas())
        self._global: dict = {}

    def __enter__(self) -> TorchOpCounter:
        self._mode.__enter__()
        self._global = self._mode.flop_counts["Global"]
        return self

    def __exit__(self, *exc: Any) -> None:
        self._mode.__exit__(*exc)

    def total(self) -> int:
        return sum(self._global.values()) // 2
