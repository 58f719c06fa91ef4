"""Paddle's ``tokens`` family (see ``hookkit.backends.families.tokens``): ``paddle.nn`` transformers
(batch-first) and their incremental-decoding cache (``MultiHeadAttention.Cache``, ``gen_cache``)."""

from __future__ import annotations

import weakref
from typing import Any

import paddle

from hookkit.backends.families.tokens import Index, Tokens, along, runs

_TOKEN_INPUTS = ("tgt", "src", "input_ids", "inputs_embeds", "query")
_dims: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_SEQUENCE_LAYERS = (paddle.nn.TransformerDecoder, paddle.nn.TransformerEncoder, paddle.nn.MultiHeadAttention, paddle.nn.Transformer)


def _model_token_dim(model: Any) -> int | None:
    layers = [model, *model.sublayers()]
    return 1 if any(isinstance(m, _SEQUENCE_LAYERS) for m in layers) else None  # paddle.nn is batch-first


def _cache_length(value: Any, depth: int = 0) -> int | None:
    """The length of the first ``MultiHeadAttention.Cache`` found in ``value`` (lists of per-layer
    ``(Cache, StaticCache)`` tuples as ``TransformerDecoder.gen_cache`` makes them)."""
    if isinstance(value, paddle.nn.MultiHeadAttention.Cache):
        return int(value.k.shape[2])
    if depth < 3 and isinstance(value, (list, tuple)) and value:
        return _cache_length(value[0], depth + 1)
    return None


class PaddleTokens(Tokens):
    def token_dim(self, model: Any) -> int | None:
        try:
            return _dims[model]
        except KeyError:
            pass
        except TypeError:
            return _model_token_dim(model)
        d = _dims[model] = _model_token_dim(model)
        return d

    def forward_info(self, args: tuple, kwargs: dict, token_dim: int | None) -> tuple[int, int | None, bool]:
        offset, cached = 0, False
        for value in (kwargs.get("cache"), *args[1:], *kwargs.values()):
            if value is None or isinstance(value, paddle.Tensor):
                continue
            n = _cache_length(value)
            if n is not None:
                offset, cached = n, True
                break
        tokens = None
        if token_dim is not None:
            t = next((kwargs[k] for k in _TOKEN_INPUTS if isinstance(kwargs.get(k), paddle.Tensor)), None)
            if t is None:
                t = next((a for a in args if isinstance(a, paddle.Tensor)), None)
            if t is not None and t.ndim > token_dim:
                tokens = int(t.shape[token_dim])
        return offset, tokens, cached

    def take(self, t: Any, dim: int, index: Index) -> Any:
        if isinstance(index, slice):
            return t[along(dim, index)]
        return paddle.index_select(t, paddle.to_tensor(list(index), dtype="int64", place=t.place), axis=dim)

    def put(self, t: Any, dim: int, index: Index, values: Any) -> Any:
        pieces, prev, k = [], 0, 0
        for a, b in runs(index):
            pieces.append(t[along(dim, slice(prev, a))])
            pieces.append(values[along(dim, slice(k, k + b - a))])
            prev, k = b, k + b - a
        pieces.append(t[along(dim, slice(prev, None))])
        return paddle.concat([p for p in pieces if p.shape[dim]], axis=dim)


OPS = PaddleTokens()
