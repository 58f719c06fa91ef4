"""Float tolerances derived from the dtype and the size of the computation, never from one machine.

Two code paths that compute the same value (a fused kernel and the same formula by hand, a
convolution and its im2col, a mean over 16 tokens in another order) agree to rounding, and rounding
depends on the CPU (AVX2 or AVX-512 lanes change the summation order), the thread count (a parallel
reduction splits the sum differently) and the library build. What does not depend on the machine
is the bound: each float operation on the path from input to result adds at most one unit of
roundoff (``eps / 2``) relative to the magnitude of the values it combines. So a comparison says

    |actual - expected| <= factor * eps(dtype) * n_ops * (|expected| + scale)

with ``n_ops`` the length of the longest chain of roundings the result went through (the size of a
reduction, the depth of the network times the width it sums over, or an honest upper estimate) and
``scale`` the magnitude of the terms (``max |expected|`` by default: values near zero made by
cancellation carry the error of the large terms they came from). ``factor`` (4) covers the
rounding of the inputs and of the comparison itself.

Bit-equality (``np.testing.assert_array_equal``) is only for the same kernels run in the same
order: a hooked forward against the plain forward, a tensor saved and loaded, a value copied.

    from tolerance import assert_close
    assert_close(cam_by_hand, cam_auto, dtype="float32", n_ops=64)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

FACTOR = 4.0


def eps(dtype: Any) -> float:
    """Machine epsilon of a dtype given as a name, a numpy dtype or a torch/paddle dtype."""
    try:
        return float(np.finfo(np.dtype(dtype)).eps)
    except TypeError:
        name = str(dtype).rsplit(".", 1)[-1]  # torch.float32, paddle.float32, VarType.FP32 spelled as float32
    if name == "bfloat16":
        return 2.0**-7
    return float(np.finfo(np.dtype(name)).eps)


def tolerance(dtype: Any = "float32", n_ops: float = 1, factor: float = FACTOR) -> float:
    """The relative tolerance ``factor * eps * n_ops``: ``tolerance("float32", 64)`` is 3.1e-5."""
    if n_ops < 1:
        raise ValueError(f"tolerance: n_ops={n_ops} must be at least 1 (the number of roundings on the longest path)")
    return factor * eps(dtype) * n_ops


def to_numpy(value: Any) -> np.ndarray:
    """A numpy copy of an array, a scalar or a torch/paddle tensor (detached, on the host)."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # torch
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":
            value = value.float()
        return value.numpy()
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):  # paddle
        return np.asarray(value.numpy())
    return np.asarray(value)


def _float_dtype(*arrays: np.ndarray) -> np.dtype:
    floats = [a.dtype for a in arrays if np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.complexfloating)]
    if not floats:
        return np.dtype("float64")
    # the least precise operand bounds the error: float32 against a float64 reference is float32
    return min(floats, key=lambda d: np.finfo(d).bits)


def assert_close(
    actual: Any,
    expected: Any,
    *,
    dtype: Any = None,
    n_ops: float = 1,
    scale: float | None = None,
    factor: float = FACTOR,
    err_msg: str = "",
) -> None:
    """Assert two computations of the same value agree to the rounding their dtype and size allow.

    ``dtype``: the precision the computation ran in (default: the least precise operand's float dtype).
    ``n_ops``: roundings on the longest path (a reduction's size, depth x width); ``scale``: the
    magnitude of the terms (default ``max |expected|``, at least 1e-30).
    """
    a, b = to_numpy(actual), to_numpy(expected)
    dt = dtype if dtype is not None else _float_dtype(a, b)
    rtol = tolerance(dt, n_ops, factor)
    if scale is None:
        scale = float(np.max(np.abs(b))) if b.size and np.all(np.isfinite(b)) else 0.0
    np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * max(scale, 1e-30), err_msg=err_msg)


def sum_ops(n: int) -> float:
    """Roundings on the longest path of a sum of ``n`` terms as numpy, torch, Paddle and the C
    kernel compute it (blocked, then pairwise): at most a block of 32 plus one per halving, never
    more than ``n``. ``sum_ops(4096)`` is 44."""
    return float(min(max(n, 1), 32 + math.ceil(math.log2(max(n, 2)))))


# A CAM map of the tests' small models: a forward, a backward, a spatial mean and a channel sum, then
# scaled to [0, 1] (dividing by max - min amplifies the rounding): 64 roundings is an upper estimate.
MAP_OPS = 64
