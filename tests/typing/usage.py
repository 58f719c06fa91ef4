"""Typed usage of hookkit's public API: `mypy` (CI) checks that these calls type-check with the
types a user expects, and tests/test_packaging.py runs the file, so it stays true.

A regression in the public types (a return type widened to Any where it was precise, a parameter
that no longer accepts a framework tensor or layer) fails the `mypy` step of .ci/run."""

from __future__ import annotations

import numpy as np
import torch
from typing_extensions import assert_type

import hookkit
from hookkit.core.types import Layer, Tensor


def run() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    x = torch.randn(4, 5)

    layer: Layer = model  # a torch.nn.Module is a hookkit Layer
    tensor: Tensor = x  # a torch.Tensor is a hookkit Tensor
    assert layer is model and tensor is x

    with hookkit.capture(model, ["0", "2"]) as cap:
        model(x)
    assert_type(cap, hookkit.capture)
    assert_type(cap.names, list[str])
    assert_type(cap.records(), list[hookkit.Record])

    s = hookkit.summary(model, (2, 5))
    assert_type(s, hookkit.Summary)
    assert_type(s.total_params, int)

    with hookkit.ActivationStats(model) as acts:
        model(x)
    assert_type(acts, hookkit.ActivationStats)

    cnn = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 3))
    maps = hookkit.gradcam(cnn, "0", torch.rand(2, 1, 6, 6))
    assert_type(maps, np.ndarray)

    handle = hookkit.on_forward(model, "0", lambda ev: None)
    assert_type(handle, hookkit.HandleGroup)
    handle.remove()
    assert_type(hookkit.remove_all(model), int)
    assert_type(hookkit.__version__, str)


if __name__ == "__main__":
    run()
