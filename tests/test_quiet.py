"""hookkit's own calls write nothing of their own or a library's to standard error: the profiler
that measures a training step's peak memory (Kineto's "USDT: ... profiler_start/stop" lines, written
by C++ below ``sys.stderr``) is started and stopped with the C-level stream quieted, and only then."""

from __future__ import annotations

import sys

import hookkit


def test_summary_in_train_mode_prints_no_profiler_lines(torch_fw, capfd):
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(5, 10), torch.nn.ReLU(), torch.nn.Linear(10, 2))
    capfd.readouterr()
    s = hookkit.summary(model, (2, 5), mode="train", optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    out, err = capfd.readouterr()
    assert "USDT" not in err and "profiler_" not in err, err
    assert s.training["measured"] > 0  # the profiler did run
    print("after", file=sys.stderr)  # standard error works again after the profiler's stop
    assert capfd.readouterr().err == "after\n"
