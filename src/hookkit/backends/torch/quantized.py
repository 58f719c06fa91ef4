"""PyTorch's ``quantized`` family (see ``hookkit.backends.families.quantized``): tensor subclasses
that flatten into inner tensors (``__tensor_flatten__``, the protocol torchao and optimum-quanto
implement for ``torch.compile``)."""

from __future__ import annotations

from typing import Any

import torch

from hookkit.backends.families.quantized import Quantized


def _is_wrapper(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and type(t) not in (torch.Tensor, torch.nn.Parameter) and hasattr(t, "__tensor_flatten__")


def inner_tensors(t: Any, depth: int = 0) -> list[torch.Tensor]:
    """The plain tensors a tensor subclass holds (itself for a plain tensor)."""
    if not _is_wrapper(t) or depth > 4:
        return [t]
    names, _ = t.__tensor_flatten__()
    out: list[torch.Tensor] = []
    for name in names:
        inner = getattr(t, name, None)
        if isinstance(inner, torch.Tensor):
            out += inner_tensors(inner, depth + 1)
    return out


def storage_keys(t: Any) -> list[int]:
    """Data pointers of the storages ``t`` holds (a quantized parameter's inner tensors)."""
    keys = []
    for inner in inner_tensors(t):
        try:
            keys.append(inner.untyped_storage().data_ptr())
        except (RuntimeError, NotImplementedError, TypeError):
            continue
    return keys


class TorchQuantized(Quantized):
    def nbytes(self, t: Any) -> int | None:
        if not _is_wrapper(t):
            return None
        return sum(i.numel() * i.element_size() for i in inner_tensors(t))

    def describe(self, t: Any) -> str | None:
        if not _is_wrapper(t):
            return None
        dtypes = sorted({str(i.dtype).replace("torch.", "") for i in inner_tensors(t)})
        return f"{type(t).__name__} ({' + '.join(dtypes)})"

    def dequantize(self, t: Any) -> Any:
        if not _is_wrapper(t):
            return t
        deq = getattr(t, "dequantize", None)
        return deq() if callable(deq) else t.to(torch.float32)


OPS = TorchQuantized()
