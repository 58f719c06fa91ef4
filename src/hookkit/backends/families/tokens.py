"""``tokens``: what the token positions of sequence models need from a framework: the model's token
axis, where a forward starts along it (the KV cache's length) and how many tokens it feeds, and
taking / replacing positions along an axis. The core's ``hookkit.core.positions`` asks these;
model-family knowledge (a ``transformers`` cache object, Paddle's ``MultiHeadAttention.Cache``)
lives in the implementations, never in the core."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Index = slice | Sequence[int]  # a contiguous slice (step 1, bounds set) or a list of positions


def _missing(op: str) -> NotImplementedError:
    return NotImplementedError(f"tokens.{op} is not implemented for this framework")


class Tokens:
    """The interface; each framework's ``tokens`` module subclasses it as ``OPS``."""

    def token_dim(self, model: Any) -> int | None:
        """The token axis of the activations of ``model`` (1 for batch-first models), or None when
        ``model`` is not a sequence model this framework knows (the user passes ``token_dim=``)."""
        raise _missing("token_dim")

    def forward_info(self, args: tuple, kwargs: dict, token_dim: int | None) -> tuple[int, int | None, bool]:
        """``(offset, tokens, cached)`` of a root forward called with ``args, kwargs``: how many
        positions its KV cache already holds (0 without one), how many tokens it feeds (None when no
        token input is found) and whether a cache was passed (a forward that can be continued)."""
        raise _missing("forward_info")

    def take(self, t: Any, dim: int, index: Index) -> Any:
        """The entries of ``t`` at ``index`` along ``dim`` (a view for a slice)."""
        raise _missing("take")

    def put(self, t: Any, dim: int, index: Index, values: Any) -> Any:
        """A copy of ``t`` with the entries at ``index`` along ``dim`` replaced by ``values``
        (out of place, differentiable through both)."""
        raise _missing("put")


def runs(index: Index) -> list[tuple[int, int]]:
    """``index`` as ``[(start, stop), ...]`` contiguous runs, in order."""
    if isinstance(index, slice):
        return [(index.start, index.stop)]
    out: list[tuple[int, int]] = []
    for i in index:
        if out and out[-1][1] == i:
            out[-1] = (out[-1][0], i + 1)
        else:
            out.append((i, i + 1))
    return out


def along(dim: int, s: slice) -> tuple:
    """An indexing tuple selecting ``s`` along ``dim`` (all of the axes before it)."""
    return (slice(None),) * dim + (s,)
