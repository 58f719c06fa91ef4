# Types of the optional C extension built at install time from _cpu_kernels.c (one-pass CPU statistics).
import numpy as np

def activation(
    x: np.ndarray,
    near_zero: float,
    rows: np.ndarray,
    k: int,
    step: int,
    call: int,
    factor: int = 1,
    threads: int = 1,
    hist: np.ndarray | None = None,
    lo: float = 0.0,
    hi: float = 0.0,
    /,
) -> None: ...
def tensor(x: np.ndarray, rows: np.ndarray, k: int, step: int, call: int, factor: int = 1, threads: int = 1, /) -> None: ...
