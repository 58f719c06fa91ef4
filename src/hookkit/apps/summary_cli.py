"""``hookkit summary TARGET --input-size 1,3,224,224 [--dtype long] [--depth N] [--kw k=v] [--json]``."""

from __future__ import annotations

import re
import sys
from typing import Any

from hookkit.apps.targets import TargetError, load_model, parse_kw
from hookkit.observers.summary import DEFAULT_COLUMNS, summarize

_SHAPE = re.compile(r"^\s*\d+\s*(,\s*\d+\s*)*$")


def parse_shape(text: str) -> tuple[int, ...]:
    """``"1,3,224,224"`` -> ``(1, 3, 224, 224)``; anything else is an error saying what is valid."""
    if not _SHAPE.match(text):
        raise TargetError(f"--input-size {text!r} is not a shape: give positive integers separated by commas, like 1,3,224,224")
    shape = tuple(int(s) for s in text.split(","))
    if any(s <= 0 for s in shape):
        raise TargetError(f"--input-size {text!r}: every dimension must be positive, like 1,3,224,224")
    return shape


def run_cli(args: Any) -> int:
    try:
        kw = parse_kw(args.kw)
        shapes = [parse_shape(text) for text in args.input_size]
        dtypes = list(args.dtype) or None
        if dtypes is not None and not shapes:
            raise TargetError("--dtype needs an --input-size to apply to")
        if dtypes is not None and len(dtypes) not in (1, len(shapes)):
            raise TargetError(f"--dtype: got {len(dtypes)} for {len(shapes)} --input-size; give one for all or one per input")
        if args.depth < 0:
            raise TargetError(f"--depth must be >= 0; got {args.depth}")
        model = load_model(args.target, kw)
        try:
            result, exc = summarize(
                model, shapes or None, None, depth=args.depth, columns=DEFAULT_COLUMNS, dtypes=dtypes, mode="eval", device=None
            )
        except (ValueError, TypeError) as e:
            raise TargetError(str(e).replace("summary(): dtypes", "--dtype").replace("summary(): input_size", "--input-size")) from None
    except TargetError as e:
        print(f"hookkit summary: error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(result.to_json())
    else:
        result.print()
    if exc is not None:
        print(f"hookkit summary: error: {result.error}", file=sys.stderr)
        return 2
    return 0
