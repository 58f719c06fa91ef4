"""The monitoring statistics of a float32 array in host memory, by the C kernel
``hookkit.backends._cpu_kernels``: one read per array, for either framework's CPU tensors.

``kernels`` is None when hookkit was installed without a C compiler; the backends then use their
own routes (torch_stats' numpy route, Paddle's ops). Large arrays are split across threads: the
kernel releases the GIL, and the framework's intra-op threads sit idle while a forward waits for
its hook.

    row, counts = activation_row(np.random.randn(10000).astype(np.float32), 0.05, (40, 0.0, 10.0))
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

try:
    from hookkit.backends import _cpu_kernels as kernels
except ImportError:  # installed without a C compiler
    kernels = None

MAX_BINS = 1 << 24
_VALUES_PER_THREAD = 1 << 20  # below this, handing work to another thread costs more than it saves
_WELL_CONDITIONED = 1e4  # mean**2 / var above which the one-pass variance (float64 sums) loses digits


def applies(n: int, hist: tuple | None = None) -> bool:
    """Whether the kernel route serves ``n`` values (and histc's ``(bins, lo, hi)``)."""
    return kernels is not None and n > 0 and (hist is None or (1 <= hist[0] <= MAX_BINS and hist[1] < hist[2]))


class _Threads:
    """One pool per process, recreated after a fork: a child inherits the pool's bookkeeping but
    not its threads."""

    pool: ThreadPoolExecutor | None = None
    size = 0
    pid = 0

    @classmethod
    def get(cls, size: int) -> ThreadPoolExecutor:
        if cls.pool is None or cls.size < size or cls.pid != os.getpid():
            if cls.pool is not None and cls.pid == os.getpid():
                cls.pool.shutdown(wait=False)  # outgrown: its threads finish what they hold, then exit
            cls.pool, cls.size, cls.pid = ThreadPoolExecutor(size, thread_name_prefix="hookkit-stats"), size, os.getpid()
        return cls.pool


def moments(
    values: np.ndarray,
    near_zero: float,
    counts: np.ndarray | None = None,
    lo: float = 0.0,
    hi: float = 0.0,
    max_abs: bool = False,
    threads: int = 1,
) -> tuple:
    """``(sum, sum of squares, count <= near_zero, max |x| or None)`` of a contiguous float32 array,
    split across up to ``threads`` threads when large (sums to float64 rounding, counts exactly);
    ``counts`` (int64, one per bin) gets ``histc(values, len(counts), lo, hi)`` added."""
    threads = min(threads, values.size // _VALUES_PER_THREAD)
    if threads < 2:
        return kernels.moments(values, near_zero, counts, lo, hi, max_abs)
    parts = np.array_split(values, threads)
    hists = [None if counts is None else np.zeros_like(counts) for _ in parts]
    results = list(_Threads.get(threads).map(lambda p, h: kernels.moments(p, near_zero, h, lo, hi, max_abs), parts, hists))
    if counts is not None:
        counts += np.sum(hists, axis=0)
    total, ssq, count = (sum(r[k] for r in results) for k in range(3))
    return total, ssq, count, max((r[3] for r in results), key=_nan_first) if max_abs else None


def _nan_first(v: float) -> float:
    return float("inf") if v != v else v


def activation_row(values: np.ndarray, near_zero: float, hist: tuple | None = None, threads: int = 1) -> tuple:
    """``([mean, sum of squared deviations, count <= near_zero], counts or None)`` in float64 / int64;
    ``hist=(bins, lo, hi)`` asks for histc's counts. Needs ``applies(values.size, hist)``."""
    n = values.size
    counts = None if hist is None else np.zeros(hist[0], np.int64)
    total, ssq, count, _ = moments(values, near_zero, counts, *(hist[1:] if hist else (0.0, 0.0)), threads=threads)
    mean = total / n
    m2 = ssq - n * mean * mean
    if m2 * _WELL_CONDITIONED < n * mean * mean:  # var << mean**2: the one-pass formula cancels
        m2 = moments(values - np.float32(mean), 0.0, threads=threads)[1]
    return np.array((mean, max(m2, 0.0), count), dtype=np.float64), counts


def tensor_row(values: np.ndarray, threads: int = 1) -> np.ndarray:
    """``[sum, ||x||, max |x|]`` in float64 (max |x| is NaN when any value is). Needs ``applies``."""
    total, ssq, _, largest = moments(values, 0.0, max_abs=True, threads=threads)
    return np.array((total, ssq**0.5, largest), dtype=np.float64)
