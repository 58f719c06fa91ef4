"""``cam(..., out=FOLDER)``: maps over a data set, streamed to the sharded safetensors format of
``hookkit.extract`` (its folder, writer thread and row buffers: bounded memory, resumable), key ``"cam"``."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from typing import Any

import numpy as np

from hookkit.analyses.cam.call import prepare_inputs
from hookkit.analyses.targets import check_target
from hookkit.core.entry import entry_name
from hookkit.core.validate import fail
from hookkit.observers import features as fmt
from hookkit.observers.extract import count_samples, parse_size, prepare_out
from hookkit.observers.extract_io import Progress, Rows, Writer
from hookkit.observers.features import ExtractError, Features, load_features

KEY = "cam"


def _fingerprint(run: Any, layers: Any) -> dict[str, Any]:
    be, model = run.be, run.model
    params = hashlib.sha256()
    for pname, p in be.named_parameters(model):
        params.update(f"{pname}:{list(be.shape(p))}:{be.dtype_name(p)};".encode())
    target = run.target
    return {
        "model": f"{type(model).__module__}.{type(model).__qualname__}",
        "framework": be.name,
        "layers": [n for n, _ in run.named],
        "parameters": params.hexdigest()[:16],
        "method": run.name,
        "target": "callable" if callable(target) else None if target is None else int(target),  # np.int64: not JSON
        "smoothing": [run.aug, run.eigen],
        "reshape": "callable" if callable(run.reshape) else run.reshape,
        "prefix_tokens": run.prefix,  # both change the maps: a resume with other values would mix them
        "eval": run.eval,
    }


def stream(run: Any, data: Iterable[Any], out: Any, layers: Any, shard_size: int | str, progress: bool | None) -> Features:
    """Write ``run``'s maps for every batch of ``data`` to ``out``; the same call resumes an interrupted run."""
    fn = entry_name()
    out = os.fspath(out)
    if hasattr(data, "shape") or isinstance(data, (str, bytes)) or not isinstance(data, Iterable):
        fail(fn, "inputs", "an iterable of batches with out= (a DataLoader, a list of tensors or arrays)", data)
    if run.target is not None and not callable(run.target) and not isinstance(run.target, (int, np.integer)):
        fail(fn, "target", "None, a class index or a callable with out= (one per sample cannot span batches)", run.target)
    fp = _fingerprint(run, layers)
    meta = {"model": fp["model"], "framework": run.be.name, "layers": fp["layers"], "keys": [KEY], "method": run.name}
    same = "model and weights, layers, method, target, reshape, prefix_tokens, smoothing and eval"
    index = prepare_out(out, fp, meta, fn=fn, same=same)
    if index["complete"]:
        return load_features(out)
    done = [c for s in index["shards"] for c in s["batch_sizes"]]
    specs = {k: (tuple(v["shape"]), v["dtype"]) for k, v in index["layers"].items()}
    writer = bar = None
    b = -1
    try:
        writer = Writer(out, index)
        rows = Rows([KEY], parse_size(shard_size), writer)
        bar = Progress(progress, len(data) if hasattr(data, "__len__") else None, writer, len(done))  # type: ignore[arg-type]
        samples = index["count"]
        for b, batch in enumerate(data):
            n = count_samples(batch, b)
            if b < len(done):
                if n != done[b]:
                    raise ExtractError(
                        f"{fn}(out={out!r}): batch {b} holds {n} samples but held {done[b]} in the interrupted run; "
                        "resuming needs the same batches in the same order"
                    )
                continue
            x = prepare_inputs(run.be, run.model, batch[0] if isinstance(batch, (tuple, list)) else batch)
            check_target(run.target, n)
            maps = run.be.to_numpy(run(x))
            spec = specs.setdefault(KEY, (tuple(maps.shape[1:]), maps.dtype.name))
            if spec != (tuple(maps.shape[1:]), maps.dtype.name):
                raise ExtractError(f"{fn}(out={out!r}): batch {b} gave maps of shape {list(maps.shape[1:])}, earlier ones {list(spec[0])}")
            rows.add({KEY: maps}, n, specs)
            samples += n
            writer.check()
            bar.update(b + 1, samples)
        if b < 0:
            raise ExtractError(f"{fn}(inputs=...): the data gave no batches (an exhausted iterator?)")
        rows.flush(specs)
        writer.close()
        writer.check()
        index["complete"] = True
        fmt.write_json(os.path.join(out, fmt.INDEX), index)
    finally:
        if writer is not None:
            writer.close()
        if bar is not None:
            bar.close()
    return load_features(out)
