"""``attention``: attention probabilities from a layer's own queries, keys and masks, and (where a
library hands them to a replaceable attention function) a way to see those arguments while the
library keeps its own kernel (SDPA, flash) for the output, or to run that call eagerly instead.
Used by ``hookkit.attention_patterns`` and the ``hook_attn_scores``/``hook_pattern`` standard names."""

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

    def mix(self, probs: Any, value: Any, dropout: float, training: bool) -> tuple[Any, Any]:
        """The rest of an eager attention call after the softmax: ``probs [B, H, Tq, Tk]`` in
        ``value``'s dtype, dropout (``dropout`` when ``training``), times ``value [B, H_kv, Tk, d]``
        (grouped-query: each key/value head serves ``H / H_kv`` heads) -> ``(output [B, Tq, H, d],
        probs after dropout)``, as transformers' eager attention functions return them."""
        raise _missing("mix")

    def route_interface(self, modules: Sequence[Any], route: Callable[..., Any]) -> Any:
        """Until the returned handle's ``remove()``: every call of the library's attention function
        made for one of ``modules`` calls ``route(original, module, query, key, value, mask, args,
        kwargs, implementation)`` instead, which returns what the call returns (``original`` is the
        library's function for that call). Nothing of the library is left changed after the last
        handle is removed."""
        raise _missing("route_interface")
