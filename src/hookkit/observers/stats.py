"""Streaming activation and gradient statistics, computed and kept on the model's device.

The hot path (one consumer call per hooked layer call) reduces the detached output to one row
``[mean, sum of squared deviations, count <= near_zero]`` (backends/torch_stats.py: no full-size
temporaries, not ``std_mean``, which is ~5x slower on CPU) and appends it to a list: on an
accelerator no ``.item()``, no ``float(t)``, no copy to the host. Every 1024 records a layer's list
is stacked into one tensor (on the device, no sync), so a long run keeps a few tensors per layer,
not millions. Reading (``layer_stats``, ``to_numpy``, ``save``) stacks what is left, copies it to
the host once and finishes fastai's formulas there (std = sqrt(m2 / (n - 1)), near_zero = count / n).

>>> with hookkit.ActivationStats(model, hist=True) as stats:   # doctest: +SKIP
...     train(model)
>>> stats.layer_stats("0")["mean"]   # one value per recorded forward
"""

from __future__ import annotations

import json
import os
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from hookkit.backends import Backend, backend_for
from hookkit.core.handles import Handle, HandleGroup
from hookkit.core.router import OBSERVER, Event, attach
from hookkit.core.select import WITH_PARAMS, LayerSpec, select
from hookkit.core.tree import first_tensor

__all__ = ["ActivationStats", "GradientStats", "load_stats"]

_CHUNK = 1024  # records per layer before they are stacked into one device tensor
_GRAD_KEYS = ("mean", "std", "norm", "max_abs")
_STAT_FILES = {"activation_stats": "ActivationStats", "gradient_stats": "GradientStats"}


class _Series:
    """Rows of one quantity: appended per record on the device, stacked lazily, moved to the host
    when read (and then dropped from the device, so repeated reads copy only the new rows)."""

    __slots__ = ("backend", "width", "pending", "chunks", "host", "n_host")

    def __init__(self, backend: Backend, width: int):
        self.backend, self.width = backend, width
        self.pending: list[Any] = []  # per record: one [width] tensor
        self.chunks: list[Any] = []  # stacked device tensors, not yet read
        self.host: list[np.ndarray] = []  # what was read already
        self.n_host = 0

    def append(self, t: Any) -> None:
        pending = self.pending
        pending.append(t)
        if len(pending) >= _CHUNK:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.chunks.append(self.backend.stack(self.pending))
            self.pending = []

    def __len__(self) -> int:
        return self.n_host + len(self.pending) + sum(self.backend.numel(c) // self.width for c in self.chunks)

    def numpy(self) -> np.ndarray:
        width = self.width
        self.flush()
        for chunk in self.chunks:
            rows = np.asarray(self.backend.to_numpy(chunk), dtype=np.float32).reshape(-1, width)
            self.host.append(rows)
            self.n_host += len(rows)
        self.chunks = []
        if len(self.host) > 1:
            self.host = [np.concatenate(self.host, axis=0)]
        return self.host[0] if self.host else np.zeros((0, width), dtype=np.float32)

    def clear(self) -> None:
        self.pending, self.chunks, self.host, self.n_host = [], [], [], 0


# -- reading, shared by live and loaded statistics --------------------------------------------------
class _StatsData:
    """The reading API: ``names``, ``steps``, ``layer_stats(name)``, ``to_numpy()``, ``to_dict()``, ``save(dir)``."""

    kind = ""  # file stem: "activation_stats" / "gradient_stats"
    names: list[str]
    framework: str = ""

    def _layer_arrays(self) -> dict[str, dict[str, np.ndarray]]:
        raise NotImplementedError

    def _meta(self) -> dict[str, Any]:
        return {"names": list(self.names), "framework": self.framework}

    def _check_name(self, name: str) -> None:
        if name not in self.names:
            from hookkit.core.select import _closest

            close = _closest(name, self.names) or self.names[:8]
            raise KeyError(f"layer {name!r} has no statistics; recorded layers: {', '.join(repr(n) for n in close)}")

    @property
    def steps(self) -> np.ndarray:
        """The recorded step indices (forwards of the model), sorted, over all layers."""
        arrays = self._layer_arrays()
        if not arrays:
            return np.zeros(0, dtype=np.int64)
        return np.unique(np.concatenate([a["step"] for a in arrays.values()])).astype(np.int64)

    def layer_stats(self, name: str) -> dict[str, np.ndarray]:
        """Per-record series of one layer: ``{"mean": [n], ..., "step": [n], "call": [n]}``."""
        self._check_name(name)
        return self._layer_arrays()[name]

    def to_numpy(self) -> dict[str, dict[str, np.ndarray]]:
        """``{layer name: layer_stats(name)}`` for every layer."""
        return dict(self._layer_arrays())

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: the metadata plus ``"layers": {name: {key: list}}``."""
        out = self._meta()
        out["layers"] = {n: {k: v.tolist() for k, v in a.items()} for n, a in self._layer_arrays().items()}
        return out

    def save(self, directory: str | os.PathLike) -> str:
        """Write ``<kind>.safetensors`` (the arrays) and ``<kind>.json`` (metadata) into ``directory``;
        returns the safetensors path. No pickle.

        >>> stats.save("runs/stats")   # doctest: +SKIP
        """
        from safetensors.numpy import save_file

        os.makedirs(directory, exist_ok=True)
        tensors: dict[str, np.ndarray] = {}
        for i, (_name, arrays) in enumerate(self._layer_arrays().items()):
            for key, value in arrays.items():
                tensors[f"{i}/{key}"] = np.ascontiguousarray(value)
        path = os.path.join(directory, f"{self.kind}.safetensors")
        save_file(tensors, path)
        meta = self._meta()
        meta["type"] = _STAT_FILES[self.kind]
        with open(os.path.join(directory, f"{self.kind}.json"), "w") as f:
            json.dump(meta, f, indent=1)
        return path

    def __repr__(self) -> str:
        return f"<hookkit.{type(self).__name__} {len(self.names)} layers>"


def _read_files(directory: str | os.PathLike, kind: str) -> tuple[dict[str, Any], dict[str, dict[str, np.ndarray]]]:
    from safetensors.numpy import load_file

    json_path = os.path.join(directory, f"{kind}.json")
    st_path = os.path.join(directory, f"{kind}.safetensors")
    for p in (json_path, st_path):
        if not os.path.exists(p):
            raise FileNotFoundError(f"no {os.path.basename(p)} in {os.fspath(directory)!r}: save it with {_STAT_FILES[kind]}.save(dir)")
    with open(json_path) as f:
        meta = json.load(f)
    flat = load_file(st_path)
    arrays: dict[str, dict[str, np.ndarray]] = {n: {} for n in meta["names"]}
    for key, value in flat.items():
        i, field = key.split("/", 1)
        arrays[meta["names"][int(i)]][field] = value
    return meta, arrays


class _ActivationMeta:
    """The settings an activation record is read with, saved beside it (live and loaded alike)."""

    def _meta(self) -> dict[str, Any]:
        return {
            **super()._meta(),
            "bins": self.bins,
            "range": list(self.hist_range),
            "near_zero": self.near_zero,
            "every": self.every,
            "hist": self.hist,
            "train_only": self.train_only,
        }


class LoadedActivationStats(_ActivationMeta, _StatsData):
    """Activation statistics read back from disk by ``ActivationStats.load(dir)``; same reading API."""

    kind = "activation_stats"

    def __init__(self, meta: dict[str, Any], arrays: dict[str, dict[str, np.ndarray]]):
        self.names = list(meta["names"])
        self.framework = meta.get("framework", "")
        self.bins = int(meta["bins"])
        self.hist_range = tuple(meta["range"])
        self.near_zero = float(meta["near_zero"])
        self.every = int(meta["every"])
        self.hist = bool(meta.get("hist", False))
        self.train_only = bool(meta.get("train_only", True))
        self._arrays = arrays

    def _layer_arrays(self) -> dict[str, dict[str, np.ndarray]]:
        return self._arrays


class _GradReading:
    """Reading API of gradient statistics; arrays hold output keys and ``param_*`` keys."""

    names: list[str]
    _check_name: Callable[[str], None]
    _layer_arrays: Callable[[], dict[str, dict[str, np.ndarray]]]

    def layer_stats(self, name: str) -> dict[str, np.ndarray]:
        """Gradient w.r.t. the layer's output: ``{"mean", "std", "norm", "max_abs", "step", "call"}``."""
        self._check_name(name)
        return {k: v for k, v in self._layer_arrays()[name].items() if not k.startswith("param_")}

    def param_stats(self, name: str) -> dict[str, np.ndarray]:
        """The layer's direct parameter gradients, all together, one row per recorded backward:
        ``{"mean", "std", "norm", "max_abs", "step"}`` (empty arrays for a layer without parameters)."""
        self._check_name(name)
        return {k[6:]: v for k, v in self._layer_arrays()[name].items() if k.startswith("param_")}

    def gradient_flow(self, params: bool = False) -> tuple[list[str], np.ndarray, np.ndarray]:
        """The gradient-flow view: ``(names, steps, norms[len(names), len(steps)])``, the norm of each
        layer's output gradient (``params=True``: of its parameter gradients) per step; NaN where a
        layer has no record. Several calls in one step are combined (root of the sum of squares)."""
        return _gradient_flow(self, params)


class LoadedGradientStats(_GradReading, _StatsData):
    """Gradient statistics read back from disk by ``GradientStats.load(dir)``; same reading API."""

    kind = "gradient_stats"

    def __init__(self, meta: dict[str, Any], arrays: dict[str, dict[str, np.ndarray]]):
        self.names = list(meta["names"])
        self.framework = meta.get("framework", "")
        self.every = int(meta["every"])
        self._arrays = arrays

    def _meta(self) -> dict[str, Any]:
        return {**super()._meta(), "every": self.every}

    def _layer_arrays(self) -> dict[str, dict[str, np.ndarray]]:
        return self._arrays


# -- live statistics --------------------------------------------------------------------------------
class _Live(_StatsData, HandleGroup):
    """Attach at construction; ``remove()`` / ``with`` detach every hook placed."""

    def __init__(self, model: Any, layers: LayerSpec, every: int):
        HandleGroup.__init__(self)
        if not isinstance(every, int) or isinstance(every, bool) or every < 1:
            raise ValueError(f"every= must be an integer >= 1 (record one step in N); got {every!r}")
        self._backend = backend_for(model)
        self._model = weakref.ref(model)
        self.framework = self._backend.name
        self.every = every
        self._named = select(model, WITH_PARAMS if layers is None else layers)
        self.names = [n for n, _ in self._named]
        self._cache: tuple[int, dict[str, dict[str, np.ndarray]]] | None = None

    def __enter__(self) -> Any:
        return self

    def _layer_arrays(self) -> dict[str, dict[str, np.ndarray]]:
        version = sum(len(s) for s in self._steps.values())
        if self._cache is None or self._cache[0] != version:
            self._cache = (version, self._read())
        return self._cache[1]

    def _read(self) -> dict[str, dict[str, np.ndarray]]:
        raise NotImplementedError

    def _recording(self, every: int, train_only: bool) -> Callable[[int], bool]:
        """``record(step) -> bool``, evaluated once per step (model.training read once, a Python attribute)."""
        model_ref, backend = self._model, self._backend
        state = [None, False]

        def record(step: int) -> bool:
            if step != state[0]:
                state[0] = step
                ok = step % every == 0
                if ok and train_only:
                    model = model_ref()
                    ok = model is not None and backend.is_training(model)
                state[1] = ok
            return state[1]

        return record

    def clear(self) -> None:
        """Forget what was recorded; keep recording."""
        for series in self._all_series():
            series.clear()
        for lst in (*self._steps.values(), *self._calls.values(), *self._numels.values()):
            lst.clear()
        self._cache = None

    def _all_series(self) -> list[_Series]:
        raise NotImplementedError


class ActivationStats(_ActivationMeta, _Live):
    """fastai's ActivationStats, kept on the device: per layer and recorded forward, the mean, std and
    fraction of values ``<= near_zero`` of the layer's output (and its histogram with ``hist=True``).

    >>> with hookkit.ActivationStats(model, every=10, hist=True) as stats:   # doctest: +SKIP
    ...     for x, y in data: train_step(model, x, y)
    >>> stats.layer_stats("conv1")["std"]     # np.ndarray, one value per recorded forward
    >>> stats.save("runs/act"); hookkit.ActivationStats.load("runs/act")

    ``layers``: any layer spec, default ``hookkit.WITH_PARAMS`` (fastai's default). ``every=N``:
    record the forwards of ``model`` whose index (``step``) is a multiple of N. ``train_only``: only
    forwards with the model in training mode. A layer called several times per forward gives one
    record per call (``"call"`` says which). Where a layer returns a tuple or dict, its first tensor
    is used. Formulas (fastai's): ``o.mean()``, ``o.std()`` (unbiased), ``(o <= near_zero)`` mean,
    ``histc(o.float(), bins, *range)``.
    """

    kind = "activation_stats"

    def __init__(
        self,
        model: Any,
        layers: LayerSpec = None,
        *,
        every: int = 1,
        hist: bool = False,
        bins: int = 40,
        range: tuple[float, float] = (0, 10),  # noqa: A002 - fastai's name
        near_zero: float = 0.05,
        train_only: bool = True,
    ):
        super().__init__(model, layers, every)
        if not isinstance(bins, int) or bins < 1:
            raise ValueError(f"bins= must be a positive integer; got {bins!r}")
        lo, hi = (float(v) for v in range)
        if not lo < hi:
            raise ValueError(f"range= must be (low, high) with low < high; got {range!r}")
        self.hist, self.bins, self.hist_range = bool(hist), bins, (lo, hi)
        self.near_zero, self.train_only = float(near_zero), bool(train_only)
        be = self._backend
        self._values = {n: _Series(be, 3) for n in self.names}
        self._hists = {n: _Series(be, bins) for n in self.names} if hist else {}
        self._steps: dict[str, list[int]] = {n: [] for n in self.names}
        self._calls: dict[str, list[int]] = {n: [] for n in self.names}
        self._numels: dict[str, list[int]] = {n: [] for n in self.names}
        record = self._recording(every, self.train_only)
        for name, layer in self._named:
            self.add(attach(model, [(name, layer)], "forward", self._consumer(name, record), OBSERVER))

    def _consumer(self, name: str, record: Callable[[int], bool]) -> Callable[[Event], None]:
        be = self._backend
        is_tensor, sums, sums_hist, numel = be.is_tensor, be.activation_sums, be.activation_sums_hist, be.numel
        values, steps, calls, numels = self._values[name], self._steps[name], self._calls[name], self._numels[name]
        hists = self._hists.get(name)
        near_zero, bins, (lo, hi) = self.near_zero, self.bins, self.hist_range

        def on_forward(ev: Event) -> None:
            if not record(ev.step):
                return
            o = ev.output
            if not is_tensor(o):
                o = first_tensor(o, is_tensor)
                if o is None:
                    return
            o = o.detach()  # no autograd graph for the statistics
            if hists is None:
                values.append(sums(o, near_zero))
            else:
                row, hist = sums_hist(o, near_zero, bins, lo, hi)
                values.append(row)
                hists.append(hist)
            steps.append(ev.step)
            calls.append(ev.call)
            numels.append(numel(o))

        return on_forward

    def _all_series(self) -> list[_Series]:
        return [*self._values.values(), *self._hists.values()]

    def _read(self) -> dict[str, dict[str, np.ndarray]]:
        out: dict[str, dict[str, np.ndarray]] = {}
        for name in self.names:
            v = self._values[name].numpy().astype(np.float64)
            n = np.asarray(self._numels[name], dtype=np.float64)
            with np.errstate(invalid="ignore", divide="ignore"):
                arrays = {
                    "mean": v[:, 0].astype(np.float32),
                    "std": np.sqrt(v[:, 1] / (n - 1)).astype(np.float32),
                    "near_zero": (v[:, 2] / n).astype(np.float32),
                }
            if self.hist:
                arrays["hist"] = self._hists[name].numpy().copy()
            arrays["step"] = np.asarray(self._steps[name], dtype=np.int64)
            arrays["call"] = np.asarray(self._calls[name], dtype=np.int64)
            out[name] = arrays
        return out

    @staticmethod
    def load(directory: str | os.PathLike) -> LoadedActivationStats:
        """Read statistics written by ``ActivationStats.save(directory)``.

        >>> stats = hookkit.ActivationStats.load("runs/act"); stats.layer_stats("conv1")   # doctest: +SKIP
        """
        return LoadedActivationStats(*_read_files(directory, "activation_stats"))

    def __repr__(self) -> str:
        n = sum(len(s) for s in self._steps.values())
        return f"<hookkit.ActivationStats {len(self.names)} layers, {n} records, {'removed' if self.removed else 'active'}>"


class GradientStats(_GradReading, _Live):
    """Per layer and recorded step: mean, std, norm and max-abs of the gradient w.r.t. the layer's
    output (``layer_stats``), and of its direct parameters' gradients taken together (``param_stats``).

    >>> with hookkit.GradientStats(model) as gstats:   # doctest: +SKIP
    ...     for x, y in data: train_step(model, x, y)
    >>> gstats.layer_stats("fc")["norm"]; gstats.param_stats("fc")["max_abs"]
    >>> names, steps, norms = gstats.gradient_flow()   # [layers, steps] norms

    Output gradients come from the router's ``grad`` event (a tensor hook on the first output
    tensor). Parameter gradients come from tensor hooks placed on each direct parameter at
    construction (removed by ``remove()``): each sees the gradient of one backward, before it is
    accumulated into ``.grad`` (so gradient accumulation and ``zero_grad`` do not matter). Each
    parameter's hook computes ``[sum, norm, max |g|]`` on the device; the layer's mean, std
    (unbiased) and norm over all its parameters are combined from these when read (in float64:
    ``var = (sum of squares - n mean^2) / (n - 1)``, which loses precision only when |mean| >> std,
    not the case of gradients). Output gradients likewise keep ``[sum, norm, max |g|]``, one pass
    each, no host sync. ``every=N`` records the backward of forwards whose step is a multiple of N.
    """

    kind = "gradient_stats"

    def __init__(self, model: Any, layers: LayerSpec = None, *, every: int = 1):
        super().__init__(model, layers, every)
        be = self._backend
        self._values = {n: _Series(be, 3) for n in self.names}
        self._steps = {n: [] for n in self.names}
        self._calls = {n: [] for n in self.names}
        self._numels: dict[str, list[int]] = {n: [] for n in self.names}
        # parameter gradients: per layer, per parameter, (step, [sum, sumsq, maxabs]) rows
        self._param_values: dict[str, list[_Series]] = {}
        self._param_steps: dict[str, list[list[int]]] = {}
        self._param_numel: dict[str, list[int]] = {}
        self._cur_step = [0]
        record = self._recording(every, False)
        owners: dict[int, list[tuple[_Series, list[int]]]] = {}  # a tied parameter is hooked once
        for name, layer in self._named:
            self.add(attach(model, [(name, layer)], "grad", self._consumer(name, record), OBSERVER))
            params = [p for p in be.parameters(layer, recurse=False) if be.requires_grad(p)]
            self._param_values[name] = [_Series(be, 3) for _ in params]
            self._param_steps[name] = [[] for _ in params]
            self._param_numel[name] = [be.numel(p) for p in params]
            for i, p in enumerate(params):
                target = (self._param_values[name][i], self._param_steps[name][i])
                if id(p) in owners:
                    owners[id(p)].append(target)
                else:
                    owners[id(p)] = [target]
                    self.add(Handle(be.hook_tensor(p, self._param_hook(owners[id(p)], record)).remove))

    def _consumer(self, name: str, record: Callable[[int], bool]) -> Callable[[Event], None]:
        sums, numel = self._backend.grad_sums, self._backend.numel
        values, steps, calls, numels, cur = self._values[name], self._steps[name], self._calls[name], self._numels[name], self._cur_step

        def on_grad(ev: Event) -> None:
            step = ev.step
            cur[0] = step  # the step the parameter hooks of this backward belong to
            if ev.index != 0 or not record(step):
                return
            g = ev.grad.detach()
            values.append(sums(g))
            steps.append(step)
            calls.append(ev.call)
            numels.append(numel(g))

        return on_grad

    def _param_hook(self, targets: list[tuple[_Series, list[int]]], record: Callable[[int], bool]) -> Callable[[Any], None]:
        ssm, cur = self._backend.param_sums, self._cur_step

        def on_param_grad(g: Any) -> None:
            step = cur[0]
            if record(step):
                row = ssm(g.detach())
                for values, steps in targets:  # every layer that holds this parameter
                    values.append(row)
                    steps.append(step)

        return on_param_grad

    def _all_series(self) -> list[_Series]:
        return [*self._values.values(), *(s for ss in self._param_values.values() for s in ss)]

    def clear(self) -> None:
        super().clear()
        for lists in self._param_steps.values():
            for lst in lists:
                lst.clear()

    def _meta(self) -> dict[str, Any]:
        return {**super()._meta(), "every": self.every}

    def _layer_arrays(self) -> dict[str, dict[str, np.ndarray]]:
        version = sum(len(s) for s in self._steps.values()) + sum(len(s) for ss in self._param_steps.values() for s in ss)
        if self._cache is None or self._cache[0] != version:
            self._cache = (version, self._read())
        return self._cache[1]

    def _read(self) -> dict[str, dict[str, np.ndarray]]:
        out: dict[str, dict[str, np.ndarray]] = {}
        for name in self.names:
            v = self._values[name].numpy().astype(np.float64)
            n = np.asarray(self._numels[name], dtype=np.float64)
            step = np.asarray(self._steps[name], dtype=np.int64)
            call = np.asarray(self._calls[name], dtype=np.int64)
            order = np.lexsort((call, step))  # records arrive in backward order; read in forward order
            norm = v[:, 1]
            with np.errstate(invalid="ignore", divide="ignore"):
                mean = v[:, 0] / n
                ssd = np.maximum(norm * norm - n * mean * mean, 0.0)  # no deviation pass on the device
                cols = {
                    "mean": mean,
                    "std": np.sqrt(ssd / (n - 1)),
                    "norm": norm,
                    "max_abs": v[:, 2],
                }
            arrays = {k: cols[k][order].astype(np.float32) for k in _GRAD_KEYS}
            arrays["step"], arrays["call"] = step[order], call[order]
            for k, val in self._read_params(name).items():
                arrays[f"param_{k}"] = val
            out[name] = arrays
        return out

    def _read_params(self, name: str) -> dict[str, np.ndarray]:
        """Merge the per-parameter ``[sum, norm, max_abs]`` rows of each step (in float64)."""
        acc: dict[int, list[float]] = {}  # step -> [n, sum, sumsq, maxabs]
        for series, steps, numel in zip(self._param_values[name], self._param_steps[name], self._param_numel[name]):
            rows = series.numpy().astype(np.float64)
            for step, (s, norm, m) in zip(steps, rows):
                q = norm * norm
                a = acc.setdefault(step, [0.0, 0.0, 0.0, 0.0])
                a[0] += numel
                a[1] += s
                a[2] += q
                a[3] = max(a[3], m) if not np.isnan(m) else np.nan
        order = sorted(acc)
        n = np.array([acc[s][0] for s in order])
        total = np.array([acc[s][1] for s in order])
        sumsq = np.array([acc[s][2] for s in order])
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = total / n
            var = np.maximum(sumsq - n * mean * mean, 0.0) / (n - 1)
        return {
            "mean": mean.astype(np.float32),
            "std": np.sqrt(var).astype(np.float32),
            "norm": np.sqrt(sumsq).astype(np.float32),
            "max_abs": np.array([acc[s][3] for s in order], dtype=np.float32),
            "step": np.asarray(order, dtype=np.int64),
        }

    def to_numpy(self) -> dict[str, dict[str, np.ndarray]]:
        """``{name: arrays}``: the output-gradient keys, and the parameter ones prefixed ``param_``."""
        return super().to_numpy()

    @staticmethod
    def load(directory: str | os.PathLike) -> LoadedGradientStats:
        """Read statistics written by ``GradientStats.save(directory)``."""
        return LoadedGradientStats(*_read_files(directory, "gradient_stats"))

    def __repr__(self) -> str:
        n = sum(len(s) for s in self._steps.values())
        return f"<hookkit.GradientStats {len(self.names)} layers, {n} records, {'removed' if self.removed else 'active'}>"


def _gradient_flow(stats: Any, params: bool) -> tuple[list[str], np.ndarray, np.ndarray]:
    per_layer = [stats.param_stats(n) if params else stats.layer_stats(n) for n in stats.names]
    all_steps = [a["step"] for a in per_layer if len(a["step"])]
    steps = np.unique(np.concatenate(all_steps)) if all_steps else np.zeros(0, dtype=np.int64)
    norms = np.full((len(per_layer), len(steps)), np.nan, dtype=np.float64)
    for i, a in enumerate(per_layer):
        if len(a["step"]):
            cols = np.searchsorted(steps, a["step"])
            sq = np.zeros(len(steps))
            np.add.at(sq, cols, a["norm"].astype(np.float64) ** 2)
            seen = np.zeros(len(steps), dtype=bool)
            seen[cols] = True
            norms[i, seen] = np.sqrt(sq[seen])
    return list(stats.names), steps.astype(np.int64), norms


def load_stats(directory: str | os.PathLike) -> dict[str, Any]:
    """Load whatever statistics ``directory`` holds: ``{"activation_stats": ..., "gradient_stats": ...}``.

    >>> hookkit.load_stats("runs/stats")["activation_stats"].layer_stats("conv1")   # doctest: +SKIP
    """
    out: dict[str, Any] = {}
    if os.path.exists(os.path.join(directory, "activation_stats.json")):
        out["activation_stats"] = ActivationStats.load(directory)
    if os.path.exists(os.path.join(directory, "gradient_stats.json")):
        out["gradient_stats"] = GradientStats.load(directory)
    if not out:
        raise FileNotFoundError(f"no activation_stats.json or gradient_stats.json in {os.fspath(directory)!r}")
    return out
