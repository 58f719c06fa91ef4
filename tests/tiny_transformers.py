"""Tiny transformers from configs (random weights, seed 0, no download) shared by the standard-name
tests: 2 blocks, width 32, 4 heads, vocabulary 50, 16 positions. ``attn`` is the attention
implementation (``"eager"``, ``"sdpa"``); other keywords go to the config. Import after
``pytest.importorskip("transformers")``."""

from __future__ import annotations

from typing import Any

import torch
import transformers as T

_DECODER = {
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "hidden_size": 32,
    "intermediate_size": 64,
    "vocab_size": 50,
    "max_position_embeddings": 16,
}


def gpt2(attn: str = "eager", **config: Any) -> Any:
    torch.manual_seed(0)
    cfg = T.GPT2Config(n_layer=2, n_head=4, n_embd=32, vocab_size=50, n_positions=16, attn_implementation=attn, **config)
    return T.GPT2LMHeadModel(cfg).eval()


def llama(attn: str | None = None, **config: Any) -> Any:
    """Grouped-query attention: 4 query heads, 2 key/value heads; ``attn`` None: the library's default (SDPA)."""
    torch.manual_seed(0)
    return T.LlamaForCausalLM(T.LlamaConfig(**_DECODER, num_key_value_heads=2, attn_implementation=attn, **config)).eval()


def pythia(**config: Any) -> Any:
    torch.manual_seed(0)
    return T.GPTNeoXForCausalLM(T.GPTNeoXConfig(**_DECODER, **config)).eval()


def paddle_encoder(pre_norm: bool = True) -> Any:
    """Paddle's ``nn.TransformerEncoder`` of the same size (2 layers, width 32, 4 heads, a final norm),
    seed 0, eval mode. Call after ``pytest.importorskip("paddle")``."""
    import paddle

    paddle.seed(0)
    layer = paddle.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, normalize_before=pre_norm)
    model = paddle.nn.TransformerEncoder(layer, 2, norm=paddle.nn.LayerNorm(32))
    model.eval()
    return model
