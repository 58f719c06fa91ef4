"""What the summary says about parameters beyond their count: their real bytes (quantized ones:
their inner tensors), the quantized types, the dtypes."""

from __future__ import annotations

from typing import Any

from hookkit.backends import Backend


def quantized_ops(be: Backend) -> Any:
    """The backend's ``quantized`` family, or None."""
    try:
        return be.family("quantized")
    except NotImplementedError:
        return None


def param_bytes(be: Backend, p: Any) -> int:
    """A parameter's bytes: a quantized one's inner tensors (integer data, scales), else numel x itemsize."""
    ops = quantized_ops(be)
    real = ops.nbytes(p) if ops is not None else None
    return be.numel(p) * be.itemsize(p) if real is None else real


def quantized_notes(be: Backend, unique: dict[int, Any]) -> list[str]:
    """One note per kind of quantized parameter: how many, which type, the bytes per parameter."""
    ops = quantized_ops(be)
    kinds: dict[str, list[Any]] = {}
    for p in unique.values():
        kind = ops.describe(p) if ops is not None else None
        if kind is not None:
            kinds.setdefault(kind, []).append(p)
    notes = []
    for kind, ps in kinds.items():
        n = sum(be.numel(p) for p in ps)
        size = sum(ops.nbytes(p) for p in ps)
        notes.append(f"quantized: {len(ps)} parameters are {kind}, {n:,} values in {size:,} bytes ({size / n:.3g} bytes per parameter)")
    return notes


def dtype_counts(be: Backend, params: list[Any]) -> dict[str, int]:
    """Parameters (values) per dtype name."""
    counts: dict[str, int] = {}
    for p in params:
        counts[be.dtype_name(p)] = counts.get(be.dtype_name(p), 0) + be.numel(p)
    return counts
