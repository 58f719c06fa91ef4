"""``amp``: what mixed-precision training's loss scaling looks like to a gradient hook. Under a
gradient scaler (``torch.amp.GradScaler``, ``paddle.amp.GradScaler``) the backward carries the
gradient multiplied by the scaler's current scale; a feature that compares gradients with a
threshold (``clip_grad(..., scaler=)``) reads that scale here, as a device tensor: no host sync."""

from __future__ import annotations

from typing import Any


class Amp:
    """The interface; each framework's ``amp`` module subclasses it as ``OPS``."""

    def is_scaler(self, obj: Any) -> bool:
        """Whether ``obj`` is this framework's gradient scaler."""
        return False

    def scale(self, scaler: Any) -> Any:
        """The loss scale the running backward was multiplied by: a float32 tensor on the scaler's
        device, read when called (it changes as the scaler updates), or None when scaling is off."""
        raise NotImplementedError("amp.scale is not implemented for this framework")
