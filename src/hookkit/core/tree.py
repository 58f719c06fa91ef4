"""Map a function over the tensors of nested outputs (tuples, lists, dicts, dataclasses) keeping their types."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any


def map_tensors(obj: Any, fn: Callable[[Any], Any], is_tensor: Callable[[Any], bool]) -> Any:
    """Return ``obj`` with every tensor ``t`` inside replaced by ``fn(t)``; containers keep their type."""
    if is_tensor(obj):
        return fn(obj)
    if isinstance(obj, (str, bytes, int, float, bool)) or obj is None:
        return obj
    if isinstance(obj, tuple):
        items = [map_tensors(o, fn, is_tensor) for o in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    if isinstance(obj, list):
        return [map_tensors(o, fn, is_tensor) for o in obj]
    if isinstance(obj, dict):
        # Hugging Face ModelOutput is an OrderedDict dataclass: rebuild it from keywords.
        mapped = {k: map_tensors(v, fn, is_tensor) for k, v in obj.items()}
        if type(obj) is dict:
            return mapped
        try:
            return type(obj)(**mapped)
        except TypeError:
            out = type(obj)()
            out.update(mapped)
            return out
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: map_tensors(getattr(obj, f.name), fn, is_tensor) for f in dataclasses.fields(obj) if f.init}
        return dataclasses.replace(obj, **changes)
    return obj


def leaves(obj: Any, is_tensor: Callable[[Any], bool]) -> list[Any]:
    """The tensors inside ``obj``, depth first, in order."""
    found: list[Any] = []

    def visit(t: Any) -> Any:
        found.append(t)
        return t

    map_tensors(obj, visit, is_tensor)
    return found


def first_tensor(obj: Any, is_tensor: Callable[[Any], bool]) -> Any:
    """The first tensor inside ``obj``, or None."""
    if is_tensor(obj):
        return obj
    found = leaves(obj, is_tensor)
    return found[0] if found else None
