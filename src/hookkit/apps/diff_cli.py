"""``hookkit diff A B --input-size 2,8 [--dtype long] [--backward] [--port] [--local] [--kw k=v] [--json]``:
build two models (``package.module:callable`` each), run ``hookkit.diff`` on random inputs, print
the table. Exit status as the ``diff`` tool's: 0 no divergence, 1 divergence, 2 error."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("diff", help="compare two models layer by layer and name the first layer where they diverge")
    p.add_argument("a", help="package.module:callable returning the reference model")
    p.add_argument("b", help="package.module:callable returning the model compared with it (either framework)")
    p.add_argument("--input-size", action="append", default=[], help="input shape like 2,3,32,32 (repeat for several inputs)")
    p.add_argument("--dtype", action="append", default=[], help="input dtype (float, long, ...), one per --input-size or one for all")
    p.add_argument("--backward", action="store_true", help="also compare output and parameter gradients of the sum of the output")
    p.add_argument("--port", action="store_true", help="copy a's weights into b first (hookkit.port_weights)")
    p.add_argument("--local", action="store_true", help="each layer's own error: b's layers run on a's inputs (diff(local=True))")
    p.add_argument("--kw", action="append", default=[], help="keyword for both callables, like n_layer=2 (repeatable)")
    p.add_argument("--rtol", type=float, default=None, help="relative tolerance (default: from the dtypes compared)")
    p.add_argument("--atol", type=float, default=None, help="absolute tolerance (default: from the dtypes compared)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default: 0)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def make_inputs(shapes: list[tuple[int, ...]], dtypes: list[str], seed: int) -> list[Any]:
    """Random inputs on the host: floats standard normal, integers 0 or 1 (valid token ids and masks)."""
    import numpy as np

    from hookkit.observers.summary.inputs import is_float

    rng = np.random.default_rng(seed)
    out = []
    for shape, dtype in zip(shapes, dtypes):
        if is_float(dtype):
            out.append(rng.standard_normal(shape).astype("float32" if dtype == "bfloat16" else dtype))
        else:
            out.append(rng.integers(0, 2, size=shape).astype(dtype))
    return out


def run_cli(args: argparse.Namespace) -> int:
    import hookkit
    from hookkit.apps.summary_cli import parse_shape
    from hookkit.apps.targets import TargetError, load_model, parse_kw
    from hookkit.core.errors import HookkitError
    from hookkit.observers.summary.inputs import input_dtypes

    try:
        kw = parse_kw(args.kw)
        shapes = [parse_shape(text) for text in args.input_size]
        if not shapes:
            raise TargetError("give the inputs' shapes with --input-size, like --input-size 2,3,32,32")
        try:
            dtypes = input_dtypes(shapes, list(args.dtype) or None)
        except ValueError as e:
            raise TargetError(str(e).replace("summary(): dtypes", "--dtype")) from None
        a = load_model(args.a, kw)
        b = load_model(args.b, kw)
        if args.port:
            hookkit.port_weights(a, b)
        inputs = make_inputs(shapes, dtypes, args.seed)
        d = hookkit.diff(a, b, tuple(inputs), backward=args.backward, rtol=args.rtol, atol=args.atol, local=args.local)
    except (TargetError, HookkitError) as e:
        return _error(e)
    except Exception as e:  # noqa: BLE001 - a model that fails on these inputs: one line, not a traceback
        return _error(f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}")
    if args.json:
        print(json.dumps(d.to_dict(), indent=2))
    else:
        d.print()
    if d.first is not None and not args.port and d.rows and d.first is d.rows[0]:
        print(
            "hookkit diff: hint: the models differ from their first layer on; built separately, their weights "
            "differ from the start: pass --port to copy a's weights into b first",
            file=sys.stderr,
        )
    return 1 if d.first is not None else 0


def _error(e: Any) -> int:
    text = " ".join(str(e).split())
    print(f"hookkit diff: error: {text}", file=sys.stderr)
    return 2
