"""``extract`` on several ranks: who writes what, and which data-set sample each row is.

Under an initialized process group (torch.distributed, Paddle's launcher) every rank writes its own
shards (``shard-r00001-00000.safetensors``) and its own index (``index-rank00001.json``) into the
same folder, so a killed rank resumes from its own index. Each row also stores the data-set index of
its sample (``":sample"``), read from the sampler: the one given, or the DataLoader's own
``batch_sampler`` (``DistributedSampler``, ``DistributedBatchSampler``). After a barrier, rank 0
writes ``index.json`` listing the ranks; ``load_features`` then puts the rows back in data order and
drops the duplicates a ``DistributedSampler`` pads with. The folder must be on a filesystem every rank
sees (a local disk for one machine, a shared one for several).
"""

from __future__ import annotations

import copy
import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from hookkit.observers import features as fmt
from hookkit.observers.features import ExtractError

_SAMPLER_FIELDS = ("seed", "epoch", "shuffle", "num_replicas", "drop_last", "batch_size")


@dataclass
class RankPlan:
    """This process's part: ``rank`` of ``world``; ``ids``: the data-set index of each sample it will
    see, in order (None when no sampler says); ``batches``: the sampler's batch sizes, when known."""

    rank: int
    world: int
    ids: np.ndarray | None
    batches: list[int] | None
    sampler: dict[str, Any] | None

    @property
    def ranked(self) -> bool:
        return self.world > 1

    @property
    def index_name(self) -> str:
        return fmt.rank_index_name(self.rank) if self.ranked else fmt.INDEX

    @property
    def shard_rank(self) -> int | None:
        return self.rank if self.ranked else None


def plan(backend: Any, data: Iterable[Any], sampler: Any) -> RankPlan:
    """The rank plan of an ``extract`` call: rank and world from the backend's process group, sample
    indices from ``sampler`` or ``data.batch_sampler``. The sampler must give the same order when
    read twice (``DistributedSampler`` and ``DistributedBatchSampler`` do, for a given epoch)."""
    rank, world = backend.world()
    source = sampler if sampler is not None else getattr(data, "batch_sampler", None)
    if source is None:
        return RankPlan(rank, world, None, None, None)
    try:
        # a shallow copy: Paddle's DistributedBatchSampler advances its epoch (its shuffle seed) at each
        # iteration; reading the copy leaves the loader's own sampler where it was
        items = list(iter(copy.copy(source)))
    except TypeError:
        raise ExtractError(
            f"extract(sampler=...): got {type(source).__name__}, which is not iterable; pass the DataLoader's sampler"
        ) from None
    batches = None
    if items and not np.isscalar(items[0]) and not (hasattr(items[0], "shape") and len(items[0].shape) == 0):
        batches = [len(b) for b in items]
        flat = [int(i) for b in items for i in (b.tolist() if hasattr(b, "tolist") else b)]
    else:
        flat = [int(i) for i in items]
    ids = np.asarray(flat, dtype=np.int64)
    return RankPlan(rank, world, ids, batches, describe(source, ids, world))


def describe(source: Any, ids: np.ndarray, world: int) -> dict[str, Any]:
    """What the fingerprint keeps of a sampler: its visible settings (seed, epoch, shuffle...) and a
    digest of the indices it gives this rank, so a resume with another seed or split is refused."""
    inner = getattr(source, "sampler", None)
    out: dict[str, Any] = {"class": type(source).__name__, "world": world}
    for obj in (source, inner):
        for f in _SAMPLER_FIELDS:
            v = getattr(obj, f, None)
            if isinstance(v, (bool, int, float, str)) and f not in out:
                out[f] = v
    out["samples"] = int(len(ids))
    out["digest"] = hashlib.sha256(ids.tobytes()).hexdigest()[:16]
    return out


def check_world(out: str, plan: RankPlan) -> None:
    """An unfinished multi-rank folder resumes only with the world size that wrote it."""
    if not os.path.isdir(out) or os.path.exists(os.path.join(out, fmt.INDEX)):
        return
    on_disk = fmt.rank_indexes_on_disk(out)
    if not on_disk:
        return
    try:
        old = fmt.read_index(out, fmt.rank_index_name(on_disk[0]), on_disk[0]).get("world")
    except fmt.FeaturesError:
        old = None
    if old != plan.world:
        raise ExtractError(
            f"extract(out={out!r}): the folder holds an unfinished extraction by {old if old is not None else len(on_disk)} ranks; "
            f"this run has world size {plan.world}: re-run with the same number of ranks to resume it, or use a new folder"
        )


def sample_rows(plan: RankPlan, start: int, n: int, batch: int) -> np.ndarray | None:
    """The data-set indices of the ``n`` samples of batch ``batch``, which starts at this rank's ``start``-th sample."""
    if plan.ids is None:
        return None
    if plan.batches is not None and batch < len(plan.batches) and plan.batches[batch] != n:
        raise ExtractError(
            f"extract: batch {batch} holds {n} samples but the sampler's batch {batch} has {plan.batches[batch]}: the loader does not "
            "follow its batch_sampler (or sampler= is not the loader's)"
        )
    if start + n > len(plan.ids):
        raise ExtractError(
            f"extract: the data gave more samples ({start + n}) than the sampler lists ({len(plan.ids)}); pass the loader's own sampler"
        )
    return plan.ids[start : start + n]


def finish(out: str, plan: RankPlan, backend: Any, fingerprint: dict[str, Any], meta: dict[str, Any]) -> None:
    """After every rank finished: rank 0 writes ``index.json`` listing the ranks' indexes (between two
    barriers, so no rank reads the folder before it is whole)."""
    backend.barrier()
    if plan.rank == 0:
        indexes = [fmt.read_rank_index(out, r) for r in range(plan.world)]
        unfinished = [r for r, idx in enumerate(indexes) if not idx.get("complete")]
        if unfinished:
            raise ExtractError(f"extract(out={out!r}): ranks {unfinished} did not finish; re-run every rank to resume")
        samples = (
            np.concatenate([fmt._Shard(os.path.join(out, s["file"])).array(fmt.SAMPLE_KEY) for idx in indexes for s in idx["shards"]])
            if indexes[0].get("samples")
            else None
        )
        count = len(fmt.data_order(samples)[0]) if samples is not None else sum(idx["count"] for idx in indexes)
        top = {
            "format": fmt.FORMAT,
            "version": fmt.VERSION,
            "fingerprint": fingerprint,
            "metadata": meta,
            "world": plan.world,
            "ranks": [fmt.rank_index_name(r) for r in range(plan.world)],
            "count": count,
            "complete": True,
        }
        fmt.write_json(os.path.join(out, fmt.INDEX), top)
    backend.barrier()
