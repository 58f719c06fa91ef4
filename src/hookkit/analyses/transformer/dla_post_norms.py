"""Direct logit attribution for families whose attention and MLP outputs pass a norm before they join
the residual stream (Gemma 2's ``post_attention_layernorm`` / ``post_feedforward_layernorm``).

What is additive there is what the residual stream is the sum of: the embeddings and each block's
attention and MLP outputs *after* their post-norms (``hook_attn_out``, ``hook_mlp_out``, as
TransformerLens's ``decompose_resid`` gives them on the bridge). The heads are not: the post-norm
divides their sum by its RMS, so a head's share depends on the others. Gemma 2's final logit
softcapping (``tanh``) is not linear either, so the rows sum to the logit before it.

>>> dla = hookkit.logit_attribution(gemma2, ids, tokens=answer)    # doctest: +SKIP
>>> dla.labels[:3]
['embed', '0_attn_out', '0_mlp_out']
"""

from __future__ import annotations

from typing import Any

from hookkit.core.errors import UnsupportedModel


def _slice_pos(t: Any, pos: int) -> Any:
    return t[:, pos]


def post_norm_components(cache: Any, pos: int) -> tuple[list[Any], list[str]]:
    """``(items [batch, d_model] each, labels)``: the embeddings, then each block's normed attention
    and MLP outputs at position ``pos`` (they sum to the last block's output)."""
    embeds, labels = cache._embeds()
    items = [_slice_pos(t, pos) for t in embeds]
    for i in range(cache.n_layers):
        for part in ("attn", "mlp"):
            items.append(_slice_pos(cache[f"blocks.{i}.hook_{part}_out"], pos))
            labels.append(f"{i}_{part}_out")
    return items, labels


def no_heads(n_layers: int) -> None:
    """Refuse per-head results of a post-norm family, saying why."""
    raise UnsupportedModel(
        "logit_attribution: this model's attention output passes a norm (RMS of the heads' sum) before the residual "
        "stream, so a head's contribution is not additive and no per-head result is given; the rows are the "
        f"embeddings and each of the {n_layers} blocks' normed attn_out and mlp_out (labels), summing to the logit "
        "before the final softcapping"
    )


def no_full_decomposition() -> None:
    """Refuse ``get_full_resid_decomposition`` on a post-norm family: its heads and neurons do not sum
    to the residual stream (TransformerBridge returns them anyway; the sum would be silently wrong)."""
    raise UnsupportedModel(
        "get_full_resid_decomposition: this model's attention and MLP outputs pass a norm before the residual stream, "
        "so its heads and neurons do not sum to it; decompose_resid() gives the normed attn_out and mlp_out, which do "
        "(stack_head_results() still gives each head's output before the norm)"
    )
