"""``hookkit summary TARGET --input-size 1,3,224,224 [--dtype long] [--depth N] [--kw k=v] [--json]
[--config FILE.json|JSON] [--meta] [--mode train] [--plan ranks=8,sharding=fsdp,...]``."""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any

from hookkit.apps.targets import TargetError, load_model, parse_kw, parse_value
from hookkit.observers.summary import DEFAULT_COLUMNS, summarize

_SHAPE = re.compile(r"^\s*\d+\s*(,\s*\d+\s*)*$")
PLAN_KEYS = ("ranks", "sharding", "checkpointing", "param_dtype", "grad_dtype", "master_weights", "optimizer")


def parse_shape(text: str) -> tuple[int, ...]:
    """``"1,3,224,224"`` -> ``(1, 3, 224, 224)``; anything else is an error saying what is valid."""
    if not _SHAPE.match(text):
        raise TargetError(f"--input-size {text!r} is not a shape: give positive integers separated by commas, like 1,3,224,224")
    shape = tuple(int(s) for s in text.split(","))
    if any(s <= 0 for s in shape):
        raise TargetError(f"--input-size {text!r}: every dimension must be positive, like 1,3,224,224")
    return shape


def parse_config(text: str | None) -> dict[str, Any] | None:
    """``--config``: inline JSON (an object) or the path of a JSON file holding one."""
    if text is None:
        return None
    if text.lstrip().startswith(("{", "[")):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise TargetError(f"--config: not valid JSON ({e.msg} at character {e.pos})") from None
    else:
        from hookkit.core.files import InvalidFile, read_json_file

        if not os.path.isfile(text):
            raise TargetError(f"--config {text!r}: no such file (give a config.json or an inline JSON object)")
        try:
            data = read_json_file(text, "a model config")
        except InvalidFile as e:
            raise TargetError(f"--config: {e}") from None
    if not isinstance(data, dict):
        raise TargetError(f"--config: a JSON object of config settings is needed, got {type(data).__name__}")
    return data


def parse_plan(text: str | None) -> dict[str, Any] | None:
    """``"ranks=8,sharding=fsdp"`` -> ``{"ranks": 8, "sharding": "fsdp"}``."""
    if text is None:
        return None
    plan: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = item.partition("=")
        if not eq or key.strip() not in PLAN_KEYS:
            raise TargetError(f"--plan: {item!r} is not key=value with a key among {', '.join(PLAN_KEYS)}")
        plan[key.strip()] = parse_value(value.strip())
    return plan


def run_cli(args: Any) -> int:
    try:
        kw = parse_kw(args.kw)
        config = parse_config(getattr(args, "config", None))
        plan = parse_plan(getattr(args, "plan", None))
        mode = "train" if plan is not None else getattr(args, "mode", "eval")
        shapes = [parse_shape(text) for text in args.input_size]
        dtypes = list(args.dtype) or None
        if dtypes is not None and not shapes:
            raise TargetError("--dtype needs an --input-size to apply to")
        if dtypes is not None and len(dtypes) not in (1, len(shapes)):
            raise TargetError(f"--dtype: got {len(dtypes)} for {len(shapes)} --input-size; give one for all or one per input")
        if args.depth < 0:
            raise TargetError(f"--depth must be >= 0; got {args.depth}")
        model = load_model(args.target, kw, meta=getattr(args, "meta", False), config=config)
        try:
            result, exc = summarize(
                model, shapes or None, None, depth=args.depth, columns=DEFAULT_COLUMNS, dtypes=dtypes, mode=mode, device=None
            )
            planned = result.memory_plan(**plan) if plan is not None and exc is None else None
        except (ValueError, TypeError) as e:
            text = str(e).replace("summary(): dtypes", "--dtype").replace("summary(): input_size", "--input-size")
            raise TargetError(text.replace("memory_plan(): ", "--plan ")) from None
    except TargetError as e:
        print(f"hookkit summary: error: {e}", file=sys.stderr)
        return 2
    if args.json:
        data = result.to_dict()
        if planned is not None:
            data["memory_plan"] = planned.to_dict()
        print(json.dumps(data, indent=2))
    else:
        result.print()
        if planned is not None:
            print(planned)
    if exc is not None:
        print(f"hookkit summary: error: {result.error}", file=sys.stderr)
        return 2
    return 0
