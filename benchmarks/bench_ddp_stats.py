"""The DDP training step with hookkit's statistics attached, against the bare DDP step (same run).

    python benchmarks/bench_ddp_stats.py [--rounds 8] [--reps 20] [--width 256]

Two processes on 127.0.0.1 (gloo), one intra-op thread each, train a DDP-wrapped MLP
(Linear width-width-width-10 with ReLUs, batch 64 per rank, SGD) on new data each step. Variants,
interleaved round by round on both ranks (harness.run_interleaved): the bare DDP step;
ActivationStats(hist=True) + GradientStats attached (no read: reading is a collective made at log
points, never per step); the same plus a read (both objects' ``to_numpy()``, the cross-rank merge)
every 10 steps. Rank 0's CPU time per step (time.process_time, its gloo threads included);
ratios are the median over rounds of (variant / bare) in the same round.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--rounds", type=int, default=8)
p.add_argument("--reps", type=int, default=20)
p.add_argument("--width", type=int, default=256)
ARGS = p.parse_args()
H.set_threads(1)


def rank_main(rank: int, world: int, port: int, args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    import hookkit

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    w = args.width
    net = torch.nn.Sequential(torch.nn.Linear(w, w), torch.nn.ReLU(), torch.nn.Linear(w, w), torch.nn.ReLU(), torch.nn.Linear(w, 10))
    ddp = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)

    def step() -> None:
        x, y = torch.randn(64, w, generator=g), torch.randint(0, 10, (64,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()

    def bare():
        return step, lambda: None

    def with_stats(read_every: int = 0):
        def setup():
            acts, grads = hookkit.ActivationStats(ddp, hist=True), hookkit.GradientStats(ddp)
            count = [0]

            def stepped() -> None:
                step()
                count[0] += 1
                if read_every and count[0] % read_every == 0:
                    acts.to_numpy()
                    grads.to_numpy()

            def teardown() -> None:
                acts.remove()
                grads.remove()

            return stepped, teardown

        return setup

    variants = [
        ("bare DDP step", bare),
        ("+ ActivationStats(hist) + GradientStats", with_stats()),
        ("+ the same, read every 10 steps", with_stats(10)),
    ]
    results = H.run_interleaved(variants, rounds=args.rounds, reps=args.reps, warmup=3)
    if rank == 0:
        base = variants[0][0]
        rows = [
            [name, f"{r.median_ms:.3f}", f"{H.ratio(results, name, base):.3f}", H.spread(results, name, base)]
            for name, r in results.items()
        ]
        print(f"machine: {H.machine()}; width {args.width}, batch 64 per rank, 2 ranks (gloo), {args.rounds} rounds x {args.reps} steps")
        print(H.table(rows, ["variant", "rank 0 CPU ms / step", "ratio to bare", "IQR of ratio"]))
    dist.destroy_process_group()


if __name__ == "__main__":
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(rank_main, args=(2, port, ARGS), nprocs=2)
