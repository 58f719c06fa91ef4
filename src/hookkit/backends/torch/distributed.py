"""torch.distributed for the statistics: rank, a gather of host rows at read time, the end of a
backward (after DDP's all-reduce), DTensor shards (FSDP2) and the wrappers whose names we drop."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

_WRAPPERS = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)


def unwrap(model: Any) -> Any:
    while True:
        if isinstance(model, _WRAPPERS):
            model = model.module
        elif type(model).__name__ == "_LightningModuleWrapperBase":  # Lightning's, inside its DDP
            model = model._forward_module
        else:
            return model


def world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_entry(rank: int, fn: Callable[..., int], args: tuple, world: int, port: int, codes: Any) -> None:
    import os

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        codes[rank] = int(fn(*args) or 0)
    finally:
        import gc

        # a DDP module left in reference cycles by fn would hold the group into interpreter shutdown,
        # where gloo's threads are joined after Python finalized (an abort): free it while all is alive
        gc.collect()
        dist.destroy_process_group()


def launch(nprocs: int, fn: Callable[..., int], args: tuple) -> list[int]:
    import multiprocessing

    import torch.multiprocessing as mp

    codes = multiprocessing.get_context("spawn").Array("i", [1] * nprocs)  # 1 until a rank returns
    try:
        mp.spawn(_rank_entry, args=(fn, args, nprocs, _free_port(), codes), nprocs=nprocs)
    except (mp.ProcessRaisedException, mp.ProcessExitedException):  # a rank failed
        return [max(2, c) for c in codes[:]]
    return codes[:]


def barrier() -> None:
    if world()[1] > 1:
        dist.barrier()


def all_gather_rows(rows: np.ndarray) -> list[np.ndarray]:
    """Pads to the largest row count (gathered first), one ``all_gather``, trims."""
    # NCCL moves CUDA tensors only; gloo and MPI take CPU ones
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    mine = torch.from_numpy(np.ascontiguousarray(rows, dtype=np.float64)).to(device)
    sizes = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, torch.tensor([mine.shape[0]], dtype=torch.int64, device=device))
    counts = [int(s.item()) for s in sizes]
    padded = torch.zeros((max(counts), mine.shape[1]), dtype=torch.float64, device=device)
    padded[: mine.shape[0]] = mine
    parts = [torch.empty_like(padded) for _ in counts]
    dist.all_gather(parts, padded)
    return [p[:k].cpu().numpy() for p, k in zip(parts, counts)]


def after_backward(fn: Callable[[], None]) -> None:
    # Final callbacks run in order once the graph is done; DDP queues the wait for its all-reduce
    # (and the copy of the averaged buckets into .grad) during the backward, possibly after ours.
    # A callback queued *by* a callback runs after all of them: queue twice.
    engine = torch.autograd.Variable._execution_engine
    engine.queue_callback(lambda: engine.queue_callback(fn))


def grad_of(param: Any) -> Any:
    grad = param.grad
    to_local = getattr(grad, "to_local", None)  # a DTensor (FSDP2): this rank's shard
    return grad if to_local is None else to_local()


def is_sharded(param: Any) -> bool:
    placements = getattr(param, "placements", None)  # DTensor parameters only
    if not placements:
        return False
    return any(p.is_shard() for p in placements)
