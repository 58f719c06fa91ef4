"""``WeightStats``: per parameter and optimizer step, the weights' mean, std, norm, max |w|, histogram
and update-to-weight ratio ``||w_t - w_{t-1}|| / ||w_{t-1}||``, kept on the device until read.

At each recorded step one call of the backend's ``training`` family computes every watched
parameter's row ``[mean, m2, max |w|, ||w - prev||^2, ||prev||^2]`` as one device tensor (and,
with ``hist=True``, their histograms); the rows wait in a ``slots.Pending`` like the activation
rows, and a read moves them to the host, merges them into ``series.Rows`` and, in distributed
training, merges them with the other ranks' (one collective per read, none per step). The
previous weights are one copy per watched parameter on its device, refreshed only before a
recorded step (``every=N``: one copy in N steps).

Steps come from the optimizer: torch's ``register_step_post_hook``; Paddle's optimizers have no
step hook, so the backend wraps ``step``/``minimize`` on that optimizer instance (removed with the
statistics). Without an optimizer, the weights are read before each training-mode forward of the
model (the update of the step before it).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from hookkit.backends.host_stats import HostRows, kernels
from hookkit.core.entry import public_entry
from hookkit.core.handles import Handle
from hookkit.core.router import OBSERVER, Event, attach
from hookkit.core.select import LayerSpec
from hookkit.core.types import Layer
from hookkit.core.validate import ArgumentTypeError, check_bool, check_int, check_range_pair, fail
from hookkit.observers.stats.live import Tables, _Recorder
from hookkit.observers.stats.loaded import StatsData, read_files, register_kind
from hookkit.observers.stats.reduce import merge_block
from hookkit.observers.stats.series import ACTIVATION, Block, Kind
from hookkit.observers.stats.slots import Pending, Slot

__all__ = ["WEIGHT", "WeightData", "WeightStats"]


class _Weight(Kind):
    """``[n, mean, m2, max |w|, ||w - prev||^2, ||prev||^2]``: Chan's merge for (n, mean, m2), a max,
    sums of squares (shards of one parameter make the whole parameter's norms)."""

    def merge(self, state: np.ndarray, starts: np.ndarray) -> np.ndarray:
        moments = ACTIVATION.merge(np.column_stack((state[:, :3], np.zeros(len(state)))), starts)[:, :3]
        with np.errstate(invalid="ignore"):
            peak = np.maximum.reduceat(state[:, 3], starts)
        squares = np.add.reduceat(state[:, 4:6], starts, axis=0)  # NaN (no previous weights) stays NaN
        return np.column_stack((moments, peak, squares))

    def finish(self, state: np.ndarray) -> dict[str, np.ndarray]:
        n, mean, m2, peak, step_sq, prev_sq = state.T
        with np.errstate(invalid="ignore", divide="ignore"):
            return {
                "mean": np.where(n > 0, mean, np.nan).astype(np.float32),
                "std": np.where(n > 1, np.sqrt(np.maximum(m2, 0.0) / (n - 1)), np.nan).astype(np.float32),
                "norm": np.sqrt(np.maximum(m2, 0.0) + n * np.where(n > 0, mean, 0.0) ** 2).astype(np.float32),
                "max_abs": peak.astype(np.float32),
                "update_ratio": np.where(prev_sq > 0, np.sqrt(step_sq) / np.sqrt(prev_sq), np.nan).astype(np.float32),
            }


WEIGHT = _Weight("weight", 6, ("mean", "std", "norm", "max_abs", "update_ratio"))


class WeightData(StatsData):
    """Weight statistics per parameter (by its dotted name): ``param_stats(name)`` -> ``{"mean", "std",
    "norm", "max_abs", "update_ratio", "step", "records"}`` (and ``"hist"`` with ``hist=True``).

    >>> w = hookkit.WeightStats.load("runs/w"); w.param_stats("0.weight")["update_ratio"]   # doctest: +SKIP
    """

    kind = "weight_stats"

    def __init__(self, names: list[str], framework: str, settings: dict[str, Any], tables: dict[str, dict[str, np.ndarray]] | None = None):
        super().__init__(names, framework, settings, tables)
        self.hist = bool(settings.get("hist", False))
        self.bins = int(settings.get("bins", 64))
        ranges = settings.get("ranges") or [[-1.0, 1.0]] * len(self.names)
        self.hist_ranges = {n: (float(r[0]), float(r[1])) for n, r in zip(self.names, ranges)}

    def settings(self) -> dict[str, Any]:
        return {"every": self.every, "hist": self.hist, "bins": self.bins, "ranges": [list(self.hist_ranges[n]) for n in self.names]}

    def param_stats(self, name: str) -> dict[str, np.ndarray]:
        """One parameter's series, one value per recorded step (``update_ratio`` NaN at the first
        step and where the previous weights' norm is 0)."""
        return self.layer_stats(name)

    def update_ratios(self) -> tuple[list[str], np.ndarray, np.ndarray]:
        """``(names, steps, ratios[len(names), len(steps)])``: the update-to-weight ratio of every
        parameter per recorded step (NaN where there is none). A healthy learning rate gives about 1e-3.

        >>> names, steps, ratios = wstats.update_ratios()   # doctest: +SKIP
        """
        tables = [self.param_stats(n) for n in self.names]
        steps = self.steps
        out = np.full((len(tables), len(steps)), np.nan)
        for i, t in enumerate(tables):
            if len(t.get("step", ())):
                out[i, np.searchsorted(steps, t["step"])] = t["update_ratio"]
        return list(self.names), steps, out


register_kind("weight_stats", "WeightStats", WeightData, hist=True)


def _trainable(be: Any, named: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """``(dotted name, parameter)`` of the layers' own trainable parameters, each once (tied ones too)."""
    params: list[tuple[str, Any]] = []
    seen: set[int] = set()
    for lname, layer in named:
        for pname, p in be.named_parameters(layer, recurse=False):
            if id(p) not in seen and be.requires_grad(p):
                seen.add(id(p))
                params.append((f"{lname}.{pname}" if lname else pname, p))
    return params


def _pow2_above(x: float) -> float:
    return 2.0 ** math.ceil(math.log2(x)) if x > 0 and math.isfinite(x) else 1.0


class WeightStats(_Recorder, WeightData):
    """wandb.watch(log="all")'s weight view, on the device: per parameter and optimizer step the
    weights' mean, std, norm, max |w| (and histogram with ``hist=True``) and the update-to-weight
    ratio ``||w_t - w_{t-1}|| / ||w_{t-1}||`` (about 1e-3 when the learning rate is right).

    >>> wstats = hookkit.WeightStats(model, optimizer=opt, hist=True)   # doctest: +SKIP
    >>> for x, y in data: train_step(model, opt, x, y)                   # doctest: +SKIP
    >>> wstats.param_stats("fc.weight")["update_ratio"]                  # doctest: +SKIP
    >>> wstats.save("runs/w"); hookkit.report("runs/w")                  # doctest: +SKIP

    ``layers``: a layer spec (default: every layer with parameters); their direct parameters are
    watched, each once (tied ones under their first name), keyed by dotted name ("fc.weight").
    ``optimizer``: record after each of its steps (torch: ``register_step_post_hook``; Paddle: its
    ``step``/``minimize`` wrapped on that instance until removed); None: before each training-mode
    forward of ``model``. ``every=N``: record steps whose index is a multiple of N (one copy of the
    weights is taken at the step before each, for the ratio). ``hist``: histograms of ``bins`` bins
    over ``range`` (default: per parameter, +-the power of two above its largest |w| when created;
    values outside are not counted). The ratio is NaN at the first recorded step (no previous
    weights yet) and where the previous weights' norm is 0.

    Distributed training (DDP, FSDP, ``paddle.DataParallel``): create it on every rank (with
    ``range=None`` the ranks agree on the ranges once, here); reads are collectives returning the
    statistics of the whole parameters: replicated parameters from rank 0, FSDP shards merged.
    """

    @public_entry()
    def __init__(
        self,
        model: Layer,
        layers: LayerSpec = None,
        optimizer: Any = None,
        every: int = 1,
        hist: bool = False,
        *,
        bins: int = 64,
        range: tuple[float, float] | None = None,  # noqa: A002 - ActivationStats' name
        sync: bool = True,
    ):
        fn = "WeightStats"
        check_bool(hist, arg="hist")
        check_int(bins, arg="bins", low=1, high=1 << 16)
        fixed = None if range is None else check_range_pair(range, arg="range")
        named = self._setup(model, layers, every, sync)
        be = self._backend
        self._ops = be.family("training")
        params = _trainable(be, named)
        if not params:
            fail(fn, "layers", "a spec selecting layers with trainable parameters", layers)
        ranges = [list(fixed)] * len(params) if fixed is not None else self._ranges([p for _, p in params]) if hist else None
        settings = {"every": every, "hist": hist, "bins": bins, "ranges": ranges}
        WeightData.__init__(self, [n for n, _ in params], be.name, settings)
        self._refs = [weakref.ref(p) for _, p in params]
        self._numels = [be.numel(self._ops.local(p)) for _, p in params]
        self._sharded = np.array([be.is_sharded(p) for _, p in params], dtype=bool)
        self._prev: list[Any] = [None] * len(params)
        self._prev_step = -2  # the step whose weights ``_prev`` holds (after it)
        self._count = 0
        # one slot per parameter, by name; their records wait together in one Pending (one row
        # block per step for all parameters: its "call" is the parameter's index)
        self._pending = Pending(be, bins if hist else 0, width=5)
        self._params = {name: Slot(WEIGHT, bins if hist else 0, self._pending) for name, _ in params}
        self._slots = list(self._params.values())
        # the CPU route: the C kernel reads each parameter once for [n, mean, m2] (+ histogram) and
        # once for max |w|; the framework's ops add the update norms
        self._cpu = kernels is not None and be.host_routes and all(be.host_values(self._ops.local(p)) is not None for _, p in params)
        self._host_moments, self._host_sums = HostRows(bins if hist else 0), HostRows()
        self._updates = Pending(be, 0, width=2)
        self._attach_all(self._attacher(model, optimizer, params))

    def _attacher(self, model: Any, optimizer: Any, params: list[tuple[str, Any]]) -> Callable[[], None]:
        """What places the recording: after each step of ``optimizer``, else at each training forward."""
        be, fn = self._backend, "WeightStats"
        if optimizer is not None:
            if not self._ops.is_optimizer(optimizer):
                fail(fn, "optimizer", f"None or an optimizer of the model's framework ({be.name})", optimizer, kind=ArgumentTypeError)
            mine = {id(p) for p in self._ops.optimizer_parameters(optimizer)}
            if not any(id(p) in mine for _, p in params):
                fail(fn, "optimizer", "an optimizer updating some of the watched parameters", optimizer)

            def attach_step() -> None:
                self.add(Handle(self._ops.on_step(optimizer, self._on_step).remove))

            return attach_step
        model_ref = self._model

        def on_forward(ev: Event) -> None:
            m = model_ref()
            if m is not None and be.is_training(m):
                self._record(ev.step)

        def attach_forward() -> None:
            self.add(attach(model, [("", model)], "forward_pre", on_forward, OBSERVER))

        return attach_forward

    def _ranges(self, params: list[Any]) -> list[list[float]]:
        """Per parameter +-(the power of two above max |w|), agreed across ranks (a max, once)."""
        be = self._backend
        local = [self._ops.local(p) for p in params]
        peaks = np.array([float(np.max(np.abs(be.to_numpy(p)))) if be.numel(p) else 0.0 for p in local], np.float64)
        if be.world()[1] > 1:
            peaks = np.max(np.stack([r.reshape(-1) for r in be.all_gather_rows(peaks.reshape(1, -1))]), axis=0)
        return [[-_pow2_above(a), _pow2_above(a)] for a in peaks]

    # -- recording ----------------------------------------------------------------------------------
    def _on_step(self) -> None:
        step = self._count
        self._count += 1
        self._record(step)

    def _record(self, step: int) -> None:
        every = self.every
        record, keep = step % every == 0, (step + 1) % every == 0
        if not (record or keep):
            return
        local = self._ops.local
        ws = [None if w is None else local(w) for w in (r() for r in self._refs)]
        live = [i for i, w in enumerate(ws) if w is not None]
        if not live:
            return
        if record and self._cpu:
            self._record_host(step, ws, live)
        elif record:
            self._record_device(step, ws, live)
        if keep:
            self._keep(step, ws, live)

    def _record_device(self, step: int, ws: list[Any], live: list[int]) -> None:
        prevs = [self._prev[i] if self._prev_step == step - 1 else None for i in live]
        hists = None
        if self.hist:
            histc, detach = self._backend.histc, self._backend.detach
            hists = self._backend.stack([histc(detach(ws[i]), self.bins, *self.hist_ranges[self.names[i]]) for i in live])
        keys = [(step, i, self._numels[i]) for i in live]
        self._pending.add_block(self._ops.weight_rows([ws[i] for i in live], prevs), keys, hists)

    def _keep(self, step: int, ws: list[Any], live: list[int]) -> None:
        """This step's weights, for the next step's update ratio."""
        be = self._backend
        for i in live:
            if self._prev[i] is None:
                self._prev[i] = be.clone(be.detach(ws[i]))
                self._prev_step = -2
        self._ops.copy_all([self._prev[i] for i in live], [ws[i] for i in live])
        self._prev_step = step

    def _record_host(self, step: int, ws: list[Any], live: list[int]) -> None:
        be = self._backend
        moments, sums, ranges, names = self._host_moments, self._host_sums, self.hist_ranges, self.names
        for i in live:
            w = be.detach(ws[i])
            be.activation_sums_into(moments, w, 0.0, step, i, ranges[names[i]] if self.hist else None)
            be.tensor_sums_into(sums, w, step, i)
        if self._prev_step == step - 1:
            norms = self._ops.update_norms([ws[i] for i in live], [self._prev[i] for i in live])
            self._updates.add_block(norms, [(step, i, 0) for i in live])

    # -- reading --------------------------------------------------------------------------------
    def _has_pending(self) -> bool:
        return len(self._pending) > 0 or len(self._host_moments) > 0

    def _drain_host(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """``(steps, parameter indices, state [k, 6], hists)`` of the CPU route's records."""
        moments, hists = self._host_moments.take()
        sums, _ = self._host_sums.take()
        steps, index = moments[:, 0].astype(np.int64), moments[:, 1].astype(np.int64)
        state = np.full((len(moments), 6), np.nan)
        state[:, :3] = moments[:, 2:5]  # n, mean, m2
        state[:, 3] = sums[:, 5]  # max |w|
        updates = self._updates.drain()  # state [0, ||w - prev||^2, ||prev||^2]
        if len(updates.step):
            key = steps * (1 << 24) + index
            at = np.searchsorted(key, updates.step * (1 << 24) + updates.call)  # records are in (step, index) order
            state[at, 4:6] = updates.state[:, 1:]
        return steps, index, state, hists

    def _drain(self, world: int, rank: int) -> tuple[list[Block], list[Block]]:
        steps, index, _, state, hists = self._pending.drain()  # state [numel, WEIGHT's row]: WEIGHT's state
        if len(self._host_moments):
            h_steps, h_index, h_state, h_hists = self._drain_host()
            steps, index, state = np.concatenate((steps, h_steps)), np.concatenate((index, h_index)), np.concatenate((state, h_state))
            if h_hists is not None:
                hists = h_hists if hists is None else np.concatenate((hists, h_hists))
        local, contributions = [], []
        ones = np.ones(len(steps), np.int64)
        for i in range(len(self.names)):
            mine = index == i
            zeros = np.zeros(int(mine.sum()), np.int64)
            block = merge_block(WEIGHT, Block(steps[mine], zeros, ones[mine], state[mine], None if hists is None else hists[mine]))
            local.append(block)
            if world > 1 and rank != 0 and not self._sharded[i]:
                # replicated parameters (DDP) count once, from rank 0; FSDP shards from every rank
                block = block.subset(slice(0, 0))
            contributions.append(block)
        return local, contributions

    def _build(self, merged: bool) -> Tables:
        out = {}
        for name, slot in self._params.items():
            table = dict(slot.rows(merged).columns())
            table.pop("call", None)
            out[name] = table
        return out

    @staticmethod
    def load(directory: Any) -> WeightData:
        """Read statistics written by ``WeightStats.save(directory)``.

        >>> hookkit.WeightStats.load("runs/w").param_stats("fc.weight")   # doctest: +SKIP
        """
        return read_files(directory, "weight_stats")  # type: ignore[return-value]

    def remove(self) -> None:
        """Stop recording and drop the kept copies of the weights; what was recorded stays readable."""
        super().remove()
        self._prev = [None] * len(self._prev)

    def __repr__(self) -> str:
        n = sum(len(slot.local) for slot in self._slots) + len(self._pending) + len(self._host_moments)
        return f"<hookkit.WeightStats {len(self.names)} parameters, {n} records, {'removed' if self.removed else 'active'}>"
