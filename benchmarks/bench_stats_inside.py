"""Time spent inside the statistics during real training steps (in context: caches as training
leaves them), against the bare step: the in-loop cost, without comparing two noisy step medians.

    /work/bench-venv/bin/python benchmarks/bench_stats_inside.py [--steps 30]

Wraps the backend calls that hookkit's consumers make per hooked call (the CPU route's
``*_sums_into`` and the framework route's rows) with a CPU-time counter, trains the workloads of bench_stats.py (new batch each
step, AdamW) with each hookkit variant attached, and reports the median time inside per step and
1 + inside / (median bare step). Dispatch (the hook call itself, ~5 us per call) is not counted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--steps", type=int, default=30)
ARGS = p.parse_args()
H.keep_freed_memory()
H.set_threads(1)
H.block_torchvision()

import torch  # noqa: E402

import hookkit  # noqa: E402
from hookkit.backends.torch import TorchBackend  # noqa: E402

torch.set_num_threads(1)
sys.argv = sys.argv[:1]  # bench_stats parses its own arguments on import
import bench_stats as B  # noqa: E402

INSIDE = [0.0]


def counted(fn):
    def wrapper(*args, **kwargs):
        t0 = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            INSIDE[0] += time.process_time() - t0

    return wrapper


for _name in ("activation_sums", "activation_sums_hist", "param_sums", "activation_sums_into", "tensor_sums_into"):
    setattr(TorchBackend, _name, counted(getattr(TorchBackend, _name)))


def steps(step, n: int) -> tuple[list[float], list[float]]:
    walls, inside = [], []
    for _ in range(n):
        INSIDE[0] = 0.0
        t0 = time.process_time()
        step()
        walls.append(time.process_time() - t0)
        inside.append(INSIDE[0])
    return walls, inside


def main() -> None:
    print("| workload | variant | bare step (median) | inside the statistics per step (median) | x bare |")
    print("|---|---|---|---|---|")
    for label, make in (("GPT-2", B.gpt2_step), ("CNN", B.cnn_step)):
        model, step = make()
        steps(step, 3)
        bare = statistics.median(steps(step, ARGS.steps)[0])
        for name, attach in (
            ("ActivationStats", lambda m: hookkit.ActivationStats(m)),
            ("ActivationStats(hist=True)", lambda m: hookkit.ActivationStats(m, hist=True)),
            ("GradientStats", lambda m: hookkit.GradientStats(m)),
        ):
            with attach(model):
                steps(step, 2)
                inside = statistics.median(steps(step, ARGS.steps)[1])
            print(f"| {label} | {name} | {bare * 1e3:.1f} ms | {inside * 1e3:.1f} ms | **{1 + inside / bare:.3f}x** |")


if __name__ == "__main__":
    main()
