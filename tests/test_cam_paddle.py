"""hookkit.cam beyond tests/test_cam.py: Paddle's channels-last layers (data_format="NLC" / "NHWC" /
"NDHWC") whose output shape fits both readings, targets and smoothing on Paddle, the out= stream's
resume and refusals, what is left after a forward that raises part-way, and the error messages."""

from __future__ import annotations

import numpy as np
import pytest

import hookkit

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
    np.testing.assert_allclose(hookkit.load_features(out)["cam"].numpy(), expected, atol=1e-6)
    with pytest.raises(ValueError, match="target must be None, a class index or a callable with out="):
        hookkit.cam(model, "conv2", batches, target=True, out=tmp_path / "other")
    assert hookkit.remove_all(model) == 0
