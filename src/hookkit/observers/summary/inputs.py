"""The summary's inputs: shapes and dtypes turned into tensors, or the user's tensors moved."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hookkit.backends import Backend, framework_of
from hookkit.core.entry import entry_name
from hookkit.core.validate import ArgumentTypeError, fail

DTYPE_ALIASES = {"long": "int64", "int": "int64", "float": "float32", "double": "float64", "half": "float16", "bool": "bool"}
DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")


def dtype_name(dtype: Any) -> str:
    """``"long"``, ``torch.int64``, ``paddle.int64`` or ``"int64"`` -> ``"int64"``."""
    fn = entry_name("summary")
    name = str(dtype).rpartition(".")[2].lower()
    name = DTYPE_ALIASES.get(name, name)
    if name not in DTYPES:
        fail(fn, "dtypes", f"dtype names among {', '.join(DTYPES)} (or long, int, float, double, half)", dtype)
    return name


def is_shape(obj: Any) -> bool:
    return isinstance(obj, (tuple, list)) and all(isinstance(s, int) and not isinstance(s, bool) for s in obj)


def is_float(name: str) -> bool:
    return name.startswith(("float", "bfloat"))


def _make_tensor(be: Backend, shape: Sequence[int], dtype: str, device: Any, seed: int) -> Any:
    if any(s <= 0 for s in shape):
        fail("summary", "input_size", "a shape whose every dimension is positive", tuple(shape))
    if is_float(dtype):
        array = np.random.default_rng(seed).standard_normal(tuple(shape)).astype("float32")
    else:  # index-like inputs (token ids, masks): zeros are valid for every vocabulary
        array = np.zeros(tuple(shape), dtype=dtype)
    t = be.from_numpy(array)
    if str(array.dtype) != dtype:  # float16, bfloat16, float64: numpy has no bfloat16
        t = be.cast(t, dtype)
    return be.to(t, device) if device is not None else t


def input_dtypes(shapes: list[tuple[int, ...]], dtypes: Any) -> list[str]:
    """One dtype name per input: ``dtypes`` is one for all or one per input (default float32)."""
    fn = entry_name("summary")
    if dtypes is None:
        return ["float32"] * len(shapes)
    seq = [dtypes] if isinstance(dtypes, str) or not isinstance(dtypes, (list, tuple)) else list(dtypes)
    if len(seq) == 1:
        seq = seq * len(shapes)
    if len(seq) != len(shapes):
        fail(fn, "dtypes", f"one dtype for all inputs or one per input ({len(shapes)})", dtypes)
    return [dtype_name(d) for d in seq]


def _given_inputs(be: Backend, input_data: Any, device: Any) -> tuple[tuple, dict, list[str]]:
    """``input_data`` as the forward's ``(args, kwargs)``, moved to ``device`` when given."""
    items = input_data.values() if isinstance(input_data, dict) else input_data if isinstance(input_data, (list, tuple)) else [input_data]
    for item in items:
        other = framework_of(item)
        if other and other != be.name:  # else the model fails with "expected a Tensor ... got Tensor"
            fail(
                "summary",
                "input_data",
                f"{be.name} tensors: the model is a {be.name} model and this is a {other} tensor "
                f"(convert it through numpy, or pass input_size= and let summary make the inputs)",
                item,
                kind=ArgumentTypeError,
            )
    move = (lambda t: be.to(t, device)) if device is not None else (lambda t: t)
    if be.is_tensor(input_data):
        return (move(input_data),), {}, []
    if isinstance(input_data, dict):
        return (), {k: move(v) if be.is_tensor(v) else v for k, v in input_data.items()}, []
    if isinstance(input_data, (list, tuple)):
        return tuple(move(v) if be.is_tensor(v) else v for v in input_data), {}, []
    fail("summary", "input_data", "a tensor, a list/tuple of tensors or a dict of keyword tensors", input_data, kind=ArgumentTypeError)


def build_inputs(model: Any, be: Backend, input_size: Any, input_data: Any, dtypes: Any, device: Any) -> tuple[tuple, dict, list[str]]:
    """``(args, kwargs, dtype names of the made inputs)`` for one forward of ``model``."""
    if input_size is not None and input_data is not None:
        fail("summary", "input_data", "None when input_size is given: give input_size or input_data, not both", input_data)
    if input_data is not None:
        return _given_inputs(be, input_data, device)
    if is_shape(input_size):
        keys, shapes = None, [tuple(input_size)]
    elif isinstance(input_size, dict) and input_size and all(is_shape(v) for v in input_size.values()):
        keys, shapes = list(input_size), [tuple(v) for v in input_size.values()]
    elif isinstance(input_size, (list, tuple)) and input_size and all(is_shape(s) for s in input_size):
        keys, shapes = None, [tuple(s) for s in input_size]
    else:
        fail(
            "summary",
            "input_size",
            "a shape like (1, 3, 224, 224), a list of shapes or a dict of shapes",
            input_size,
            kind=ArgumentTypeError,
        )
    names = input_dtypes(shapes, dtypes)
    if device is None:  # the first parameter holding data (a dispatched model's first may be offloaded)
        device = be.input_device(model)
    tensors = [_make_tensor(be, s, d, device, i) for i, (s, d) in enumerate(zip(shapes, names))]
    if keys is not None:
        return (), dict(zip(keys, tensors)), names
    return tuple(tensors), {}, names
