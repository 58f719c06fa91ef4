"""``hookkit extract TARGET --data X.npy --layers SPEC --out DIR``: ``hookkit.extract`` on the command line.

The model comes from ``package.module:callable`` (as for ``hookkit summary``); the data from a
``.npy`` (memory-mapped), ``.npz`` or ``.safetensors`` file of samples along dim 0, read without
pickle, cut into batches of ``--batch-size``.

Weights: ``--weights`` (a ``from_pretrained`` folder or a weights file); without it the model has
random weights, drawn from ``--seed`` (default 0) so that a re-run (a resume) gets the same ones.
The features folder records a digest of the weights: resuming with other weights is refused.
A forward that fails is reported on one line with a hint (exit status 2).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

from hookkit.apps.targets import TargetError, load_model, parse_kw
from hookkit.core.errors import HookkitError


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("extract", help="write layers' outputs over a data file to sharded safetensors (resumable)")
    p.add_argument("target", help="package.module:callable returning a model")
    p.add_argument("--data", required=True, help="samples along dim 0: a .npy, .npz or .safetensors file")
    p.add_argument("--data-key", default=None, help="the array to read from a .npz / .safetensors file (default: the only one)")
    p.add_argument("--data-dtype", default=None, help="cast each batch to this dtype first, like float32")
    p.add_argument("--layers", action="append", required=True, help="layer name or glob, like 'h.*' (repeatable)")
    p.add_argument("--out", required=True, help="output folder (created; an interrupted run there is resumed)")
    p.add_argument("--batch-size", type=int, default=64, help="samples per forward (default: 64)")
    p.add_argument(
        "--weights",
        default=None,
        help="a from_pretrained folder (transformers classes) or a weights file (.safetensors, .pt, .pdparams); default: random weights",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights when --weights is not given (default: 0)")
    p.add_argument("--kw", action="append", default=[], help="keyword for the callable or its config, like n_layer=2 (repeatable)")
    p.add_argument("--inputs", action="store_true", help="also store each layer's first input, as LAYER:input")
    p.add_argument(
        "--reduce", action="append", default=[], help="mean:1, max:2,3, token:-1, slice:0:4, for all layers or as LAYER=SPEC (repeatable)"
    )
    p.add_argument("--dtype", default=None, help="stored dtype, like float16")
    p.add_argument("--shard-size", default="16MB", help="bytes per shard file, like 16MB (default); memory stays under ~3x this")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None, help="progress bar (default: on a terminal)")
    p.add_argument(
        "--nproc",
        type=int,
        default=1,
        help="processes to start (gloo on 127.0.0.1), each extracting its share into the same folder; one progress bar (default: 1)",
    )
    return p


def _array(path: str, key: str | None) -> np.ndarray:
    if not os.path.isfile(path):
        raise TargetError(f"--data {path!r}: no such file")
    ext = os.path.splitext(path)[1].lower()
    try:
        if ext == ".npy":
            return np.load(path, mmap_mode="r", allow_pickle=False)
        if ext == ".npz":
            with np.load(path, allow_pickle=False) as z:
                names = list(z.files)
                name = key or (names[0] if len(names) == 1 else None)
                if name not in names:
                    raise TargetError(f"--data {path!r} holds {', '.join(names)}: choose one with --data-key")
                return z[name]
        if ext == ".safetensors":
            from safetensors import safe_open

            with safe_open(path, "np") as f:
                names = list(f.keys())
                name = key or (names[0] if len(names) == 1 else None)
                if name not in names:
                    raise TargetError(f"--data {path!r} holds {', '.join(names)}: choose one with --data-key")
                return f.get_tensor(name)
    except TargetError:
        raise
    except Exception as e:  # noqa: BLE001 - a file that numpy / safetensors cannot read
        raise TargetError(f"--data {path!r}: cannot read it ({type(e).__name__}: {e})") from None
    raise TargetError(f"--data {path!r}: give a .npy, .npz or .safetensors file")


def _batches(array: np.ndarray, size: int, dtype: str | None) -> Iterator[np.ndarray]:
    for i in range(0, len(array), size):
        batch = np.ascontiguousarray(array[i : i + size])
        yield batch.astype(dtype) if dtype else batch


class _Batches:
    def __init__(self, array: np.ndarray, size: int, dtype: str | None):
        self.array, self.size, self.dtype = array, size, dtype

    def __len__(self) -> int:
        return -(-len(self.array) // self.size)

    def __iter__(self) -> Iterator[np.ndarray]:
        return _batches(self.array, self.size, self.dtype)


class _RankBatches:
    """Rank ``rank``'s share of the samples, as ``DistributedSampler(shuffle=False)`` deals them
    (padded with the first samples to a multiple of ``world``); ``batch_sampler`` lists each batch's
    sample indices, which ``extract`` stores so the folder reads back in the file's order."""

    def __init__(self, array: np.ndarray, size: int, dtype: str | None, rank: int, world: int):
        n = len(array)
        padded = list(range(n)) + list(range(-(-n // world) * world - n))
        mine = padded[rank::world]
        self.array, self.dtype = array, dtype
        self.batch_sampler = [mine[i : i + size] for i in range(0, len(mine), size)]

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self) -> Iterator[np.ndarray]:
        for idx in self.batch_sampler:
            batch = np.ascontiguousarray(self.array[idx])
            yield batch.astype(self.dtype) if self.dtype else batch


def _forward_failure(e: Exception) -> str:
    """One line for an exception raised by the model on the data: where, what, and a hint."""
    where = next((n.removeprefix("hookkit.extract: ") for n in getattr(e, "__notes__", ()) if n.startswith("hookkit.extract")), "")
    text = " ".join(str(e).split())[:300]
    low = text.lower()
    if any(w in low for w in ("long", "int64", "integer", "scalar type")) and "float" in low:
        hint = "token ids must be integers: add --data-dtype int64"
    elif "index out of range" in low or "out of bounds" in low or "out of range" in low:
        hint = "a value is outside what the model takes: token ids below the vocabulary size, sequences no longer than its positions (--kw n_positions=...)"
    elif any(w in low for w in ("shape", "size mismatch", "mat1", "dimension")):
        hint = "the samples' shape does not fit the model: check the data file (samples along dim 0) and --kw"
    else:
        hint = "check --data, --data-dtype and --kw against what the model takes"
    return f"the model failed {where or 'on the data'}: {type(e).__name__}: {text} (hint: {hint})"


def run_cli(args: Any) -> int:
    if getattr(args, "nproc", 1) < 1:
        print(f"hookkit extract: error: --nproc must be >= 1; got {args.nproc}", file=sys.stderr)
        return 2
    if getattr(args, "nproc", 1) > 1:
        return _launch(args)
    return _extract(args, rank_world=None)


def _launch(args: Any) -> int:
    """``--nproc N``: N processes on this machine, each one rank of a gloo process group."""
    from hookkit.backends import backend_for

    try:
        model = load_model(args.target, parse_kw(args.kw), seed=args.seed, weights=args.weights)
    except (TargetError, HookkitError) as e:
        print(f"hookkit extract: error: {e}", file=sys.stderr)
        return 2
    codes = backend_for(model).launch(args.nproc, _rank_main, (args,))
    return max(codes) if codes else 0


def _rank_main(args: Any) -> int:
    from hookkit.backends import loaded_backends

    rank, world = next((b.world() for b in loaded_backends() if b.world()[1] > 1), (0, 1))
    return _extract(args, rank_world=(rank, world))


def _extract(args: Any, rank_world: tuple[int, int] | None) -> int:
    from hookkit.observers.extract import extract

    try:
        if args.batch_size < 1:
            raise TargetError(f"--batch-size must be >= 1; got {args.batch_size}")
        if args.data_dtype is not None:
            try:
                np.dtype(args.data_dtype)
            except TypeError:
                raise TargetError(f"--data-dtype {args.data_dtype!r} is not a numpy dtype") from None
        reduce: Any = None
        per_layer = {}
        for item in args.reduce:
            layer, eq, spec = item.rpartition("=")
            if eq:
                per_layer[layer] = spec
            elif reduce is not None or len(args.reduce) > 1:
                raise TargetError("--reduce: give one SPEC for all layers, or LAYER=SPEC items")
            else:
                reduce = spec
        reduce = per_layer or reduce
        array = _array(args.data, args.data_key)
        if array.ndim == 0:
            raise TargetError(f"--data {args.data!r} holds a scalar; samples go along dim 0")
        model = load_model(args.target, parse_kw(args.kw), seed=args.seed, weights=args.weights)
        if hasattr(model, "eval"):
            model.eval()
        batches = (
            _Batches(array, args.batch_size, args.data_dtype)
            if rank_world is None
            else _RankBatches(array, args.batch_size, args.data_dtype, *rank_world)
        )
        feats = extract(
            model,
            batches,
            args.layers,
            args.out,
            inputs=args.inputs,
            reduce=reduce,
            dtype=args.dtype,
            shard_size=args.shard_size,
            progress=args.progress,
        )
    except (TargetError, HookkitError) as e:
        print(f"hookkit extract: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - the model's forward failed: one line and a hint, not a traceback
        print(f"hookkit extract: error: {_forward_failure(e)}", file=sys.stderr)
        return 2
    if rank_world is None or rank_world[0] == 0:
        shapes = ", ".join(f"{k} {list(a.shape)} {a.dtype}" for k, a in feats.items())
        ranks = f" ({rank_world[1]} processes)" if rank_world else ""
        print(f"{feats.count} samples -> {args.out}{ranks}: {shapes}")
    return 0
