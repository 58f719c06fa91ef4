"""The per-layer row store: mergeable statistics rows on the host, bounded in memory, read in O(new rows).

A row is the *mergeable state* of one record (one call of a layer, or one backward): enough to
merge two records exactly, as if their values had been one tensor. Two kinds:

- ``ACTIVATION``: ``[n, mean, m2, count <= near_zero]`` (m2: sum of squared deviations), merged
  with Chan et al.'s parallel formulas; histogram counts add.
- ``GRADIENT``: ``[n, sum, sum of squares, max |x|]``: sums add, the max is a max (NaN wins).

Gradient rows are keyed by (step, backward, call): ``backward`` numbers the backwards of one
forward (``loss_a.backward(retain_graph=True); loss_b.backward()`` gives backwards 0 and 1), packed
into the stored call as ``backward * BACKWARD + call`` and split again by ``columns()``.

``Rows`` keeps ``step``, ``call`` and ``records`` (how many records a row holds) beside the state,
in buffers that double when full, and the finished columns (mean, std, ...) computed once per row:
a read costs O(rows added since the last read). Long runs: past ``limit`` rows, the oldest rows
outside the last ``limit // 2`` are merged pairwise (exact merges), so memory stays bounded and
the recent window keeps one row per record; older history gets coarser, step by step.

>>> rows = Rows(GRADIENT); rows.append(steps, calls, state); rows.columns()["norm"]   # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = ["ACTIVATION", "BACKWARD", "GRADIENT", "LIMIT", "Block", "Kind", "Rows"]

LIMIT = 8192  # rows kept per layer before the oldest are merged pairwise (documented policy)


class Kind:
    """How rows of one kind merge and finish. ``width``: state columns; ``keys``: finished columns."""

    def __init__(self, name: str, width: int, keys: tuple[str, ...]):
        self.name, self.width, self.keys = name, width, keys

    def merge(self, state: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """Merge consecutive rows of ``state`` into one row per group; ``starts``: the first row of
        each group (ascending, starting at 0)."""
        raise NotImplementedError

    def finish(self, state: np.ndarray) -> dict[str, np.ndarray]:
        """The user's columns (float32) of state rows."""
        raise NotImplementedError


class _Activation(Kind):
    def merge(self, state: np.ndarray, starts: np.ndarray) -> np.ndarray:
        n, mean, m2, count = state.T
        add = np.add.reduceat
        total = add(n, starts)
        with np.errstate(invalid="ignore", divide="ignore"):
            filled = n > 0  # an empty record (n = 0) has a NaN mean
            merged_mean = add(np.where(filled, n * mean, 0.0), starts) / total
            dev = np.where(filled, mean - np.repeat(merged_mean, np.diff(starts, append=len(n))), 0.0)
            # Chan et al.: M2 = sum of the parts' M2 + sum of n_i (mean_i - mean)^2
            merged_m2 = add(np.where(filled, m2, 0.0) + n * dev * dev, starts)
        return np.stack((total, merged_mean, merged_m2, add(count, starts)), axis=1)

    def finish(self, state: np.ndarray) -> dict[str, np.ndarray]:
        n, mean, m2, count = state.T
        with np.errstate(invalid="ignore", divide="ignore"):
            # torch's conventions on both frameworks: no values -> NaN mean; fewer than two -> NaN
            # (unbiased) std, not sqrt(0 / -1) = -0.0
            return {
                "mean": np.where(n > 0, mean, np.nan).astype(np.float32),
                "std": np.where(n > 1, np.sqrt(np.maximum(m2, 0.0) / (n - 1)), np.nan).astype(np.float32),
                "near_zero": np.where(n > 0, count / n, np.nan).astype(np.float32),
            }


class _Gradient(Kind):
    def merge(self, state: np.ndarray, starts: np.ndarray) -> np.ndarray:
        sums = np.add.reduceat(state[:, :3], starts, axis=0)  # n, sum, sum of squares
        with np.errstate(invalid="ignore"):  # NaN compares invalid; it still propagates
            largest = np.maximum.reduceat(state[:, 3], starts)  # NaN propagates, as in the rows
        return np.column_stack((sums, largest))

    def finish(self, state: np.ndarray) -> dict[str, np.ndarray]:
        n, total, sumsq, peak = state.T
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(n > 0, total / n, np.nan)
            # one-pass variance in float64: gradients have |mean| << std, where it keeps its digits
            var = np.where(n > 1, np.maximum(sumsq - n * mean * mean, 0.0) / (n - 1), np.nan)
            return {
                "mean": mean.astype(np.float32),
                "std": np.sqrt(var).astype(np.float32),
                "norm": np.sqrt(sumsq).astype(np.float32),
                "max_abs": peak.astype(np.float32),
            }


ACTIVATION = _Activation("activation", 4, ("mean", "std", "near_zero"))
GRADIENT = _Gradient("gradient", 4, ("mean", "std", "norm", "max_abs"))


BACKWARD = 1 << 32  # gradient rows: the stored "call" is backward * BACKWARD + call (see Rows.columns)


def merge_keys(steps: np.ndarray, calls: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(order, starts)`` to sort rows by (step, call) and merge equal keys (``starts``: the first
    sorted row of each key); None when the rows are sorted and unique already (nothing to do)."""
    if len(steps) < 2:
        return None
    ds, dc = np.diff(steps), np.diff(calls)
    if bool(((ds > 0) | ((ds == 0) & (dc > 0))).all()):
        return None
    order = np.lexsort((calls, steps))
    s, c = steps[order], calls[order]
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    np.logical_or(s[1:] != s[:-1], c[1:] != c[:-1], out=new[1:])
    return order, np.flatnonzero(new)


class Block(NamedTuple):
    """Rows of one series as arrays, one entry per row: ``step`` and ``call`` (int64, the row's
    key), ``records`` (how many records the row holds), ``state`` (float64 [k, the kind's width])
    and ``hist`` (float64 [k, bins], or None without histograms)."""

    step: np.ndarray
    call: np.ndarray
    records: np.ndarray
    state: np.ndarray
    hist: np.ndarray | None

    @classmethod
    def empty(cls, width: int, bins: int = 0) -> Block:
        z = np.zeros(0, np.int64)
        return cls(z, z, z, np.zeros((0, width)), np.zeros((0, bins)) if bins else None)

    def subset(self, index: Any) -> Block:
        """The rows ``index`` selects (a boolean mask, a slice or indices)."""
        return Block(
            self.step[index], self.call[index], self.records[index], self.state[index], None if self.hist is None else self.hist[index]
        )

    def concat(self, other: Block) -> Block:
        """These rows, then ``other``'s (histograms where both have them)."""
        hist = None if self.hist is None or other.hist is None else np.concatenate((self.hist, other.hist))
        cat = np.concatenate
        return Block(
            cat((self.step, other.step)),
            cat((self.call, other.call)),
            cat((self.records, other.records)),
            cat((self.state, other.state)),
            hist,
        )


class Rows:
    """Rows of one layer (and one kind): append in blocks, read finished columns, merge when long.

    ``columns()`` returns read-only arrays that later appends never change (appends write past
    them; a merge builds new buffers)."""

    __slots__ = ("kind", "bins", "limit", "n", "done", "step", "call", "records", "state", "hist", "cols", "_view")

    def __init__(self, kind: Kind, bins: int = 0, limit: int | None = None):
        self.kind, self.bins, self.limit = kind, bins, max(int(LIMIT if limit is None else limit), 4)
        self._alloc(64)

    def _alloc(self, capacity: int) -> None:
        self.n = self.done = 0
        self.step = np.zeros(capacity, np.int64)
        self.call = np.zeros(capacity, np.int64)
        self.records = np.zeros(capacity, np.int64)
        self.state = np.zeros((capacity, self.kind.width))
        self.hist = np.zeros((capacity, self.bins)) if self.bins else None  # float64: counts stay exact
        self.cols = {k: np.zeros(capacity, np.float32) for k in self.kind.keys}
        self._view: dict[str, np.ndarray] | None = None

    def __len__(self) -> int:
        return self.n

    def clear(self) -> None:
        self._alloc(64)

    def append(self, steps: Any, calls: Any, state: np.ndarray, hist: np.ndarray | None = None, records: Any = 1) -> None:
        """Add ``len(state)`` rows (in record order)."""
        k = len(state)
        if not k:
            return
        n = self.n
        if n + k > len(self.step):
            self._grow(max(2 * len(self.step), n + k))
        end = n + k
        self.step[n:end] = steps
        self.call[n:end] = calls
        self.records[n:end] = records
        self.state[n:end] = state
        if self.hist is not None:
            self.hist[n:end] = hist
        self.n = end
        self._view = None
        if end > self.limit:
            self._compact()

    def _grow(self, capacity: int) -> None:
        n = self.n
        for name in ("step", "call", "records", "state", "hist"):
            old = getattr(self, name)
            if old is not None:
                new = np.zeros((capacity, *old.shape[1:]), old.dtype)
                new[:n] = old[:n]
                setattr(self, name, new)
        for key, old in self.cols.items():
            new = np.zeros(capacity, np.float32)
            new[: self.done] = old[: self.done]
            self.cols[key] = new

    def _compact(self) -> None:
        """Merge the rows before the last ``limit // 2`` pairwise, into new buffers (amortized O(1) a row)."""
        n, keep = self.n, self.limit // 2
        old = (n - keep) // 2 * 2
        merged = self.kind.merge(self.state[:old], np.arange(0, old, 2))
        tail = slice(old, n)
        step = np.concatenate((self.step[:old:2], self.step[tail]))  # a merged row: its first step and call
        call = np.concatenate((self.call[:old:2], self.call[tail]))
        records = np.concatenate((self.records[:old:2] + self.records[1:old:2], self.records[tail]))
        state = np.concatenate((merged, self.state[tail]))
        hist = None if self.hist is None else np.concatenate((self.hist[:old:2] + self.hist[1:old:2], self.hist[tail]))
        self._alloc(max(64, 2 * len(step)))
        self.append(step, call, state, hist, records)

    def columns(self) -> dict[str, np.ndarray]:
        """``{finished columns..., "hist"?, "step", "call", "records"}``, read-only, one entry per row."""
        if self._view is not None:
            return self._view
        n, done = self.n, self.done
        if done < n:
            for key, values in self.kind.finish(self.state[done:n]).items():
                self.cols[key][done:n] = values
            self.done = n
        view: dict[str, np.ndarray] = {k: v[:n] for k, v in self.cols.items()}
        if self.hist is not None:
            view["hist"] = self.hist[:n]
        view["step"], view["call"], view["records"] = self.step[:n], self.call[:n], self.records[:n]
        if self.kind is GRADIENT:  # the key packs (backward, call): several backwards of one forward
            view["call"], view["backward"] = self.call[:n] % BACKWARD, self.call[:n] // BACKWARD
        for v in view.values():
            v.flags.writeable = False
        self._view = view
        return view

    def block(self, start: int = 0) -> Block:
        """Rows ``start:`` as a block."""
        end = self.n
        hist = None if self.hist is None else self.hist[start:end]
        return Block(self.step[start:end], self.call[start:end], self.records[start:end], self.state[start:end], hist)
