"""Microseconds per hooked call, piece by piece: what ActivationStats / GradientStats add to one
layer call beyond the read of its output (issue 19's "where the time goes").

    /work/bench-venv/bin/python benchmarks/bench_stats_percall.py     (or /work/main/.venv/bin/python)

A layer (``nn.Identity``) is called on a tensor of n values (n = 16: the kernel's read is ~free,
what remains is per-call overhead; n = 32768: a GPT-2 4x128 block output) with, in turn: no hook;
a plain no-op forward hook; hookkit's no-op consumer; a plain hook handing the output to the kernel
(the floor); hookkit.ActivationStats. And the pieces alone: the kernel on a ready array, the
backend's ``host_values`` + kernel (``activation_sums_into``), the framework-ops route. Least CPU
time of 15 runs of 2000 calls, one thread.

``--callgrind``: instructions per call of the layer-call variants instead (exact, insensitive to a
shared machine's load): ``valgrind --tool=callgrind --instr-atstart=no python bench_stats_percall.py
--callgrind``, then ``callgrind_annotate`` or the ``totals:`` line of each dump / 1000.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402

H.set_threads(1)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import hookkit  # noqa: E402
from hookkit.backends import backend_for, host_stats  # noqa: E402

torch.set_num_threads(1)
CALLS = 2000
CALLGRIND = "--callgrind" in sys.argv


def per_call_us(fn, label: str = "") -> float:
    fn()
    if CALLGRIND and label:
        CG.on()
        for _ in range(1000):
            fn()
        CG.dump(label.encode())
        return float("nan")
    best = float("inf")
    for _ in range(15):
        t0 = time.process_time()
        for _ in range(CALLS):
            fn()
        best = min(best, time.process_time() - t0)
    return best / CALLS * 1e6


CG = H.callgrind_client() if CALLGRIND else None


def main() -> None:
    K = host_stats.kernels
    print("| n values | piece | µs per call |")
    print("|---|---|---|")
    for n in (16, 32768):
        x = torch.randn(n)
        layer = torch.nn.Identity()
        be = backend_for(layer)
        values = x.numpy()
        rows = np.zeros((CALLS + 1, 6))
        host = host_stats.HostRows()

        def reset(host=host) -> None:
            host.n = 0

        pieces = {
            "kernel alone (array ready, row preallocated)": lambda: K.activation(values, 0.05, rows, 0, 0, 0),  # noqa: B023
            "host_values (detach + numpy view)": lambda: be.host_values(x),  # noqa: B023
            "Backend.activation_sums_into (host_values + kernel + row bookkeeping)": lambda: (
                be.activation_sums_into(host, x, 0.05, 0, 0),  # noqa: B023
                reset(),
            ),
            "framework-ops route (torch: mean, centered sum of squares, count_nonzero)": lambda: be.activation_sums(x, 0.05),  # noqa: B023
        }
        for name, fn in pieces.items():
            print(f"| {n} | {name} | {per_call_us(fn):.2f} |", flush=True)
        handle = layer.register_forward_hook(lambda m, i, o: None)
        print(f"| {n} | layer call, plain no-op hook | {per_call_us(lambda: layer(x), f'{n} plain no-op'):.2f} |")  # noqa: B023
        handle.remove()
        frows = np.zeros((4, 6))
        handle = layer.register_forward_hook(lambda m, i, o: K.activation(o.detach().numpy(), 0.05, frows, 0, 0, 0))  # noqa: B023
        print(f"| {n} | layer call, plain hook + kernel (the floor) | {per_call_us(lambda: layer(x), f'{n} floor'):.2f} |")  # noqa: B023
        handle.remove()
        with hookkit.on_forward(layer, hookkit.ALL, lambda m, i, o: None):
            print(f"| {n} | layer call, hookkit no-op consumer | {per_call_us(lambda: layer(x), f'{n} hookkit no-op'):.2f} |")  # noqa: B023
        layer.train()
        with hookkit.ActivationStats(layer, hookkit.ALL) as stats:
            print(f"| {n} | layer call, hookkit.ActivationStats | {per_call_us(lambda: layer(x), f'{n} ActivationStats'):.2f} |")  # noqa: B023
            assert len(stats.layer_stats("")["mean"]) > 0
        with hookkit.ActivationStats(layer, hookkit.ALL, hist=True):
            print(f"| {n} | layer call, hookkit.ActivationStats(hist=True) | {per_call_us(lambda: layer(x), f'{n} hist'):.2f} |")  # noqa: B023
        print(f"| {n} | layer call, no hook | {per_call_us(lambda: layer(x), f'{n} no hook'):.2f} |")  # noqa: B023


if __name__ == "__main__":
    main()
