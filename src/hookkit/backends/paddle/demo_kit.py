"""PaddlePaddle's ``demo_kit`` family (see ``hookkit.backends.families.demo_kit``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import paddle
import paddle.nn.functional as F
from paddle import nn

from hookkit.backends.families.demo_kit import DemoKit


class PaddleDemoKit(DemoKit):
    def layer_types(self) -> dict[str, type]:
        return {
            "Conv2d": nn.Conv2D,
            "MaxPool2d": nn.MaxPool2D,
            "ReLU": nn.ReLU,
            "Flatten": nn.Flatten,
            "Linear": nn.Linear,
        }

    def seed(self, seed: int) -> None:
        paddle.seed(seed)

    def adam(self, parameters: Any, lr: float) -> Any:
        return paddle.optimizer.Adam(learning_rate=lr, parameters=parameters)

    def cross_entropy(self, logits: Any, labels: Any) -> Any:
        return F.cross_entropy(logits, labels)

    def clear_grads(self, optimizer: Any) -> None:
        optimizer.clear_grad()

    @contextlib.contextmanager
    def cpu_session(self) -> Iterator[None]:
        device = paddle.get_device()
        paddle.set_device("cpu")
        try:
            yield
        finally:
            paddle.set_device(device)


OPS = PaddleDemoKit()
