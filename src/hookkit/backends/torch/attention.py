"""PyTorch's ``attention`` family (see ``hookkit.backends.families.attention``). The interface
watcher wraps the functions of transformers' ``AttentionInterface`` (the library's documented
extension point), restoring them on exit."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from hookkit.backends.families.attention import Attention

_lock = threading.Lock()
_watched: dict[int, Callable[..., None]] = {}
_routes: dict[int, Callable[..., Any]] = {}  # module id -> route (route_interface)
_installed: dict[str, Any] = {}  # implementation -> the function it had before (None: absent)
_users = [0]


def _heads_of(t: Any, heads: Sequence[int], n_heads: int) -> Any:
    """``t [B, H or 1, ...]`` -> the selected heads (a broadcasting dim of 1 is kept)."""
    if t.dim() < 4 or t.shape[1] == 1 or len(heads) == n_heads and list(heads) == list(range(n_heads)):
        return t
    return t.index_select(1, torch.as_tensor(list(heads), device=t.device))


class TorchAttention(Attention):
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
        if len(heads) == n_heads and list(heads) == list(range(n_heads)):  # every head: the eager functions' own products
            qs = q
            ks = k if group == 1 else k[:, :, None].expand(k.shape[0], n_kv, group, *k.shape[2:]).reshape(k.shape[0], n_heads, *k.shape[2:])
        else:
            idx = torch.as_tensor(list(heads), device=q.device)
            qs = q.index_select(1, idx)
            ks = k.index_select(1, idx // group)
        if scale_query:
            s = torch.matmul(qs * scaling, ks.transpose(-1, -2))
        else:
            s = torch.matmul(qs, ks.transpose(-1, -2)) * scaling
        if softcap:
            s = torch.tanh(s / softcap) * softcap
        tq, tk = s.shape[-2], s.shape[-1]
        if position_bias is not None:
            s = s + _heads_of(position_bias[..., :tk], heads, n_heads)
        if mask is not None:
            mask = _heads_of(mask[..., :tk], heads, n_heads)
            if mask.dtype == torch.bool:
                s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
            elif not mask.is_floating_point():
                s = s.masked_fill(mask == 0, torch.finfo(s.dtype).min)
            else:
                s = s + mask.to(s.dtype)
        elif causal and tq > 1:
            above = torch.ones(tq, tk, dtype=torch.bool, device=s.device).triu(1 + tk - tq)
            s = s.masked_fill(above, torch.finfo(s.dtype).min)
        return s

    def softmax(self, scores: Any) -> Any:
        return torch.softmax(scores.float(), dim=-1).to(scores.dtype)

    def mix(self, probs: Any, value: Any, dropout: float, training: bool) -> tuple[Any, Any]:
        p = probs.to(value.dtype)
        if dropout:
            p = torch.nn.functional.dropout(p, p=dropout, training=training)
        n_heads, n_kv = p.shape[1], value.shape[1]
        if n_heads != n_kv:  # transformers' repeat_kv: each key/value head serves n_heads / n_kv heads
            b, _, t, d = value.shape
            value = value[:, :, None].expand(b, n_kv, n_heads // n_kv, t, d).reshape(b, n_heads, t, d)
        return torch.matmul(p, value).transpose(1, 2), p

    @contextlib.contextmanager
    def watch_interface(self, watched: dict[int, Callable[..., None]]) -> Iterator[None]:
        with _lock:
            overlap = set(watched) & set(_watched)
            if overlap:
                raise RuntimeError("attention_patterns(): another attention_patterns call is running on the same layers")
            _install()
            _watched.update(watched)
        try:
            yield
        finally:
            with _lock:
                for key in watched:
                    _watched.pop(key, None)
                _uninstall()

    def route_interface(self, modules: Sequence[Any], route: Callable[..., Any]) -> Any:
        keys = [id(m) for m in modules]
        with _lock:
            taken = [k for k in keys if k in _routes]
            if taken:
                raise RuntimeError("the attention function of this layer is already routed (a second slot on the same module)")
            _install()
            for k in keys:
                _routes[k] = route
        return _Routed(keys)


class _Routed:
    """The handle of ``route_interface``: ``remove()`` takes the route away (once)."""

    __slots__ = ("keys",)

    def __init__(self, keys: list[int]):
        self.keys = keys

    def remove(self) -> None:
        with _lock:
            keys, self.keys = self.keys, []
            if not keys:
                return
            for k in keys:
                _routes.pop(k, None)
            _uninstall()


def _install() -> None:
    """Wrap the functions of transformers' ``AttentionInterface`` (under ``_lock``; counted)."""
    try:
        from transformers.modeling_utils import AttentionInterface
    except ImportError as exc:  # pragma: no cover - transformers is what the families name
        raise NotImplementedError("attention patterns of this layer need transformers' AttentionInterface") from exc
    _users[0] += 1
    if _users[0] == 1:
        mapping = AttentionInterface._global_mapping
        for impl in [*mapping, "eager"]:
            if impl not in _installed:
                _installed[impl] = mapping.get(impl)
                AttentionInterface.register(impl, _wrapper(impl, mapping.get(impl)))


def _uninstall() -> None:
    """The last user gone: the library's own functions back (under ``_lock``)."""
    _users[0] -= 1
    if _users[0] == 0:
        from transformers.modeling_utils import AttentionInterface  # lazy: imported by _install already

        mapping = AttentionInterface._global_mapping
        for impl, before in _installed.items():
            if before is None:
                mapping.pop(impl, None)
            else:
                mapping[impl] = before
        _installed.clear()


def _wrapper(impl: str, original: Any) -> Callable[..., Any]:
    def attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, *args: Any, **kwargs: Any) -> Any:
        fn = original
        if fn is None:  # "eager": the module's own function, the library's default
            fn = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
            if fn is None:
                raise RuntimeError(f"attention_patterns(): no eager attention function found for {type(module).__name__}")
        watch = _watched.get(id(module))
        if watch is not None:
            watch(module, query, key, attention_mask, kwargs, impl)
        route = _routes.get(id(module))
        if route is not None:
            return route(fn, module, query, key, value, attention_mask, args, kwargs, impl)
        return fn(module, query, key, value, attention_mask, *args, **kwargs)

    attention.__wrapped__ = original  # type: ignore[attr-defined]
    return attention


OPS = TorchAttention()
