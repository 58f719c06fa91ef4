"""What the training-loop callbacks share: attach statistics to a model, remove them, log them as scalars.

The callbacks only decide *when* (fit start / end / error, log points); ``Monitor`` does the rest.
Statistics stay on the device during training; ``scalars()`` reads them once per log point
(never per batch per layer) and reduces the steps recorded since the previous log point to their mean.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from hookkit.core.entry import entered, public_entry
from hookkit.core.validate import check_int
from hookkit.integrations.writers import Histogram, ScalarWriter, as_writer

ACT_KEYS = ("mean", "std", "near_zero")
GRAD_KEYS = ("norm", "mean", "std", "max_abs")


# (tag prefix, key in the arrays, tag suffix) of what is logged
_ACT_TAGS = [("act", k, k) for k in ACT_KEYS]
_GRAD_TAGS = [("grad", k, k) for k in GRAD_KEYS] + [("param_grad", "param_norm", "norm")]
WEIGHT_KEYS = ("norm", "mean", "std", "max_abs", "update_ratio")
_WEIGHT_TAGS = [("weight", k, k) for k in WEIGHT_KEYS]


class Monitor:
    """Activation / gradient statistics and non-finite checks on one model, with scalar logging.

    >>> mon = Monitor(hist=True, writer=SummaryWriter("runs/x"))   # doctest: +SKIP
    >>> mon.attach(model); ...; mon.log(step=100); mon.remove()    # doctest: +SKIP
    """

    @public_entry()
    def __init__(
        self,
        activation_stats: bool = True,
        gradient_stats: bool = True,
        hist: bool = False,
        layers: Any = None,
        every: int = 1,
        nonfinite: bool = False,
        writer: ScalarWriter | None = None,
        log_every: int = 1,
        weight_stats: bool = False,
    ):
        check_int(every, arg="every", low=1)
        check_int(log_every, arg="log_every", low=1)
        writer = as_writer(writer)  # SummaryWriter as is; VisualDL's LogWriter and a wandb run adapted
        self.want_activations, self.want_gradients, self.hist = activation_stats, gradient_stats, hist
        self.layers, self.every, self.nonfinite = layers, every, nonfinite
        self.writer, self.log_every = writer, log_every
        self.want_weights = weight_stats
        self.activation_stats: Any = None
        self.gradient_stats: Any = None
        self.weight_stats: Any = None
        self._stack: contextlib.ExitStack | None = None
        self._logged: dict[str, int] = {}

    @property
    def attached(self) -> bool:
        return self._stack is not None

    def attach(self, model: Any, optimizer: Any = None) -> None:
        """Start recording on ``model`` (fresh statistics; anything still attached from a failed run is removed first).
        ``optimizer``: the one whose steps ``WeightStats`` records (None: the model's training forwards)."""
        import hookkit  # lazy: the package imports this module's siblings lazily; no cycle at import time

        self.remove()
        stack = contextlib.ExitStack()
        try:
            if self.want_activations:
                self.activation_stats = hookkit.ActivationStats(model, self.layers, every=self.every, hist=self.hist)
                stack.callback(self.activation_stats.remove)
            if self.want_gradients:
                self.gradient_stats = hookkit.GradientStats(model, self.layers, every=self.every)
                stack.callback(self.gradient_stats.remove)
            if self.want_weights:
                self.weight_stats = hookkit.WeightStats(model, self.layers, optimizer, every=self.every, hist=self.hist)
                stack.callback(self.weight_stats.remove)
            if self.nonfinite:
                stack.enter_context(hookkit.watch_nonfinite(model))
        except BaseException:
            stack.close()
            raise
        self._stack, self._logged = stack, {}

    def remove(self, exc: BaseException | None = None) -> None:
        """Remove every hook placed by ``attach``; the recorded statistics stay readable. Idempotent.

        ``exc``: the exception training is failing with; the non-finite watcher then skips its
        final check, so that no second error hides the first."""
        stack, self._stack = self._stack, None
        if stack is None:
            return
        if exc is None:
            stack.close()
        else:
            stack.__exit__(type(exc), exc, exc.__traceback__)

    def _tables(self) -> list[tuple[list[tuple[str, str, str]], dict[str, Any]]]:
        """One host read per statistics object: ``[(tags, {layer: columns})]``."""
        sources = []
        if self.activation_stats is not None:
            sources.append((_ACT_TAGS, self.activation_stats.to_numpy()))
        if self.gradient_stats is not None:
            sources.append((_GRAD_TAGS, self.gradient_stats.to_numpy()))
        if self.weight_stats is not None:
            sources.append((_WEIGHT_TAGS, self.weight_stats.to_numpy()))
        return sources

    def _since_last(self, tag: str, steps: Any) -> int | None:
        """The first row recorded after the last step logged under ``tag`` (None: nothing new); marks it logged."""
        if steps is None or not len(steps):
            return None
        # rows of steps after the last one logged (old rows of long runs get merged: count by step)
        start = int(np.searchsorted(steps, self._logged.get(tag, -1), side="right"))
        if start >= len(steps):
            return None
        self._logged[tag] = int(steps[-1])
        return start

    def scalars(self, tables: Any = None) -> dict[str, float]:
        """``{"act/<layer>/mean": value, ...}``: per layer and statistic, the mean over the steps recorded since the last call.

        In distributed training the figures are those of all ranks (a collective: every rank calls it)."""
        out: dict[str, float] = {}
        for tags, table in self._tables() if tables is None else tables:
            for name, series in table.items():
                for prefix, key, suffix in tags:
                    tag = f"{prefix}/{name}/{suffix}"
                    start = self._since_last(tag, series.get("param_step" if key.startswith("param_") else "step"))
                    if start is not None:
                        values = np.asarray(series[key][start:], dtype=np.float64)
                        if key == "update_ratio":  # NaN at the first step (no previous weights)
                            values = values[np.isfinite(values)]
                            if not len(values):
                                continue
                        out[tag] = float(values.mean())
        return out

    def histograms(self, tables: Any = None) -> dict[str, Histogram]:
        """Histograms of the steps recorded since the last call, from what the statistics kept (no
        tensor is read again): ``act_hist/<layer>``, the layer's output values (with ``hist=True``:
        the recorded bins summed over those steps, values outside ``range`` not counted), and
        ``grad_hist/<layer>/norm`` / ``param_grad_hist/<layer>/norm``, the per-step gradient norms, and
        ``weight_hist/<parameter>``, the parameter's values at the last recorded step (``hist=True``)."""
        out: dict[str, Histogram] = {}
        acts = self.activation_stats
        for tags, table in self._tables() if tables is None else tables:
            for name, series in table.items():
                if tags is _ACT_TAGS and "hist" in series:
                    tag = f"act_hist/{name}"
                    start = self._since_last(tag, series.get("step"))
                    counts = None if start is None else np.asarray(series["hist"][start:], np.float64).sum(axis=0)
                    lo, hi = acts.hist_range
                    h = None if counts is None else Histogram.from_bins(np.linspace(lo, hi, len(counts) + 1), counts)
                elif tags is _WEIGHT_TAGS and "hist" in series:
                    tag = f"weight_hist/{name}"
                    start = self._since_last(tag, series.get("step"))
                    lo, hi = self.weight_stats.hist_ranges[name]
                    last = None if start is None else np.asarray(series["hist"][-1], np.float64)  # the weights now: a state
                    h = None if last is None else Histogram.from_bins(np.linspace(lo, hi, len(last) + 1), last)
                elif tags is _GRAD_TAGS:
                    for prefix, key, steps in (("grad_hist", "norm", "step"), ("param_grad_hist", "param_norm", "param_step")):
                        tag = f"{prefix}/{name}/norm"
                        start = self._since_last(tag, series.get(steps))
                        if start is not None and (h := Histogram.of_values(series[key][start:])) is not None:
                            out[tag] = h
                    continue
                else:
                    continue
                if h is not None:
                    out[tag] = h
        return out

    def log(self, step: int) -> dict[str, float]:
        """Read the new statistics once and write them to the writer (if any) at ``step``: scalars,
        and histograms where the writer takes them (``add_histogram_raw``); returns the scalars.
        Distributed training: every rank reads (the figures of all ranks), rank 0 writes."""
        tables = self._tables()
        values = self.scalars(tables)
        hists = self.histograms(tables) if callable(getattr(self.writer, "add_histogram_raw", None)) else {}
        rank = next((s.rank for s in (self.activation_stats, self.gradient_stats, self.weight_stats) if s is not None), 0)
        if self.writer is not None and rank == 0:
            for tag, value in values.items():
                self.writer.add_scalar(tag, value, step)
            for tag, h in hists.items():
                h.write(self.writer, tag, step)
            commit = getattr(self.writer, "commit", None)
            if callable(commit):
                commit()  # writers that send one record per log point (wandb)
        return values


class MonitorCallback:
    """What the three framework callbacks share: the arguments, the results, removal, ``with``.

    A mixin placed before the framework's own ``Callback`` class; subclasses only map their
    library's events to ``self.monitor.attach / log / remove``."""

    def __init__(
        self,
        activation_stats: bool = True,
        gradient_stats: bool = True,
        hist: bool = False,
        layers: Any = None,
        every: int = 1,
        nonfinite: bool = False,
        writer: ScalarWriter | None = None,
        log_every: int = 1,
        weight_stats: bool = False,
    ):
        super().__init__()
        with entered(type(self).__name__):  # errors name the callback class the user made
            self.monitor = Monitor(activation_stats, gradient_stats, hist, layers, every, nonfinite, writer, log_every, weight_stats)

    @property
    def activation_stats(self) -> Any:
        """The ``hookkit.ActivationStats`` of the last run (None before it, or when not asked for)."""
        return self.monitor.activation_stats

    @property
    def gradient_stats(self) -> Any:
        """The ``hookkit.GradientStats`` of the last run (None before it, or when not asked for)."""
        return self.monitor.gradient_stats

    @property
    def weight_stats(self) -> Any:
        """The ``hookkit.WeightStats`` of the last run (None before it, or when not asked for)."""
        return self.monitor.weight_stats

    def remove(self) -> None:
        """Remove the hooks now (idempotent); the statistics stay readable."""
        self.monitor.remove()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.monitor.remove(exc)
