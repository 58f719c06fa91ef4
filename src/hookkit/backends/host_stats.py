"""The CPU route of the monitoring statistics, for any framework: the C kernel
``hookkit.backends._cpu_kernels`` reads a float32 array once and writes one record straight into a
preallocated row of a ``HostRows`` block; per call no tensor, tuple or array is made.

A record row is ``[step, call, n]`` and the backends' row of the statistic (what the framework-ops
route computes on other devices): ``[mean, m2, count <= near_zero]`` for an activation (m2: sum of
squared deviations), ``[sum, ||x||, max |x|]`` for a gradient or parameter. ``kernels`` is None when hookkit was installed
without a C compiler: the backends then use their framework's own ops on the CPU too.

    rows = HostRows(bins=40)
    write_activation(rows, np.random.randn(10000).astype(np.float32), 0.05, step=0, call=0, hist=(0.0, 10.0))
    rows.take()   # (records [1, 6], histograms [1, 40])
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

try:  # the C extension by its full name: an import graph sees no module there and would draw an edge back to the package
    kernels: Any = importlib.import_module("hookkit.backends._cpu_kernels")
except ImportError:  # installed without a C compiler
    kernels = None  # the statistics then use the framework's ops

ROW = 6  # step, call, n, and the three statistics
MAX_BINS = 1 << 24
SPLIT = 1 << 21  # values below which the kernel reads on one thread (it starts one per 2**20 values)

__all__ = ["HostRows", "MAX_BINS", "ROW", "SPLIT", "compact", "kernels", "write_activation", "write_tensor"]


class HostRows:
    """Records written on the host: ``rows`` float64 [capacity, 6], ``hist`` float64 [capacity, bins]
    (``bins=0``: none); ``n`` rows are filled. Capacity doubles when full; ``take()`` empties it.

    >>> rows = HostRows(); rows.take()[0].shape
    (0, 6)
    """

    __slots__ = ("rows", "hist", "n")

    def __init__(self, bins: int = 0, capacity: int = 64):
        capacity = max(1, min(capacity, (1 << 13) // max(bins, 1)))  # many bins: start small, grow when used
        self.rows = np.zeros((capacity, ROW))
        self.hist = np.zeros((capacity, bins)) if bins else None
        self.n = 0

    def __len__(self) -> int:
        return self.n

    def slot(self) -> int:
        """The index of the next row, growing the buffers when they are full."""
        n = self.n
        if n == len(self.rows):
            self.rows = np.concatenate((self.rows, np.zeros_like(self.rows)))
            if self.hist is not None:
                self.hist = np.concatenate((self.hist, np.zeros_like(self.hist)))
        return n

    def take(self) -> tuple[np.ndarray, np.ndarray | None]:
        """``(rows [n, 6], hist [n, bins] or None)``, copies; the block is empty afterwards."""
        n, self.n = self.n, 0
        return self.rows[:n].copy(), None if self.hist is None else self.hist[:n].copy()


def compact(values: np.ndarray) -> tuple[np.ndarray, int]:
    """``(C-contiguous values, factor)``: an array with stride-0 axes (an expanded tensor, e.g. the
    gradient of ``out.sum()``) becomes its distinct values, each standing for ``factor`` of them;
    any other strided array is copied. No copy of the full expanded size is made."""
    factor = 1
    index = []
    for size, stride in zip(values.shape, values.strides):
        if stride == 0 and size > 1:
            factor *= size
            index.append(slice(0, 1))
        else:
            index.append(slice(None))
    return np.ascontiguousarray(values[tuple(index)]), factor


def write_activation(
    rows: HostRows, values: np.ndarray, near_zero: float, step: int, call: int, hist: tuple[float, float] | None = None, threads: int = 1
) -> None:
    """Write ``[step, call, n, mean, m2, count <= near_zero]`` of float32 ``values`` (any layout) into
    the next row of ``rows``, and ``torch.histc`` counts over ``hist=(lo, hi)`` into its histogram."""
    factor = 1
    if not values.flags.c_contiguous:
        values, factor = compact(values)
    k = rows.slot()
    if hist is None:
        kernels.activation(values, near_zero, rows.rows, k, step, call, factor, threads)
    else:
        kernels.activation(values, near_zero, rows.rows, k, step, call, factor, threads, rows.hist, hist[0], hist[1])
    rows.n = k + 1


def write_tensor(rows: HostRows, values: np.ndarray, step: int, call: int, threads: int = 1) -> None:
    """Write ``[step, call, n, sum, ||x||, max |x|]`` of float32 ``values`` into the next row."""
    factor = 1
    if not values.flags.c_contiguous:
        values, factor = compact(values)
    k = rows.slot()
    kernels.tensor(values, rows.rows, k, step, call, factor, threads)
    rows.n = k + 1
