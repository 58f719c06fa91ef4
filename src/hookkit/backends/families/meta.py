"""``meta``: models whose weights hold no data (PyTorch's meta device, built under
``accelerate.init_empty_weights()`` or ``with torch.device("meta")``), and models placed by
accelerate (layers offloaded to the CPU or to disk, run through its hooks).

``dry_run`` prepares the summary's forward on fake tensors: every tensor without data is replaced,
for that forward only, by a fake one (shape, dtype, strides and device, no storage), so the real
forward runs and every column of the summary is filled without allocating weights or activations.
``dataless`` leaves out layers whose weights accelerate's offload hooks load at call time."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class DryRun:
    """One fake forward of a model without data: the inputs (fake), the fake parameters (each
    parameter once, tied ones shared), and ``call(*args, **kwargs)``, the model's forward on them."""

    args: tuple
    kwargs: dict
    params: list[Any]
    call: Callable[..., Any]
    device: str
    #: ``backward(loss)``: the backward of a loss of ``call``'s output on fake tensors; returns the ids
    #: of the model's parameters it reached (their fake counterparts got a gradient)
    backward: Callable[[Any], set[int]] = lambda loss: set()
    notes: list[str] = field(default_factory=list)


class Meta:
    """The interface; each framework's ``meta`` module subclasses it as ``OPS``."""

    #: whether ``dry_run`` can run a forward on tensors without data; ``why_not`` says what to do when not
    dry_runs = True
    why_not = ""

    def has_data(self, t: Any) -> bool:
        """False for a tensor that holds no data (on PyTorch's meta device, or a fake tensor)."""
        return True

    def dataless(self, model: Any) -> list[str]:
        """Dotted names of the parameters and buffers without data that no loading hook fills at
        call time (accelerate's offload hooks fill theirs): a forward cannot compute real values."""
        return []

    def dry_run(self, model: Any, args: tuple, kwargs: dict, device: Any) -> DryRun:
        """The fake forward of ``model`` on ``args``/``kwargs`` as if its tensors lived on ``device``
        (default: the CPU)."""
        raise NotImplementedError("meta.dry_run: this framework has no meta device (a model without data cannot be run)")

    def empty_like(self, t: Any) -> Any:
        """A tensor of ``t``'s shape and dtype on its device, without values (a meta gradient for a meta parameter)."""
        raise NotImplementedError("meta.empty_like is not implemented for this framework")

    def empty_init(self) -> Any:
        """A context manager under which the framework builds layers without allocating their weights."""
        raise NotImplementedError("meta.empty_init: this framework has no meta device")
