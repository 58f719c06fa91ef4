"""``hookkit.extract``: layers' outputs over a whole data set, streamed to sharded safetensors files.

The compute thread runs the forwards; the hooks (router consumers) reduce and cast each output on
its device; complete batches go to a shard buffer; a full buffer goes through a queue of one to a
writer thread, which writes the shard (temporary file, then ``os.replace``) and only then the index.
So host memory holds at most three shards' worth of features (the one being written, the one
queued, the one being filled) plus one batch, whatever the number of samples; and an interrupted
run, re-run with the same arguments, continues after the last shard the index lists.
"""

from __future__ import annotations

import hashlib
import os
import queue
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from hookkit.backends import Backend, backend_for
from hookkit.core.router import OBSERVER, attach
from hookkit.core.select import LayerSpec, select
from hookkit.core.tree import first_tensor
from hookkit.observers import features as fmt
from hookkit.observers.features import ExtractError, Features, load_features
from hookkit.observers.reductions import ReduceSpec, Reduction, reductions_for

DEFAULT_SHARD_SIZE = 16 * 2**20  # 16 MB: peak memory flat from 1,000 samples on (BENCHMARKS.md)
STORABLE = tuple(fmt.CODES)  # dtype names extract can store


# -- sizes, samples -------------------------------------------------------------------------------
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_size(size: int | str, what: str = "shard_size") -> int:
    """Bytes from an int or a string like "64MB" / "512KiB"."""
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size
    if isinstance(size, str):
        m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", size)
        if m and m.group(2).lower() in _UNITS and float(m.group(1)) > 0:
            return max(1, int(float(m.group(1)) * _UNITS[m.group(2).lower()]))
    raise ExtractError(f"extract({what}=...): expected a positive number of bytes or a size like '64MB'; got {size!r}")


def _count(batch: Any, b: int) -> int:
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


def _default_forward(model: Any, be: Backend) -> Callable[[Any], Any]:
    """model(x) for a tensor, model(x) for (x, y, ...), model(**batch) for a dict; numpy arrays
    become tensors and tensors move to the model's device."""
    params = be.parameters(model)
    like = params[0] if params else None
    device = be.device_of(like) if like is not None else None

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
    """``{name: digest}`` of the values of every parameter and buffer (sha256 of its bytes, 16 hex
    digits): a resumed run with other weights (another checkpoint, another random init) is refused,
    naming the tensors that differ. One pass over the weights (about 0.5 s per 250 MB on a CPU)."""
    tensors = dict(be.named_parameters(model))
    for lname, layer in be.named_layers(model):
        for bname, t in be.forward_state(layer):
            tensors.setdefault(f"{lname}.{bname}" if lname else bname, t)
    out = {}
    for name, t in tensors.items():
        a = np.ascontiguousarray(be.to_numpy(t))
        out[name] = hashlib.sha256(memoryview(a).cast("B") if a.size else b"").hexdigest()[:16]
    return out


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


# -- the writer thread ----------------------------------------------------------------------------
class _Writer:
    """Writes shards handed over through a queue of one, then updates the index; never outlives
    the call (``close`` joins it); its exception is re-raised in the caller."""

    def __init__(self, out: str, index: dict[str, Any]):
        self.out, self.index = out, index
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
        name = fmt.shard_name(len(index["shards"]))
        self.bytes_written += fmt.write_shard(os.path.join(self.out, name), chunks)
        done()  # the buffers can be filled again
        index["layers"] = layers
        index["shards"].append({"file": name, "count": sum(sizes), "batch_sizes": sizes})
        index["count"] += sum(sizes)
        index["batches"] += len(sizes)
        fmt.write_json(os.path.join(self.out, fmt.INDEX), index)  # only after the shard is whole

    def check(self) -> None:
        if self.error is not None:
            e = self.error
            note = f"hookkit.extract: writing a shard to {self.out!r} failed"
            if note not in getattr(e, "__notes__", ()):
                e.add_note(note)
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


class _Rows:
    """Per-key row buffers of the shard being filled, recycled through the writer: at most ``sets``
    of them exist (the one filling, the one queued, the one being written), each of about
    ``shard_size`` + one batch, allocated once and reused, so memory neither grows nor fragments."""

    def __init__(self, keys: list[str], shard_bytes: int, writer: _Writer, sets: int = 3):
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


# -- the folder -----------------------------------------------------------------------------------
def _prepare_out(out: str, fingerprint: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """Create or reopen ``out``: a new index, or the old one when the fingerprint matches (resume)."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise ExtractError(f"extract(out={out!r}): it is a file; give a folder (created if missing)")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise ExtractError(f"extract(out={out!r}): cannot create the folder: {e.strerror or e}") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise ExtractError(f"extract(out={out!r}): the folder is not writable")
    index = None
    if os.path.exists(os.path.join(out, fmt.INDEX)):
        try:
            index = fmt.read_index(out)
        except fmt.FeaturesError as e:
            raise ExtractError(
                f"extract(out={out!r}): the folder holds an index that cannot be resumed ({e}); use a new folder or delete it"
            ) from None
        old = index.get("fingerprint") or {}
        diff = [k for k in fingerprint if old.get(k) != fingerprint[k]]
        if diff:
            what = "; ".join(_difference(k, old.get(k), fingerprint[k]) for k in diff)
            raise ExtractError(
                f"extract(out={out!r}): the folder holds an extraction with other arguments ({what}); "
                "re-run with the same model and weights, layers, inputs, reduce and dtype to resume it, or use a new folder"
            )
    else:
        names = [n for n in os.listdir(out) if fmt._SHARD_NAME.fullmatch(n)]
        if names:
            raise ExtractError(f"extract(out={out!r}): the folder holds shard files but no {fmt.INDEX}; use a new folder")
        index = {
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
        try:
            fmt.write_json(os.path.join(out, fmt.INDEX), index)
        except OSError as e:
            raise ExtractError(f"extract(out={out!r}): cannot write to the folder: {e.strerror or e}") from None
    # leftovers of a killed run: temporary files, and shards written after the index's last update
    listed = {s["file"] for s in index["shards"]}
    for n in os.listdir(out):
        stale_tmp = n.startswith(".") and n.endswith(".tmp") and (fmt._SHARD_NAME.fullmatch(n[1:-4]) or n[1:-4] == fmt.INDEX)
        if stale_tmp or (fmt._SHARD_NAME.fullmatch(n) and n not in listed):
            os.remove(os.path.join(out, n))
    return index


# -- progress -------------------------------------------------------------------------------------
class _Progress:
    """A rich progress line (samples, samples/s, bytes written) on a terminal; nothing otherwise."""

    def __init__(self, enabled: bool | None, total: int | None, writer: _Writer, done: int):
        if enabled is None:
            enabled = sys.stderr.isatty()
        self.bar = None
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.writer, self.t0, self.samples0 = writer, time.perf_counter(), None
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


# -- extract --------------------------------------------------------------------------------------
def extract(
    model: Any,
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
    """
    out = os.fspath(out)
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
    shard_bytes = parse_size(shard_size)
    be = backend_for(model)
    named = select(model, layers)  # LayerNotFound here, before any forward
    names = [n for n, _ in named]
    if not names:
        raise ExtractError(f"extract(layers={layers!r}): selects no layer; name at least one")
    reds = reductions_for(reduce, names)
    keys = [k for n in names for k in ((n, n + ":input") if inputs else (n,))]
    fp = _fingerprint(model, be, named, inputs, reds, dtype)
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
    index = _prepare_out(out, fp, meta)
    fresh = not index["shards"]  # nothing written yet: a failure leaves no folder or index behind
    if index["complete"]:
        return load_features(out)

    done_sizes = [c for s in index["shards"] for c in s["batch_sizes"]]
    specs: dict[str, tuple[tuple[int, ...], str]] = {k: (tuple(v["shape"]), v["dtype"]) for k, v in index["layers"].items()}
    run = forward if forward is not None else _default_forward(model, be)
    got: dict[str, Any] = {}
    state = {"batch": -1}

    def consumer(name: str, red: Reduction | None) -> Callable:
        def on_forward(ev: Any) -> None:
            pairs = [(name, ev.output), (name + ":input", (ev.args, ev.kwargs))] if inputs else [(name, ev.output)]
            for key, value in pairs:
                if key in got:
                    raise ExtractError(
                        f"extract: layer {name!r} ran more than once in the forward of batch {state['batch']}; extract keeps one "
                        "tensor per sample and layer: select a layer that runs once per forward"
                    )
                t = first_tensor(value, be.is_tensor)
                if t is None:
                    raise ExtractError(
                        f"extract: the {'inputs' if key != name else 'output'} of layer {name!r} hold no tensor (batch {state['batch']})"
                    )
                r = red.apply(be, t, key) if red is not None else t
                fresh = red is not None and red.op in ("mean", "max")
                if dtype is not None and be.dtype_name(r) != dtype:
                    r, fresh = be.cast(r, dtype), True
                # a view, or the layer's own output, could change under a later in-place op: copy it
                got[key] = r if fresh else be.clone(be.detach(r))

        return on_forward

    total = len(data) if hasattr(data, "__len__") else None  # type: ignore[arg-type]
    samples, b = index["count"], -1
    hooks: list[Any] = []
    writer = bar = None
    finished = False
    try:
        for n_, m in named:
            hooks.append(attach(model, [(n_, m)], "forward", consumer(n_, reds[n_]), OBSERVER))
        writer = _Writer(out, index)
        buffer = _Rows(keys, shard_bytes, writer)
        bar = _Progress(progress, total, writer, len(done_sizes))
        for b, batch in enumerate(data):
            state["batch"] = b
            n = _count(batch, b)
            if b < len(done_sizes):  # written before the interruption: skip, after checking it
                if n != done_sizes[b]:
                    raise ExtractError(
                        f"extract(out={out!r}): batch {b} holds {n} samples but held {done_sizes[b]} in the interrupted run; "
                        "the data changed (a shuffled loader?): resume needs the same batches in the same order"
                    )
                continue
            got.clear()
            try:
                with be.no_grad():
                    run(batch)
            except Exception as e:
                if not isinstance(e, ExtractError):
                    e.add_note(f"hookkit.extract: in the forward of batch {b} ({n} samples)")
                raise
            rows = {}
            for key in keys:
                if key not in got:
                    raise ExtractError(f"extract: layer {key.split(':')[0]!r} did not run in the forward of batch {b}")
                a = be.to_numpy(got[key])
                if a.ndim == 0 or a.shape[0] != n:
                    raise ExtractError(
                        f"extract: {key!r} gave shape {list(a.shape)} for batch {b} of {n} samples; extract needs the samples along "
                        "dim 0 (use reduce= or forward= for layers that are not batch-first)"
                    )
                spec = (tuple(a.shape[1:]), a.dtype.name)
                old = specs.setdefault(key, spec)
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
            buffer.add(rows, n, specs)  # a copy: the batch's tensors are freed now
            got.clear()
            samples += n
            writer.check()
            bar.update(b + 1, samples)
        if b + 1 < len(done_sizes):
            raise ExtractError(
                f"extract(out={out!r}): data gave {b + 1} batches, fewer than the {len(done_sizes)} already written; "
                "the data changed: resume needs the same batches in the same order"
            )
        if b < 0:
            raise ExtractError("extract(data=...): the data gave no batches (an exhausted iterator?)")
        buffer.flush(specs)
        writer.close()
        writer.check()
        index["complete"] = True
        fmt.write_json(os.path.join(out, fmt.INDEX), index)
        finished = True
    finally:
        if writer is not None:
            writer.close()  # shards already queued are whole: they are written (resume skips them)
        if bar is not None:
            bar.close()
        for h in hooks:
            h.remove()
        if not finished and fresh and not index["shards"]:
            _forget(out, existed)
    return load_features(out)


def _forget(out: str, existed: bool) -> None:
    """A call that failed before writing any shard leaves nothing behind: no ``index.json`` (which
    would tie the folder to these arguments), and no folder it created."""
    try:
        os.remove(os.path.join(out, fmt.INDEX))
        if not existed and not os.listdir(out):
            os.rmdir(out)
    except OSError:
        pass
