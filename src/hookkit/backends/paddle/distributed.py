"""paddle.distributed for the statistics: rank, a gather of host rows at read time, the end of a
backward (after DataParallel's all-reduce) and the wrapper whose names we drop."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import paddle
import paddle.distributed as dist


def unwrap(model: Any) -> Any:
    while isinstance(model, paddle.DataParallel):
        model = model._layers
    return model


def world() -> tuple[int, int]:
    if dist.is_initialized() and dist.get_world_size() > 1:
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _rank_entry(fn: Callable[..., int], args: tuple, codes: Any) -> None:
    dist.init_parallel_env()
    codes[dist.get_rank()] = int(fn(*args) or 0)


def launch(nprocs: int, fn: Callable[..., int], args: tuple) -> list[int]:
    import multiprocessing

    codes = multiprocessing.get_context("spawn").Array("i", [1] * nprocs)  # 1 until a rank returns
    try:
        dist.spawn(_rank_entry, args=(fn, args, codes), nprocs=nprocs, backend="gloo")
    except Exception:  # noqa: BLE001 - a rank failed: its message went to stderr
        return [max(2, c) for c in codes[:]]
    return codes[:]


def barrier() -> None:
    if world()[1] > 1:
        dist.barrier()


def all_gather_rows(rows: np.ndarray) -> list[np.ndarray]:
    """Pads to the largest row count (gathered first), one ``all_gather``, trims."""
    rows = np.ascontiguousarray(rows, dtype=np.float64)
    sizes: list[Any] = []
    dist.all_gather(sizes, paddle.to_tensor([rows.shape[0]], dtype="int64"))
    counts = [int(s.numpy()[0]) for s in sizes]
    padded = np.zeros((max(counts), rows.shape[1]))
    padded[: rows.shape[0]] = rows
    parts: list[Any] = []
    dist.all_gather(parts, paddle.to_tensor(padded))
    return [p.numpy()[:k] for p, k in zip(parts, counts)]


def after_backward(fn: Callable[[], None]) -> None:
    # runs once the backward is done and DataParallel's reducer has written the averaged grads
    paddle.base.core.eager._add_backward_final_hook(fn)
