"""The training-memory estimate on recurrent layers: the transient is the documented per-kernel rule
(``training.layer_transient``), and the estimate holds against a real step on small LSTMs and GRUs."""

from __future__ import annotations

import pytest

import hookkit

GATES = {"lstm": 4, "gru": 3}


def _net(fw, kind, i, h, layers=1, bidirectional=False, batch_first=False):
    """A recurrent layer and a linear head on its output sequence."""
    out = h * (2 if bidirectional else 1)
    if fw.name == "torch":
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                cls = nn.LSTM if kind == "lstm" else nn.GRU
                self.rnn = cls(i, h, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first)
                self.head = nn.Linear(out, 3)

            def forward(self, x):
                return self.head(self.rnn(x)[0])

        return Net()
    import paddle

    class PNet(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            cls = paddle.nn.LSTM if kind == "lstm" else paddle.nn.GRU
            direction = "bidirect" if bidirectional else "forward"
            self.rnn = cls(i, h, num_layers=layers, direction=direction, time_major=not batch_first)
            self.head = paddle.nn.Linear(out, 3)

        def forward(self, x):
            return self.head(self.rnn(x)[0])

    return PNet()


def _summary(fw, kind, steps, batch, i, h, **kw):
    fw.seed(0)
    model = _net(fw, kind, i, h, **kw)
    x = fw.randn(*((batch, steps, i) if kw.get("batch_first") else (steps, batch, i)))
    return model, hookkit.summary(model, input_data=x, mode="train", optimizer=fw.adam(model))


def _estimate(fw, kind, steps, batch, i, h, **kw):
    return _summary(fw, kind, steps, batch, i, h, **kw)[1].training


def _torch_rule(kind, t, n, i, h, layers, dirs, fused):
    """The rule of ``TorchTraining.layer_transient``, written out (float32)."""
    g = GATES[kind]
    out = 4 * (t * n * dirs * h + (2 if kind == "lstm" else 1) * layers * dirs * n * h)  # output sequence, final states
    if not fused:
        return 4 * t * n * h * (g + (2 if dirs == 2 else 0)), out + 4 * g * h * h

    def copies(d):
        return 2 if d % 256 == 0 or d % 16 else 1

    kernels = []
    for lay in range(layers):
        d = i if lay == 0 else dirs * h
        copy = t * n * h if lay == layers - 1 or dirs == 2 else 0
        kernels.append(t * n * d + g * t * n * h + 4 * n * h + g * h * (copies(d) * d + copies(h) * h) + copy)
    return 0, out + 4 * max(kernels)


def _paddle_rule(kind, t, n, i, h, layers, dirs, batch_first):
    """The rule of ``PaddleTraining.layer_transient``, written out (float32)."""
    g, states = GATES[kind], 2 if kind == "lstm" else 1
    out = 4 * (t * n * dirs * h + states * layers * dirs * n * h)
    k = (1 if layers == 1 else min(layers + 1, 4)) + 2 * (dirs - 1)
    kernel = dirs * g * t * n * h + t * n * i + k * dirs * t * n * h + (states * layers * dirs + states + 2) * n * h
    kernel += dirs * t * n * h if batch_first else 0
    return 0, out + 4 * kernel


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_recurrent_transient_is_the_documented_rule(fw, kind):
    # 7 steps, batch 5, input 24 (a second weight copy in oneDNN: 24 is not a multiple of 16),
    # hidden 48, 2 layers, both directions, batch first
    t, n, i, h = 7, 5, 24, 48
    model, s = _summary(fw, kind, t, n, i, h, layers=2, bidirectional=True, batch_first=True)
    if fw.name == "torch":
        want = _torch_rule(kind, t, n, i, h, 2, 2, fused=kind == "lstm")
    else:
        want = _paddle_rule(kind, t, n, i, h, 2, 2, batch_first=True)
    row = next(r for r in s.all_rows if r.name == "rnn")
    ops = hookkit.backends.backend_for(model).family("training")
    assert ops.layer_transient(model.rnn, row.input_shapes, row.output_bytes) == want
    head = 4 * (t * n * 2 * h + t * n * 3)  # the head's generic transient: its input and output gradients
    assert s.training["transient"] == max(want[1], want[0] - s.training["gradients"], head) == want[1]


def test_a_forward_transient_counts_less_the_gradients(torch_fw):
    # a GRU with many short steps: the input projections of all steps (forward) outweigh the rest
    t, n, i, h = 50, 16, 8, 16
    model, s = _summary(torch_fw, "gru", t, n, i, h)
    fwd, bwd = _torch_rule("gru", t, n, i, h, 1, 1, fused=False)
    assert fwd == 4 * 3 * t * n * h and fwd - s.training["gradients"] > max(bwd, 4 * (t * n * h + t * n * 3))
    assert s.training["transient"] == fwd - s.training["gradients"]


def test_lstm_off_onednn_takes_the_step_by_step_rule(torch_fw):
    import torch

    with torch.backends.mkldnn.flags(enabled=False):
        model, s = _summary(torch_fw, "lstm", 9, 3, 16, 32)
    fwd, bwd = _torch_rule("lstm", 9, 3, 16, 32, 1, 1, fused=False)
    assert s.training["transient"] == max(bwd, fwd - s.training["gradients"])
    model, s = _summary(torch_fw, "lstm", 9, 3, 16, 32)
    assert s.training["transient"] == _torch_rule("lstm", 9, 3, 16, 32, 1, 1, fused=True)[1]


@pytest.mark.parametrize(
    ("kind", "shape", "kw"),
    [
        ("lstm", (20, 8, 32, 128), {}),
        ("gru", (20, 8, 32, 128), {}),
        ("lstm", (24, 8, 48, 96), {"layers": 2}),
    ],
)
def test_estimate_holds_against_a_real_step(fw, kind, shape, kw):
    t = _estimate(fw, kind, *shape, **kw)
    assert abs(t["estimate"] - t["measured"]) <= 0.10 * t["measured"], t
