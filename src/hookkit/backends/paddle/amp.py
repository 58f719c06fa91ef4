"""PaddlePaddle's gradient scaler (``paddle.amp.GradScaler``; disabled on the CPU, where it scales nothing)."""

from __future__ import annotations

from typing import Any

import paddle

from hookkit.backends.families.amp import Amp


class PaddleAmp(Amp):
    def is_scaler(self, obj: Any) -> bool:
        return isinstance(obj, paddle.amp.GradScaler)

    def scale(self, scaler: Any) -> Any:
        if not scaler.is_enable():
            return None
        s = getattr(scaler, "_scale", None)
        if isinstance(s, paddle.Tensor):
            return s.astype("float32")
        return paddle.to_tensor(float(scaler._init_loss_scaling), dtype="float32")


OPS = PaddleAmp()
