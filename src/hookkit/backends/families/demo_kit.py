"""``demo_kit``: what ``hookkit demo`` trains its small CNN with, in the model's framework. Only
``hookkit.apps.demo`` uses it."""

from __future__ import annotations

from typing import Any


def _missing(op: str) -> NotImplementedError:
    return NotImplementedError(f"demo_kit.{op} is not implemented for this framework: hookkit demo needs it")


class DemoKit:
    """The interface; each framework's ``demo_kit`` module subclasses it as ``OPS``."""

    def layer_types(self) -> dict[str, type]:
        """The framework's layer classes under PyTorch's names and signatures: ``Conv2d``,
        ``MaxPool2d``, ``ReLU``, ``Flatten``, ``Linear``."""
        raise _missing("layer_types")

    def seed(self, seed: int) -> None:
        """Seed the framework's random generator."""
        raise _missing("seed")

    def adam(self, parameters: Any, lr: float) -> Any:
        """An Adam optimizer over ``parameters``."""
        raise _missing("adam")

    def cross_entropy(self, logits: Any, labels: Any) -> Any:
        """The mean cross-entropy loss of ``logits`` [N, classes] for integer ``labels`` [N]."""
        raise _missing("cross_entropy")

    def clear_grads(self, optimizer: Any) -> None:
        """Reset the gradients of the parameters ``optimizer`` updates."""
        raise _missing("clear_grads")

    def cpu_session(self) -> Any:
        """A context manager running the framework on the CPU with one math thread (the fastest for
        a tiny model on a shared machine), restoring the settings on exit."""
        raise _missing("cpu_session")
