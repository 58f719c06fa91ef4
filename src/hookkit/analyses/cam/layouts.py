"""Layer outputs -> channels-first ``[N, C, *spatial]`` maps that line up with the input's spatial axes.

Recognized without help: ``[N, C, h, w]``; channels-last ``[N, h, w, C]`` (Swin, Paddle NHWC);
ViT tokens ``[N, prefix + h*w, C]`` on 2-D inputs, the grid inferred from the input's size and the
class / register / distillation tokens that lead the sequence dropped; ``[N, C, L]`` on 1-D inputs;
``[N, C, D, H, W]`` on 3-D inputs. Channels-first wins when both readings fit. Anything else takes
``reshape=``: a callable returning ``[N, C, *spatial]``, or one of the layout names
``"channels_first"``, ``"channels_last"``, ``"tokens"``.

>>> plan_layout((8, 197, 768), (224, 224), None, None, "blocks.11.norm1", "cam").describe()   # doctest: +SKIP
'ViT tokens: 1 prefix token dropped, 14 x 14 grid'
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hookkit.core.entry import entry_name
from hookkit.core.validate import InvalidArgument, fail

NAMES = ("channels_first", "channels_last", "tokens")
MAX_PREFIX = 16  # class + distillation + register tokens tried when the grid is inferred


@dataclass(frozen=True)
class Layout:
    """How one layer's output maps to ``[N, C, *spatial]``; applied alike to activations and gradients."""

    kind: str  # "channels_first" | "channels_last" | "tokens" | "custom"
    prefix: int = 0
    grid: tuple[int, ...] = ()
    fn: Callable[[Any], Any] | None = None

    def to_channels_first(self, m: Any, t: Any) -> Any:
        if self.kind == "channels_first":
            return t
        if self.kind == "channels_last":
            r = len(t.shape)
            return m.permute(t, [0, r - 1, *range(1, r - 1)])
        if self.kind == "tokens":
            n, c = t.shape[0], t.shape[-1]
            grid = m.reshape(t[:, self.prefix :, :], [n, *self.grid, c])
            return m.permute(grid, [0, len(self.grid) + 1, *range(1, len(self.grid) + 1)])
        return self.fn(t)  # type: ignore[misc]

    def channel_axis(self, shape: Sequence[int], channels: int) -> int:
        """The channel axis of the layer's own output (where an ablation zeroes a channel)."""
        if self.kind == "channels_first":
            return 1
        if self.kind in ("channels_last", "tokens"):
            return len(shape) - 1
        axes = [a for a in range(1, len(shape)) if shape[a] == channels]
        return axes[-1] if axes else 1

    def describe(self) -> str:
        if self.kind == "tokens":
            grid = " x ".join(map(str, self.grid))
            return f"ViT tokens: {self.prefix} prefix token{'s' if self.prefix != 1 else ''} dropped, {grid} grid"
        return {"channels_first": "channels-first", "channels_last": "channels-last", "custom": "reshape="}[self.kind]


def _fits(spatial: Sequence[int], size: Sequence[int]) -> bool:
    """True when one stride ``s`` maps the input's ``size`` to ``spatial`` (each dim floor or ceil of size / s)."""
    lo, hi = 0.0, math.inf
    for d, n in zip(spatial, size):
        if d < 1:
            return False
        lo = max(lo, n / (d + 1))
        if d > 1:
            hi = min(hi, n / (d - 1))
    return lo < hi


def token_grid(tokens: int, size: Sequence[int], prefix: int | None = None) -> tuple[int, tuple[int, int]] | None:
    """``(prefix, (h, w))`` of a token sequence on a 2-D input of ``size``: the leading tokens whose removal
    leaves the ``h x w`` grid closest to the input's proportions (ties: the fewest); None when there is none."""
    counts = [prefix] if prefix is not None else range(0, min(tokens, MAX_PREFIX + 1))
    H, W = size
    best: tuple[float, int, tuple[int, int]] | None = None
    for k in counts:
        n = tokens - k
        for d in range(1, math.isqrt(max(n, 0)) + 1):  # divisor pairs: sqrt(n) steps per count
            if n % d:
                continue
            for h, w in sorted({(d, n // d), (n // d, d)}):
                if not _fits((h, w), size):
                    continue
                # The closest fit over every prefix count, not the first count that fits at all: the
                # floor/ceil slack of ``_fits`` lets a 4 x 4 grid behind 1 class + 4 register tokens (21)
                # read as 1 prefix token and a 4 x 5 grid on a square image.
                miss = round(abs(math.log(h / w) - math.log(H / W)), 9)
                if best is None or (miss, k) < best[:2]:
                    best = (miss, k, (h, w))
    return None if best is None else (best[1], best[2])


def _refuse(name: str, shape: Sequence[int], size: Sequence[int], why: str = "") -> InvalidArgument:
    s = len(size)
    want = {1: "[N, C, L]", 2: "[N, C, h, w]", 3: "[N, C, D, H, W]"}.get(s, "[N, C, *spatial]")
    return InvalidArgument(
        f"{entry_name()}(): layer {name or '(root)'!r} outputs {list(shape)}, which hookkit cannot map onto the input's spatial size "
        f"{tuple(size)}{why}; give a layer whose output is {want} feature maps (channels-first or channels-last) or ViT tokens "
        f"[N, T, C], or reshape=f(output) -> {want}"
    )


def plan_layout(
    shape: Sequence[int],
    size: Sequence[int],
    reshape: Any,
    prefix_tokens: int | None,
    name: str,
    n: int | None = None,
    *,
    declared: Callable[[], str | None] | None = None,
) -> Layout:
    """The layout of a layer output of ``shape`` for ``n`` inputs whose spatial size is ``size``; ``declared()``
    (asked only when the shape fits both readings) is the layout the layer or its model declares, if any."""
    shape, s = tuple(shape), len(size)
    if callable(reshape):
        return Layout("custom", fn=reshape)
    if n is not None and (not shape or shape[0] != n):
        # A layer that folds positions into the batch axis (MobileViT's transformer: [N * patch area, P, C])
        # would otherwise give one map per row, not per input; only reshape= can unfold it.
        raise _refuse(name, shape, size, f": its first axis holds {shape[0] if shape else 0} rows for the {n} inputs")
    if reshape is not None and reshape not in NAMES:
        fail(entry_name(), "reshape", f"None, a callable f(output) -> [N, C, *spatial], or one of {', '.join(map(repr, NAMES))}", reshape)
    if reshape == "tokens" or (reshape is None and len(shape) == 3 and s == 2):
        return _tokens(shape, size, prefix_tokens, name)
    if len(shape) != 2 + s:
        raise _refuse(name, shape, size, _input_hint(declared))
    if reshape is not None:
        return Layout(reshape)
    return _channels(shape, size, name, declared)


def _tokens(shape: tuple[int, ...], size: Sequence[int], prefix_tokens: int | None, name: str) -> Layout:
    """ViT tokens ``[N, prefix + h*w, C]`` on a 2-D input: the grid of the input's proportions."""
    if len(shape) != 3 or len(size) != 2:
        raise _refuse(name, shape, size, ": reshape='tokens' needs [N, T, C] outputs and a 2-D input")
    found = token_grid(shape[1], size, prefix_tokens)
    if found is None:
        extra = f" after dropping prefix_tokens={prefix_tokens}" if prefix_tokens is not None else ""
        raise _refuse(name, shape, size, f": its {shape[1]} tokens{extra} form no grid of the input's proportions")
    return Layout("tokens", prefix=found[0], grid=found[1])


def _channels(shape: tuple[int, ...], size: Sequence[int], name: str, declared: Callable[[], str | None] | None) -> Layout:
    """Feature maps with as many spatial axes as the input: channels-first or channels-last, by what fits."""
    first, last = _fits(shape[2:], size), _fits(shape[1:-1], size)
    if first and last and declared is not None and declared() == "channels_last":
        # [N, 16, 16, 16] on a 32 x 32 input fits both readings: a Paddle NHWC convolution says which
        return Layout("channels_last")
    if first or not last:
        if not first and len(size) > 1:
            raise _refuse(name, shape, size, _input_hint(declared))
        return Layout("channels_first")
    return Layout("channels_last")


def _input_hint(declared: Callable[[], str | None] | None) -> str:
    """Why a channels-last model's layer may not map: its NHWC inputs were read as [N, C, h, w]."""
    if declared is None or declared() != "channels_last":
        return ""
    return (
        " (the inputs are read channels-first [N, C, *spatial]; this model's layers are channels-last: give it "
        "channels-first inputs through a permute in front of it)"
    )


def check_mapped(t: Any, n: int, size: Sequence[int], name: str) -> None:
    """What ``reshape=`` returned must be ``[N, C, *spatial]`` with as many spatial axes as the input."""
    shape = tuple(getattr(t, "shape", ()) or ())
    if len(shape) != 2 + len(size) or shape[0] != n:
        axes = {1: "L", 2: "h, w", 3: "D, H, W"}.get(len(size), "*spatial")
        raise InvalidArgument(
            f"{entry_name()}(): reshape must return [N, C, {axes}] (N={n}, {len(size)} spatial axes like the input) for layer "
            f"{name!r}; it returned shape {list(shape)}"
        )
