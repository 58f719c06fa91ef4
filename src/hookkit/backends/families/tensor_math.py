"""``tensor_math``: the array ops the analyses (CAM, attribution, lenses, diffs) compute with, on
the model's device, in the model's framework. Dimensions are ints (negative counts from the end);
tensors are channels-first where a layout matters."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _missing(op: str) -> NotImplementedError:
    return NotImplementedError(f"tensor_math.{op} is not implemented for this framework")


class TensorMath:
    """The interface; each framework's ``tensor_math`` module subclasses it as ``OPS``."""

    def sum(self, t: Any, dims: Sequence[int], keepdim: bool = False) -> Any:
        """Sum over ``dims``."""
        raise _missing("sum")

    def mean(self, t: Any, dims: Sequence[int], keepdim: bool = False) -> Any:
        """Mean over ``dims``."""
        raise _missing("mean")

    def amax(self, t: Any, dims: Sequence[int], keepdim: bool = False) -> Any:
        """Maximum over ``dims`` (values only)."""
        raise _missing("amax")

    def amin(self, t: Any, dims: Sequence[int], keepdim: bool = False) -> Any:
        """Minimum over ``dims`` (values only)."""
        raise _missing("amin")

    def argmax(self, t: Any, dim: int) -> Any:
        """Index of the maximum along ``dim`` (int64)."""
        raise _missing("argmax")

    def permute(self, t: Any, dims: Sequence[int]) -> Any:
        """Reorder the axes: output axis i is input axis ``dims[i]``."""
        raise _missing("permute")

    def reshape(self, t: Any, shape: Sequence[int]) -> Any:
        """The same elements in ``shape`` (-1 allowed once)."""
        raise _missing("reshape")

    def cat(self, ts: Sequence[Any], dim: int) -> Any:
        """Join tensors along an existing axis."""
        raise _missing("cat")

    def stack(self, ts: Sequence[Any], dim: int = 0) -> Any:
        """Join tensors along a new axis."""
        raise _missing("stack")

    def relu(self, t: Any) -> Any:
        """max(t, 0)."""
        raise _missing("relu")

    def softmax(self, t: Any, dim: int) -> Any:
        """Softmax along ``dim``."""
        raise _missing("softmax")

    def log_softmax(self, t: Any, dim: int) -> Any:
        """Log-softmax along ``dim``."""
        raise _missing("log_softmax")

    def einsum(self, equation: str, *ts: Any) -> Any:
        """Einstein summation, numpy's notation."""
        raise _missing("einsum")

    def flip(self, t: Any, dims: Sequence[int]) -> Any:
        """Reverse the order of elements along ``dims``."""
        raise _missing("flip")

    def interpolate(self, t: Any, size: Sequence[int], mode: str) -> Any:
        """Resize channels-first ``[N, C, *spatial]`` to ``size`` (one int per spatial axis) with half-pixel
        centres (``align_corners=False``): ``mode`` "linear" (1-D), "bilinear" (2-D), "trilinear" (3-D),
        "nearest"."""
        raise _missing("interpolate")

    def svd(self, t: Any) -> tuple[Any, Any, Any]:
        """Reduced SVD of a batch of matrices ``[..., m, n]``: ``(U, S, Vh)`` with ``U @ diag(S) @ Vh == t``."""
        raise _missing("svd")

    def full(self, shape: Sequence[int], value: float, like: Any) -> Any:
        """A tensor of ``shape`` filled with ``value``, of ``like``'s dtype and device."""
        raise _missing("full")

    def arange(self, n: int, like: Any) -> Any:
        """0, 1, ..., n - 1 as int64 on ``like``'s device."""
        raise _missing("arange")

    def index_select(self, t: Any, dim: int, index: Any) -> Any:
        """The entries of ``t`` at positions ``index`` (an int64 tensor or a list of ints) along ``dim``."""
        raise _missing("index_select")

    def gather(self, t: Any, dim: int, index: Any) -> Any:
        """``out[i][j] = t[i][index[i][j]]`` along ``dim`` (torch.gather / paddle.take_along_axis)."""
        raise _missing("gather")

    def topk(self, t: Any, k: int, dim: int = -1) -> tuple[Any, Any]:
        """The ``k`` largest entries along ``dim``, largest first: ``(values, int64 indices)``."""
        raise _missing("topk")

    def isfinite(self, t: Any) -> Any:
        """Elementwise: True where ``t`` is neither NaN nor infinite (bool)."""
        raise _missing("isfinite")

    def interpolate_aligned(self, t: Any, size: Sequence[int], mode: str) -> Any:
        """Resize channels-first ``[N, C, *spatial]`` to ``size`` with the corner pixels aligned
        (``align_corners=True``, as ``UpsamplingBilinear2d``): ``mode`` "linear", "bilinear", "trilinear"."""
        raise _missing("interpolate_aligned")

    def nan_to_zero(self, t: Any) -> Any:
        """``t`` with every NaN replaced by 0."""
        raise _missing("nan_to_zero")

    def eigh(self, t: Any) -> tuple[Any, Any]:
        """Eigen-decomposition of a batch of symmetric matrices ``[..., n, n]``: ``(values, vectors)``, the
        values ascending, ``vectors[..., :, i]`` the unit eigenvector of ``values[..., i]``."""
        raise _missing("eigh")

    def tile_rows(self, t: Any, k: int) -> Any:
        """``k`` copies of ``t`` one after the other along axis 0 (rows ``[t; t; ...]``)."""
        raise _missing("tile_rows")

    def repeat_rows(self, t: Any, k: int) -> Any:
        """Each row of ``t`` ``k`` times in a row along axis 0 (``[t0, t0, t1, t1, ...]``)."""
        raise _missing("repeat_rows")

    def abs(self, t: Any) -> Any:
        """Elementwise absolute value."""
        raise _missing("abs")

    def norm_scale(self, t: Any, kind: str, eps: float) -> Any:
        """TransformerLens's ``hook_scale`` of a norm's input ``t``: ``sqrt(mean(x^2) + eps)`` over the
        last dim (kept), ``x`` = ``t`` centred for ``kind="layer"``, ``t`` itself for ``"rms"``."""
        x = t - self.mean(t, [-1], keepdim=True) if kind == "layer" else t
        return (self.mean(x * x, [-1], keepdim=True) + eps) ** 0.5

    def norm_normalized(self, t: Any, kind: str, eps: float, scale: Any = None) -> Any:
        """TransformerLens's ``hook_normalized``: ``x / scale`` (``x`` as in ``norm_scale``; ``scale``:
        its result, None to compute it), before the norm's weight and bias."""
        x = t - self.mean(t, [-1], keepdim=True) if kind == "layer" else t
        return x / (self.norm_scale(t, kind, eps) if scale is None else scale)

    def version(self, t: Any) -> int | None:
        """How many times ``t``'s storage was written in place (shared by its views and detached
        copies); None where the framework does not count. A changed number means changed values."""
        return None

    def seed(self, seed: int) -> None:
        """Seed the framework's global random generator (what ``randn_like`` draws from): the same
        seed gives the same noise (smoothgrad), as the framework's own ``manual_seed`` does."""
        raise _missing("seed")

    def conv_layout(self, t: Any) -> Any:
        """``t`` (the same values and shape) in the memory layout the framework's convolutions run fastest
        on, on ``t``'s device (torch on the CPU: 4-D tensors channels-last); else ``t`` itself. A model may
        refuse it (a ``view`` that needs contiguous rows): callers retry with ``t``."""
        raise _missing("conv_layout")
