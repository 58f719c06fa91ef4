"""The inputs of ``hookkit.diff``: taken to the host once (numpy is the bridge between frameworks),
then given to each model in its own framework, on its device, floats in its dtype."""

from __future__ import annotations

from typing import Any

import numpy as np

from hookkit.backends import backend_for
from hookkit.core.entry import entry_name
from hookkit.core.errors import UnsupportedModel
from hookkit.core.validate import ArgumentTypeError, fail

_PLAIN = (bool, int, float, str, type(None))
INPUTS = "a tensor (either framework) or numpy array, a tuple / list of them (positional inputs) or a dict (keyword inputs)"


def to_host(inputs: Any) -> tuple[list[Any], dict[str, Any]]:
    """``(args, kwargs)`` with every tensor replaced by a numpy copy of its values."""
    if isinstance(inputs, dict):
        args, kwargs = [], dict(inputs)
    elif isinstance(inputs, (tuple, list)):
        args, kwargs = list(inputs), {}
    else:
        args, kwargs = [inputs], {}
    if not args and not kwargs:
        fail(entry_name(), "inputs", INPUTS, inputs)
    return [_host(x, f"inputs[{i}]") for i, x in enumerate(args)], {k: _host(v, f"inputs[{k!r}]") for k, v in kwargs.items()}


def _host(x: Any, where: str) -> Any:
    if isinstance(x, np.ndarray):
        if x.dtype.kind not in "biufc":
            fail(
                entry_name(),
                where,
                "numeric values (bool, int, float, complex); numpy arrays of objects or strings cannot become tensors",
                x,
                kind=ArgumentTypeError,
            )
        return np.array(x, copy=True)
    if isinstance(x, _PLAIN):
        return x
    if isinstance(x, (tuple, list)):
        return type(x)(_host(v, f"{where}[{i}]") for i, v in enumerate(x))
    if isinstance(x, dict):
        return {k: _host(v, f"{where}[{k!r}]") for k, v in x.items()}
    try:
        be = backend_for(x)
    except UnsupportedModel:
        be = None
    if be is None or not be.is_tensor(x):
        fail(
            entry_name(),
            where,
            "a tensor of a framework hookkit knows, a numpy array, a number, or a tuple / list / dict of them",
            x,
            kind=ArgumentTypeError,
        )
    return np.array(be.to_numpy(x), copy=True)


def model_place(model: Any, be: Any) -> tuple[Any, str | None]:
    """``(a tensor of the model to place inputs like, its float dtype)``: its first parameter
    (or buffer), or ``(None, None)`` for a model without state."""
    like = None
    for p in be.parameters(model):
        if be.dtype_kind(p) == "float":
            return p, be.dtype_name(p)
        like = like if like is not None else p
    for _, t in be.forward_state(model):
        if be.dtype_kind(t) == "float":
            return t, be.dtype_name(t)
    return like, None


def to_model(args: list[Any], kwargs: dict[str, Any], be: Any, like: Any, float_dtype: str | None) -> tuple[list[Any], dict[str, Any]]:
    """The host inputs as tensors of ``be``'s framework, on ``like``'s device, floats cast to ``float_dtype``."""

    def conv(x: Any) -> Any:
        if isinstance(x, np.ndarray):
            t = be.from_numpy(np.ascontiguousarray(x).copy(), like=like)
            if float_dtype is not None and x.dtype.kind == "f" and be.dtype_name(t) != float_dtype:
                t = be.cast(t, float_dtype)
            return t
        if isinstance(x, (tuple, list)):
            return type(x)(conv(v) for v in x)
        if isinstance(x, dict):
            return {k: conv(v) for k, v in x.items()}
        return x

    return [conv(x) for x in args], {k: conv(v) for k, v in kwargs.items()}


def float_tensors(args: list[Any], kwargs: dict[str, Any], be: Any) -> list[Any]:
    """The floating-point tensors among converted inputs (top level and one level of nesting)."""
    found: list[Any] = []
    for x in [*args, *kwargs.values()]:
        for t in x if isinstance(x, (tuple, list)) else [x]:
            if be.is_tensor(t) and be.dtype_kind(t) == "float":
                found.append(t)
    return found
