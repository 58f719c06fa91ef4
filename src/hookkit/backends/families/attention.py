"""``attention``: attention probabilities from a layer's own queries, keys and masks, and (where a
library hands them to a replaceable attention function) a way to see those arguments while the
library keeps its own kernel (SDPA, flash) for the output. Used by ``hookkit.attention_patterns``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def _missing(op: str) -> NotImplementedError:
    return NotImplementedError(f"attention.{op} is not implemented for this framework")


class Attention:
    """The interface; each framework's ``attention`` module subclasses it as ``OPS``."""

    def probs(
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
        """softmax(q k^T * scaling [softcapped] + position_bias + mask) for the selected ``heads``:
        ``q [B, H, Tq, d]``, ``k [B, H_kv, Tk, d]`` (H_kv dividing H: grouped-query heads share a key
        head) -> ``[B, len(heads), Tq, Tk]``, softmax in float32, in q's dtype. ``mask``: boolean
        (True: attend), integer (1: attend) or additive, broadcasting to ``[B, H, Tq, Tk]``; None with
        ``causal``: each query sees keys up to its own index. ``scale_query``: scale q before the product."""
        s = self.scores(
            q, k, heads, scaling, mask=mask, causal=causal, position_bias=position_bias, softcap=softcap, scale_query=scale_query
        )
        return self.softmax(s)  # framework-free: each backend gives scores and softmax

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
        """The scores ``probs`` takes the softmax of (same arguments), in q's dtype: q k^T * scaling
        [softcapped] + position_bias, masked positions at the mask's additive value (boolean or integer
        masks and ``causal``: the dtype's lowest finite value, as transformers and TransformerLens's
        bridge; Paddle: -1e9 added, as its ``nn.MultiHeadAttention``)."""
        raise _missing("scores")

    def softmax(self, scores: Any) -> Any:
        """``probs`` from ``scores``: softmax over the keys in float32, in the scores' dtype."""
        raise _missing("softmax")

    def watch_interface(self, watched: dict[int, Callable[..., None]]) -> Any:
        """A context manager: while inside, every call of the library's attention functions made
        for a module whose ``id`` is in ``watched`` first calls ``watched[id](module, query, key,
        mask, kwargs, implementation)``, then runs the library's own function unchanged."""
        raise _missing("watch_interface")
