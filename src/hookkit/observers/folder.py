"""The writing side of the features folder (``features.py`` reads it back): the one way ``extract`` and
``cam(out=...)`` write one.

``open_folder`` creates the folder and its index, or reopens it to resume when the fingerprint (what
the call's arguments make of the rows) matches, refusing it otherwise and naming what changed;
``FolderWriter`` takes the batches' rows (a batch written before an interruption is checked and
skipped), fills shards through the writer thread (``extract_io``) and marks the index complete.

>>> index = open_folder(out, fingerprint, meta)                          # doctest: +SKIP
>>> with FolderWriter(out, index, ["cam"], 16 * 2**20, progress=None) as w:   # doctest: +SKIP
...     for b, batch in enumerate(data):
...         n = count_samples(batch, b)
...         if not w.resumed(b, n):
...             w.add(b, {"cam": rows_of(batch)}, n)
...     w.finish(b)
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from hookkit.core.entry import entry_name
from hookkit.observers import extract_ranks as ranks
from hookkit.observers import features as fmt
from hookkit.observers.extract_io import Progress, Rows, Writer
from hookkit.observers.extract_ranks import RankPlan
from hookkit.observers.features import ExtractError

__all__ = ["FolderWriter", "count_samples", "forget", "open_folder", "parse_size"]

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}
RESUME_HINT = "the data changed (a shuffled loader?): resume needs the same batches in the same order"


# -- sizes, samples -------------------------------------------------------------------------------
def parse_size(size: int | str, what: str = "shard_size") -> int:
    """Bytes from an int or a string like "64MB" / "512KiB"."""
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size
    if isinstance(size, str):
        m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", size)
        if m and m.group(2).lower() in _UNITS and float(m.group(1)) > 0:
            return max(1, int(float(m.group(1)) * _UNITS[m.group(2).lower()]))
    raise ExtractError(f"extract({what}=...): expected a positive number of bytes or a size like '64MB'; got {size!r}")


def count_samples(batch: Any, b: int) -> int:
    """The number of samples of a batch: dim 0 of its first array-like leaf (a tensor, an ndarray)."""
    stack = [batch]
    while stack:
        x = stack.pop(0)
        if isinstance(x, (str, bytes)):
            continue
        shape = getattr(x, "shape", None)
        if shape is not None and not isinstance(x, type):
            if len(shape) == 0:
                break
            return int(shape[0])
        if isinstance(x, Mapping):
            stack = list(x.values()) + stack
        elif isinstance(x, (tuple, list)):
            stack = list(x) + stack
    raise ExtractError(
        f"extract: cannot tell how many samples batch {b} holds (a {type(batch).__name__}): the first tensor of a batch "
        "(a tensor, a tuple (x, y), a dict like {'input_ids': ...}) must hold the samples along dim 0"
    )


# -- opening ----------------------------------------------------------------------------------------
def open_folder(
    out: str,
    fingerprint: dict[str, Any],
    meta: dict[str, Any],
    plan: RankPlan | None = None,
    same: str = "model and weights, layers, inputs, reduce and dtype",
) -> dict[str, Any]:
    """Create or reopen ``out``: a new index (this rank's, under a process group), or the old one
    when the fingerprint matches (resume). Errors name the public function the user called and
    ``same``: the arguments a resume must repeat."""
    plan = plan or RankPlan(0, 1, None, None, None)
    _check_writable(out)
    if plan.ranked and os.path.exists(os.path.join(out, fmt.INDEX)):  # a finished multi-rank run: left as it is
        return fmt.read_index(out)
    ranks.check_world(out, plan)
    if os.path.exists(os.path.join(out, plan.index_name)):
        index = _reopen(out, fingerprint, plan, same)
    else:
        index = _create(out, fingerprint, meta, plan)
    # leftovers of a killed run: temporary files, and shards written after the index's last update
    listed = {s["file"] for s in index["shards"]}
    for n in os.listdir(out):
        stale_tmp = n.startswith(".") and n.endswith(".tmp") and (_own_shard(n[1:-4], plan) or n[1:-4] == plan.index_name)
        if stale_tmp or (_own_shard(n, plan) and n not in listed):
            os.remove(os.path.join(out, n))
    return index


def _check_writable(out: str) -> None:
    fn = entry_name()
    if os.path.exists(out) and not os.path.isdir(out):
        raise ExtractError(f"{fn}(out={out!r}): it is a file; give a folder (created if missing)")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise ExtractError(f"{fn}(out={out!r}): cannot create the folder: {e.strerror or e}") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise ExtractError(f"{fn}(out={out!r}): the folder is not writable")


def _reopen(out: str, fingerprint: dict[str, Any], plan: RankPlan, same: str) -> dict[str, Any]:
    """The index of an earlier run with the same fingerprint (to resume)."""
    fn = entry_name()
    try:
        index = fmt.read_index(out, plan.index_name, plan.shard_rank)
    except fmt.FeaturesError as e:
        raise ExtractError(
            f"{fn}(out={out!r}): the folder holds an index that cannot be resumed ({e}); use a new folder or delete it"
        ) from None
    old = index.get("fingerprint") or {}
    diff = [k for k in fingerprint if old.get(k) != fingerprint[k]]
    if diff:
        what = "; ".join(_difference(k, old.get(k), fingerprint[k]) for k in diff)
        raise ExtractError(
            f"{fn}(out={out!r}): the folder holds an extraction with other arguments ({what}); "
            f"re-run with the same {same} to resume it, or use a new folder"
        )
    return index


def _create(out: str, fingerprint: dict[str, Any], meta: dict[str, Any], plan: RankPlan) -> dict[str, Any]:
    """A new, empty index, written at once (it ties the folder to these arguments)."""
    fn = entry_name()
    if any(_own_shard(n, plan) for n in os.listdir(out)):
        raise ExtractError(f"{fn}(out={out!r}): the folder holds shard files but no {plan.index_name}; use a new folder")
    index: dict[str, Any] = {
        "format": fmt.FORMAT,
        "version": fmt.VERSION,
        "fingerprint": fingerprint,
        "metadata": meta,
        "layers": {},
        "shards": [],
        "count": 0,
        "batches": 0,
        "complete": False,
    }
    if plan.ranked:
        index.update(rank=plan.rank, world=plan.world)
    if plan.ids is not None:
        index["samples"] = True  # each shard also holds every row's data-set index
    try:
        fmt.write_json(os.path.join(out, plan.index_name), index)
    except OSError as e:
        raise ExtractError(f"{fn}(out={out!r}): cannot write to the folder: {e.strerror or e}") from None
    return index


def _difference(key: str, old: Any, new: Any) -> str:
    """What changed in fingerprint field ``key``, for the refusal message."""
    if key == "weights" and isinstance(old, dict):
        changed = [n for n in new if n in old and old[n] != new[n]]
        gone, added = [n for n in old if n not in new], [n for n in new if n not in old]
        parts = []
        for what, names in (("differ", changed), ("are new", added), ("are gone", gone)):
            if names:
                more = f" and {len(names) - 3} more" if len(names) > 3 else ""
                parts.append(f"{len(names)} of {len(new)} tensors {what} ({', '.join(names[:3])}{more})")
        return "weights: " + "; ".join(parts) + ": another checkpoint or another random init"
    if key == "weights":
        return "weights: not recorded there (a folder from an older hookkit)"
    return f"{key}: {old!r} there, {new!r} now"[:300]


def _own_shard(name: str, plan: RankPlan) -> bool:
    """A shard file of this rank (or of the single process)."""
    if not fmt._SHARD_NAME.fullmatch(name):
        return False
    return name.startswith(f"shard-r{plan.rank:05d}-") if plan.ranked else not name.startswith("shard-r")


def forget(out: str, existed: bool, index_name: str = fmt.INDEX) -> None:
    """A call that failed before writing any shard leaves nothing behind: no index (which would tie
    the folder to these arguments), and no folder it created."""
    try:
        os.remove(os.path.join(out, index_name))
        if not existed and not os.listdir(out):
            os.rmdir(out)
    except OSError:
        pass


# -- writing ----------------------------------------------------------------------------------------
class FolderWriter:
    """The rows of each batch into shards of ``out`` (an index from ``open_folder``), through the writer
    thread; ``resumed`` skips the batches an interrupted run wrote, ``finish`` marks the index complete.
    ``specs``: each key's row shape and dtype, fixed by the first rows (or by the index on resume); the
    caller may share its own dict to check its rows against."""

    def __init__(
        self,
        out: str,
        index: dict[str, Any],
        keys: list[str],
        shard_bytes: int,
        progress: bool | None,
        total: int | None = None,
        *,
        plan: RankPlan | None = None,
        others: Callable[[], tuple[int, int]] | None = None,
        resume_hint: str = RESUME_HINT,
        specs: dict[str, tuple[tuple[int, ...], str]] | None = None,
    ):
        plan = plan or RankPlan(0, 1, None, None, None)
        self.out, self.index, self.plan, self.resume_hint = out, index, plan, resume_hint
        self.done = [c for s in index["shards"] for c in s["batch_sizes"]]
        self.specs = specs if specs is not None else {k: (tuple(v["shape"]), v["dtype"]) for k, v in index["layers"].items()}
        self.samples = index["count"]
        self.writer = Writer(out, index, plan.index_name, plan.shard_rank)
        try:
            self.rows = Rows(keys, shard_bytes, self.writer)
            self.bar = Progress(progress, total, self.writer, len(self.done), others)
        except BaseException:
            self.writer.close()
            raise

    def __enter__(self) -> FolderWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def resumed(self, b: int, n: int) -> bool:
        """Whether batch ``b`` of ``n`` samples was written before the interruption (then it is skipped)."""
        if b >= len(self.done):
            return False
        if n != self.done[b]:
            raise ExtractError(
                f"{entry_name()}(out={self.out!r}): batch {b} holds {n} samples but held {self.done[b]} in the interrupted run; "
                + self.resume_hint
            )
        return True

    def add(self, b: int, rows: dict[str, Any], n: int) -> None:
        """Batch ``b``'s ``n`` rows per key (copied: the batch's tensors may be freed now)."""
        self.rows.add(rows, n, self.specs)
        self.samples += n
        self.writer.check()
        self.bar.update(b + 1, self.samples)

    def finish(self, b: int, data_arg: str = "data") -> None:
        """After the last batch ``b``: the last shard, then the index marked complete."""
        if b + 1 < len(self.done):
            raise ExtractError(
                f"{entry_name()}(out={self.out!r}): data gave {b + 1} batches, fewer than the {len(self.done)} already written; "
                "the data changed: resume needs the same batches in the same order"
            )
        if b < 0:
            raise ExtractError(f"{entry_name()}({data_arg}=...): the data gave no batches (an exhausted iterator?)")
        self.rows.flush(self.specs)
        self.writer.close()
        self.writer.check()
        self.index["complete"] = True
        fmt.write_json(os.path.join(self.out, self.plan.index_name), self.index)

    def close(self) -> None:
        """Shards already queued are whole: they are written (resume skips them)."""
        self.writer.close()
        self.bar.close()
