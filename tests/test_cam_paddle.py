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
