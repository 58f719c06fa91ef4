"""Any batch size and dtype, on both frameworks: every observer and intervention either computes the
right thing or leaves the output alone with one warning; never a crash in the user's forward or
backward. Statistics agree across frameworks (NaN conventions included). Grad-CAM on any layer,
layers followed by in-place ops included, equal to Grad-CAM computed by hand with plain hooks.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import hookkit
from hookkit.core.guards import SkippedOutputWarning

DTYPES = ["float32", "float16", "bfloat16", "float64", "int64", "bool", "complex64"]


def _cast_model(fw, dtype: str):
    """conv -> output cast to ``dtype`` (the layer "cast") -> identity: the layer hooked is "cast"."""
    lib = fw.lib

    class Cast(fw.Layer):
        def forward(self, x):
            return x.to(getattr(lib, dtype)) if fw.name == "torch" else x.astype(dtype)

    class Model(fw.Layer):
        def __init__(self):
            super().__init__()
            self.conv = fw.conv2d(2, 3, 3, padding=1)
            self.cast = Cast()
            self.out = Cast()  # keeps the dtype: a layer after the one hooked

        def forward(self, x):
            return self.out(self.cast(self.conv(x)))

    return Model()


def _features(dtype):
    """(name, attach(model) -> handle-like) for every observer and intervention."""
    ch = np.array([1, 0, 1], dtype=np.float32)
    return [
        ("capture", lambda m: hookkit.capture(m, "cast", grads=True)),
        ("ActivationStats", lambda m: hookkit.ActivationStats(m, "cast", hist=True)),
        ("GradientStats", lambda m: hookkit.GradientStats(m, ["conv", "cast"])),
        ("watch_nonfinite", lambda m: hookkit.watch_nonfinite(m, ["conv", "cast"], explode=1e9, vanish=0.0)),
        ("dropout", lambda m: hookkit.dropout(m, "cast", p=0.3)),
        ("channel_dropout", lambda m: hookkit.channel_dropout(m, "cast", p=0.3)),
        ("drop_path", lambda m: hookkit.drop_path(m, "cast", p=0.3)),
        ("gaussian_noise", lambda m: hookkit.gaussian_noise(m, "cast", std=0.1)),
        ("drop_block", lambda m: hookkit.drop_block(m, "cast", p=0.3, block_size=2)),
        ("mask threshold", lambda m: hookkit.mask_activations(m, "cast", threshold=0.1)),
        ("mask top_k", lambda m: hookkit.mask_activations(m, "cast", top_k=3)),
        ("mask channels", lambda m: hookkit.mask_activations(m, "cast", channels=ch)),
        ("ablate zero", lambda m: hookkit.ablate(m, "cast")),
        ("ablate mean", lambda m: hookkit.ablate(m, "cast", mode="mean")),
        ("steer", lambda m: hookkit.steer(m, "cast", np.ones(5, np.float32))),
        ("clip_grad", lambda m: hookkit.clip_grad(m, ["conv", "cast"], value=0.1, norm=1.0)),
    ]


def _real_sum(fw, y, dtype):
    if dtype == "complex64":
        y = y.real if fw.name == "torch" else fw.lib.real(y)
    return y.float().sum() if fw.name == "torch" else y.astype("float32").sum()


@pytest.mark.parametrize("batch", [0, 2])
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_feature_survives_any_dtype_and_batch(fw, dtype, batch):
    trains = dtype in ("float32", "float16", "bfloat16", "float64", "complex64")
    x = fw.randn(batch, 2, 5, 5)
    if fw.name == "torch":
        x.requires_grad_(True)
    else:
        x.stop_gradient = False
    for name, make in _features(dtype):
        model = _cast_model(fw, dtype)
        model.train()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            h = make(model)
            for _ in range(2):  # two steps: the warning for a skipped output comes once
                y = model(x)
                assert tuple(int(d) for d in y.shape) == (batch, 3, 5, 5), name
                assert str(y.dtype).rpartition(".")[2] == dtype, name
                if trains and fw.requires_grad(y):  # (zero ablation cuts the graph)
                    _real_sum(fw, y, dtype).backward()
            if hasattr(h, "check"):
                h.check()
            if hasattr(h, "layer_stats"):
                h.layer_stats("cast")
            h.remove()
        skipped = [w for w in caught if issubclass(w.category, SkippedOutputWarning)]
        assert len(skipped) <= 2, (name, [str(w.message) for w in skipped])  # once per (feature, layer, dtype)
        for w in skipped:
            assert "'cast'" in str(w.message) and dtype in str(w.message)
        assert hookkit.remove_all(model) == 0


def test_odd_kinds_are_skipped_with_one_warning(fw, monkeypatch):
    monkeypatch.setattr("hookkit.core.guards._warned", set())  # warned once per process otherwise
    model = _cast_model(fw, "int64")
    model.train()
    x = fw.randn(2, 2, 5, 5)
    plain = fw.numpy(model(x))
    with pytest.warns(SkippedOutputWarning, match=r"dropout\(\): left the int64 output of layer 'cast' unchanged"):
        with hookkit.dropout(model, "cast", p=0.9):
            out = fw.numpy(model(x))
    np.testing.assert_array_equal(out, plain)  # integer values (token ids, labels) are not dropped


def test_zero_size_batch_statistics_follow_torch_conventions(fw):
    model = fw.mlp((4, 3))
    x = fw.randn(0, 4, requires_grad=True)
    with hookkit.ActivationStats(model, "0") as acts, hookkit.GradientStats(model, "0") as grads:
        with hookkit.watch_nonfinite(model):
            model(x).sum().backward()
    a, g = acts.layer_stats("0"), grads.layer_stats("0")
    assert np.isnan(a["mean"][0]) and np.isnan(a["std"][0]) and np.isnan(a["near_zero"][0])
    assert np.isnan(g["mean"][0]) and np.isnan(g["std"][0]) and np.isnan(g["max_abs"][0]) and g["norm"][0] == 0.0


def test_statistics_agree_across_frameworks(torch_fw, paddle_fw):
    """Same weights, same data: same numbers on both frameworks, NaN where torch gives NaN."""
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((1, 4)).astype(np.float32), rng.standard_normal(1).astype(np.float32)
    results = {}
    for fw in (torch_fw, paddle_fw):
        model = fw.mlp((4, 1))  # one output per sample: a batch of 1 is one value (std NaN)
        lin = model[0]
        if fw.name == "torch":
            lin.weight.data[:] = fw.tensor(w)
            lin.bias.data[:] = fw.tensor(b)
        else:
            lin.weight.set_value(w.T.copy())
            lin.bias.set_value(b)
        model.train()
        with hookkit.ActivationStats(model, "0", hist=True, range=(-3, 3)) as acts, hookkit.GradientStats(model, "0") as grads:
            for n in (5, 1, 0):
                x = fw.tensor(rng.standard_normal((n, 4)).astype(np.float32) if fw.name == "torch" else results["x"][n])
                if fw.name == "torch":
                    results.setdefault("x", {})[n] = fw.numpy(x)
                x = fw.tensor(fw.numpy(x), requires_grad=True)
                (model(x) * 2.0).sum().backward()
        results[fw.name] = (acts.layer_stats("0"), grads.layer_stats("0"), grads.param_stats("0"))
    for t, p in zip(results["torch"], results["paddle"]):
        for key in t:
            np.testing.assert_allclose(np.asarray(p[key], np.float64), np.asarray(t[key], np.float64), rtol=2e-5, atol=1e-6, err_msg=key)
    act = results["torch"][0]
    assert np.isnan(act["std"][1]) and np.isnan(act["std"][2]) and np.isnan(act["mean"][2])  # 1 value; no value


def test_paddle_half_precision_on_cpu(paddle_fw):
    fw = paddle_fw
    for dtype in ("float16", "bfloat16"):
        model = _cast_model(fw, dtype)
        x = fw.randn(2, 2, 5, 5)
        with hookkit.watch_nonfinite(model, grads=False):
            model(x)  # finite: nothing raised
        x_bad = fw.tensor(np.full((1, 2, 5, 5), 1e6, np.float32))  # overflows float16 (not bfloat16)
        if dtype == "float16":
            with pytest.raises(hookkit.NonFiniteError, match="'cast'"):
                with hookkit.watch_nonfinite(model, grads=False):
                    model(x_bad)
        with hookkit.mask_activations(model, "cast", threshold=0.5):
            got = fw.numpy(model(x).astype("float32"))
        want = fw.numpy(model(x).astype("float32"))
        np.testing.assert_array_equal(got, np.where(np.abs(want) >= 0.5, want, 0))


@pytest.mark.parametrize("dtype", ["float64", "int64", "int32"])
def test_top_k_mask_on_wide_and_integer_outputs(fw, dtype):
    model = fw.sequential(fw.flatten())
    values = np.array([[3, -7, 1, 5, 0, -2], [4, 4, -9, 1, 2, 8]])
    x = fw.tensor(values, dtype=dtype)
    with hookkit.mask_activations(model, "0", top_k=2):
        out = fw.numpy(model(x))
    np.testing.assert_array_equal(out, [[0, -7, 0, 5, 0, 0], [0, 0, -9, 0, 0, 8]])
    assert out.dtype == np.dtype(dtype)


# -- Grad-CAM on any layer ---------------------------------------------------------------------------
def _inplace_net(fw):
    """A conv followed by an in-place ReLU (torch) and a BasicBlock whose bn2 output is changed in
    place by ``out += identity``."""
    lib = fw.lib

    class InplaceReLU(fw.Layer):  # torch's ReLU(inplace=True); Paddle's nn.ReLU has no such mode: relu_
        def forward(self, x):
            return lib.relu_(x) if fw.name == "torch" else fw.F.relu_(x)

    class Net(fw.Layer):
        def __init__(self):
            super().__init__()
            self.conv = fw.conv2d(3, 8, 3, padding=1)
            self.relu = InplaceReLU()
            self.conv1 = fw.conv2d(8, 8, 3, padding=1)
            self.bn1 = fw.batchnorm2d(8)
            self.conv2 = fw.conv2d(8, 8, 3, padding=1)
            self.bn2 = fw.batchnorm2d(8)
            self.pool = fw.maxpool2d(2)
            self.flatten = fw.flatten()
            self.fc = fw.linear(8 * 4 * 4, 5)

        def forward(self, x):
            identity = self.relu(self.conv(x))
            out = self.relu(self.bn1(self.conv1(identity)))
            out = self.bn2(self.conv2(out))
            if fw.name == "torch":
                out += identity  # in place: bn2's output is overwritten
            else:
                out.add_(identity)  # Paddle's += makes a new tensor; add_ is its in-place add
            return self.fc(self.flatten(self.pool(self.pool(self.relu(out)))))

    net = Net()
    rng = np.random.default_rng(1)
    for bn in (net.bn1, net.bn2):  # statistics far from the defaults: bn2's output differs from conv2's
        mean, var = rng.uniform(-0.5, 0.5, 8).astype(np.float32), rng.uniform(0.5, 2, 8).astype(np.float32)
        if fw.name == "torch":
            bn.running_mean.data[:] = fw.tensor(mean)
            bn.running_var.data[:] = fw.tensor(var)
        else:
            bn._mean.set_value(mean)
            bn._variance.set_value(var)
    lib.manual_seed(0) if fw.name == "torch" else None
    return net


def _by_hand(fw, model, layer, x, target):
    """Grad-CAM with the framework's own hooks: the activation copied in a forward hook, the
    gradient from a tensor hook on the output, a full backward, then pytorch-grad-cam's steps."""
    store = {}

    def on_forward(mod, inputs, output):
        store["act"] = fw.numpy(output).copy()
        output.register_hook(lambda g: store.__setitem__("grad", fw.numpy(g).copy()))

    h = layer.register_forward_hook(on_forward) if fw.name == "torch" else layer.register_forward_post_hook(on_forward)
    model.eval()
    out = model(x)
    score = sum(out[i, c] for i, c in enumerate(target))
    score.backward()
    h.remove()
    act, grad = store["act"], store["grad"]
    cam = np.maximum((grad.mean(axis=(2, 3))[:, :, None, None] * act).sum(axis=1), 0)
    size = fw.numpy(x).shape[-2:]

    def minmax(img):
        img = img - img.min()
        return img / (1e-7 + img.max())

    import torch  # the reference resize: interpolate(bilinear, half-pixel centers) = OpenCV's INTER_LINEAR

    up = [
        torch.nn.functional.interpolate(
            torch.from_numpy(minmax(c)[None, None].astype(np.float32)), size=tuple(size), mode="bilinear", align_corners=False
        )[0, 0].numpy()
        for c in cam
    ]
    return np.stack([minmax(np.maximum(u, 0)) for u in up])


@pytest.mark.parametrize("layer", ["conv", "bn2"])
def test_gradcam_on_layers_followed_by_in_place_ops(fw, layer):
    model = _inplace_net(fw)
    x = fw.randn(3, 3, 16, 16)
    target = [1, 4, 2]
    cams = hookkit.gradcam(model, layer, x, target=target)
    ref = _by_hand(fw, model, getattr(model, layer), fw.tensor(fw.numpy(x), requires_grad=True), target)
    assert cams.shape == (3, 16, 16)
    np.testing.assert_allclose(cams, ref, atol=1e-4)
    assert hookkit.remove_all(model) == 0


def test_gradcam_accepts_numpy_inputs(fw):
    model = fw.small_cnn()
    x = np.random.default_rng(0).standard_normal((2, 1, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(
        hookkit.gradcam(model, "conv2", x, target=3), hookkit.gradcam(model, "conv2", fw.tensor(x), target=3), atol=1e-6
    )


@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16"])
def test_prune_any_parameter_dtype(fw, dtype):
    model = fw.sequential(fw.linear(4, 3))
    if fw.name == "torch":
        model.to(getattr(fw.lib, dtype))
    else:
        model.to(dtype=dtype)  # half on Paddle's CPU: no multiply kernel, pruning computes in float32

    def weight():
        w = model[0].weight
        return fw.numpy(w.float() if fw.name == "torch" else w.astype("float32"))

    before = weight()
    p = hookkit.prune(model, "0", amount=0.5)
    assert p.sparsity() == 0.5 and (weight() == 0).mean() == 0.5
    assert str(model[0].weight.dtype).rpartition(".")[2] == dtype
    p.remove()
    np.testing.assert_array_equal(weight(), before)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_edits_compute_in_the_outputs_dtype(fw, dtype):
    """steer, a channel mask and mean ablation on half/double outputs: the values numpy gives, in the output's dtype."""
    model = _cast_model(fw, dtype)
    x = fw.randn(2, 2, 5, 5)

    def plain():
        y = model(x)
        return fw.numpy(y.float() if fw.name == "torch" else y.astype("float32")), str(y.dtype).rpartition(".")[2]

    base, _ = plain()
    vec = np.linspace(-1, 1, 5).astype(np.float32)
    mask = np.array([1, 0, 1], np.float32)
    tol = {"float16": 1e-2, "bfloat16": 6e-2, "float64": 1e-6}[dtype]
    with hookkit.steer(model, "cast", vec):
        got, kind = plain()
    np.testing.assert_allclose(got, base + vec, atol=tol * (1 + np.abs(base).max()))
    assert kind == dtype
    with hookkit.mask_activations(model, "cast", channels=mask):
        got, kind = plain()
    np.testing.assert_array_equal(got, base * mask[None, :, None, None])
    with hookkit.ablate(model, "cast", mode="mean"):
        got, kind = plain()
    np.testing.assert_allclose(got, np.broadcast_to(base.mean(0), base.shape), atol=tol * (1 + np.abs(base).max()))
    assert kind == dtype
