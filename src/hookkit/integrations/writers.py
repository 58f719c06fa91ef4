"""Where the callbacks write: TensorBoard, VisualDL and Weights & Biases behind one small protocol.

A writer has ``add_scalar(tag, value, step)`` and, for histograms, TensorBoard's
``add_histogram_raw(tag, min, max, num, sum, sum_squares, bucket_limits, bucket_counts, global_step)``:
a histogram given by its bin counts, which is what ``ActivationStats(hist=True)`` keeps, so no
tensor is read a second time. ``SummaryWriter`` (torch.utils.tensorboard, tensorboardX) is such a
writer as it is; ``VisualDLWriter`` and ``WandbWriter`` adapt VisualDL's ``LogWriter`` and a wandb
run; ``as_writer`` picks the adapter, so ``writer=`` takes any of the three directly.

>>> cb = HookkitCallback(hist=True, writer=SummaryWriter("runs/x"))        # doctest: +SKIP
>>> cb = HookkitPaddleCallback(hist=True, writer=LogWriter("vdl/x"))       # doctest: +SKIP
>>> cb = HookkitCallback(hist=True, writer=wandb.init(project="p"))        # doctest: +SKIP
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from hookkit.core.entry import entry_name
from hookkit.core.validate import ArgumentTypeError, fail

__all__ = ["Histogram", "HistogramWriter", "ScalarWriter", "VisualDLWriter", "WandbWriter", "as_writer"]


class ScalarWriter(Protocol):
    """Anything with TensorBoard's ``add_scalar(tag, value, step)``."""

    def add_scalar(self, tag: str, value: float, step: int) -> Any: ...


class HistogramWriter(ScalarWriter, Protocol):
    """A writer that also takes histograms as bin counts (TensorBoard's ``add_histogram_raw``)."""

    def add_histogram_raw(
        self,
        tag: str,
        min: float,  # noqa: A002 - TensorBoard's names
        max: float,  # noqa: A002
        num: float,
        sum: float,  # noqa: A002
        sum_squares: float,
        bucket_limits: Any,
        bucket_counts: Any,
        global_step: int | None = None,
    ) -> Any: ...


@dataclass(frozen=True)
class Histogram:
    """Counts of values in bins: ``counts[i]`` values in ``(edges[i], edges[i + 1]]``; moments are
    over the counted values, from the bin centers where the values themselves are not kept."""

    edges: np.ndarray
    counts: np.ndarray
    sum: float
    sum_squares: float

    @staticmethod
    def from_bins(edges: np.ndarray, counts: np.ndarray) -> Histogram | None:
        """The histogram of recorded bins, empty bins at both ends left out; None when nothing was counted."""
        counts = np.asarray(counts, np.float64)
        filled = np.flatnonzero(counts)
        if not len(filled):
            return None
        first, last = int(filled[0]), int(filled[-1])
        edges = np.asarray(edges, np.float64)[first : last + 2]
        counts = counts[first : last + 1]
        centers = (edges[:-1] + edges[1:]) / 2
        return Histogram(edges, counts, float(counts @ centers), float(counts @ centers**2))

    @staticmethod
    def of_values(values: np.ndarray, bins: int = 30) -> Histogram | None:
        """The histogram of a few values (per-step statistics), with their exact moments."""
        values = np.asarray(values, np.float64)
        values = values[np.isfinite(values)]
        if not len(values):
            return None
        counts, edges = np.histogram(values, bins=max(1, min(bins, len(values))))
        return Histogram(edges, counts.astype(np.float64), float(values.sum()), float((values**2).sum()))

    @property
    def num(self) -> float:
        return float(self.counts.sum())

    def write(self, writer: Any, tag: str, step: int) -> None:
        writer.add_histogram_raw(
            tag,
            min=float(self.edges[0]),
            max=float(self.edges[-1]),
            num=self.num,
            sum=self.sum,
            sum_squares=self.sum_squares,
            bucket_limits=self.edges[1:].tolist(),
            bucket_counts=self.counts.tolist(),
            global_step=step,
        )


class VisualDLWriter:
    """VisualDL's ``LogWriter`` behind the protocol: scalars as they are, histograms from bin counts.

    >>> from visualdl import LogWriter                                       # doctest: +SKIP
    >>> cb = HookkitPaddleCallback(hist=True, writer=VisualDLWriter(LogWriter("vdl/run1")))

    VisualDL's own ``add_histogram`` bins raw values; a histogram that is already counted goes to
    its file writer as the same ``Histogram`` record."""

    def __init__(self, log_writer: Any):
        self.log_writer = log_writer

    def add_scalar(self, tag: str, value: float, step: int) -> Any:
        return self.log_writer.add_scalar(tag=tag, value=value, step=step)

    def add_histogram_raw(self, tag: str, min: float, max: float, num: float, sum: float, sum_squares: float,  # noqa: A002
                          bucket_limits: Any, bucket_counts: Any, global_step: int | None = None) -> None:  # fmt: skip
        from visualdl.component.base_component import histogram

        edges = [min, *bucket_limits]
        record = histogram(tag=tag, hist=list(bucket_counts), bin_edges=edges, step=global_step or 0, walltime=round(time.time() * 1000))
        self.log_writer._get_file_writer().add_record(record)  # what LogWriter.add_histogram does after np.histogram

    def flush(self) -> None:
        self.log_writer.flush()

    def close(self) -> None:
        self.log_writer.close()


class WandbWriter:
    """A Weights & Biases run behind the protocol (``pip install wandb``; offline runs work too).

    >>> run = wandb.init(project="my-project")                              # doctest: +SKIP
    >>> cb = HookkitCallback(hist=True, writer=WandbWriter(run))             # or writer=run

    What one log point writes goes to ``run.log`` at once, at that step (``commit()``, called by
    the callbacks after each log point): scalars as numbers, histograms as ``wandb.Histogram``
    from the recorded bin counts. ``run``: default ``wandb.run`` (after ``wandb.init``)."""

    def __init__(self, run: Any = None):
        if run is None:
            import wandb

            run = wandb.run
            if run is None:
                raise RuntimeError("WandbWriter(): no wandb run: call wandb.init(...) first or pass the run")
        self.run = run
        self._pending: dict[int, dict[str, Any]] = {}

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self._pending.setdefault(int(step), {})[tag] = float(value)

    def add_histogram_raw(self, tag: str, min: float, max: float, num: float, sum: float, sum_squares: float,  # noqa: A002
                          bucket_limits: Any, bucket_counts: Any, global_step: int | None = None) -> None:  # fmt: skip
        import wandb

        edges = np.asarray([min, *bucket_limits], np.float64)
        self._pending.setdefault(int(global_step or 0), {})[tag] = wandb.Histogram(np_histogram=(np.asarray(bucket_counts), edges))

    def commit(self) -> None:
        """Send what was added, one ``run.log`` per step, in step order."""
        pending, self._pending = self._pending, {}
        for step in sorted(pending):
            self.run.log(pending[step], step=step)

    def flush(self) -> None:
        self.commit()

    def close(self) -> None:
        self.commit()


def as_writer(writer: Any) -> Any:
    """``writer`` ready for the callbacks: a ``SummaryWriter`` (or anything with ``add_scalar``)
    as it is, VisualDL's ``LogWriter`` in a ``VisualDLWriter``, a wandb run in a ``WandbWriter``;
    None stays None. Anything else: TypeError naming what is accepted."""
    if writer is None or isinstance(writer, (VisualDLWriter, WandbWriter)):
        return writer
    module = type(writer).__module__
    if module.startswith("visualdl"):
        return VisualDLWriter(writer)
    if module.startswith("wandb") and callable(getattr(writer, "log", None)):
        return WandbWriter(writer)
    if callable(getattr(writer, "add_scalar", None)):
        return writer
    fail(
        entry_name("Monitor"),
        "writer",
        "a TensorBoard SummaryWriter (or any object with add_scalar(tag, value, step)), a VisualDL LogWriter or a wandb run",
        writer,
        kind=ArgumentTypeError,
    )
