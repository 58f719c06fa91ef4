"""``hookkit.extract``: layers' outputs over a whole data set, streamed to sharded safetensors files.

A short pipeline: check the arguments, open the run (fingerprint, folder, this rank's part), attach
the collector (router consumers that reduce and cast each output on its device), run the batches
(complete batches go to the folder's shard buffer; a full buffer goes to the writer thread, which
writes the shard, then the index: ``folder.FolderWriter``, the format's one writer), finish (the last shard; under a process group, the index of
all ranks: ``extract_ranks``). An interrupted run, re-run with the same arguments, continues after
the last shard its index lists.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hookkit.backends import Backend, backend_for
from hookkit.core.entry import public_entry
from hookkit.core.errors import add_note
from hookkit.core.failures import explains_failures
from hookkit.core.router import OBSERVER, attach
from hookkit.core.select import LayerSpec, select
from hookkit.core.tree import first_tensor
from hookkit.core.types import Layer
from hookkit.core.validate import check_runnable
from hookkit.observers import extract_ranks as ranks
from hookkit.observers import features as fmt
from hookkit.observers.extract_ranks import RankPlan
from hookkit.observers.features import ExtractError, Features, load_features
from hookkit.observers.folder import FolderWriter, count_samples, forget, open_folder, parse_size
from hookkit.observers.reductions import ReduceSpec, Reduction, reductions_for
from hookkit.observers.summary.dryrun import has_data

DEFAULT_SHARD_SIZE = 16 * 2**20  # 16 MB: peak memory flat from 1,000 samples on (BENCHMARKS.md)
STORABLE = tuple(fmt.CODES)  # dtype names extract can store


def _default_forward(model: Any, be: Backend) -> Callable[[Any], Any]:
    """model(x) for a tensor, model(x) for (x, y, ...), model(**batch) for a dict; numpy arrays
    become tensors and tensors move to the model's device."""
    device = be.input_device(model)  # a dispatched model's first parameters may be offloaded (meta)
    like = next((p for p in be.parameters(model) if be.device_of(p) == device), None) if device is not None else None

    def prepare(x: Any) -> Any:
        if isinstance(x, np.ndarray):  # a writable copy when read-only (memory-mapped data)
            x = np.ascontiguousarray(x) if x.flags.writeable else np.array(x)
            return be.from_numpy(x, like=like)
        if device is not None and be.is_tensor(x) and be.device_of(x) != device:
            return be.to(x, device)
        if isinstance(x, Mapping):
            return {k: prepare(v) for k, v in x.items()}
        if isinstance(x, (tuple, list)):
            return type(x)(prepare(v) for v in x) if not hasattr(x, "_fields") else type(x)(*(prepare(v) for v in x))
        return x

    def run(batch: Any) -> Any:
        if isinstance(batch, (tuple, list)) and batch:
            batch = batch[0]
        batch = prepare(batch)
        return model(**batch) if isinstance(batch, Mapping) else model(batch)

    return run


# -- fingerprint ----------------------------------------------------------------------------------
def _fingerprint(
    model: Any, be: Backend, named: list[tuple[str, Any]], inputs: bool, reds: dict[str, Reduction | None], dtype: str | None
) -> dict[str, Any]:
    params = hashlib.sha256()
    for pname, p in be.named_parameters(model):
        params.update(f"{pname}:{list(be.shape(p))}:{be.dtype_name(p)};".encode())
    return {
        "model": f"{type(model).__module__}.{type(model).__qualname__}",
        "framework": be.name,
        "layers": [[n, f"{type(m).__module__}.{type(m).__qualname__}"] for n, m in named],
        "parameters": params.hexdigest()[:16],
        "weights": _weights(model, be),
        "inputs": inputs,
        "reduce": {n: (r.describe() if r else None) for n, r in reds.items()},
        "dtype": dtype,
    }


def _weights(model: Any, be: Backend) -> dict[str, str]:
    """Tensors without data here (layers accelerate offloads to disk or the CPU) give their shape only. ``{name: digest}`` of the values of every parameter and buffer (sha256 of its bytes, 16 hex
    digits): a resumed run with other weights (another checkpoint, another random init) is refused,
    naming the tensors that differ. One pass over the weights (about 0.6 s per GB on a CPU)."""
    tensors = dict(be.named_parameters(model))
    for lname, layer in be.named_layers(model):
        for bname, t in be.forward_state(layer):
            tensors.setdefault(f"{lname}.{bname}" if lname else bname, t)
    out = {}
    for name, t in tensors.items():
        if not has_data(be, t):  # offloaded by accelerate (meta until its hook loads it): its shape and dtype
            out[name] = f"no data here: {list(be.shape(t))} {be.dtype_name(t)}"
            continue
        a = np.ascontiguousarray(be.to_numpy(t))
        out[name] = hashlib.sha256(a.data.cast("B") if a.size else b"").hexdigest()[:16]
    return out


# -- the pipeline: checks, open run, collector, batches, finish --------------------------------------
@dataclass
class _Run:
    """Everything an extraction knows once its folder is open."""

    out: str
    be: Backend
    named: list[tuple[str, Any]]
    keys: list[str]
    reds: dict[str, Reduction | None]
    fingerprint: dict[str, Any]
    meta: dict[str, Any]
    plan: RankPlan
    index: dict[str, Any]
    existed: bool
    specs: dict[str, tuple[tuple[int, ...], str]] = field(default_factory=dict)

    @property
    def fresh(self) -> bool:  # nothing written yet: a failure leaves no folder or index behind
        return not self.index["shards"]


def _check_args(data: Any, forward: Any, dtype: Any, progress: Any, shard_size: Any) -> int:
    if isinstance(data, (str, bytes)) or hasattr(data, "shape"):
        raise ExtractError(
            f"extract(data=...): got a single {type(data).__name__}; pass an iterable of batches, like a DataLoader or np.array_split(x, n)"
        )
    if not isinstance(data, Iterable):
        raise ExtractError(f"extract(data=...): got {type(data).__name__}, which is not iterable; pass a DataLoader or a list of batches")
    if forward is not None and not callable(forward):
        raise ExtractError(f"extract(forward=...): must be a callable taking a batch; got {type(forward).__name__}")
    if dtype is not None and dtype not in STORABLE:
        raise ExtractError(f"extract(dtype=...): got {dtype!r}; storable dtypes: {', '.join(STORABLE)}")
    if progress not in (None, True, False):
        raise ExtractError(f"extract(progress=...): True, False or None (on a terminal only); got {progress!r}")
    return parse_size(shard_size)


def _open_run(model: Any, data: Any, layers: LayerSpec, out: str, inputs: bool, reduce: Any, dtype: str | None, sampler: Any) -> _Run:
    be = backend_for(model)
    check_runnable(be, model)
    named = select(model, layers)  # LayerNotFound here, before any forward
    names = [n for n, _ in named]
    if not names:
        raise ExtractError(f"extract(layers={layers!r}): selects no layer; name at least one")
    reds = reductions_for(reduce, names)
    keys = [k for n in names for k in ((n, n + ":input") if inputs else (n,))]
    plan = ranks.plan(be, data, sampler)
    fp = _fingerprint(model, be, named, inputs, reds, dtype)
    if plan.ranked:
        fp.update(world=plan.world, sampler=plan.sampler)
    meta = {
        "model": fp["model"],
        "framework": be.name,
        "layers": names,
        "keys": keys,
        "inputs": inputs,
        "reduce": fp["reduce"],
        "dtype": dtype,
    }
    existed = os.path.isdir(out)
    index = open_folder(out, fp, meta, plan)
    run = _Run(out, be, named, keys, reds, fp, meta, plan, index, existed)
    if "ranks" not in index:
        run.specs = {k: (tuple(v["shape"]), v["dtype"]) for k, v in index["layers"].items()}
    return run


class _Collector:
    """The router consumers of one extraction: each selected layer's output (and input) of the
    running batch, reduced and cast on the device, kept until the batch is done."""

    def __init__(self, run: _Run, inputs: bool, dtype: str | None):
        self.run, self.inputs, self.dtype = run, inputs, dtype
        self.got: dict[str, Any] = {}
        self.batch = -1
        self.hooks: list[Any] = []

    def attach(self, model: Any) -> None:
        for name, layer in self.run.named:
            self.hooks.append(attach(model, [(name, layer)], "forward", self._consumer(name, self.run.reds[name]), OBSERVER))

    def remove(self) -> None:
        for h in self.hooks:
            h.remove()
        self.hooks = []

    def _consumer(self, name: str, red: Reduction | None) -> Callable[[Any], None]:
        be, got, inputs, dtype = self.run.be, self.got, self.inputs, self.dtype

        def on_forward(ev: Any) -> None:
            pairs = [(name, ev.output), (name + ":input", (ev.args, ev.kwargs))] if inputs else [(name, ev.output)]
            for key, value in pairs:
                if key in got:
                    raise ExtractError(
                        f"extract: layer {name!r} ran more than once in the forward of batch {self.batch}; extract keeps one "
                        "tensor per sample and layer: select a layer that runs once per forward"
                    )
                t = first_tensor(value, be.is_tensor)
                if t is None:
                    raise ExtractError(
                        f"extract: the {'inputs' if key != name else 'output'} of layer {name!r} hold no tensor (batch {self.batch})"
                    )
                r = red.apply(be, t, key) if red is not None else t
                fresh = red is not None and red.op in ("mean", "max")
                if dtype is not None and be.dtype_name(r) != dtype:
                    r, fresh = be.cast(r, dtype), True
                # a view, or the layer's own output, could change under a later in-place op: copy it
                got[key] = r if fresh else be.clone(be.detach(r))

        return on_forward

    def rows(self, b: int, n: int) -> dict[str, np.ndarray]:
        """The batch's rows per key, on the host, checked (one row per sample, the same shape every batch)."""
        run, rows = self.run, {}
        for key in run.keys:
            if key not in self.got:
                raise ExtractError(f"extract: layer {key.split(':')[0]!r} did not run in the forward of batch {b}")
            a = run.be.to_numpy(self.got[key])
            if a.ndim == 0 or a.shape[0] != n:
                raise ExtractError(
                    f"extract: {key!r} gave shape {list(a.shape)} for batch {b} of {n} samples; extract needs the samples along "
                    "dim 0 (use reduce= or forward= for layers that are not batch-first)"
                )
            spec = (tuple(a.shape[1:]), a.dtype.name)
            old = run.specs.setdefault(key, spec)
            if old != spec:
                raise ExtractError(
                    f"extract: {key!r} gave rows of shape {list(spec[0])} {spec[1]} in batch {b}, but {list(old[0])} {old[1]} "
                    "before; every batch must give the same per-sample shape (pad the data, or reduce= over the varying dims)"
                )
            if a.dtype.name not in fmt.CODES:
                raise ExtractError(
                    f"extract: {key!r} has dtype {a.dtype.name}, which cannot be stored; pass dtype= one of {', '.join(STORABLE)}"
                )
            rows[key] = a
        self.got.clear()
        return rows


def _other_ranks(run: _Run) -> Callable[[], tuple[int, int]]:
    """(batches, samples) the other ranks' indexes list: the progress bar on rank 0 sums all ranks."""

    def read() -> tuple[int, int]:
        batches = samples = 0
        for r in range(run.plan.world):
            if r == run.plan.rank:
                continue
            try:
                idx = fmt.read_index(run.out, fmt.rank_index_name(r), r)
            except (fmt.FeaturesError, OSError):
                continue
            batches, samples = batches + idx["batches"], samples + idx["count"]
        return batches, samples

    return read


def _run_batches(
    run: _Run, collector: _Collector, data: Iterable[Any], forward: Callable[[Any], Any], shard_bytes: int, progress: bool | None
) -> None:
    """Every batch of ``data``: skip those written before an interruption (after checking them),
    run the others and hand their rows to the folder; then finish it."""
    plan = run.plan
    keys = run.keys + ([fmt.SAMPLE_KEY] if plan.ids is not None else [])
    total = len(data) if hasattr(data, "__len__") else None  # type: ignore[arg-type]
    others = _other_ranks(run) if plan.ranked and plan.rank == 0 else None
    shown = progress if plan.rank == 0 else False
    start, b = 0, -1
    with FolderWriter(
        run.out,
        run.index,
        keys,
        shard_bytes,
        shown,
        total * plan.world if (total and others) else total,
        plan=plan,
        others=others,
        specs=run.specs,
    ) as folder:
        for b, batch in enumerate(data):
            collector.batch = b
            n = count_samples(batch, b)
            ids = ranks.sample_rows(plan, start, n, b)
            start += n
            if folder.resumed(b, n):
                continue
            collector.got.clear()
            try:
                with run.be.no_grad():
                    forward(batch)
            except Exception as e:
                if not isinstance(e, ExtractError):
                    add_note(e, f"hookkit.extract: in the forward of batch {b} ({n} samples)")
                raise
            rows = collector.rows(b, n)
            if ids is not None:
                rows[fmt.SAMPLE_KEY] = ids
                run.specs.setdefault(fmt.SAMPLE_KEY, ((), "int64"))
            folder.add(b, rows, n)
        folder.finish(b)


# -- extract --------------------------------------------------------------------------------------
@public_entry("extract")
@explains_failures("extract")
def extract(
    model: Layer,
    data: Iterable[Any],
    layers: LayerSpec,
    out: str | os.PathLike,
    *,
    inputs: bool = False,
    reduce: ReduceSpec | Mapping[str, ReduceSpec] = None,
    dtype: str | None = None,
    forward: Callable[[Any], Any] | None = None,
    shard_size: int | str = DEFAULT_SHARD_SIZE,
    progress: bool | None = None,
    sampler: Any = None,
) -> Features:
    """Run ``model`` over every batch of ``data`` and stream the outputs of ``layers`` to the folder
    ``out`` (sharded safetensors + ``index.json``): one row per sample, in data order, every layer
    aligned. Returns ``load_features(out)``.

    >>> feats = hookkit.extract(model, loader, ["h.*"], "feats", reduce="mean:1", dtype="float16")   # doctest: +SKIP
    >>> feats["h.0"].shape          # (N, hidden)

    ``data``: an iterable of batches (a torch or paddle DataLoader, a list of tensors, numpy arrays,
    tuples ``(x, y)``, dicts like ``{"input_ids": ...}``); a batch's sample count is dim 0 of its
    first tensor. ``forward(batch)`` runs the model when ``model(x)`` / ``model(**batch)`` won't do.
    Each selected layer must run once per forward; its output's first tensor is kept (with
    ``inputs=True`` also its first input, as ``"<layer>:input"``).
    ``reduce``: applied on the device at hook time, for all layers or as ``{layer glob: spec}``:
    ``"mean:1"`` / ``"max:2,3"`` (over dims), ``"token:-1"`` or an int (one position of dim 1),
    ``"slice:0:4"`` or a slice (of dim 1), or a function tensor -> tensor. ``dtype``: stored dtype,
    like ``"float16"``.
    Memory: at most 3 x (``shard_size`` + one batch's features) of host memory, whatever the number
    of samples. Interrupted (exception, Ctrl-C, kill -9), the same call resumes after the last
    complete shard; another model, other weights (a digest of every parameter and buffer), layers,
    reduce or dtype in the same folder are refused, naming what changed. A call that fails before
    its first shard is written leaves no ``index.json`` behind (nor a folder it created).
    Runs under no_grad; the model's train/eval mode is left as it is (call ``model.eval()``).

    Under an initialized process group (``torchrun``, ``torch.multiprocessing`` with
    ``init_process_group``; Paddle's ``paddle.distributed.spawn`` / ``launch``) each rank extracts
    its share into the same folder (its own shards and index) and rank 0 writes the folder's index
    after the others finish; every rank returns the whole data set. ``sampler``: where each rank's
    samples come from (a ``DistributedSampler`` or a batch sampler), read from ``data.batch_sampler``
    when not given, so rows come back in the data's order with ``DistributedSampler``'s padding
    dropped; without one, ranks' rows follow one another (rank 0 first). A killed rank (or job)
    re-run with the same world size resumes where each rank stopped; another world size or sampler
    seed is refused, naming what changed.

    >>> sampler = DistributedSampler(dataset); loader = DataLoader(dataset, 64, sampler=sampler)   # doctest: +SKIP
    >>> feats = hookkit.extract(model, loader, "h.*", "feats", reduce="mean:1")                    # doctest: +SKIP
    """
    out = os.fspath(out)
    shard_bytes = _check_args(data, forward, dtype, progress, shard_size)
    run = _open_run(model, data, layers, out, inputs, reduce, dtype, sampler)
    if run.index.get("complete"):
        if not run.plan.ranked or os.path.exists(os.path.join(out, fmt.INDEX)):
            return load_features(out)
        # this rank's share was written by an interrupted run; the others may still be resuming: meet them at the end
    else:
        collector = _Collector(run, inputs, dtype)
        finished = False
        try:
            collector.attach(model)
            _run_batches(run, collector, data, forward if forward is not None else _default_forward(model, run.be), shard_bytes, progress)
            finished = True
        finally:
            collector.remove()
            if not finished and run.fresh:
                forget(out, run.existed, run.plan.index_name)
    if run.plan.ranked:
        ranks.finish(out, run.plan, run.be, run.fingerprint, run.meta)
    return load_features(out)
