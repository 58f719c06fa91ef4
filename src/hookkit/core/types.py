"""The types hookkit's public API speaks in, for users' type checkers.

hookkit works on the tensors and layers of several frameworks, so its signatures use structural
types: any ``torch.Tensor`` or ``paddle.Tensor`` is a ``Tensor``; any ``torch.nn.Module`` or
``paddle.nn.Layer`` is a ``Layer``. Functions that hand back what they were given use the TypeVars
(``capture(model)`` keeps ``model``'s own class for the checker).

>>> from hookkit.core.types import Layer, Tensor
>>> def norms(model: Layer, x: Tensor) -> None: ...   # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar


class Tensor(Protocol):
    """A framework tensor: ``torch.Tensor``, ``paddle.Tensor`` (or another registered backend's)."""

    @property
    def shape(self) -> Any: ...

    @property
    def dtype(self) -> Any: ...


class Layer(Protocol):
    """A framework layer or model: ``torch.nn.Module``, ``paddle.nn.Layer``."""

    training: bool

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...


LayerT = TypeVar("LayerT", bound=Layer)
TensorT = TypeVar("TensorT", bound=Tensor)

__all__ = ["Layer", "LayerT", "Tensor", "TensorT"]
