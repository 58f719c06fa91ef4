"""Where recorded statistics wait: ``Pending`` (records since the last read, on the device or in
host memory) and ``Slot`` (one series: its pending records, its rows on this rank, all ranks' rows).

A slot is one series of one kind: a layer's outputs (``ActivationStats``), a layer's output
gradients or its direct parameters' gradients (``GradientStats``), one parameter's weights
(``WeightStats``). The recorders keep one slot per series, by name; the order of their slots is
the slot number of the cross-rank merge (``reduce.gather_blocks``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hookkit.backends.host_stats import HostRows
from hookkit.observers.stats.reduce import merge_block
from hookkit.observers.stats.series import Block, Kind, Rows

__all__ = ["CHUNK", "Pending", "Slot", "extend"]

CHUNK = 1024  # device rows per series before they are stacked into one device tensor


class Pending:
    """Records since the last read (one series). ``add`` keeps a device row per record and stacks
    them every ``CHUNK`` records into one device tensor, so a long run holds a few tensors, not
    millions. Records of tensors in host memory are written by the C kernel into ``host`` instead
    (preallocated rows, no tensor per call: ``Backend.activation_sums_into``, ``tensor_sums_into``)."""

    __slots__ = ("backend", "width", "bins", "host", "rows", "hists", "steps", "calls", "numels", "chunks", "hist_chunks")

    def __init__(self, backend: Any, bins: int = 0, width: int = 3):
        self.backend = backend
        self.width = width  # values per device row (a 2-d row block holds several rows)
        self.bins = bins  # histogram bins per record (0: none)
        self.host = HostRows(bins)
        self.rows: list[Any] = []
        self.hists: list[Any] = []
        self.steps: list[int] = []
        self.calls: list[int] = []
        self.numels: list[int] = []
        self.chunks: list[Any] = []
        self.hist_chunks: list[Any] = []

    def __len__(self) -> int:
        return len(self.steps) + len(self.host)

    def add(self, row: Any, step: int, call: int, numel: int, hist: Any = None) -> None:
        """One record: ``row`` (and ``hist``) on the device, its key and element count on the host."""
        rows = self.rows
        rows.append(row)
        self.steps.append(step)
        self.calls.append(call)
        self.numels.append(numel)
        if hist is not None:
            self.hists.append(hist)
        if len(rows) >= CHUNK:
            self.stack()

    def add_block(self, rows: Any, keys: list[tuple[int, int, int]], hists: Any = None) -> None:
        """Several records in one device row block ``rows`` [k, width]: ``keys`` their (step, call, numel)."""
        self.rows.append(rows)
        for step, call, numel in keys:
            self.steps.append(step)
            self.calls.append(call)
            self.numels.append(numel)
        if hists is not None:
            self.hists.append(hists)

    def stack(self) -> None:
        """The device rows recorded so far, stacked into one tensor (no host read)."""
        if self.rows:
            self.chunks.append(self.backend.stack(self.rows))
            del self.rows[:]
        if self.hists:
            self.hist_chunks.append(self.backend.stack(self.hists))
            del self.hists[:]

    def drain(self) -> Block:
        """The records as a block, one row each, in no particular order: ``state`` is ``[numel, the
        backend's row...]``, ``records`` ones. Moves the device rows to the host; empties the pending."""
        self.stack()
        to_numpy, w = self.backend.to_numpy, self.width
        rows = np.zeros((0, w))
        if self.chunks:
            rows = np.concatenate([np.asarray(to_numpy(c), np.float64).reshape(-1, w) for c in self.chunks])
        hists = np.zeros((0, self.bins)) if self.bins else None
        if self.hist_chunks:
            parts = [np.asarray(to_numpy(c), np.float64) for c in self.hist_chunks]
            hists = np.concatenate([h.reshape(-1, h.shape[-1]) for h in parts])
        block = Block(
            np.array(self.steps, np.int64),
            np.array(self.calls, np.int64),
            np.ones(len(self.steps), np.int64),
            np.column_stack((np.array(self.numels, np.float64), rows)),
            hists,
        )
        self.chunks, self.hist_chunks = [], []
        del self.steps[:], self.calls[:], self.numels[:]
        if self.host.n:  # host rows are [step, call, numel, the backend's row]: the same state
            host, host_hists = self.host.take()
            on_host = Block(host[:, 0].astype(np.int64), host[:, 1].astype(np.int64), np.ones(len(host), np.int64), host[:, 2:], host_hists)
            block = block.concat(on_host)
        return block


class Slot:
    """One series being recorded: ``pending`` records (None where the recorder keeps one ``Pending``
    for several series), ``local`` rows read on this rank, ``merged`` rows of every rank (after a
    distributed read) and ``waiting``: this rank's rows not yet merged with the other ranks'."""

    __slots__ = ("pending", "local", "merged", "waiting")

    def __init__(self, kind: Kind, bins: int = 0, pending: Pending | None = None):
        self.pending = pending
        self.local = Rows(kind, bins)
        self.merged: Rows | None = None
        self.waiting: Block | None = None

    def rows(self, merged: bool) -> Rows:
        """The rows to read: every rank's (``merged``) or this rank's."""
        return self.merged if merged and self.merged is not None else self.local

    def clear(self) -> None:
        """Forget the rows read (this rank's, the merged ones, what waits to be merged); the
        recorder drains ``pending`` itself."""
        self.local.clear()
        if self.merged is not None:
            self.merged.clear()
        self.waiting = None


def extend(rows: Rows, block: Block) -> None:
    """Append a block sorted by (step, call) to ``rows``; rows of keys already there are merged in."""
    if not len(block.step):
        return
    if rows.n:
        last = (rows.step[rows.n - 1], rows.call[rows.n - 1])
        if (block.step[0], block.call[0]) <= last:  # overlaps what is stored: merge the tail again
            start = int(np.searchsorted(rows.step[: rows.n], block.step[0], side="left"))
            block = merge_block(rows.kind, rows.block(start).concat(block))
            rows._grow(len(rows.step))  # fresh buffers: arrays handed out earlier stay as they were
            rows.n, rows.done = start, min(rows.done, start)
    rows.append(block.step, block.call, block.state, block.hist, block.records)
