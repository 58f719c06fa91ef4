"""The inputs an analysis runs the model on: a tensor (``model(x)``), a tuple (``model(*x)``) or a
dict of keyword arguments (``model(**x)``, masks included), and the few things analyses ask of them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hookkit.core.tree import leaves, map_tensors
from hookkit.core.validate import ArgumentTypeError, fail

INPUTS = "a tensor, a tuple of model arguments or a dict of keyword arguments"


def check_inputs(be: Any, inputs: Any, arg: str = "inputs") -> Any:
    if be.is_tensor(inputs) or (isinstance(inputs, (tuple, list, Mapping)) and leaves(inputs, be.is_tensor)):
        return inputs
    fail(None, arg, INPUTS, inputs, kind=ArgumentTypeError)


def call_model(model: Any, inputs: Any) -> Any:
    """``model(x)``, ``model(*x)`` or ``model(**x)``."""
    if isinstance(inputs, Mapping):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


def first_input(be: Any, inputs: Any) -> Any:
    """The tensor the batch and sequence sizes are read from (``input_ids`` first in a dict)."""
    if isinstance(inputs, Mapping):
        for key in ("input_ids", "inputs_embeds", "pixel_values", "x"):
            if be.is_tensor(inputs.get(key)):
                return inputs[key]
    return leaves(inputs, be.is_tensor)[0]


def batch_size(be: Any, inputs: Any) -> int:
    return int(be.shape(first_input(be, inputs))[0])


def tile_inputs(be: Any, inputs: Any, n: int) -> Any:
    """Every tensor of ``inputs`` (``[N, ...]``) stacked ``n`` times along dim 0: ``[n * N, ...]``,
    copy ``j`` in rows ``j * N .. (j + 1) * N - 1``."""
    if n == 1:
        return inputs
    m = be.family("tensor_math")
    return map_tensors(inputs, lambda t: m.tile_rows(t, n) if len(be.shape(t)) else t, be.is_tensor)
