"""Quantized weights on the CPU (torchao int8 weight-only and dynamic int8, optimum-quanto int8 and int4):
capture, statistics, edits, summary (real bytes, quantized types named), cam, attribute, WeightStats,
checked against a float model holding the dequantized weights (the hand computation)."""

from __future__ import annotations

import numpy as np
import pytest

import hookkit
from models import hooks_left
from tolerance import assert_close, sum_ops

torch = pytest.importorskip("torch")

KINDS = ["torchao-int8-weight-only", "torchao-int8-dynamic", "quanto-int8", "quanto-int4"]
TYPE_NAMES = {
    "torchao-int8-weight-only": "Int8Tensor",
    "torchao-int8-dynamic": "Int8Tensor",
    "quanto-int8": "WeightQBytesTensor",
    "quanto-int4": "WeightQBitsTensor",
}


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 16)).eval()


def quantized(kind, model):
    if kind.startswith("torchao"):
        pytest.importorskip("torchao")
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig, Int8WeightOnlyConfig, quantize_

        quantize_(model, Int8WeightOnlyConfig() if kind.endswith("weight-only") else Int8DynamicActivationInt8WeightConfig())
    else:
        pytest.importorskip("optimum.quanto")
        from optimum.quanto import freeze, qint4, qint8, quantize

        quantize(model, weights=qint8 if kind.endswith("int8") else qint4)
        freeze(model)
    assert type(model[0].weight).__name__ == TYPE_NAMES[kind]
    return model


def dequantized_copy(model):
    """The hand reference: a float model whose weights are the quantized model's dequantized ones."""
    ref = mlp()
    with torch.no_grad():
        for i in (0, 2):
            ref[i].weight.copy_(model[i].weight.dequantize())
            ref[i].bias.copy_(model[i].bias)
    return ref


@pytest.fixture(params=KINDS)
def case(request):
    return request.param, quantized(request.param, mlp())


X = torch.randn(8, 64, generator=torch.Generator().manual_seed(1))


def test_capture_statistics_and_edits(case):
    kind, model = case
    ref = dequantized_copy(model)
    with hookkit.capture(model, ["0", "2"]) as cap, hookkit.ActivationStats(model, ["0"], train_only=False) as stats:
        out = model(X)
    assert torch.equal(cap["2"], out)
    h = ref[0](X)
    # weight-only int8/int4: x @ dequant(W).T computed by another kernel (sums reordered); dynamic int8 also
    # rounds the activations to int8 (about 1/127 of their range per row), so its tolerance is that step
    tol = 2e-2 * float(X.abs().max()) if kind.endswith("dynamic") else 1e-4
    np.testing.assert_allclose(cap["0"].detach().numpy(), h.detach().numpy(), atol=tol, rtol=0)
    h0 = cap["0"].detach().numpy()  # two float32 means in other orders, of values of both signs: their size
    assert_close(
        stats.layer_stats("0")["mean"][0],
        float(cap["0"].mean()),
        dtype="float32",
        n_ops=sum_ops(h0.size) + 1,
        scale=float(np.abs(h0).max()),
    )

    v = torch.linspace(-1, 1, 128)
    with hookkit.steer(model, "0", v, scale=2.0), hookkit.capture(model, "0") as steered:
        edited = model(X)
    torch.testing.assert_close(steered["0"], cap["0"] + 2.0 * v)
    torch.testing.assert_close(edited, model[2](torch.relu(steered["0"])))
    with hookkit.ablate(model, "0"):
        torch.testing.assert_close(model(X), model[2](torch.zeros(8, 128)))
    assert not hooks_left(model)
    torch.testing.assert_close(model(X), out)


def test_summary_counts_the_real_bytes_and_names_the_types(case):
    kind, model = case
    s = hookkit.summary(model, (8, 64))
    dense = hookkit.summary(mlp(), (8, 64))
    assert s.total_params == dense.total_params == 64 * 128 + 128 + 128 * 16 + 16
    assert s.total_mult_adds == dense.total_mult_adds == 8 * (64 * 128 + 128 * 16)  # the int8 kernels counted too
    biases = (128 + 16) * 4
    weights = 64 * 128 + 128 * 16
    per_weight = (s.param_bytes - biases) / weights
    # int8: one byte per weight plus float32 scales per output row (1 + 4/64 at most here); int4: half a
    # byte plus the group scales and shifts
    assert (1.0 <= per_weight < 1.1) if "int8" in kind else (0.5 <= per_weight < 0.7)
    assert dense.param_bytes == 4 * s.total_params
    note = next(n for n in s.notes if n.startswith("quantized:"))
    assert f"2 parameters are {TYPE_NAMES[kind]}" in note and ("int8" in note or "uint8" in note)


@pytest.mark.parametrize("kind", ["torchao-int8-weight-only", "quanto-int8", "quanto-int4"])
def test_attribute_and_cam_through_quantized_layers(kind):
    model = quantized(kind, mlp())
    ref = dequantized_copy(model)
    a = hookkit.attribute(model, "0", X, target=3, n_steps=16)
    b = hookkit.attribute(ref, "0", X, target=3, n_steps=16)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-4, rtol=1e-3)

    torch.manual_seed(0)
    conv = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), mlp_head()
    ).eval()
    images = torch.randn(2, 3, 10, 10, generator=torch.Generator().manual_seed(2))
    dense_maps = hookkit.cam(conv, "0", images, target=1)
    head = conv[4]
    quantized(kind, head)
    maps = hookkit.cam(conv, "0", images, target=1)
    assert np.asarray(maps).shape == (2, 10, 10)
    # the head's weights moved by at most one quantization step: the maps stay close to the float model's
    assert np.corrcoef(np.asarray(maps).ravel(), np.asarray(dense_maps).ravel())[0, 1] > 0.9


def mlp_head():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.ReLU(), torch.nn.Linear(64, 5))


def test_dynamic_int8_blocks_gradients_and_attribute_says_so():
    model = quantized("torchao-int8-dynamic", mlp())
    with pytest.raises(ValueError, match="does not depend on layer '0'"):
        hookkit.attribute(model, "0", X, target=3, n_steps=4)


def test_weight_stats_read_the_dequantized_values():
    model = quantized("quanto-int8", mlp())
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(trainable, lr=0.0)
    with hookkit.WeightStats(model, optimizer=opt) as ws:
        model(X).sum().backward()
        opt.step()
    w = model[0].weight.dequantize()
    stats = ws.param_stats("0.weight")
    np.testing.assert_allclose(stats["mean"][0], float(w.mean()), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(stats["max_abs"][0], float(w.abs().max()), rtol=1e-6)
