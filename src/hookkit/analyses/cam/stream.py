"""``cam(..., out=FOLDER)``: maps over a data set, streamed to the features folder of ``hookkit.extract``
through its one writer (``observers.folder``: bounded memory, resumable), key ``"cam"``."""

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
from hookkit.observers.features import ExtractError, Features, load_features
from hookkit.observers.folder import FolderWriter, count_samples, open_folder, parse_size

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
    index = open_folder(out, fp, meta, same=same)
    if index["complete"]:
        return load_features(out)
    total = len(data) if hasattr(data, "__len__") else None  # type: ignore[arg-type]
    hint = "resuming needs the same batches in the same order"
    b = -1
    with FolderWriter(out, index, [KEY], parse_size(shard_size), progress, total, resume_hint=hint) as folder:
        for b, batch in enumerate(data):
            n = count_samples(batch, b)
            if folder.resumed(b, n):
                continue
            x = prepare_inputs(run.be, run.model, batch[0] if isinstance(batch, (tuple, list)) else batch)
            check_target(run.target, n)
            maps = run.be.to_numpy(run(x))
            spec = folder.specs.setdefault(KEY, (tuple(maps.shape[1:]), maps.dtype.name))
            if spec != (tuple(maps.shape[1:]), maps.dtype.name):
                raise ExtractError(f"{fn}(out={out!r}): batch {b} gave maps of shape {list(maps.shape[1:])}, earlier ones {list(spec[0])}")
            folder.add(b, {KEY: maps}, n)
        folder.finish(b, data_arg="inputs")
    return load_features(out)
