"""PaddlePaddle's ``attention`` family (see ``hookkit.backends.families.attention``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import paddle
import paddle.nn.functional as F

from hookkit.backends.families.attention import Attention


def _heads_of(t: Any, heads: Sequence[int], n_heads: int) -> Any:
    if t.ndim < 4 or t.shape[1] == 1 or list(heads) == list(range(n_heads)):
        return t
    return paddle.index_select(t, paddle.to_tensor(list(heads), dtype="int64"), axis=1)


class PaddleAttention(Attention):
    def scores(
        self,
        q: Any,
        k: Any,
        heads: Sequence[int],
        scaling: float,
        *,
        mask: Any = None,
        causal: bool = False,
        position_bias: Any = None,
        softcap: float | None = None,
        scale_query: bool = False,
    ) -> Any:
        n_heads, n_kv = q.shape[1], k.shape[1]
        group = n_heads // n_kv
        qs = paddle.index_select(q, paddle.to_tensor(list(heads), dtype="int64"), axis=1)
        ks = paddle.index_select(k, paddle.to_tensor([h // group for h in heads], dtype="int64"), axis=1)
        if scale_query:
            s = paddle.matmul(qs * scaling, ks, transpose_y=True)
        else:
            s = paddle.matmul(qs, ks, transpose_y=True) * scaling
        if softcap:
            s = paddle.tanh(s / softcap) * softcap
        tq, tk = s.shape[-2], s.shape[-1]
        if position_bias is not None:
            s = s + _heads_of(position_bias[..., :tk], heads, n_heads)
        if mask is not None:
            mask = _heads_of(mask[..., :tk], heads, n_heads)
            if mask.dtype != s.dtype and (mask.dtype == paddle.bool or "int" in str(mask.dtype)):
                mask = (paddle.cast(mask, s.dtype) - 1.0) * 1e9  # Paddle's own conversion (nn.MultiHeadAttention)
            s = s + paddle.cast(mask, s.dtype)
        elif causal and tq > 1:
            above = paddle.triu(paddle.ones([tq, tk], dtype=s.dtype), 1)
            s = s - above * 1e9
        return s

    def softmax(self, scores: Any) -> Any:
        return F.softmax(paddle.cast(scores, "float32"), axis=-1).astype(scores.dtype)


OPS = PaddleAttention()
