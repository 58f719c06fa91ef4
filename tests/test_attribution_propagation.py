"""hookkit.attribute's propagation methods (DeepLift, guided backprop, deconvolution, guided
Grad-CAM, GradientShap, DeepLiftShap, LRP): each against a hand computation on both frameworks
(DeepLift's completeness, LRP's conservation), equal to captum and zennit in float64 where they are
installed; nothing left attached, also when the forward raises."""

from __future__ import annotations

import numpy as np
import pytest

import hookkit
from models import hooks_left


def weights(fw, layer):
    w = fw.numpy(layer.weight).astype(np.float64)
    return (w if fw.name == "torch" else w.T), fw.numpy(layer.bias).astype(np.float64)


def relu_mlp(fw, sizes=(4, 6, 3)):
    fw.seed(0)
    return fw.sequential(fw.linear(sizes[0], sizes[1]), fw.relu(), fw.linear(sizes[1], sizes[2]))


def np_(fw, t):
    return fw.numpy(t).astype(np.float64)


def data(rng, n=3, d=4):
    return rng.normal(size=(n, d)).astype(np.float32), 0.5 * rng.normal(size=(n, d)).astype(np.float32)


# float32 sums of a few terms of order one
TOL = dict(rtol=1e-5, atol=1e-6)


# -- guided backprop, deconvolution: by hand -------------------------------------------------------
@pytest.mark.parametrize("method", ["guided_backprop", "deconvolution"])
def test_guided_backprop_and_deconvolution_by_hand(fw, rng, method):
    model = relu_mlp(fw)
    x, _ = data(rng)
    W1, b1 = weights(fw, model[0])
    W2, _ = weights(fw, model[2])
    z = x @ W1.T + b1
    g_out = np.tile(W2[2], (len(x), 1))  # the gradient at the ReLU's output
    g = np.maximum(g_out * (z > 0), 0) if method == "guided_backprop" else np.maximum(g_out, 0)
    got = hookkit.attribute(model, None, fw.tensor(x), method=method, target=2)
    np.testing.assert_allclose(np_(fw, got), g @ W1, **TOL)
    plain = hookkit.attribute(model, None, fw.tensor(x), method="gradient", target=2)
    assert not np.allclose(np_(fw, plain), g @ W1, **TOL)  # the modification did something
    assert hooks_left(model) == []


# -- DeepLift: by hand, completeness ----------------------------------------------------------------
def test_deeplift_rescale_by_hand_and_complete(fw, rng):
    model = relu_mlp(fw)
    x, b = data(rng)
    W1, b1 = weights(fw, model[0])
    W2, b2 = weights(fw, model[2])
    zx, zb = x.astype(np.float64) @ W1.T + b1, b.astype(np.float64) @ W1.T + b1
    m = (np.maximum(zx, 0) - np.maximum(zb, 0)) / (zx - zb)  # the Rescale multiplier of the ReLU
    want = ((W2[1] * m) @ W1) * (x - b)
    got, delta = hookkit.attribute(model, None, fw.tensor(x), method="deeplift", target=1, baselines=fw.tensor(b), return_delta=True)
    np.testing.assert_allclose(np_(fw, got), want, rtol=1e-4, atol=1e-6)
    f = lambda v: np.maximum(v @ W1.T + b1, 0) @ W2.T + b2  # noqa: E731
    np.testing.assert_allclose(np_(fw, got).sum(1), f(x)[:, 1] - f(b)[:, 1], rtol=1e-4, atol=1e-5)  # completeness
    assert np.abs(np_(fw, delta)).max() < 1e-4
    assert hooks_left(model) == []


def test_deeplift_completeness_deep_tanh_relu(fw, rng):
    fw.seed(1)
    model = fw.sequential(fw.linear(4, 8), fw.relu(), fw.linear(8, 8), fw.nn.Tanh(), fw.linear(8, 8), fw.nn.Sigmoid(), fw.linear(8, 2))
    x, b = data(rng, n=5)
    got, delta = hookkit.attribute(model, None, fw.tensor(x), method="deeplift", target=0, baselines=fw.tensor(b), return_delta=True)
    assert np.abs(np_(fw, delta)).max() < 1e-4 * max(1.0, np.abs(np_(fw, got)).sum(1).max())
    grad = hookkit.attribute(model, None, fw.tensor(x), method="gradient_x_activation", target=0)
    assert not np.allclose(np_(fw, got), np_(fw, grad) - 0, atol=1e-4)


# -- nothing left behind ----------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["deeplift", "guided_backprop", "deconvolution"])
def test_nothing_left_when_the_forward_raises(fw, rng, method):
    calls = {"n": 0}

    class Boom(fw.Layer):
        def forward(self, v):
            calls["n"] += 1
            if calls["n"] > 1:  # the probe passes, the modified pass raises
                raise RuntimeError("boom")
            return v

    fw.seed(0)
    model = fw.sequential(fw.linear(4, 6), fw.relu(), Boom(), fw.linear(6, 3))
    x, _ = data(rng)
    with pytest.raises(RuntimeError, match="boom"):
        hookkit.attribute(model, None, fw.tensor(x), method=method, target=0)
    assert hooks_left(model) == [] and model.training
    calls["n"] = -100
    out = hookkit.attribute(model, None, fw.tensor(x), method=method, target=0)  # and it works after
    assert fw.numpy(out).shape == x.shape


# -- equal to captum --------------------------------------------------------------------------------
def _captum_models():
    torch = pytest.importorskip("torch")
    nn = torch.nn
    torch.manual_seed(0)
    cnn = nn.Sequential(
        nn.Conv2d(2, 4, 3), nn.ReLU(), nn.Conv2d(4, 3, 3, padding=1), nn.ReLU(), nn.AvgPool2d(2),
        nn.Flatten(), nn.Linear(27, 5), nn.Tanh(), nn.Linear(5, 4),
    ).double().eval()  # fmt: skip
    mlp = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 8), nn.Sigmoid(), nn.Linear(8, 3)).double().eval()
    g = torch.Generator().manual_seed(1)
    return [
        (cnn, torch.randn(3, 2, 8, 8, generator=g, dtype=torch.float64), 0.1 * torch.randn(3, 2, 8, 8, generator=g, dtype=torch.float64)),
        (mlp, torch.randn(4, 6, generator=g, dtype=torch.float64), 0.1 * torch.randn(4, 6, generator=g, dtype=torch.float64)),
    ]


@pytest.mark.parametrize("method", ["deeplift", "guided_backprop", "deconvolution"])
def test_equal_to_captum(method):
    attr = pytest.importorskip("captum.attr")
    cls = {"deeplift": attr.DeepLift, "guided_backprop": attr.GuidedBackprop, "deconvolution": attr.Deconvolution}[method]
    for model, x, b in _captum_models():
        kw = {"baselines": b} if method == "deeplift" else {}
        with pytest.warns(UserWarning) if method == "deeplift" else _nothing():
            want = cls(model).attribute(x, target=1, **kw)
        got = hookkit.attribute(model, None, x, method=method, target=1, **kw)
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-6, atol=1e-12)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
