"""The reading API of statistics, and statistics read back from disk.

``ActivationData`` / ``GradientData`` hold per-layer tables ``{key: array}`` and answer every
read (``layer_stats``, ``to_numpy``, ``to_dict``, ``save``, ...). ``ActivationStats.load(dir)``
returns them as they are; the live classes (live.py) subclass them and only say where their
tables come from (``_tables``), reduced across ranks when training is distributed.

Files: ``<kind>.safetensors`` (arrays ``"<layer index>/<key>"``) and ``<kind>.json`` (names and
settings). No pickle: a file read here is data, never code.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, ClassVar, NoReturn

import numpy as np

from hookkit.core.files import InvalidFile, read_json_file
from hookkit.core.validate import ArgumentTypeError, fail, shown

__all__ = ["ActivationData", "GradientData", "StatsData", "load_stats", "read_files"]

_TYPES = {"activation_stats": "ActivationStats", "gradient_stats": "GradientStats"}


class EmptyLayerWarning(UserWarning):
    """A layer selected for statistics has no record when read: it never ran (or never got a
    gradient) while the statistics recorded, so its series are empty."""


class StatsData:
    """Per-layer statistics tables: ``names``, ``steps``, ``layer_stats(name)``, ``to_numpy()``,
    ``to_dict()``, ``save(dir)``.

    >>> data = hookkit.ActivationStats.load("runs/act"); data.layer_stats("conv1")["std"]   # doctest: +SKIP
    """

    kind: ClassVar[str] = ""  # file stem: "activation_stats" / "gradient_stats"

    def __init__(self, names: list[str], framework: str, settings: dict[str, Any], tables: dict[str, dict[str, np.ndarray]] | None = None):
        self.names = list(names)
        self.framework = framework
        self.every = int(settings.get("every", 1))
        self._saved = tables if tables is not None else {n: {} for n in self.names}

    # -- where the tables come from: saved ones here; live statistics record and reduce them -------
    def _tables(self) -> dict[str, dict[str, np.ndarray]]:
        return self._saved

    def _local_tables(self) -> dict[str, dict[str, np.ndarray]]:
        """This rank's own tables (no cross-rank reduction)."""
        return self._tables()

    @property
    def rank(self) -> int:
        """This process's rank when the statistics are reduced across processes, else 0."""
        return 0

    def settings(self) -> dict[str, Any]:
        """The settings the records were taken with (saved beside them)."""
        return {"every": self.every}

    # -- reading -------------------------------------------------------------------------------
    def _check_name(self, name: str) -> None:
        if name not in self.names:
            from hookkit.core.suggest import close_matches

            close = close_matches(name, self.names) or self.names[:8]
            raise KeyError(f"layer {name!r} has no statistics; recorded layers: {', '.join(repr(n) for n in close)}")

    @property
    def steps(self) -> np.ndarray:
        """The recorded step indices (forwards of the model), sorted, over all layers."""
        tables = self._tables()
        parts = [t["step"] for t in tables.values() if "step" in t]
        return np.unique(np.concatenate(parts)).astype(np.int64) if parts else np.zeros(0, np.int64)

    def layer_stats(self, name: str) -> dict[str, np.ndarray]:
        """Per-record series of one layer: ``{"mean": [n], ..., "step": [n], "call": [n], "records": [n]}``
        (``records``: how many records a row holds; more than 1 for old rows of a long run, merged)."""
        self._check_name(name)
        out = {k: v for k, v in self._tables()[name].items() if not k.startswith("param_")}
        if "step" in out and len(out["step"]) == 0:  # selected, but never ran (or never got a gradient)
            from hookkit.core.user_frame import warn_user

            what = "got no gradient" if self.kind == "gradient_stats" else "never ran"
            warn_user(f"layer {name!r} was selected but {what} while the statistics recorded: its series are empty", EmptyLayerWarning)
        return out

    def to_numpy(self) -> dict[str, dict[str, np.ndarray]]:
        """``{layer name: {key: array}}`` for every layer (gradient statistics: parameter keys prefixed ``param_``)."""
        return {n: dict(t) for n, t in self._tables().items()}

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: the metadata plus ``"layers": {name: {key: list}}``."""
        out = self._meta()
        out["layers"] = {n: {k: v.tolist() for k, v in t.items()} for n, t in self.to_numpy().items()}
        return out

    def _meta(self) -> dict[str, Any]:
        return {"names": list(self.names), "framework": self.framework, **self.settings()}

    def save(self, directory: str | os.PathLike, *, per_rank: bool = False) -> str:
        """Write ``<kind>.safetensors`` (the arrays) and ``<kind>.json`` (names, settings) into
        ``directory``; returns the safetensors path. No pickle.

        Distributed training: every rank calls ``save`` (the statistics are reduced across ranks),
        rank 0 writes. ``per_rank=True``: every rank writes its own records, unreduced, into
        ``directory/rank<r>`` (no collective).

        >>> stats.save("runs/stats")   # doctest: +SKIP
        """
        from safetensors.numpy import save_file

        if per_rank:
            tables, rank = self._local_tables(), self.rank
            directory = os.path.join(directory, f"rank{rank}") if self._world() > 1 else directory
        else:
            tables, rank = self._tables(), self.rank
        path = os.path.join(directory, f"{self.kind}.safetensors")
        if rank != 0 and not per_rank:
            return path  # rank 0 writes the reduced statistics
        os.makedirs(directory, exist_ok=True)
        arrays = {f"{i}/{key}": np.ascontiguousarray(value) for i, t in enumerate(tables.values()) for key, value in t.items()}
        save_file(arrays, path)
        meta = {**self._meta(), "type": _TYPES[self.kind]}
        with open(os.path.join(directory, f"{self.kind}.json"), "w") as f:
            json.dump(meta, f, indent=1)
        return path

    def _world(self) -> int:
        return 1

    def __repr__(self) -> str:
        from hookkit.observers.stats.display import text

        return text(self)

    def _repr_html_(self) -> str:
        from hookkit.observers.stats.display import html

        return html(self)


class ActivationData(StatsData):
    """Activation statistics: per layer and record, ``mean``, ``std``, ``near_zero`` (and ``hist``)."""

    kind = "activation_stats"

    def __init__(self, names: list[str], framework: str, settings: dict[str, Any], tables: dict[str, dict[str, np.ndarray]] | None = None):
        super().__init__(names, framework, settings, tables)
        self.bins = int(settings.get("bins", 40))
        self.hist_range = tuple(float(v) for v in settings.get("range", (0.0, 10.0)))
        self.near_zero = float(settings.get("near_zero", 0.05))
        self.hist = bool(settings.get("hist", False))
        self.train_only = bool(settings.get("train_only", True))

    def settings(self) -> dict[str, Any]:
        return {
            "bins": self.bins,
            "range": list(self.hist_range),
            "near_zero": self.near_zero,
            "every": self.every,
            "hist": self.hist,
            "train_only": self.train_only,
        }


class GradientData(StatsData):
    """Gradient statistics: per layer, of the gradient w.r.t. its output (``layer_stats``) and of its
    direct parameters' gradients together (``param_stats``)."""

    kind = "gradient_stats"

    def layer_stats(self, name: str) -> dict[str, np.ndarray]:
        """Gradient w.r.t. the layer's output: ``{"mean", "std", "norm", "max_abs", "step", "backward", "call", "records"}``,
        one row per (forward ``step``, ``backward`` of that forward, ``call`` of the layer in it): a
        forward differentiated twice (``retain_graph=True``, ``create_graph=True`` then a penalty's
        backward) gives backwards 0 and 1, each the gradient that backward sent through the output."""
        return super().layer_stats(name)

    def param_stats(self, name: str) -> dict[str, np.ndarray]:
        """The layer's direct parameter gradients, all together, one row per recorded backward:
        ``{"mean", "std", "norm", "max_abs", "step", "backward", "records"}`` (``backward``: 0, 1, ...
        for several backwards of one forward; empty arrays for a layer without parameters)."""
        self._check_name(name)
        return {k[6:]: v for k, v in self._tables()[name].items() if k.startswith("param_")}

    def gradient_flow(self, params: bool = False) -> tuple[list[str], np.ndarray, np.ndarray]:
        """The gradient-flow view: ``(names, steps, norms[len(names), len(steps)])``, the norm of each
        layer's output gradient (``params=True``: of its parameter gradients) per step; NaN where a
        layer has no record. Several calls (and several backwards) in one step are combined (root of the
        sum of squares).

        >>> names, steps, norms = gstats.gradient_flow()   # doctest: +SKIP
        """
        per_layer = [self.param_stats(n) if params else self.layer_stats(n) for n in self.names]
        all_steps = [a["step"] for a in per_layer if len(a.get("step", ()))]
        steps = np.unique(np.concatenate(all_steps)) if all_steps else np.zeros(0, dtype=np.int64)
        norms = np.full((len(per_layer), len(steps)), np.nan, dtype=np.float64)
        for i, a in enumerate(per_layer):
            if len(a.get("step", ())):
                cols = np.searchsorted(steps, a["step"])
                sq = np.zeros(len(steps))
                np.add.at(sq, cols, a["norm"].astype(np.float64) ** 2)
                seen = np.zeros(len(steps), dtype=bool)
                seen[cols] = True
                norms[i, seen] = np.sqrt(sq[seen])
        return list(self.names), steps.astype(np.int64), norms


_CLASSES: dict[str, type[StatsData]] = {"activation_stats": ActivationData, "gradient_stats": GradientData}
_HIST_KINDS = {"activation_stats"}  # kinds whose rows may carry a histogram


def register_kind(kind: str, type_name: str, cls: type[StatsData], hist: bool = False) -> None:
    """Make ``load_stats`` / ``read_files`` know one more kind of statistics file (``<kind>.json``,
    ``<kind>.safetensors``) read back as ``cls(names, framework, settings, tables)``."""
    _TYPES[kind] = type_name
    _CLASSES[kind] = cls
    if hist:
        _HIST_KINDS.add(kind)


def read_files(directory: str | os.PathLike, kind: str) -> StatsData:
    """Statistics written by ``save(directory)``: ``kind`` is "activation_stats" or "gradient_stats".

    The files may come from elsewhere: the JSON and the arrays are checked (schema, dtypes, shapes)
    and anything wrong raises ``InvalidFile`` naming the file and the field."""
    from safetensors.numpy import load_file

    json_path = os.path.join(directory, f"{kind}.json")
    st_path = os.path.join(directory, f"{kind}.safetensors")
    for p in (json_path, st_path):
        if not os.path.exists(p):
            raise FileNotFoundError(f"no {os.path.basename(p)} in {os.fspath(directory)!r}: save it with {_TYPES[kind]}.save(dir)")
    meta = _read_meta(json_path, kind)
    names = meta["names"]
    try:
        flat = load_file(st_path)
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types for corrupt files
        raise InvalidFile(f"{st_path}: not a readable safetensors file ({type(e).__name__}: {e})") from None
    tables: dict[str, dict[str, np.ndarray]] = {n: {} for n in names}
    for key, value in flat.items():
        index, _, field = key.partition("/")
        if not index.isdigit() or int(index) >= len(names) or not field:
            raise InvalidFile(f"{st_path}: unexpected array {key!r} (expected '<layer index>/<key>' for {len(names)} layers)")
        tables[names[int(index)]][field] = value
    _check_tables(tables, st_path, meta, kind)
    settings = {k: v for k, v in meta.items() if k not in ("names", "framework", "type")}
    return _CLASSES[kind](names, str(meta.get("framework", "")), settings, tables)


def _read_meta(path: str, kind: str) -> dict[str, Any]:
    meta = read_json_file(path, "a statistics file")
    if not isinstance(meta, dict):
        _bad(path, "(top level)", "an object", meta)
    if meta.get("type", _TYPES[kind]) != _TYPES[kind]:
        _bad(path, "type", repr(_TYPES[kind]), meta.get("type"))
    names = meta.get("names")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        _bad(path, "names", "a list of layer names (strings)", names)
    if len(set(names)) != len(names):
        _bad(path, "names", "a list of distinct layer names", names)
    if not isinstance(meta.get("framework", ""), str):
        _bad(path, "framework", "a string", meta.get("framework"))
    every = meta.get("every", 1)
    if not isinstance(every, int) or isinstance(every, bool) or every < 1:
        _bad(path, "every", "an int >= 1", every)
    if kind in _HIST_KINDS:
        bins = meta.get("bins", 40)
        if not isinstance(bins, int) or isinstance(bins, bool) or not 1 <= bins <= 1 << 20:
            _bad(path, "bins", "an int >= 1", bins)
    if kind == "activation_stats":
        _check_activation_meta(path, meta)
    return meta


def _bad(path: str, field: str, valid: str, value: Any) -> NoReturn:
    raise InvalidFile(f"{path}: field {field!r} must be {valid}; got {shown(value)}")


def _check_activation_meta(path: str, meta: dict[str, Any]) -> None:
    """The settings only activation statistics have: the histogram's range, near_zero, hist, train_only."""
    rng = meta.get("range", [0.0, 10.0])
    ok = isinstance(rng, list) and len(rng) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in rng)
    if not ok or not (math.isfinite(rng[0]) and math.isfinite(rng[1]) and rng[0] < rng[1]):
        _bad(path, "range", "a [low, high] pair of finite numbers with low < high", rng)
    nz = meta.get("near_zero", 0.05)
    if not isinstance(nz, (int, float)) or isinstance(nz, bool) or not math.isfinite(nz):
        _bad(path, "near_zero", "a finite number", nz)
    for key in ("hist", "train_only"):
        if not isinstance(meta.get(key, False), bool):
            _bad(path, key, "true or false", meta.get(key))


def _check_tables(tables: dict[str, dict[str, np.ndarray]], path: str, meta: dict[str, Any], kind: str) -> None:
    """Every layer's arrays: 1-d numeric columns of one length per group (output keys, ``param_``
    keys), integer ``step``/``call``/``records``, and ``hist`` of shape [rows, bins]."""
    bins = meta.get("bins", 40)
    for name, table in tables.items():
        lengths: dict[bool, int] = {}
        for key, a in table.items():
            field = f"{name}/{key}"
            if a.dtype.kind not in "fiu":
                raise InvalidFile(f"{path}: array {field!r} must hold numbers; got dtype {a.dtype}")
            base = key[6:] if key.startswith("param_") else key
            if base in ("step", "call", "backward", "records") and a.dtype.kind not in "iu":
                raise InvalidFile(f"{path}: array {field!r} must hold integers; got dtype {a.dtype}")
            if base == "hist":
                if kind not in _HIST_KINDS or a.ndim != 2 or a.shape[1] != bins:
                    raise InvalidFile(f"{path}: array {field!r} must have shape [records, {bins}] (bins); got {list(a.shape)}")
            elif a.ndim != 1:
                raise InvalidFile(f"{path}: array {field!r} must be 1-d (one value per record); got shape {list(a.shape)}")
            group = key.startswith("param_")
            n = lengths.setdefault(group, a.shape[0])
            if a.shape[0] != n:
                raise InvalidFile(f"{path}: array {field!r} has {a.shape[0]} records; the other arrays of layer {name!r} have {n}")


def load_stats(directory: str | os.PathLike) -> dict[str, StatsData]:
    """Load whatever statistics ``directory`` holds: ``{"activation_stats": ..., "gradient_stats": ...}``.

    >>> hookkit.load_stats("runs/stats")["activation_stats"].layer_stats("conv1")   # doctest: +SKIP
    """
    if not isinstance(directory, (str, os.PathLike)):
        fail("load_stats", "directory", "a folder path (str or os.PathLike)", directory, kind=ArgumentTypeError)
    out: dict[str, StatsData] = {}
    for kind in _TYPES:
        if os.path.exists(os.path.join(directory, f"{kind}.json")):
            out[kind] = read_files(directory, kind)
    if not out:
        raise FileNotFoundError(f"no {' or '.join(k + '.json' for k in _TYPES)} in {os.fspath(directory)!r}")
    return out
