"""How many scaled inputs run at once: the chunk plan of an attribution.

An attribution evaluates the model at ``n_points`` points (interpolation steps, noisy copies) for
each of ``N`` samples. ``internal_batch_size=None`` runs them all in one forward (captum's default);
an int ``B`` runs ``max(1, B // N)`` points of every sample per forward (captum's
``internal_batch_size``); ``"auto"`` sizes the chunks so that the bytes autograd keeps for one
chunk's backward (measured on one forward of the ``N`` samples) stay under ``max_memory``, splitting
the samples too when even one point of all of them is too much.

>>> plan_chunks(8, 256, "auto", budget=2 << 30, row_bytes=1 << 20)   # doctest: +SKIP
Plan(samples=8, points=256)
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_FRACTION = 0.5  # of the device's free memory, when no max_memory is given
OVERHEAD = 1.5  # the backward's own buffers and the gradients, over what the forward saved


@dataclass(frozen=True)
class Plan:
    """``samples`` samples and ``points`` points of each per forward."""

    samples: int
    points: int


def row_cost(saved_bytes: int, n: int, extra_row_bytes: int) -> int:
    """Bytes one scaled input costs: its share of what a forward of ``n`` samples saved for the
    backward (with the backward's overhead), plus the tensors the attribution itself holds per row."""
    return max(1, int(OVERHEAD * saved_bytes / max(n, 1)) + extra_row_bytes)


def plan_chunks(
    n: int, n_points: int, internal_batch_size: int | str | None, *, budget: int = 0, row_bytes: int = 1, endpoint: bool = False
) -> Plan:
    """The chunk shape for ``n`` samples at ``n_points`` points. ``endpoint``: consecutive chunks
    share a point (conductance differences neighbouring points), so a chunk holds at least two."""
    least = 2 if endpoint else 1
    if internal_batch_size is None:
        return Plan(n, n_points)
    if isinstance(internal_batch_size, int):
        return Plan(n, min(n_points, max(least, internal_batch_size // n)))
    rows = max(1, budget // max(row_bytes, 1))
    if rows >= n * least:
        return Plan(n, min(n_points, rows // n))
    return Plan(max(1, rows // least), least)


def spans(total: int, size: int, overlap: int = 0) -> list[tuple[int, int]]:
    """``[start, stop)`` spans of ``size`` covering ``range(total)``, neighbours sharing ``overlap``."""
    out, start = [], 0
    while True:
        stop = min(start + size, total)
        out.append((start, stop))
        if stop >= total:
            return out
        start = stop - overlap
