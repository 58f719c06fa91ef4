"""hookkit.attribute's propagation methods (DeepLift, guided backprop, deconvolution, guided
Grad-CAM, GradientShap, DeepLiftShap, LRP): each against a hand computation on both frameworks
(DeepLift's completeness, LRP's conservation), equal to captum and zennit in float64 where they are
installed; nothing left attached, also when the forward raises."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

import numpy as np
import pytest

import hookkit
from hookkit.core.errors import HookkitError
from models import hooks_left
from tolerance import assert_close


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
    # the (exact) gradient W2[2] masked, then a 6-term dot with W1: its terms' size is |g| @ |W1|
    assert_close(np_(fw, got), g @ W1, dtype="float32", n_ops=8, scale=float((np.abs(g) @ np.abs(W1)).max()))
    plain = hookkit.attribute(model, None, fw.tensor(x), method="gradient", target=2)
    assert not np.allclose(np_(fw, plain), g @ W1, atol=1e-3)  # the modification did something
    assert hooks_left(model) == []


# -- DeepLift: by hand, completeness ----------------------------------------------------------------
@pytest.mark.parametrize("inplace", [False, True])
def test_deeplift_rescale_by_hand_and_complete(fw, rng, inplace):
    model = relu_mlp(fw)
    if inplace:  # ReLU(inplace=True) overwrites its input: the rule needs the input as it was
        model[1] = fw.relu(inplace=True)
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
@pytest.mark.parametrize("method", ["deeplift", "guided_backprop", "deconvolution", "lrp"])
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
    kw = {"rules": {"Boom": "pass"}} if method == "lrp" else {}
    with pytest.raises(RuntimeError, match="boom"):
        hookkit.attribute(model, None, fw.tensor(x), method=method, target=0, **kw)
    assert hooks_left(model) == [] and model.training
    calls["n"] = -100
    out = hookkit.attribute(model, None, fw.tensor(x), method=method, target=0, **kw)  # and it works after
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


# -- LRP: by hand ----------------------------------------------------------------------------------
def bias_free_mlp(torch_fw, sizes=(5, 7, 6, 3)):
    torch_fw.seed(0)
    nn, layers = torch_fw.nn, []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b, bias=False), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def test_lrp_epsilon_conserves_on_a_bias_free_relu_mlp(torch_fw, rng):
    model = bias_free_mlp(torch_fw)
    x = rng.normal(size=(4, 5)).astype(np.float32)
    attr = np_(torch_fw, hookkit.attribute(model, None, torch_fw.tensor(x), method="lrp", target=2))
    out = np_(torch_fw, model(torch_fw.tensor(x)))[:, 2]
    # epsilon 1e-9 (captum's default) over outputs of order 0.1: float32 round-off dominates
    # a forward (dots of 5, 7 and 6 terms), the relevance's way back (the same dots, a division a layer)
    # and the sum over the inputs: 64 roundings at most, of terms the size of the relevances
    lrp_ops = 64
    assert_close(attr.sum(1), out, dtype="float32", n_ops=lrp_ops, scale=float(max(np.abs(attr).max(), np.abs(out).max())))
    # on a bias-free ReLU network LRP-0 is gradient x input
    gxi = np_(torch_fw, hookkit.attribute(model, None, torch_fw.tensor(x), method="gradient_x_activation", target=2))
    np.testing.assert_allclose(attr, gxi, rtol=1e-4, atol=1e-6)
    # at every layer, its output and its input: the same total relevance
    for layer in ("0", "1", "2", "3", "4"):
        for where in ("output", "input"):
            at = np_(torch_fw, hookkit.attribute(model, layer, torch_fw.tensor(x), method="lrp", target=2, attribute_to=where))
            scale = float(max(np.abs(at).max(), np.abs(out).max()))
            assert_close(at.sum(1), out, dtype="float32", n_ops=lrp_ops, scale=scale, err_msg=f"{layer} {where}")
    assert hooks_left(model) == []


@pytest.mark.parametrize("rule", ["zplus", "epsilon", "alpha_beta"])
def test_lrp_rules_of_one_linear_layer_by_hand(torch_fw, rng, rule):
    torch_fw.seed(0)
    model = torch_fw.sequential(torch_fw.linear(5, 3))
    x = rng.normal(size=(4, 5)).astype(np.float32)
    W, b = weights(torch_fw, model[0])
    t, xd = 1, x.astype(np.float64)
    z = xd @ W[t] + b[t]  # the target's score: the relevance to share
    stab = lambda v, e: v + e * np.where(v == 0, 1.0, np.sign(v))  # noqa: E731
    xp, xn, wp, wn = np.maximum(xd, 0), np.minimum(xd, 0), np.maximum(W[t], 0), np.minimum(W[t], 0)
    if rule == "epsilon":
        want = xd * W[t] / stab(z, 1e-6)[:, None]
    elif rule == "zplus":
        want = (xp * wp + xn * wn) / stab((xp * wp + xn * wn).sum(1) + max(b[t], 0), 1e-6)[:, None]
    else:  # alpha 2, beta 1
        pos = (xp * wp + xn * wn) / stab((xp * wp + xn * wn).sum(1) + max(b[t], 0), 1e-6)[:, None]
        neg = (xp * wn + xn * wp) / stab((xp * wn + xn * wp).sum(1) + min(b[t], 0), 1e-6)[:, None]
        want = 2 * pos - neg
    got = hookkit.attribute(model, None, torch_fw.tensor(x), method="lrp", target=t, rules={"Linear": rule})
    np.testing.assert_allclose(np_(torch_fw, got), want * z[:, None], rtol=1e-4, atol=1e-6)


def test_lrp_refuses_a_layer_type_without_a_rule(torch_fw, rng):
    class Scale(torch_fw.Layer):
        def forward(self, v):
            return 2 * v

    torch_fw.seed(0)
    model = torch_fw.sequential(torch_fw.linear(4, 6), Scale(), torch_fw.linear(6, 3))
    x = torch_fw.tensor(rng.normal(size=(2, 4)))
    with pytest.raises(HookkitError, match=r"attribute\(\): layer '1' of type Scale has no LRP rule.*rules=\{'Scale'"):
        hookkit.attribute(model, None, x, method="lrp", target=0)
    assert hooks_left(model) == []
    by_type = hookkit.attribute(model, None, x, method="lrp", target=0, rules={"Scale": "pass"})
    by_name = hookkit.attribute(model, None, x, method="lrp", target=0, rules={"1": "pass"})
    np.testing.assert_array_equal(torch_fw.numpy(by_type), torch_fw.numpy(by_name))
    with pytest.raises(HookkitError, match="rules.*a rule named one of 'epsilon'"):
        hookkit.attribute(model, None, x, method="lrp", target=0, rules={"Scale": "pass", "Linear": "epsilonn"})
    with pytest.raises(HookkitError, match="modifies weights.*layer '1' is a Scale"):
        hookkit.attribute(model, None, x, method="lrp", target=0, rules={"Scale": "zplus"})
    with pytest.raises(HookkitError, match="composite.*low"):
        hookkit.attribute(model, None, x, method="lrp", target=0, composite="EpsilonGammaBox", rules={"Scale": "pass"})
    with pytest.raises(HookkitError, match="composite"):
        hookkit.attribute(model, None, x, method="lrp", target=0, composite="epsilon_plus")
    with pytest.raises(HookkitError, match=r"rules.*None for method='deeplift'"):
        hookkit.attribute(model, None, x, method="deeplift", target=0, rules={"Scale": "pass"})
    assert hooks_left(model) == []


def _twin_cnns(torch_fw, paddle_fw):
    tnn, pnn = torch_fw.nn, paddle_fw.nn
    torch_fw.seed(0)
    tm = tnn.Sequential(
        tnn.Conv2d(2, 4, 3), tnn.ReLU(), tnn.Conv2d(4, 3, 3, padding=1), tnn.ReLU(), tnn.AvgPool2d(2),
        tnn.Flatten(), tnn.Linear(27, 5), tnn.ReLU(), tnn.Linear(5, 4),
    )  # fmt: skip
    pm = pnn.Sequential(
        pnn.Conv2D(2, 4, 3), pnn.ReLU(), pnn.Conv2D(4, 3, 3, padding=1), pnn.ReLU(), pnn.AvgPool2D(2),
        pnn.Flatten(), pnn.Linear(27, 5), pnn.ReLU(), pnn.Linear(5, 4),
    )  # fmt: skip
    for i in (0, 2, 6, 8):
        w = torch_fw.numpy(tm[i].weight)
        pm[i].weight.set_value(w if i < 6 else w.T)
        pm[i].bias.set_value(torch_fw.numpy(tm[i].bias))
    return tm, pm


LRP_CASES = [
    (None, {}),
    (None, {"composite": "EpsilonPlusFlat"}),
    (None, {"composite": ("EpsilonGammaBox", {"low": -3.0, "high": 3.0})}),
    (None, {"rules": {"Linear": "alpha_beta", "Conv2d": "gamma", "Conv2D": "gamma"}}),
    ("2", {}),
    ("6", {"attribute_to": "input"}),
]


def test_lrp_paddle_equal_to_torch(torch_fw, paddle_fw, rng):
    """Paddle cannot take a gradient inside a PyLayer's backward: there each rule is built into the
    layer's output in the forward (its gradient is the rule's relevance); the same numbers."""
    tm, pm = _twin_cnns(torch_fw, paddle_fw)
    x = rng.normal(size=(3, 2, 8, 8)).astype(np.float32)
    for layer, kw in LRP_CASES:
        t = torch_fw.numpy(hookkit.attribute(tm, layer, torch_fw.tensor(x), method="lrp", target=1, **kw))
        p = paddle_fw.numpy(hookkit.attribute(pm, layer, paddle_fw.tensor(x), method="lrp", target=1, **kw))
        # float32, stabilizers 1e-6 over outputs of order 0.1: relative differences of order 1e-5
        np.testing.assert_allclose(p, t, rtol=1e-4, atol=1e-4 * np.abs(t).max(), err_msg=f"{layer} {kw}")
    assert hooks_left(pm) == []


def test_lrp_both_mechanisms_agree(torch_fw, paddle_fw, rng, monkeypatch):
    """The backward rules (PyTorch) and the rules built into the forward (Paddle's way) on one model."""
    from hookkit.backends.torch.propagation import TorchPropagationOps

    tm, _ = _twin_cnns(torch_fw, paddle_fw)
    x = torch_fw.tensor(rng.normal(size=(3, 2, 8, 8)))
    backward = [torch_fw.numpy(hookkit.attribute(tm, layer, x, method="lrp", target=1, **kw)) for layer, kw in LRP_CASES]
    monkeypatch.setattr(TorchPropagationOps, "grad_in_backward", False)
    for (layer, kw), want in zip(LRP_CASES, backward):
        got = torch_fw.numpy(hookkit.attribute(tm, layer, x, method="lrp", target=1, **kw))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max(), err_msg=f"{layer} {kw}")
    assert hooks_left(tm) == []


# -- LRP: equal to zennit and captum ---------------------------------------------------------------
def _zennit():
    pytest.importorskip("torch")
    if importlib.util.find_spec("zennit") is None:
        pytest.skip("zennit is not installed")
    if "zennit" not in sys.modules:  # zennit imports torchvision's ResNet blocks at import time; only the names are needed
        torch = sys.modules["torch"]
        stub = {n: types.ModuleType(n) for n in ("torchvision", "torchvision.models", "torchvision.models.resnet")}
        stub["torchvision.models.resnet"].Bottleneck = type("Bottleneck", (torch.nn.Module,), {})
        stub["torchvision.models.resnet"].BasicBlock = type("BasicBlock", (torch.nn.Module,), {})
        added = [n for n in stub if n not in sys.modules]
        sys.modules.update({n: stub[n] for n in added})
        try:
            importlib.import_module("zennit")
        finally:  # the stub must not outlive the import: transformers looks torchvision up too
            for n in added:
                sys.modules.pop(n, None)
    return sys.modules["zennit"]


def _lrp_models():
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class CNN(nn.Module):  # flattening in forward: captum's LRP has no rule for nn.Flatten
        def __init__(self):
            super().__init__()
            self.c1, self.r1, self.c2, self.r2 = nn.Conv2d(2, 4, 3), nn.ReLU(), nn.Conv2d(4, 3, 3, padding=1), nn.ReLU()
            self.pool, self.l1, self.r3, self.l2 = nn.AvgPool2d(2), nn.Linear(27, 5), nn.ReLU(), nn.Linear(5, 4)

        def forward(self, x):
            h = self.pool(self.r2(self.c2(self.r1(self.c1(x)))))
            return self.l2(self.r3(self.l1(h.flatten(1))))

    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3)).double().eval()
    g = torch.Generator().manual_seed(1)
    return [
        (CNN().double().eval(), torch.randn(3, 2, 8, 8, generator=g, dtype=torch.float64)),
        (mlp, torch.randn(4, 6, generator=g, dtype=torch.float64)),
    ]


def test_lrp_equal_to_zennit_composites():
    _zennit()
    import zennit.attribution
    import zennit.composites
    import zennit.rules
    import zennit.types

    torch = sys.modules["torch"]
    layer_map = [
        (zennit.types.Activation, zennit.rules.Pass()),
        (zennit.types.AvgPool, zennit.rules.Norm()),
        (torch.nn.Conv2d, zennit.rules.Gamma(gamma=0.5)),
        (torch.nn.Linear, zennit.rules.AlphaBeta(alpha=2.0, beta=1.0)),
    ]
    cases = [
        (zennit.composites.EpsilonPlusFlat(), {"composite": "EpsilonPlusFlat"}),
        (zennit.composites.EpsilonGammaBox(low=-3.0, high=3.0), {"composite": ("epsilon_gamma_box", {"low": -3.0, "high": 3.0})}),
        (
            zennit.composites.LayerMapComposite(layer_map),
            {"rules": {"Conv2d": ("gamma", {"gamma": 0.5}), "Linear": "alpha_beta", "AvgPool2d": "norm"}},
        ),
    ]
    for model, x in _lrp_models():
        out = model(x).detach()
        seed = torch.zeros_like(out)
        seed[:, 1] = out[:, 1]
        for composite, kw in cases:
            with zennit.attribution.Gradient(model, composite) as attributor:
                _, want = attributor(x.clone().requires_grad_(), seed)
            got = hookkit.attribute(model, None, x, method="lrp", target=1, **kw)
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-12 * float(abs(want).max()))
            assert hooks_left(model) == []


def test_lrp_equal_to_captum_defaults():
    attr = pytest.importorskip("captum.attr")
    for model, x in _lrp_models():
        want = attr.LRP(model).attribute(x, target=1)
        got = hookkit.attribute(model, None, x, method="lrp", target=1)
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-6, atol=1e-15)
    model, x = _lrp_models()[0]
    for name in ("c1", "c2", "pool", "l1", "l2"):  # captum's LayerLRP fails on activation layers (no rule object)
        for to in (False, True):
            want = attr.LayerLRP(model, getattr(model, name)).attribute(x, target=1, attribute_to_layer_input=to)
            got = hookkit.attribute(model, name, x, method="lrp", target=1, attribute_to="input" if to else "output")
            np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-6, atol=1e-15)


# -- guided Grad-CAM, DeepLiftShap, GradientShap ---------------------------------------------------
def pooled_cnn(fw):
    fw.seed(0)
    avg = fw.nn.AvgPool2d(2) if fw.name == "torch" else fw.nn.AvgPool2D(2)
    return fw.sequential(
        fw.conv2d(2, 4, 3, padding=1), fw.relu(), avg, fw.conv2d(4, 3, 3, padding=1), fw.relu(), fw.flatten(), fw.linear(48, 4)
    )


def test_guided_gradcam_is_guided_backprop_times_upsampled_gradcam(fw, rng):
    model = pooled_cnn(fw)
    x = fw.tensor(rng.normal(size=(2, 2, 8, 8)))
    got = np_(fw, hookkit.attribute(model, "4", x, method="guided_gradcam", target=3))
    grad = np_(fw, hookkit.attribute(model, "4", x, method="gradient", target=3))  # [2, 3, 4, 4]
    act = np_(fw, hookkit.attribute(model, "4", x, method="activation", target=3))
    cam = np.maximum((grad.mean((2, 3), keepdims=True) * act).sum(1, keepdims=True), 0)
    up = cam.repeat(2, axis=2).repeat(2, axis=3)  # nearest, 4x4 -> 8x8
    gb = np_(fw, hookkit.attribute(model, None, x, method="guided_backprop", target=3))
    np.testing.assert_allclose(got, gb * up, rtol=1e-5, atol=1e-9)
    assert np.abs(got).max() > 0 and hooks_left(model) == []
    with pytest.raises(HookkitError, match=r"layer.*\[N, C, \*spatial\].*'6'"):
        hookkit.attribute(model, "6", x, method="guided_gradcam", target=3)
    assert hooks_left(model) == []


def test_deeplift_shap_is_the_mean_of_deeplift_over_baselines(fw, rng):
    model = relu_mlp(fw)
    x, _ = data(rng)
    dist = 0.5 * rng.normal(size=(4, 4)).astype(np.float32)
    got = np_(fw, hookkit.attribute(model, None, fw.tensor(x), method="deeplift_shap", target=0, baselines=fw.tensor(dist)))
    each = [np_(fw, hookkit.attribute(model, None, fw.tensor(x), method="deeplift", target=0, baselines=fw.tensor(b))) for b in dist]
    # one batch of 4 x 3 rows against four of 3 (other gemm shapes): the Rescale multipliers from a
    # 4-term dot and a bias at both ends, a 6-term dot back, a product, then the mean over 4 baselines
    assert_close(got, np.mean(each, 0), dtype="float32", n_ops=24)
    f = lambda v: np_(fw, model(fw.tensor(v)))[:, 0]  # noqa: E731
    np.testing.assert_allclose(got.sum(1), f(x) - f(dist).mean(), rtol=1e-4, atol=1e-5)  # complete on average
    with pytest.raises(HookkitError, match=r"baselines.*\[B, 4\]"):
        hookkit.attribute(model, None, fw.tensor(x), method="deeplift_shap", target=0, baselines=fw.tensor(dist[:, :3]))
    assert hooks_left(model) == []


def test_gradient_shap_on_a_linear_model(fw, rng):
    fw.seed(0)
    model = fw.linear(4, 3)
    W, _ = weights(fw, model)
    x, b = data(rng)
    # one baseline and no noise: the gradient is constant, every draw gives W * (x - b)
    one = hookkit.attribute(model, None, fw.tensor(x), method="gradient_shap", target=1, baselines=fw.tensor(b[0]), stdevs=0.0, seed=0)
    assert_close(np_(fw, one), W[1] * (x - b[0]), dtype="float32", n_ops=8)  # a difference, a product, a mean of 5
    # noise and baseline draws: repeatable with a seed, the same in one chunk or in many
    kw = dict(method="gradient_shap", target=1, baselines=fw.tensor(b), stdevs=0.3, n_samples=7, seed=3)
    a = np_(fw, hookkit.attribute(model, None, fw.tensor(x), **kw))
    c = np_(fw, hookkit.attribute(model, None, fw.tensor(x), internal_batch_size=1, **kw))
    # bit for bit: the noise is drawn once for all rows, a linear model's gradient W[1] is exact (one-hot
    # rows times W) at any batch size, and the mean over the draws runs once on the concatenated rows
    np.testing.assert_array_equal(a, c)
    assert not np.allclose(a, W[1] * (x - b.mean(0)), atol=1e-3)  # the draws are random
    # expectation: W * (x - mean baseline); 4000 draws of 3 baselines: standard error ~ 1.5% of the spread
    many = hookkit.attribute(
        model, None, fw.tensor(x), method="gradient_shap", target=1, baselines=fw.tensor(b), stdevs=0.0, n_samples=4000, seed=0
    )
    spread = np.abs(W[1] * (b - b.mean(0))).max()
    np.testing.assert_allclose(np_(fw, many), W[1] * (x - b.mean(0)), atol=0.1 * spread)


@pytest.mark.parametrize("layer", ["2", "3"])
def test_guided_gradcam_equal_to_captum(layer):
    attr = pytest.importorskip("captum.attr")
    model, x, _ = _captum_models()[0]
    want = attr.GuidedGradCam(model, model[int(layer)]).attribute(x, target=1)
    got = hookkit.attribute(model, layer, x, method="guided_gradcam", target=1)
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-6, atol=1e-15)


def test_deeplift_shap_equal_to_captum_and_gradient_shap_converges_to_it():
    attr = pytest.importorskip("captum.attr")
    torch = sys.modules["torch"]
    model, x, _ = _captum_models()[0]
    dist = 0.1 * torch.randn(4, *x.shape[1:], generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    want = attr.DeepLiftShap(model).attribute(x, target=1, baselines=dist)
    got = hookkit.attribute(model, None, x, method="deeplift_shap", target=1, baselines=dist)
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-6, atol=1e-15)
    # GradientShap: other random draws than captum's; both estimate the same expectation
    torch.manual_seed(0)
    want = attr.GradientShap(model).attribute(x, target=1, baselines=dist, n_samples=300).detach().numpy()
    got = hookkit.attribute(model, None, x, method="gradient_shap", target=1, baselines=dist, n_samples=300, stdevs=0.0, seed=0).numpy()
    np.testing.assert_allclose(got.sum((1, 2, 3)), want.sum((1, 2, 3)), atol=0.15 * np.abs(want.sum((1, 2, 3))).max())


# -- DeepLift at a layer ----------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["output", "input"])
def test_layer_deeplift_is_complete(fw, rng, where):
    fw.seed(1)
    model = fw.sequential(fw.linear(4, 8), fw.relu(), fw.linear(8, 6), fw.nn.Tanh(), fw.linear(6, 2))
    x, b = data(rng, n=5)
    f = lambda v: np_(fw, model(fw.tensor(v)))[:, 1]  # noqa: E731
    for layer in ("1", "2", "3"):
        attr, delta = hookkit.attribute(
            model, layer, fw.tensor(x), method="deeplift", target=1, baselines=fw.tensor(b), attribute_to=where, return_delta=True
        )
        np.testing.assert_allclose(np_(fw, attr).sum(1), f(x) - f(b), rtol=1e-4, atol=1e-5)
        assert np.abs(np_(fw, delta)).max() < 1e-4
    shap = hookkit.attribute(model, "2", fw.tensor(x), method="deeplift_shap", target=1, baselines=fw.tensor(b[:2]), attribute_to=where)
    np.testing.assert_allclose(np_(fw, shap).sum(1), f(x) - f(b[:2]).mean(), rtol=1e-4, atol=1e-5)
    assert hooks_left(model) == []


def test_layer_deeplift_equal_to_captum():
    attr = pytest.importorskip("captum.attr")
    model, x, b = _captum_models()[0]
    dist = b[:2]
    for layer in ("1", "2", "6", "7"):
        for to in (False, True):
            if to and layer in ("1", "7"):
                # captum's gradient at a nonlinear layer's input misses the layer's own Rescale rule (its
                # delta is not zero there); hookkit's is complete (test_layer_deeplift_is_complete)
                continue
            where = "input" if to else "output"
            want = attr.LayerDeepLift(model, model[int(layer)]).attribute(x, b, target=1, attribute_to_layer_input=to)
            got = hookkit.attribute(model, layer, x, method="deeplift", target=1, baselines=b, attribute_to=where)
            np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-6, atol=1e-15)
            want = attr.LayerDeepLiftShap(model, model[int(layer)]).attribute(x, dist, target=1, attribute_to_layer_input=to)
            got = hookkit.attribute(model, layer, x, method="deeplift_shap", target=1, baselines=dist, attribute_to=where)
            np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-6, atol=1e-15)


# -- Paddle equal to torch ---------------------------------------------------------------------------
def test_paddle_equal_to_torch_on_twin_models(torch_fw, paddle_fw, rng):
    tm, pm = relu_mlp(torch_fw), relu_mlp(paddle_fw)
    for i in (0, 2):
        pm[i].weight.set_value(torch_fw.numpy(tm[i].weight).T)
        pm[i].bias.set_value(torch_fw.numpy(tm[i].bias))
    x, b = data(rng)
    for method, kw in [
        ("deeplift", {"baselines": b}),
        ("deeplift_shap", {"baselines": b}),
        ("gradient_shap", {"baselines": b, "stdevs": 0.0, "n_samples": 4, "seed": 1}),
        ("guided_backprop", {}),
        ("deconvolution", {}),
    ]:
        t = hookkit.attribute(
            tm,
            None,
            torch_fw.tensor(x),
            method=method,
            target=2,
            **{k: (torch_fw.tensor(v) if k == "baselines" else v) for k, v in kw.items()},
        )
        p = hookkit.attribute(
            pm,
            None,
            paddle_fw.tensor(x),
            method=method,
            target=2,
            **{k: (paddle_fw.tensor(v) if k == "baselines" else v) for k, v in kw.items()},
        )
        # each framework's kernels: a forward and a backward of the 4-6-3 MLP, DeepLift's multipliers,
        # a mean over up to 4 baselines or draws
        assert_close(paddle_fw.numpy(p), torch_fw.numpy(t), dtype="float32", n_ops=32, err_msg=method)


def test_deeplift_maxpool_rule_equal_to_captum():
    attr = pytest.importorskip("captum.attr")
    torch = sys.modules["torch"]
    nn = torch.nn
    torch.manual_seed(0)
    # max pooling not next to another nonlinear layer: where captum's hooks on a shared tensor would
    # read the gradient before the neighbour's rule changes it (docs/attribution.md)
    model = (
        nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.MaxPool2d(2), nn.Conv2d(4, 3, 3), nn.Tanh(), nn.Flatten(), nn.Linear(12, 4))
        .double()
        .eval()
    )
    g = torch.Generator().manual_seed(1)
    x, b = torch.randn(3, 2, 8, 8, generator=g, dtype=torch.float64), 0.1 * torch.randn(3, 2, 8, 8, generator=g, dtype=torch.float64)
    want = attr.DeepLift(model).attribute(x, b, target=1)
    got = hookkit.attribute(model, None, x, method="deeplift", target=1, baselines=b)
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-6, atol=1e-15)


def test_deeplift_maxpool_rule_by_hand(torch_fw, rng):
    nn = torch_fw.nn
    torch_fw.seed(0)
    model = nn.Sequential(nn.MaxPool1d(2), nn.Flatten(), nn.Linear(2, 1))
    x, b = rng.normal(size=(5, 1, 4)), rng.normal(size=(5, 1, 4))
    w = torch_fw.numpy(model[2].weight)[0]
    got = np_(torch_fw, hookkit.attribute(model, None, torch_fw.tensor(x), method="deeplift", target=0, baselines=torch_fw.tensor(b)))
    # captum's rule: each window's output difference max(x) - max(b), split between the two argmax positions
    want = np.zeros_like(x)
    for n in range(5):
        for j in range(2):
            wx, wb = x[n, 0, 2 * j : 2 * j + 2], b[n, 0, 2 * j : 2 * j + 2]
            top = max(wx.max(), wb.max())
            want[n, 0, 2 * j + wx.argmax()] += w[j] * (top - wb.max())
            want[n, 0, 2 * j + wb.argmax()] += w[j] * (wx.max() - top)
    # float32 (x and b rounded, a difference of maxima, a product, two sums) against float64: the
    # differences cancel terms of size |w| |x|
    terms = float(np.abs(w).max() * max(np.abs(x).max(), np.abs(b).max()))
    assert_close(got, want, dtype="float32", n_ops=6, scale=terms)
    f = lambda v: np_(torch_fw, model(torch_fw.tensor(v)))[:, 0]  # noqa: E731
    # complete: also the 2-term dots, the bias and f(x) - f(b), which cancels values of size |f|
    assert_close(got.sum((1, 2)), f(x) - f(b), dtype="float32", n_ops=12, scale=float(max(terms, np.abs([f(x), f(b)]).max())))


def test_layer_gradient_shap_by_hand(fw, rng):
    fw.seed(0)
    model = fw.sequential(fw.linear(4, 6), fw.nn.Tanh(), fw.linear(6, 2))
    W1, b1 = weights(fw, model[0])
    W2, _ = weights(fw, model[2])
    x, b = data(rng)
    # after the layer the model is linear: every draw gives W2[t] * (layer(x) - layer(b))
    got = hookkit.attribute(model, "1", fw.tensor(x), method="gradient_shap", target=1, baselines=fw.tensor(b[:1]), stdevs=0.0, seed=0)
    h = lambda v: np.tanh(v.astype(np.float64) @ W1.T + b1)  # noqa: E731
    # float32 against float64: a 4-term dot, a bias and tanh at both ends, a difference, the product with
    # the exact gradient W2[1], a mean of 5 draws; the difference cancels terms of size |W2[1]| |h|
    scale = float(np.abs(W2[1]).max() * max(np.abs(h(x)).max(), np.abs(h(b[:1])).max()))
    assert_close(np_(fw, got), W2[1] * (h(x) - h(b[:1])), dtype="float32", n_ops=16, scale=scale)
    assert hooks_left(model) == []


def test_layer_gradient_shap_equal_to_captum_where_draws_do_not_matter():
    attr = pytest.importorskip("captum.attr")
    torch = sys.modules["torch"]
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 2)).double()
    x, b = torch.randn(3, 4, dtype=torch.float64), torch.randn(1, 4, dtype=torch.float64)
    want = attr.LayerGradientShap(model, model[1]).attribute(x, b, target=1, n_samples=5)
    got = hookkit.attribute(model, "1", x, method="gradient_shap", target=1, baselines=b, n_samples=5, stdevs=0.0, seed=0)
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-6, atol=1e-15)


def test_deeplift_maxpool_rule_paddle_equal_to_torch(torch_fw, paddle_fw, rng):
    tnn, pnn = torch_fw.nn, paddle_fw.nn
    torch_fw.seed(0)
    tm = tnn.Sequential(
        tnn.Conv2d(2, 4, 3, padding=1), tnn.ReLU(), tnn.MaxPool2d(2), tnn.Conv2d(4, 3, 3), tnn.Tanh(), tnn.Flatten(), tnn.Linear(12, 4)
    )
    pm = pnn.Sequential(
        pnn.Conv2D(2, 4, 3, padding=1), pnn.ReLU(), pnn.MaxPool2D(2), pnn.Conv2D(4, 3, 3), pnn.Tanh(), pnn.Flatten(), pnn.Linear(12, 4)
    )
    for i in (0, 3, 6):
        w = torch_fw.numpy(tm[i].weight)
        pm[i].weight.set_value(w if i < 6 else w.T)
        pm[i].bias.set_value(torch_fw.numpy(tm[i].bias))
    x, b = rng.normal(size=(3, 2, 8, 8)), 0.3 * rng.normal(size=(3, 2, 8, 8))
    t, dt = hookkit.attribute(tm, None, torch_fw.tensor(x), method="deeplift", target=1, baselines=torch_fw.tensor(b), return_delta=True)
    p = hookkit.attribute(pm, None, paddle_fw.tensor(x), method="deeplift", target=1, baselines=paddle_fw.tensor(b))
    np.testing.assert_allclose(paddle_fw.numpy(p), torch_fw.numpy(t), rtol=1e-4, atol=1e-5 * np.abs(torch_fw.numpy(t)).max())
    # the max-pooling rule is in use: without it (the plain gradient) the result differs
    pm2 = pnn.Sequential(*[pm[i] for i in range(2)], pnn.AvgPool2D(2), *[pm[i] for i in range(3, 7)])
    assert not np.allclose(
        paddle_fw.numpy(hookkit.attribute(pm2, None, paddle_fw.tensor(x), method="deeplift", target=1, baselines=paddle_fw.tensor(b))),
        paddle_fw.numpy(p),
        atol=1e-4,
    )


def test_gradient_shap_default_noise_is_captums(fw, rng):
    """stdevs defaults to captum's per method: 0.0 for gradient_shap (1.0 for smoothgrad)."""
    fw.seed(0)
    model = fw.linear(4, 3)
    W, _ = weights(fw, model)
    x, b = data(rng)
    got = hookkit.attribute(model, None, fw.tensor(x), method="gradient_shap", target=1, baselines=fw.tensor(b[0]), seed=0)
    assert_close(np_(fw, got), W[1] * (x - b[0]), dtype="float32", n_ops=8)  # no noise: exact gradient, a mean of 5 draws
    noisy = hookkit.attribute(model, None, fw.tensor(x), method="gradient_shap", target=1, baselines=fw.tensor(b[0]), stdevs=1.0, seed=0)
    assert not np.allclose(np_(fw, noisy), W[1] * (x - b[0]), atol=1e-3)
