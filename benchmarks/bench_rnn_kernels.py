"""The recurrent layers' transient rules (``training.layer_transient``) against the kernels' real
allocations, configuration by configuration.

- PyTorch LSTM (oneDNN): the most bytes allocated inside one ``mkldnn_rnn_layer_backward`` call
  (``torch.profiler(profile_memory=True)``, the allocator's events between the call's start and
  end), less the weights' and biases' gradients (the estimate counts them among the gradients),
  the largest over the calls; against the rule without the output gradients.
- PyTorch GRU, and LSTM with oneDNN off (step by step): the most the forward held above what it
  keeps when it ends (the input projections of all steps), against the rule.
- Paddle LSTM / GRU (the fused ``rnn`` kernel): the peak of its host allocator's ``Allocated``
  during the backward above its start, less the parameters' gradients; against the rule without
  the output gradients.

    PYTHONPATH=$PWD/src /work/bench-venv/bin/python benchmarks/bench_rnn_kernels.py
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

from hookkit.backends.torch.training import rnn_transient as torch_rule  # noqa: E402

LABELS = {"lstm": "LSTM", "gru": "GRU", "lstm off oneDNN": "LSTM (oneDNN off)"}
# kind, steps, batch, input, hidden, layers, bidirectional, batch_first
CONFIGS = [
    ("lstm", 50, 32, 64, 256, 2, False, False),
    ("lstm", 50, 32, 64, 256, 1, False, False),
    ("lstm", 20, 8, 32, 128, 1, False, False),
    ("lstm", 30, 16, 64, 128, 2, True, True),
    ("lstm", 100, 4, 16, 64, 1, False, False),
    ("lstm", 10, 64, 300, 200, 1, False, False),
    ("lstm", 40, 16, 128, 512, 1, False, True),
    ("lstm", 60, 8, 256, 96, 2, True, False),
    ("lstm", 5, 128, 32, 32, 1, False, False),
    ("lstm", 25, 32, 512, 384, 1, False, False),
    ("lstm", 33, 5, 100, 50, 1, False, True),
    ("gru", 50, 32, 64, 256, 1, False, False),
    ("gru", 50, 32, 64, 256, 2, True, False),
    ("gru", 20, 8, 32, 128, 1, False, True),
    ("gru", 100, 16, 32, 128, 1, False, False),
    ("gru", 25, 32, 64, 512, 1, False, False),
    ("lstm off oneDNN", 50, 32, 64, 256, 1, False, False),
    ("lstm off oneDNN", 20, 8, 32, 128, 2, True, True),
]


def _events(prof):
    evs = list(prof.kineto_results.events())
    mem = sorted((e for e in evs if e.name() == "[memory]"), key=lambda e: e.start_ns())
    return mem, [e for e in evs if e.name() != "[memory]"]


def torch_measured(kind, t, n, i, h, layers, bi, bf):
    with torch.backends.mkldnn.flags(enabled=kind != "lstm off oneDNN"):
        return _torch_measured(kind, t, n, i, h, layers, bi, bf)


def _torch_measured(kind, t, n, i, h, layers, bi, bf):
    torch.manual_seed(0)
    mod = (nn.GRU if kind == "gru" else nn.LSTM)(i, h, num_layers=layers, bidirectional=bi, batch_first=bf)
    x = torch.randn((n, t, i) if bf else (t, n, i))
    shapes = [list(x.shape)]
    forward_rule, backward_rule = torch_rule(mod, shapes, 0)
    if kind != "lstm":  # step by step: the forward's own temporaries, its peak above what it keeps at its end
        mod(x)  # warm: one-time allocations are not the layer's
        with torch.autograd.profiler.profile(profile_memory=True, use_kineto=True) as prof:
            kept = mod(x)  # noqa: F841 - the output and the graph stay alive: what the forward keeps
        mem, _ = _events(prof)
        live = peak = 0
        for e in mem:
            live += e.nbytes()
            peak = max(peak, live)
        return peak - live, forward_rule
    out = mod(x)[0].sum()
    with torch.autograd.profiler.profile(profile_memory=True, use_kineto=True) as prof:
        out.backward()
    mem, ops = _events(prof)
    calls = [o for o in ops if o.name() == "aten::mkldnn_rnn_layer_backward"]
    dirs = 2 if bi else 1
    most = 0
    for k, op in enumerate(calls):  # the top layer first
        lay = layers - 1 - k // dirs
        d_in = i if lay == 0 else dirs * h
        live = peak = 0
        for e in mem:
            if op.start_ns() <= e.start_ns() <= op.end_ns():
                live += e.nbytes()
                peak = max(peak, live)
        most = max(most, peak - 4 * (4 * h * (d_in + h) + 2 * 4 * h))
    return most, backward_rule


def paddle_measured(kind, t, n, i, h, layers, bi, bf):
    import numpy as np
    import paddle
    from paddle.base import core

    from hookkit.backends.paddle.training import rnn_transient as paddle_rule

    paddle.seed(0)
    cls = paddle.nn.GRU if kind == "gru" else paddle.nn.LSTM
    mod = cls(i, h, num_layers=layers, direction="bidirect" if bi else "forward", time_major=not bf)
    x = paddle.randn([n, t, i] if bf else [t, n, i])
    x.stop_gradient = False
    out, _ = mod(x)
    grad = paddle.ones_like(out)
    start = core.host_memory_stat_current_value("Allocated", 0)
    core.host_memory_stat_reset_peak_value("Allocated", 0)
    paddle.autograd.backward([out], [grad])
    peak = core.host_memory_stat_peak_value("Allocated", 0) - start
    grads = sum(int(np.prod(p.shape)) * 4 for p in mod.parameters())
    return peak - grads, paddle_rule(mod, [list(x.shape)], 0)[1]


def main() -> None:
    rows = []
    for cfg in CONFIGS:
        kind, t, n, i, h, layers, bi, bf = cfg
        name = f"{LABELS[kind]} T={t} N={n} I={i} H={h} L={layers}" + (" bidirectional" if bi else "") + (" batch-first" if bf else "")
        tm, tr = torch_measured(*cfg)
        pm, pr = paddle_measured(*cfg) if kind != "lstm off oneDNN" else (0, 0)
        rows.append(
            [
                name,
                f"{tm / 1e6:.3f}",
                f"{tr / 1e6:.3f}",
                f"{tr / tm:.3f}",
                *([f"{pm / 1e6:.3f}", f"{pr / 1e6:.3f}", f"{pr / pm:.3f}"] if pm else ["--"] * 3),
            ]
        )
        print(rows[-1], flush=True)
    print(machine())
    header = ["configuration", "torch kernel MB", "torch rule MB", "rule / kernel", "Paddle kernel MB", "Paddle rule MB", "rule / kernel"]
    print(table(rows, header))


if __name__ == "__main__":
    main()
