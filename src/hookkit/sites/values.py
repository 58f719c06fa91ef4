"""Values written at a site: a user's tensor, array or list turned into a tensor like the one it
meets (device, dtype), converted once per (device, dtype); shape words for messages."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from hookkit.backends import Backend


def shape_str(shape: Iterable[int]) -> str:
    """``[2, 3]``: a shape as messages show it."""
    return "[" + ", ".join(str(int(s)) for s in shape) + "]"


def cast_like(be: Backend, t: Any, like: Any) -> Any:
    """``t`` on ``like``'s device with ``like``'s dtype (no copy when both already match)."""
    if be.device_of(t) != be.device_of(like):
        t = be.to(t, be.device_of(like))
    if t.dtype != like.dtype:
        t = be.cast(t, be.dtype_name(like))
    return t


def to_tensor(be: Backend, value: Any, like: Any) -> Any:
    """A tensor, array or nested list as a tensor matching ``like`` (device, dtype)."""
    if not be.is_tensor(value):
        value = be.from_numpy(np.ascontiguousarray(np.asarray(value, dtype=np.float32)), like=like)
    return cast_like(be, value, like)


def broadcasts_into(small: tuple[int, ...], big: tuple[int, ...]) -> bool:
    """True when ``small`` broadcasts to ``big`` without changing ``big``'s shape."""
    if len(small) > len(big):
        return False
    return all(s in (1, b) for s, b in zip(reversed(small), reversed(big)))


class Converted:
    """A user value converted once per (device, dtype) of the tensors it meets."""

    __slots__ = ("value", "_cache")

    def __init__(self, value: Any):
        self.value = value
        self._cache: dict[tuple[str, str], Any] = {}

    def like(self, be: Backend, t: Any) -> Any:
        key = (be.device_of(t), str(t.dtype))
        out = self._cache.get(key)
        if out is None:
            out = self._cache[key] = to_tensor(be, self.value, t)
        return out
