"""Typed usage of hookkit's public API: `mypy` (CI) checks that these calls type-check with the
types a user expects, and tests/test_packaging.py runs the file, so it stays true.

A regression in the public types (a return type widened to Any where it was precise, a parameter
that no longer accepts a framework tensor or layer) fails the `mypy` step of .ci/run."""

from __future__ import annotations

import tempfile
from typing import TYPE_CHECKING

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
    assert_type(s.memory_plan(ranks=2, sharding="fsdp"), hookkit.MemoryPlan)  # issue 43

    with hookkit.ActivationStats(model) as acts:
        model(x)
    assert_type(acts, hookkit.ActivationStats)

    cnn = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 3)
    )
    maps = hookkit.gradcam(cnn, "0", torch.rand(2, 1, 6, 6))
    assert_type(maps, np.ndarray)

    cams = hookkit.cam(cnn, "0", torch.rand(2, 1, 6, 6), "gradcam")
    assert_type(cams, np.ndarray)
    assert cams.shape == (2, 6, 6)
    attr = hookkit.attribute(model, None, x, "saliency", target=0)
    assert tuple(attr.shape) == (4, 5)

    twin = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    twin.load_state_dict(model.state_dict())
    d = hookkit.diff(model, twin, x)
    assert_type(d, hookkit.Diff)

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with hookkit.WeightStats(model, optimizer=opt) as weights:
        model(x).sum().backward()
        opt.step()
    assert_type(weights, hookkit.WeightStats)

    with tempfile.TemporaryDirectory() as folder:
        feats = hookkit.extract(model, [x, x], "0", folder)
        assert_type(feats, hookkit.Features)
        assert feats["0"].shape == (8, 8)

    with hookkit.ablate(model, "1") as edits:
        model(x)
    assert_type(edits, hookkit.interventions.output_edits.Edits)

    sel = hookkit.select(model, ["0", "2"])
    assert_type(sel.names, list[str])
    assert_type(sel.layers, list[Layer])

    handle = hookkit.on_forward(model, "0", lambda ev: None)
    assert_type(handle, hookkit.HandleGroup)
    handle.remove()
    assert_type(hookkit.remove_all(model), int)
    assert_type(hookkit.__version__, str)
    g = hookkit.graph(model, x)  # hookkit.graph (issue 45)
    assert_type(g, hookkit.Graph)
    assert_type(g.edge_pairs(), list[tuple[str, str]])
    lens()


def lens() -> None:
    """logit_lens on a two-layer GPT-2 built from a config (random weights, no download)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=32, n_positions=16))
    result = hookkit.logit_lens(gpt, torch.randint(0, 32, (1, 5)), top_k=3)
    assert_type(result, hookkit.LensResult)
    ids, probs = result.top(3)
    assert_type(ids, np.ndarray)


if TYPE_CHECKING:  # never run: each line must fail the check, or its ignore is unused (warn_unused_ignores)
    hookkit.summary("not a model", (2, 5))  # type: ignore[arg-type]
    hookkit.capture(42)  # type: ignore[arg-type]
    hookkit.gradcam([1, 2], "0", torch.rand(1, 1, 6, 6))  # type: ignore[arg-type]


if __name__ == "__main__":
    run()
