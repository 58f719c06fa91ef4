"""``quantized``: parameters stored in another form than they compute in (torchao's ``Int8Tensor``,
optimum-quanto's ``WeightQBytesTensor`` / ``WeightQBitsTensor``: integer data and scales in a tensor
subclass that reports a float dtype). Their real size is the sum of the tensors inside; their
values, for statistics, are the dequantized ones."""

from __future__ import annotations

from typing import Any


class Quantized:
    """The interface; each framework's ``quantized`` module subclasses it as ``OPS``."""

    def nbytes(self, t: Any) -> int | None:
        """Bytes a parameter really holds when it is quantized (its inner tensors), else None."""
        return None

    def describe(self, t: Any) -> str | None:
        """``"Int8Tensor (int8 + float32 scale)"`` for a quantized parameter, else None."""
        return None

    def dequantize(self, t: Any) -> Any:
        """The parameter's values as a plain float tensor (itself when it is not quantized)."""
        return t
