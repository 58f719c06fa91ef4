"""Per-call cost of ActivationStats and GradientStats on both recording routes, for A/B runs of two
versions of hookkit (e.g. before and after a change of ``observers/stats``).

    git archive <rev> src | tar -x -C /tmp/before     # plus the built _cpu_kernels*.so beside its .c
    for r in 1 2 3 4 5 6; do
      PYTHONPATH=/tmp/before/src python benchmarks/bench_stats_routes.py before
      PYTHONPATH=$PWD/src        python benchmarks/bench_stats_routes.py after
    done

Each run prints one line ``label key=µs ...``: the least CPU time per call of 9 runs of 2000 calls,
one thread. Keys: ``floor<n>`` a plain forward hook handing the output to the C kernel; ``act<n>``
/ ``hist<n>`` ActivationStats (hist=True) on an ``nn.Identity`` of n values (the CPU route: the
kernel); ``act_ops`` / ``hist_ops`` the same with the framework-ops route (``host_routes`` off:
the route of accelerator tensors, here run on the CPU); ``bare_fb`` a forward and backward of a
``Linear(8, 8)`` without hooks, ``grad_cpu`` / ``grad_ops`` the same with GradientStats (output
and parameter gradients). Compare medians over runs of the same key, before vs after.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import torch

import hookkit
from hookkit.backends import backend_for, host_stats

torch.set_num_threads(1)
CALLS = 2000


def per_call(fn, reps: int = 9) -> float:
    fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.process_time()
        for _ in range(CALLS):
            fn()
        best = min(best, time.process_time() - t0)
    return best / CALLS * 1e6


def main(label: str) -> None:
    out: dict[str, float] = {}
    kernel_rows = np.zeros((4, 6))
    for n in (16, 32768):
        x, layer = torch.randn(n), torch.nn.Identity().train()
        handle = layer.register_forward_hook(lambda m, i, o: host_stats.kernels.activation(o.detach().numpy(), 0.05, kernel_rows, 0, 0, 0))
        out[f"floor{n}"] = per_call(lambda: layer(x))  # noqa: B023
        handle.remove()
        for key, hist in ((f"act{n}", False), (f"hist{n}", True)):
            with hookkit.ActivationStats(layer, hookkit.ALL, hist=hist):
                out[key] = per_call(lambda: layer(x))  # noqa: B023
    x, layer = torch.randn(16), torch.nn.Identity().train()
    lin, xi = torch.nn.Linear(8, 8), torch.randn(2, 8)
    backend = type(backend_for(layer))
    out["bare_fb"] = per_call(lambda: lin(xi).sum().backward(), reps=5)
    try:
        for route, on in (("cpu", True), ("ops", False)):
            backend.host_routes = on
            if not on:
                for key, hist in (("act_ops", False), ("hist_ops", True)):
                    with hookkit.ActivationStats(layer, hookkit.ALL, hist=hist):
                        out[key] = per_call(lambda: layer(x))
            with hookkit.GradientStats(lin, hookkit.ALL):
                out[f"grad_{route}"] = per_call(lambda: lin(xi).sum().backward(), reps=5)
    finally:
        backend.host_routes = True
    print(label, " ".join(f"{k}={v:.3f}" for k, v in out.items()), flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "run")
