"""PyTorch's ``demo_kit`` family (see ``hookkit.backends.families.demo_kit``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from hookkit.backends.families.demo_kit import DemoKit


class TorchDemoKit(DemoKit):
    def layer_types(self) -> dict[str, type]:
        return {**{name: getattr(nn, name) for name in ("Conv2d", "MaxPool2d", "ReLU", "Flatten", "Linear")}}

    def seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def adam(self, parameters: Any, lr: float) -> Any:
        return torch.optim.Adam(parameters, lr=lr)

    def cross_entropy(self, logits: Any, labels: Any) -> Any:
        return F.cross_entropy(logits, labels)

    def clear_grads(self, optimizer: Any) -> None:
        optimizer.zero_grad()

    @contextlib.contextmanager
    def cpu_session(self) -> Iterator[None]:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # several threads spin on a busy machine for a model this small
        try:
            yield
        finally:
            torch.set_num_threads(threads)


OPS = TorchDemoKit()
