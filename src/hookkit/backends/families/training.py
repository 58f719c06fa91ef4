"""``training``: what the training-memory summary and ``WeightStats`` need from a framework:
autograd's saved-tensor hooks, storages, an optimizer's step and state, one real training step and
the allocator's peak while it runs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def _missing(op: str) -> NotImplementedError:
    return NotImplementedError(f"training.{op} is not implemented for this framework")


class Training:
    """The interface; each framework's ``training`` module subclasses it as ``OPS``."""

    def saving(self, on_save: Callable[[Any], None]) -> Any:
        """A context manager in which autograd calls ``on_save(tensor)`` for every tensor it saves for
        backward (the framework's saved-tensor hooks); the tensors are kept as they are."""
        raise _missing("saving")

    def storage(self, t: Any) -> tuple[int, int] | None:
        """``(key, bytes)`` of the memory block ``t`` views (a view and its base give one key), or
        None when ``t`` has no plain storage."""
        raise _missing("storage")

    def on_step(self, optimizer: Any, fn: Callable[[], None]) -> Any:
        """Call ``fn()`` after every ``step`` of ``optimizer``; returns a handle with ``remove()``."""
        raise _missing("on_step")

    def optimizer_parameters(self, optimizer: Any) -> list[Any]:
        """The parameters ``optimizer`` updates (each once)."""
        raise _missing("optimizer_parameters")

    def optimizer_state(self, optimizer: Any) -> dict[str, Any]:
        """The optimizer's attribute dictionary (``vars``), whose containers and tensors hold its state."""
        return vars(optimizer)

    def take_grad(self, p: Any) -> Any:
        """Detach ``p``'s gradient from it (``p`` has none afterwards) and return it (or None)."""
        raise _missing("take_grad")

    def put_grad(self, p: Any, grad: Any) -> None:
        """Make ``grad`` (a tensor ``take_grad`` returned, or None) ``p``'s gradient again."""
        raise _missing("put_grad")

    def backward(self, loss: Any) -> None:
        """Backpropagate the scalar ``loss`` into the parameters' gradients."""
        raise _missing("backward")

    def peak_bytes(self, fn: Callable[[], None], device: str) -> tuple[int, str]:
        """Run ``fn()`` and return ``(peak, how)``: the most bytes the framework's allocator had
        allocated on ``device`` at once while it ran, above what was allocated when it started, and
        how that was measured."""
        raise _missing("peak_bytes")

    def weight_rows(self, ws: Sequence[Any], prevs: Sequence[Any]) -> Any:
        """One row per tensor of ``ws``: ``[mean, sum of squared deviations from the mean, max |w|,
        ||w - prev||^2, ||prev||^2]``, as one float32 ``[len(ws), 5]`` tensor on their device (no host
        read); where ``prevs[i]`` is None, NaN in the last two."""
        raise _missing("weight_rows")

    def update_norms(self, ws: Sequence[Any], prevs: Sequence[Any]) -> Any:
        """``[||w - prev||^2, ||prev||^2]`` for each pair, as one float32 ``[len(ws), 2]`` tensor on their
        device (the CPU route of ``WeightStats``: the C kernel computes the rest)."""
        raise _missing("update_norms")

    def local(self, t: Any) -> Any:
        """This rank's shard of a sharded parameter (FSDP2's DTensor), a quantized parameter's
        dequantized values, else ``t`` itself."""
        return t

    def copy_all(self, dsts: Sequence[Any], srcs: Sequence[Any]) -> None:
        """Copy each ``srcs[i]``'s values into ``dsts[i]`` in place, outside autograd."""
        raise _missing("copy_all")

    def group_parameters(self, ts: Sequence[Any]) -> list[Any]:
        """``ts`` without duplicates (by identity), in order."""
        seen: dict[int, Any] = {}
        for t in ts:
            seen.setdefault(id(t), t)
        return list(seen.values())

    def layer_transient(self, layer: Any, input_shapes: Sequence[Sequence[int]], output_bytes: int) -> tuple[int, int] | None:
        """``(in its forward, in its backward)``: the most bytes one call of ``layer`` holds at once
        beyond what autograd saved (and, in the backward, beyond the parameters' gradients), where
        the framework runs a kernel of its own for it (recurrent layers); None where the generic
        rule holds (in the backward, the gradients of the call's outputs and inputs, alive
        together). ``input_shapes``: the call's input tensors' shapes, as the summary recorded
        them; ``output_bytes``: the bytes of its outputs (the size of their gradients)."""
        return None

    def is_optimizer(self, obj: Any) -> bool:
        """Whether ``obj`` is one of the framework's optimizers (or a library's wrapper holding one)."""
        raise _missing("is_optimizer")
