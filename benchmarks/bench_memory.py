"""Saved-for-backward bytes and the training-memory estimate of ``hookkit.summary(mode="train")``.

For a CNN (SmallResNet-32, batch 32 of 3x32x32), a GPT-2-style model (4 layers x 128, batch 4 x 64
tokens, its own LM loss), two LSTMs (2 x 256, 50 steps x batch 32; 2 x 128 bidirectional,
batch-first 16 x 30 steps) and a GRU (2 x 256, 50 steps x 32), each with a linear head and Adam
(the recurrent ones on Paddle too: estimate and measured peak only):

- saved bytes: hookkit's total against an independent count (the same saved-tensor hooks around
  one forward, storages deduplicated by hand, parameters left out): must be equal;
- the training estimate (parameters + buffers + inputs + gradients + optimizer state + saved
  activations + largest transient) against the measured peak of one real training step (the
  CPU allocator's events under torch.profiler, steady state), and torchinfo's "Estimated Total
  Size" for the same model and input in the same table.

    PYTHONPATH=$PWD/src /work/bench-venv/bin/python benchmarks/bench_memory.py
    PYTHONPATH=$PWD/src /work/bench-venv/bin/python benchmarks/bench_memory.py --more   # 14 more recurrent configurations
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import block_torchvision, machine, set_threads, table  # noqa: E402

set_threads(1)
block_torchvision()

import torch  # noqa: E402
from torch import nn  # noqa: E402

import hookkit  # noqa: E402


def independent_saved(model: nn.Module, kwargs: dict) -> int:
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    sizes: dict[int, int] = {}
    keep = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            sizes[s.data_ptr()] = s.nbytes()
            keep.append(t)
        return t

    model.train()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(**kwargs)
    return sum(sizes.values())


class RNNNet(nn.Module):
    """A recurrent layer and a linear head on its output sequence."""

    def __init__(self, cls: type = nn.LSTM, hidden: int = 256, inputs: int = 64, **kw: object) -> None:
        super().__init__()
        self.lstm = cls(inputs, hidden, **kw)
        self.head = nn.Linear(hidden * (2 if kw.get("bidirectional") else 1), 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.head(out)


def cnn():
    from _models import SmallResNet

    torch.manual_seed(0)
    return SmallResNet(), {"x": torch.randn(32, 3, 32, 32)}


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=128, n_head=4))
    ids = torch.randint(0, model.config.vocab_size, (4, 64))
    return model, {"input_ids": ids, "labels": ids}


def lstm():
    torch.manual_seed(0)
    return RNNNet(num_layers=2), {"x": torch.randn(50, 32, 64)}


def lstm_bi():
    torch.manual_seed(0)
    return RNNNet(hidden=128, num_layers=2, bidirectional=True, batch_first=True), {"x": torch.randn(16, 30, 64)}


def gru():
    torch.manual_seed(0)
    return RNNNet(nn.GRU, num_layers=2), {"x": torch.randn(50, 32, 64)}


# --more: kind, steps, batch, input, hidden, layers, bidirectional, batch_first
MORE = [
    ("lstm", 50, 32, 64, 256, 1, False, False),
    ("lstm", 20, 8, 32, 128, 1, False, True),
    ("lstm", 30, 16, 100, 96, 3, False, True),
    ("lstm", 10, 64, 300, 200, 1, False, False),
    ("gru", 50, 32, 64, 256, 1, False, False),
    ("gru", 20, 8, 32, 128, 1, False, False),
    ("gru", 30, 16, 64, 128, 2, True, True),
    ("gru", 100, 16, 32, 128, 1, False, False),
    ("gru", 25, 32, 64, 512, 1, False, False),
    ("gru", 50, 32, 64, 256, 1, True, False),
    ("gru", 50, 32, 64, 256, 2, True, False),
    ("gru", 20, 8, 32, 128, 2, True, True),
    ("gru", 30, 16, 64, 128, 3, True, False),
    ("gru", 40, 64, 128, 128, 1, False, True),
]


def _label(cfg: tuple) -> str:
    kind, t, n, i, h, layers, bi, bf = cfg
    return f"{kind.upper()} {layers}x{h} (input {i}), {t} steps x {n}" + (", bidirectional" if bi else "") + (", batch-first" if bf else "")


def _more_row(framework: str, cfg: tuple, tr: dict) -> list[str]:
    """One table row: the configuration, the RNN transient, the estimate, the measured peak (MB), the error."""
    cells = [tr["transient"], tr["estimate"], tr["measured"]]
    return [f"{framework} {_label(cfg)}", *(f"{v / 1e6:.2f}" for v in cells), _pct(tr["estimate"], tr["measured"])]


def _torch_more(cfg: tuple) -> list[str]:
    kind, t, n, i, h, layers, bi, bf = cfg
    torch.manual_seed(0)
    model = RNNNet(nn.LSTM if kind == "lstm" else nn.GRU, h, i, num_layers=layers, bidirectional=bi, batch_first=bf)
    x = torch.randn((n, t, i) if bf else (t, n, i))
    tr = hookkit.summary(model, input_data=[x], mode="train", optimizer=torch.optim.Adam(model.parameters())).training
    return _more_row("PyTorch", cfg, tr)


def _paddle_more(pnet: type, cfg: tuple) -> list[str]:
    import paddle

    kind, t, n, i, h, layers, bi, bf = cfg
    paddle.seed(0)
    model = pnet(paddle.nn.LSTM if kind == "lstm" else paddle.nn.GRU, h, layers, bi, time_major=not bf, inputs=i)
    x = paddle.randn([n, t, i] if bf else [t, n, i])
    opt = paddle.optimizer.Adam(parameters=model.parameters())
    tr = hookkit.summary(model, input_data=[x], mode="train", optimizer=opt).training
    return _more_row("Paddle", cfg, tr)


def paddle_rnns(more: bool = False) -> list[list[str]]:
    """The same recurrent models on Paddle (its fused CPU ``rnn`` kernel; peak from its host allocator)."""
    import paddle

    class PNet(paddle.nn.Layer):
        def __init__(self, cls: type, hidden: int, layers: int, bidirectional: bool, time_major: bool, inputs: int = 64) -> None:
            super().__init__()
            direction = "bidirect" if bidirectional else "forward"
            self.rnn = cls(inputs, hidden, num_layers=layers, direction=direction, time_major=time_major)
            self.head = paddle.nn.Linear(hidden * (2 if bidirectional else 1), 10)

        def forward(self, x: paddle.Tensor) -> paddle.Tensor:
            return self.head(self.rnn(x)[0])

    if more:
        return [_paddle_more(PNet, cfg) for cfg in MORE]
    rows = []
    for name, cls, hidden, layers, bi, shape in (
        ("Paddle LSTM 2x256, 50 steps x 32", paddle.nn.LSTM, 256, 2, False, [50, 32, 64]),
        ("Paddle LSTM 2x128 bidirectional, batch-first 16 x 30 steps", paddle.nn.LSTM, 128, 2, True, [16, 30, 64]),
        ("Paddle GRU 2x256, 50 steps x 32", paddle.nn.GRU, 256, 2, False, [50, 32, 64]),
    ):
        paddle.seed(0)
        model = PNet(cls, hidden, layers, bi, time_major=not bi)
        x = paddle.randn(shape)
        opt = paddle.optimizer.Adam(parameters=model.parameters())
        t = hookkit.summary(model, input_data=[x], mode="train", optimizer=opt).training
        rows.append(
            [
                name,
                "--",
                "--",
                "--",
                f"{t['estimate'] / 1e6:.2f}",
                f"{t['measured'] / 1e6:.2f}",
                _pct(t["estimate"], t["measured"]),
                "--",
                "--",
            ]
        )
        print(name, t, flush=True)
    return rows


def _pct(a: float, b: float) -> str:
    return f"{100 * (a - b) / b:+.1f}%"


def torchinfo_total(model: nn.Module, kwargs: dict) -> float:
    import torchinfo

    stats = torchinfo.summary(model, input_data=kwargs, mode="train", verbose=0)
    return stats.total_input + stats.total_output_bytes + stats.total_param_bytes


def main() -> None:
    if "--more" in sys.argv:  # more recurrent configurations: the estimate against the measured peak
        rows = [_torch_more(cfg) for cfg in MORE] + paddle_rnns(more=True)
        print(machine())
        print(table(rows, ["model (linear head, Adam)", "transient MB", "estimate MB", "measured peak MB", "estimate vs peak"]))
        return
    rows = []
    for name, make in (
        ("CNN (SmallResNet-32, 32x3x32x32)", cnn),
        ("GPT-2 4x128, 4x64 tokens", gpt2),
        ("LSTM 2x256, 50 steps x 32", lstm),
        ("LSTM 2x128 bidirectional, batch-first 16 x 30 steps", lstm_bi),
        ("GRU 2x256, 50 steps x 32", gru),
    ):
        model, kwargs = make()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        s = hookkit.summary(model, input_data=kwargs, mode="train", optimizer=opt)
        saved_only = hookkit.summary(model, input_data=kwargs, mode="train").saved_bytes
        indep = independent_saved(model, kwargs)
        t = s.training
        ti = torchinfo_total(model, kwargs)
        rows.append(
            [
                name,
                f"{saved_only / 1e6:.2f}",
                f"{indep / 1e6:.2f}",
                "yes" if saved_only == indep else "NO",
                f"{t['estimate'] / 1e6:.2f}",
                f"{t['measured'] / 1e6:.2f}",
                _pct(t["estimate"], t["measured"]),
                f"{ti / 1e6:.2f}",
                _pct(ti, t["measured"]),
            ]
        )
        print(name, {k: v for k, v in t.items()}, flush=True)
    rows += paddle_rnns()
    header = [
        "model",
        "saved MB (hookkit)",
        "saved MB (independent)",
        "equal",
        "estimate MB",
        "measured peak MB",
        "estimate vs peak",
        "torchinfo MB",
        "torchinfo vs peak",
    ]
    print(machine())
    print(table(rows, header))


if __name__ == "__main__":
    main()
