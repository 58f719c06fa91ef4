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
        feats = extract(
            model,
            _Batches(array, args.batch_size, args.data_dtype),
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
    shapes = ", ".join(f"{k} {list(a.shape)} {a.dtype}" for k, a in feats.items())
    print(f"{feats.count} samples -> {args.out}: {shapes}")
    return 0
