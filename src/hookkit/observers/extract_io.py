"""The I/O half of ``hookkit.extract``: the writer thread, the recycled row buffers of the shard being
filled, and the progress line. Host memory holds at most three shards' worth of rows (the one being
written, the one queued, the one being filled) plus one batch, whatever the number of samples."""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from hookkit.core.errors import add_note
from hookkit.observers import features as fmt


# -- the writer thread ----------------------------------------------------------------------------
class Writer:
    """Writes shards handed over through a queue of one, then updates the index; never outlives
    the call (``close`` joins it); its exception is re-raised in the caller."""

    def __init__(self, out: str, index: dict[str, Any], index_name: str = fmt.INDEX, rank: int | None = None):
        self.out, self.index, self.index_name, self.rank = out, index, index_name, rank
        self.q: queue.Queue = queue.Queue(maxsize=1)
        self.error: BaseException | None = None
        self.bytes_written = 0
        self.thread = threading.Thread(target=self._run, name="hookkit-extract-writer", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            item = self.q.get()
            if item is None:
                return
            try:
                self._write(*item)
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                self.error = e
                return

    def _write(self, layers: dict[str, Any], chunks: dict[str, list[np.ndarray]], sizes: list[int], done: Callable[[], None]) -> None:
        index = self.index
        name = fmt.shard_name(len(index["shards"]), self.rank)
        self.bytes_written += fmt.write_shard(os.path.join(self.out, name), chunks)
        done()  # the buffers can be filled again
        index["layers"] = {k: v for k, v in layers.items() if k != fmt.SAMPLE_KEY}  # the sample ids are not a feature
        index["shards"].append({"file": name, "count": sum(sizes), "batch_sizes": sizes})
        index["count"] += sum(sizes)
        index["batches"] += len(sizes)
        fmt.write_json(os.path.join(self.out, self.index_name), index)  # only after the shard is whole

    def check(self) -> None:
        if self.error is not None:
            e = self.error
            note = f"hookkit.extract: writing a shard to {self.out!r} failed"
            if note not in getattr(e, "__notes__", ()):
                add_note(e, note)
            raise e

    def submit(self, item: Any) -> None:
        while True:
            self.check()
            try:
                self.q.put(item, timeout=0.05)
                return
            except queue.Full:
                continue

    def close(self) -> None:
        """Let the writer finish what is queued, and join it."""
        while self.thread.is_alive():
            try:
                self.q.put(None, timeout=0.05)
                break
            except queue.Full:
                continue
        self.thread.join()


class Rows:
    """Per-key row buffers of the shard being filled, recycled through the writer: at most ``sets``
    of them exist (the one filling, the one queued, the one being written), each of about
    ``shard_size`` + one batch, allocated once and reused, so memory neither grows nor fragments."""

    def __init__(self, keys: list[str], shard_bytes: int, writer: Writer, sets: int = 3):
        self.keys, self.shard_bytes, self.writer, self.sets = keys, shard_bytes, writer, sets
        self.free: queue.Queue = queue.Queue()
        self.made = 0
        self.full = self.bps = 0
        self.cur: dict[str, np.ndarray] | None = None
        self.filled = 0
        self.sizes: list[int] = []

    def _acquire(self, specs: dict[str, tuple[tuple[int, ...], str]], n: int) -> dict[str, np.ndarray]:
        try:
            return self.free.get_nowait()
        except queue.Empty:
            pass
        if self.made < self.sets:
            self.made += 1
            self.bps = sum(fmt._prod(specs[k][0]) * np.dtype(specs[k][1]).itemsize for k in self.keys)
            self.full = -(-self.shard_bytes // max(1, self.bps)) + n  # rows of a full shard, at most
            # small first, doubled as it fills: a short run never maps a whole shard's worth
            return {k: np.empty((min(self.full, 8 * n), *specs[k][0]), specs[k][1]) for k in self.keys}
        while True:  # all sets in flight: wait for the writer to hand one back
            self.writer.check()
            try:
                return self.free.get(timeout=0.05)
            except queue.Empty:
                continue

    def add(self, rows: dict[str, np.ndarray], n: int, specs: dict[str, tuple[tuple[int, ...], str]]) -> None:
        if self.cur is None:
            self.cur = self._acquire(specs, n)
        cur, at = self.cur, self.filled
        if at + n > len(cur[self.keys[0]]):  # grow this set: doubled, to a full shard (or this batch)
            size = max(at + n, min(2 * len(cur[self.keys[0]]), self.full))
            for k in self.keys:
                bigger = np.empty((size, *specs[k][0]), specs[k][1])
                bigger[:at] = cur[k][:at]
                cur[k] = bigger
        for k in self.keys:
            cur[k][at : at + n] = rows[k]
        self.filled += n
        self.sizes.append(n)
        if self.bps * self.filled >= self.shard_bytes:
            self.flush(specs)

    def flush(self, specs: dict[str, tuple[tuple[int, ...], str]]) -> None:
        if self.cur is None or not self.sizes:
            return
        cur, filled = self.cur, self.filled
        layers = {k: {"shape": list(s[0]), "dtype": s[1]} for k, s in specs.items()}
        self.writer.submit((layers, {k: [cur[k][:filled]] for k in self.keys}, self.sizes, lambda: self.free.put(cur)))
        self.cur, self.filled, self.sizes = None, 0, []


# -- progress -------------------------------------------------------------------------------------
class Progress:
    """A rich progress line (samples, samples/s, bytes written) on a terminal; nothing otherwise."""

    def __init__(
        self, enabled: bool | None, total: int | None, writer: Writer, done: int, others: Callable[[], tuple[int, int]] | None = None
    ):
        if enabled is None:
            enabled = sys.stderr.isatty()
        self.bar = None
        # several ranks: the bar (on rank 0) adds what the other ranks' indexes say they wrote, read
        # at most every 2 s (files on the shared folder: no collective per batch)
        self.others, self.polled, self.extra = others, 0.0, (0, 0)
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.writer, self.t0 = writer, time.perf_counter()
        self.samples0: int | None = None
        self.bar = Progress(
            TextColumn("extract"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("batches · {task.fields[samples]} samples · {task.fields[rate]} · {task.fields[written]} written"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
        )
        self.task = self.bar.add_task("extract", total=total, completed=done, samples=0, rate="-", written="0 B")
        self.bar.start()

    def update(self, batches: int, samples: int) -> None:
        if self.bar is None:
            return
        if self.others is not None and time.perf_counter() - self.polled > 2.0:
            self.polled, self.extra = time.perf_counter(), self.others()
        batches, samples = batches + self.extra[0], samples + self.extra[1]
        if self.samples0 is None:
            self.samples0, self.t0 = samples, time.perf_counter()
        dt = time.perf_counter() - self.t0
        rate = f"{(samples - self.samples0) / dt:,.0f} samples/s" if dt > 0 else "-"
        self.bar.update(self.task, completed=batches, samples=f"{samples:,}", rate=rate, written=_human(self.writer.bytes_written))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return ""
