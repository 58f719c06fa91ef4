"""PyTorch's ``tokens`` family (see ``hookkit.backends.families.tokens``): ``transformers`` models
(cache objects of 4.x and 5.x, legacy tuple caches, ``cache_position``) and ``torch.nn`` transformers."""

from __future__ import annotations

import weakref
from typing import Any

import torch

from hookkit.backends.families.tokens import Index, Tokens, along, runs

# the inputs whose length along the token axis is the forward's number of tokens, decoder first
_TOKEN_INPUTS = ("decoder_input_ids", "decoder_inputs_embeds", "input_ids", "inputs_embeds", "tgt", "src")
_CACHE_INPUTS = ("cache", "past_key_values", "past_key_value")
_dims: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _model_token_dim(model: Any) -> int | None:
    for m in model.modules():
        cls = type(m)
        if any(c.__module__.startswith("transformers.") and c.__name__ == "PreTrainedModel" for c in cls.__mro__):
            return 1  # every transformers text model is batch-first
        if isinstance(
            m, (torch.nn.Transformer, torch.nn.TransformerEncoderLayer, torch.nn.TransformerDecoderLayer, torch.nn.MultiheadAttention)
        ):
            return 1 if getattr(m, "batch_first", False) else 0
    return None


def _cache_length(cache: Any) -> int:
    get = getattr(cache, "get_seq_length", None)
    if get is not None:
        n = get()
        # A static cache counts in a 0-d tensor (kept on the device for torch.compile): one read per
        # root forward, where generate() itself syncs every step to test its stopping criteria.
        return int(n)
    if isinstance(cache, (tuple, list)) and cache:  # legacy ((k, v), ...) with k [B, H, T, D]
        first = cache[0]
        if isinstance(first, (tuple, list)) and first and isinstance(first[0], torch.Tensor):
            return int(first[0].shape[-2])
    return 0


class TorchTokens(Tokens):
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
        if not kwargs and token_dim is None:  # no cache, no token axis: a plain model's forward
            return 0, None, False
        offset, cached = 0, False
        for key in _CACHE_INPUTS:
            cache = kwargs.get(key)
            if cache is not None:
                offset, cached = _cache_length(cache), True
                break
        else:
            cp = kwargs.get("cache_position")
            if isinstance(cp, torch.Tensor) and cp.numel():
                offset, cached = int(cp.reshape(-1)[0]), True  # older transformers: one read per root forward
        tokens = None
        if token_dim is not None:
            for key in _TOKEN_INPUTS:
                t = kwargs.get(key)
                if isinstance(t, torch.Tensor):
                    break
            else:
                t = next((a for a in args if isinstance(a, torch.Tensor)), None)
            if t is not None and t.ndim > token_dim:
                tokens = int(t.shape[token_dim])
        return offset, tokens, cached

    def take(self, t: Any, dim: int, index: Index) -> Any:
        if isinstance(index, slice):
            return t[along(dim, index)]
        return t.index_select(dim, torch.as_tensor(list(index), dtype=torch.long, device=t.device))

    def put(self, t: Any, dim: int, index: Index, values: Any) -> Any:
        parts = runs(index)
        if len(parts) == 1:
            a, b = parts[0]
            pieces = [t[along(dim, slice(0, a))], values, t[along(dim, slice(b, None))]]
            return torch.cat([p for p in pieces if p.shape[dim]], dim=dim)
        assert not isinstance(index, slice)  # runs() gives a slice one part
        idx = torch.as_tensor(list(index), dtype=torch.long, device=t.device)
        return t.index_copy(dim, idx, values.to(t.dtype))


OPS = TorchTokens()
