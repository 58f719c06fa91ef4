"""Reading statistics during a long run: the cost of one read, early and late, and the memory kept.

    python benchmarks/bench_stats_read.py [--steps 20000] [--every-read 10]

The 5-layer MLP of the README (Linear 20-64-64-2 with ReLUs; 5 layers, 3 with parameters) trains
with SGD on a new batch of 64 each step, ``ActivationStats(hist=True)`` and ``GradientStats``
attached (one record per layer per step), and every ``--every-read`` steps the statistics are read
as a callback reads them (``Monitor.scalars()``: both objects' ``to_numpy()``, then the mean of each
statistic over the new rows). Each read's CPU time (``time.process_time``, one thread) is kept;
the table gives the median and the largest read per block of steps, and the rows kept per layer.
Before issue 15 a read was O(all rows): 541 ms per read at step 20,000 (the issue's figure).
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
p.add_argument("--steps", type=int, default=20000)
p.add_argument("--every-read", type=int, default=10)
ARGS = p.parse_args()
H.set_threads(1)

import torch  # noqa: E402

import hookkit  # noqa: E402
from hookkit.integrations._common import Monitor  # noqa: E402

torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
monitor = Monitor(hist=True)
monitor.attach(model)
reads: list[tuple[int, float, float, float]] = []  # (step, acts ms, grads ms, scalars ms)
t_start = time.process_time()
for step in range(1, ARGS.steps + 1):
    x, y = torch.randn(64, 20), torch.randint(0, 2, (64,))
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    if step % ARGS.every_read == 0:
        t0 = time.process_time()
        monitor.activation_stats.to_numpy()
        t1 = time.process_time()
        monitor.gradient_stats.to_numpy()
        t2 = time.process_time()
        monitor.scalars()  # what a callback does at a log point (reads both again: no new rows, cached)
        t3 = time.process_time()
        reads.append((step, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t0) * 1e3))
total = time.process_time() - t_start
monitor.remove()

blocks = sorted({(1, 1000), (max(1, ARGS.steps // 2 - 999), ARGS.steps // 2), (max(1, ARGS.steps - 999), ARGS.steps)})
rows = []
for lo, hi in blocks:
    chunk = [r for r in reads if lo <= r[0] <= hi]
    if chunk:
        rows.append(
            [
                f"{lo}-{hi}",
                f"{statistics.median(r[1] for r in chunk):.3f}",
                f"{statistics.median(r[2] for r in chunk):.3f}",
                f"{statistics.median(r[3] for r in chunk):.3f} (max {max(r[3] for r in chunk):.2f})",
            ]
        )
kept = {n: len(t["mean"]) for n, t in monitor.gradient_stats.to_numpy().items()}
print(f"machine: {H.machine()}")
print(
    f"{ARGS.steps} steps, a read every {ARGS.every_read}: {len(reads)} reads, {sum(r[3] for r in reads) / 1e3:.2f} s of {total:.1f} s CPU reading"
)
print(H.table(rows, ["steps", "ActivationStats.to_numpy ms", "GradientStats.to_numpy ms", "Monitor read (both + scalars) ms"]))
print(f"rows kept per layer at the end (limit {hookkit.observers.stats.LIMIT}): {kept}")
