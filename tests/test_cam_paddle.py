"""hookkit.cam beyond tests/test_cam.py: Paddle's channels-last layers (data_format="NLC" / "NHWC" /
"NDHWC") whose output shape fits both readings, targets and smoothing on Paddle, the out= stream's
resume and refusals, what is left after a forward that raises part-way, and the error messages."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import hookkit
from tolerance import MAP_OPS, assert_close

METHODS = ["gradcam", "hirescam", "gradcam++", "xgradcam", "gradcam-elementwise", "layercam", "eigencam", "eigengradcam",
           "scorecam", "ablationcam", "fullgrad"]  # fmt: skip


def images(n=3, seed=0, c=2, size=(8, 8)):
    return np.random.default_rng(seed).standard_normal((n, c, *size)).astype(np.float32)


# -- Paddle channels-last layers: the layer's data_format decides an ambiguous shape -----------------------
def paddle_conv_model(dims: int, channels_last: bool):
    """conv -> batch norm -> relu -> strided conv -> relu -> mean -> linear, in Paddle, NCL/NCHW/NCDHW or
    NLC/NHWC/NDHWC (the input is always given channels-first; the NLC model permutes it first). Every
    channels-last output here, e.g. [N, 8, 8, 8] on a 16 x 16 image, also reads as channels-first."""
    import paddle

    nn = paddle.nn
    conv = {1: nn.Conv1D, 2: nn.Conv2D, 3: nn.Conv3D}[dims]
    norm = {1: nn.BatchNorm1D, 2: nn.BatchNorm2D, 3: nn.BatchNorm3D}[dims]
    kw = {"data_format": {1: "NLC", 2: "NHWC", 3: "NDHWC"}[dims]} if channels_last else {}

    class Model(nn.Layer):
        def __init__(self):
            super().__init__()
            self.conv1 = conv(2, 8, 3, padding=1, **kw)
            self.bn = norm(8, **kw)
            self.act = nn.ReLU()
            self.conv2 = conv(8, 8, 3, stride=2, padding=1, **kw)
            self.fc = nn.Linear(8, 3)

        def forward(self, x):
            if channels_last:
                x = x.transpose([0, *range(2, 2 + dims), 1])
            h = paddle.nn.functional.relu(self.conv2(self.act(self.bn(self.conv1(x)))))
            return self.fc(h.mean(list(range(1, 1 + dims)) if channels_last else list(range(2, 2 + dims))))

    paddle.seed(4)
    model = Model()
    rng = np.random.default_rng(4)
    model.bn._mean.set_value(rng.uniform(-0.3, 0.3, 8).astype(np.float32))
    model.bn._variance.set_value(rng.uniform(0.5, 1.5, 8).astype(np.float32))
    model.bn.bias.set_value(rng.uniform(-0.3, 0.3, 8).astype(np.float32))
    model.eval()
    return model


@pytest.mark.parametrize("dims,size", [(1, (16,)), (2, (16, 16)), (3, (8, 8, 8))])
def test_paddle_channels_last_layers_give_the_channels_first_maps(paddle_fw, dims, size):
    import paddle

    first, last = paddle_conv_model(dims, False), paddle_conv_model(dims, True)
    last.set_state_dict(first.state_dict())  # a convolution's weight is [out, in, *k] in either data_format
    x = paddle.to_tensor(images(n=2, size=size))
    for layer in ("conv2", "bn", "act"):  # "act" declares nothing: the model's layers all say channels-last
        for method in METHODS:
            a = hookkit.cam(first, layer, x, method, target=[1, 2], batch_size=8)
            b = hookkit.cam(last, layer, x, method, target=[1, 2], batch_size=8)
            np.testing.assert_allclose(b, a, atol=1e-5, err_msg=f"{layer} {method}")
    assert hookkit.remove_all(last) == 0


def test_paddle_nhwc_inputs_are_refused_with_the_reason(paddle_fw):
    """A Paddle model that takes NHWC inputs: hookkit reads inputs channels-first, so the layer cannot map
    onto "spatial size (32, 3)"; the error says why and what to do, and a permute in front works."""
    import paddle

    nn = paddle.nn
    paddle.seed(0)
    model = nn.Sequential(nn.Conv2D(3, 8, 3, padding=1, data_format="NHWC"), nn.ReLU(), nn.Conv2D(8, 8, 3, stride=2, padding=1, data_format="NHWC"),
                          nn.AdaptiveAvgPool2D(1, data_format="NHWC"), nn.Flatten(), nn.Linear(8, 4))  # fmt: skip
    model.eval()
    x = images(n=2, c=3, size=(32, 32))
    with pytest.raises(ValueError, match=r"\(32, 3\) \(the inputs are read channels-first .*permute in front of it\)"):
        hookkit.cam(model, "2", paddle.to_tensor(np.ascontiguousarray(x.transpose(0, 2, 3, 1))))

    class ToNHWC(nn.Layer):
        def forward(self, t):
            return t.transpose([0, 2, 3, 1])

    maps = hookkit.cam(nn.Sequential(ToNHWC(), model), "1.2", paddle.to_tensor(x))
    assert maps.shape == (2, 32, 32) and maps.max() > 0.99


# -- the out= stream ----------------------------------------------------------------------------------------
def small_cnn(fw):
    class Small(fw.Layer):
        def __init__(self):
            super().__init__()
            self.conv1 = fw.conv2d(2, 4, 3, padding=1)
            self.conv2 = fw.conv2d(4, 6, 3, stride=2, padding=1)
            self.fc = fw.linear(6, 3)

        def forward(self, x):
            h = fw.F.relu(self.conv2(fw.F.relu(self.conv1(x))))
            return self.fc(h.mean(-1).mean(-1))

    fw.seed(1)
    return Small()


def test_stream_resumes_with_a_numpy_class_and_refuses_other_settings(fw, tmp_path):
    """(x, y) batches from an iterable that raises part-way; a numpy integer target (accepted by cam without
    out= too); the resumed run gives every row once, equal to per-batch calls; prefix_tokens and eval change
    the maps, so a resume with other values is refused, naming cam and its arguments."""
    model = small_cnn(fw)
    x, y = images(n=8, seed=2), np.arange(8) % 3
    batches = [(fw.tensor(x[i : i + 3]), fw.tensor(y[i : i + 3], dtype="int64")) for i in range(0, 8, 3)]

    def interrupted():
        yield batches[0]
        raise RuntimeError("the loader failed")

    out = tmp_path / "cams"
    with pytest.raises(RuntimeError, match="the loader failed"):
        hookkit.cam(model, "conv2", interrupted(), "scorecam", target=np.int64(2), out=out, shard_size=1)
    for changed, message in (
        (dict(prefix_tokens=0), "prefix_tokens: None there, 0 now"),
        (dict(eval=False), "eval: True there, False now"),
    ):
        with pytest.raises(hookkit.ExtractError, match=rf"cam\(out=.*{message}.*re-run with the same .*prefix_tokens"):
            hookkit.cam(model, "conv2", batches, "scorecam", target=np.int64(2), out=out, **changed)
    feats = hookkit.cam(model, "conv2", batches, "scorecam", target=np.int64(2), out=out, shard_size=1)
    expected = np.concatenate([hookkit.cam(model, "conv2", b[0], "scorecam", target=2) for b in batches])
    assert feats.count == 8
    assert_close(hookkit.load_features(out)["cam"].numpy(), expected, dtype="float32", n_ops=MAP_OPS)
    with pytest.raises(ValueError, match="target must be None, a class index or a callable with out="):
        hookkit.cam(model, "conv2", batches, target=[0, 1, 2], out=tmp_path / "other")
    assert hookkit.remove_all(model) == 0


# -- dtypes and batch norm variants -------------------------------------------------------------------------
def test_float64_model_gives_float32_maps_and_metrics(fw):
    """ScoreCAM's, AblationCAM's and FullGrad's maps came out float64 (and FullGrad failed on Paddle, whose
    concat does not promote); cam_metric fed float32 images to a float64 model."""
    model = small_cnn(fw)
    x = images(n=2)
    expected = {m: hookkit.cam(model, "conv2", fw.tensor(x), m, target=[0, 2]) for m in METHODS}
    drop = hookkit.cam_metric(model, fw.tensor(x), expected["gradcam"], target=[0, 2], metric="confidence-drop")
    road = hookkit.cam_metric(model, fw.tensor(x), expected["gradcam"], target=[0, 2], percentiles=50, noise=0)
    model = model.double() if fw.name == "torch" else model.to(dtype="float64")
    x64 = fw.tensor(x, dtype="float64")
    for method in METHODS:
        maps = hookkit.cam(model, "conv2", x64, method, target=[0, 2])
        assert maps.dtype == np.float32, method
        np.testing.assert_allclose(maps, expected[method], atol=1e-5, err_msg=method)
    drop64 = hookkit.cam_metric(model, x64, expected["gradcam"], target=[0, 2], metric="confidence-drop")
    np.testing.assert_allclose(drop64, drop, atol=1e-5)
    np.testing.assert_allclose(hookkit.cam_metric(model, x64, expected["gradcam"], target=[0, 2], percentiles=50, noise=0), road, atol=1e-5)


def test_paddle_fullgrad_batch_norm_variants(torch_fw, paddle_fw):
    """FullGrad's folded bias of a Paddle batch norm with weight_attr=False (it failed: no weight) against the
    PyTorch twin with a weight of ones; with use_global_stats=False (batch statistics even in eval) the bias is
    not folded, as PyTorch's track_running_stats=False. (Paddle's eval-mode backward of such a layer treats
    the batch statistics as constants, unlike its forward and PyTorch: no twin comparison of the maps there.)"""
    import paddle
    import torch

    from hookkit.backends import backend_for

    rng = np.random.default_rng(5)
    pd = paddle.nn.Sequential(paddle.nn.Conv2D(2, 4, 3, padding=1), paddle.nn.BatchNorm2D(4, weight_attr=False), paddle.nn.ReLU(),
                              paddle.nn.AdaptiveAvgPool2D(1), paddle.nn.Flatten(), paddle.nn.Linear(4, 3))  # fmt: skip
    th = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                             torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 3))  # fmt: skip
    with torch.no_grad():
        for t in (th[0].weight, th[0].bias, th[1].bias, th[5].weight, th[5].bias):
            t.copy_(torch.tensor(rng.uniform(-0.5, 0.5, t.shape).astype(np.float32)))
        th[1].weight.fill_(1.0)
        th[1].running_mean.copy_(torch.tensor(rng.uniform(-0.3, 0.3, 4).astype(np.float32)))
        th[1].running_var.copy_(torch.tensor(rng.uniform(0.5, 1.5, 4).astype(np.float32)))
    for (i, name), value in zip([(0, "weight"), (0, "bias"), (1, "bias"), (1, "_mean"), (1, "_variance"), (5, "weight"), (5, "bias")],
                                [th[0].weight, th[0].bias, th[1].bias, th[1].running_mean, th[1].running_var, th[5].weight.T, th[5].bias]):  # fmt: skip
        getattr(pd[i], name).set_value(value.detach().numpy())
    pd.eval(), th.eval()
    x = images(n=3, seed=9)
    a = hookkit.cam(pd, "1", paddle.to_tensor(x), "fullgrad", target=[0, 1, 2])
    np.testing.assert_allclose(a, hookkit.cam(th, "1", torch.tensor(x), "fullgrad", target=[0, 1, 2]), atol=1e-5)
    batch_stats = paddle.nn.BatchNorm2D(4, use_global_stats=False)
    batch_stats.bias.set_value(rng.uniform(-0.5, 0.5, 4).astype(np.float32))
    batch_stats._mean.set_value(np.ones(4, np.float32))
    np.testing.assert_array_equal(backend_for(pd).family("layer_bias").bias(batch_stats).numpy(), batch_stats.bias.numpy())


# -- errors name the function, the argument and what would be valid ------------------------------------------
def test_cam_metric_percentiles_and_maps_errors(fw):
    model = small_cnn(fw)
    x = fw.tensor(images())
    maps = hookkit.cam(model, "conv2", x, target=1)
    # numpy numbers are percentiles too (np.arange was refused)
    np.testing.assert_array_equal(
        hookkit.cam_metric(model, x, maps, percentiles=np.arange(20, 80, 30)), hookkit.cam_metric(model, x, maps, percentiles=[20, 50])
    )
    for bad in (0, 100, [], [50, 100.5], "50", True, [np.float32(-1)]):
        with pytest.raises(ValueError, match=r"cam_metric\(\): percentiles must be a number or a list of numbers in \(0, 100\)"):
            hookkit.cam_metric(model, x, maps, percentiles=bad)
    with pytest.raises(ValueError, match=r"cam_metric\(\): maps must be maps of shape \[3, 8, 8\]"):
        hookkit.cam_metric(model, x, maps[:, :, :4])
    with pytest.raises(TypeError, match=r"cam_metric\(\): maps must be a float array \[N, 8, 8\]"):
        hookkit.cam_metric(model, x, (maps > 0.5).astype(np.int64))
    with pytest.raises(ValueError, match=r"cam_metric\(\): target must be a class index in \[0, 2\]"):
        hookkit.cam_metric(model, x, maps, target=3)
    assert hookkit.remove_all(model) == 0


# -- nothing left behind when a later forward raises ------------------------------------------------------------
def grad_enabled(fw) -> bool:
    return fw.lib.is_grad_enabled()


@pytest.mark.parametrize("case", ["scorecam", "ablationcam", "aug_smooth", "stream"])
def test_nothing_left_behind_when_a_later_forward_raises(fw, case, tmp_path):
    """The first forward runs, every later one raises (ScoreCAM's and AblationCAM's batched forwards, the
    second augmentation, the second batch of a stream): the error reaches the caller, and the model's hooks,
    training flags, parameters' .grad and stop_gradient / requires_grad, the input's, and the grad mode are
    as before, under the caller's no_grad too."""
    model = small_cnn(fw)
    model.train()
    model.conv1.eval()
    calls = []
    forward = model.forward

    def failing(x):
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("a later forward failed")
        return forward(x)

    model.forward = failing
    x = fw.tensor(images())
    before = [fw.requires_grad(p) for p in model.parameters()]
    for no_grad in (False, True):
        calls.clear()
        with fw.no_grad() if no_grad else contextlib.nullcontext():
            with pytest.raises(RuntimeError, match="a later forward failed"):
                if case == "stream":
                    hookkit.cam(model, "conv2", [x, x], out=tmp_path / f"s{no_grad}")
                elif case == "aug_smooth":
                    hookkit.cam(model, "conv2", x, aug_smooth=True)
                else:
                    hookkit.cam(model, "conv2", x, case, target=1, batch_size=2)
            assert grad_enabled(fw) is not no_grad
        assert model.training and not model.conv1.training and model.conv2.training
        assert all(p.grad is None for p in model.parameters())
        assert [fw.requires_grad(p) for p in model.parameters()] == before and not fw.requires_grad(x)
        assert hookkit.remove_all(model) == 0
