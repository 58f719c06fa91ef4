"""How two recorded tensors are compared (numpy, on the host): default tolerances by dtype, and the
errors of one compared pair.

Default tolerances, from the least precise dtype compared so far in the run (an error made in
bfloat16 upstream is still there downstream, and in the backward pass):

============  ======  ======
dtype         rtol    atol
============  ======  ======
float64       1e-7    1e-7
float32       1e-4    1e-5
float16       1e-2    1e-3
bfloat16      5e-2    1e-2
float8 types  2.5e-1  1e-1
integer/bool  0       0
============  ======  ======

An element is beyond tolerance when ``|a - b| > atol + rtol * max(|a|, rms(a))``, NaN equal to NaN:
numpy's ``isclose`` except that an element near zero is judged at the scale of its tensor (the
rounding error of a sum follows the size of its terms, not of its result, so a value that cancels to
almost zero carries the error of its neighbours). A pair *diverges* when any element is beyond.
"""

from __future__ import annotations

from typing import Any, TypedDict

import numpy as np

TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-7),
    "float32": (1e-4, 1e-5),
    "float16": (1e-2, 1e-3),
    "bfloat16": (5e-2, 1e-2),
    "float8": (2.5e-1, 1e-1),
    "exact": (0.0, 0.0),
}
#: least precise last: the order in which a run's tolerance loosens
_ORDER = ["exact", "float64", "float32", "float16", "bfloat16", "float8"]


def precision(dtype: str) -> str:
    """The tolerance class of a dtype name ("float32", "bfloat16", "int64"...)."""
    if dtype.startswith("float8"):
        return "float8"
    if dtype in TOLERANCES:
        return dtype
    if "float" in dtype or "complex" in dtype:
        return "float32"
    return "exact"


def looser(a: str, b: str) -> str:
    """The less precise of two tolerance classes."""
    return a if _ORDER.index(a) >= _ORDER.index(b) else b


class Errors(TypedDict):
    """What ``compare`` measures (the error fields of a diff row)."""

    max_abs: float
    max_rel: float
    rel_err: float
    cosine: float
    mismatch: float


def compare(xs: list[np.ndarray], ys: list[np.ndarray], rtol: float, atol: float) -> Errors:
    """The errors of ``ys`` (side b) against ``xs`` (side a), pooled over the tensors of one output:
    ``max_abs``, ``max_rel`` (``max |a - b| / (|a| + atol)``), ``rel_err`` (``||a - b|| / ||a||``),
    ``cosine`` (of the flattened values) and ``mismatch`` (the share of elements beyond tolerance)."""
    max_abs = max_rel = 0.0
    sq_d = sq_a = sq_b = dot = 0.0
    beyond = total = 0
    for x, y in zip(xs, ys):
        wide = np.float64 if x.dtype == np.float64 or y.dtype == np.float64 else np.float32
        x = np.asarray(x, dtype=wide).reshape(-1)
        y = np.asarray(y, dtype=wide).reshape(-1)
        total += x.size
        if x.size == 0:
            continue
        same = (x == y) | (np.isnan(x) & np.isnan(y))
        d = np.abs(x - y)
        d[same] = 0.0  # equal infinities and NaN in the same place agree
        d[np.isnan(d)] = np.inf
        ax = np.abs(x)
        finite = np.isfinite(x) & np.isfinite(y)
        rms = float(np.sqrt(np.mean(np.square(x[finite])))) if finite.any() else 0.0
        beyond += int(np.count_nonzero(d > atol + rtol * np.maximum(ax, rms)))
        if d.size:
            max_abs = max(max_abs, float(d.max()))
            max_rel = max(max_rel, float((d / np.maximum(ax + atol, np.finfo(np.float32).tiny)).max()))
        xf, yf = (x, y) if finite.all() else (x[finite], y[finite])
        df = d if finite.all() else d[finite]
        sq_d += float(np.dot(df, df))
        sq_a += float(np.dot(xf, xf))
        sq_b += float(np.dot(yf, yf))
        dot += float(np.dot(xf, yf))
    norm_a, norm_b = np.sqrt(sq_a), np.sqrt(sq_b)
    if norm_a == 0 and norm_b == 0:
        cosine = 1.0
    elif norm_a == 0 or norm_b == 0:
        cosine = 0.0
    else:
        cosine = float(np.clip(dot / (norm_a * norm_b), -1.0, 1.0))
    rel = float(np.sqrt(sq_d) / norm_a) if norm_a > 0 else (0.0 if sq_d == 0 else float("inf"))
    if max_abs == np.inf:
        rel = float("inf")
    return {
        "max_abs": max_abs,
        "max_rel": max_rel,
        "rel_err": rel,
        "cosine": cosine,
        "mismatch": beyond / total if total else 0.0,
    }


def tolerance(kind: str, rtol: float | None, atol: float | None) -> tuple[float, float]:
    """``(rtol, atol)``: the user's where given, else the defaults of the tolerance class ``kind``."""
    r, a = TOLERANCES[kind]
    return (r if rtol is None else rtol), (a if atol is None else atol)


def host(x: Any) -> np.ndarray:
    """A numpy array that owns its values (the framework may reuse the memory it came from)."""
    return np.array(x, copy=True)
