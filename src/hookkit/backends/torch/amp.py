"""PyTorch's gradient scaler (``torch.amp.GradScaler``, also the older ``torch.cuda.amp.GradScaler``)."""

from __future__ import annotations

from typing import Any

import torch

from hookkit.backends.families.amp import Amp


class TorchAmp(Amp):
    def is_scaler(self, obj: Any) -> bool:
        return isinstance(obj, torch.amp.GradScaler)

    def scale(self, scaler: Any) -> Any:
        if not scaler.is_enabled():
            return None
        s = getattr(scaler, "_scale", None)  # the device tensor get_scale() reads (with a sync)
        if isinstance(s, torch.Tensor):
            return s.float()
        return torch.tensor(float(scaler.get_scale()))  # not initialized yet, or another layout: read once


OPS = TorchAmp()
