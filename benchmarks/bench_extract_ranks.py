"""hookkit.extract on 2 ranks (gloo, CPU, one thread each) vs 1 process over the same samples.

    /work/bench-venv/bin/python benchmarks/bench_extract_ranks.py [--samples 20000] [--rounds 2]

Workload: a GPT-2-style model (GPT2Model, 2 layers, width 64, 2 heads, random weights from a config),
the residual stream of every block reduced to one vector per sample (mean over tokens), samples of
16 tokens, batches of 64. The 2-rank run deals the samples with DistributedSampler(shuffle=False)
and hookkit reads the sampler from the DataLoader. Each variant runs in its own processes,
alternating, and reports wall time; the folders' arrays are compared (same order, max difference).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB, TOKENS, BATCH = 500, 16, 64


def model():
    import torch
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    return GPT2Model(GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=VOCAB, n_positions=TOKENS)).eval()


def ids(n: int) -> np.ndarray:
    return np.random.default_rng(0).integers(0, VOCAB, size=(n, TOKENS))


def run(out: str, n: int, rank: int = 0, world: int = 1) -> None:
    import torch
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    import hookkit

    torch.set_num_threads(1)
    ds = TensorDataset(torch.from_numpy(ids(n)))
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=False) if world > 1 else None
    loader = DataLoader(ds, batch_size=BATCH, sampler=sampler)
    m = model()
    hookkit.extract(m, loader, "h.*", out, reduce="mean:1", forward=lambda b: m(input_ids=b[0]), progress=False)


def _rank(rank: int, world: int, port: int, out: str, n: int) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        run(out, n, rank, world)
    finally:
        dist.destroy_process_group()


def child(variant: str, out: str, n: int) -> None:
    if variant == "one":
        run(out, n)
    else:
        import torch.multiprocessing as mp

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.spawn(_rank, args=(2, port, out, n), nprocs=2)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--samples", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--_child", nargs=2, default=None)
    a = p.parse_args()
    if a._child:
        child(a._child[0], a._child[1], a.samples)
        return
    import hookkit

    times: dict[str, list[float]] = {"one": [], "two": []}
    tmp = tempfile.mkdtemp()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    for r in range(a.rounds):
        for variant in ("one", "two") if r % 2 == 0 else ("two", "one"):
            out = os.path.join(tmp, f"{variant}{r}")
            t0 = time.perf_counter()
            subprocess.run([sys.executable, __file__, "--samples", str(a.samples), "--_child", variant, out], check=True, env=env)
            times[variant].append(time.perf_counter() - t0)
    one, two = hookkit.load_features(os.path.join(tmp, "one0")), hookkit.load_features(os.path.join(tmp, "two0"))
    same_order = one.count == two.count == a.samples
    diff = max(float(np.abs(np.asarray(one[k]) - np.asarray(two[k])).max()) for k in one)
    equal = all(np.array_equal(np.asarray(one[k]), np.asarray(two[k])) for k in one)
    t1, t2 = np.median(times["one"]), np.median(times["two"])
    load = os.getloadavg()
    print(f"samples {a.samples}, batches of {BATCH} x {TOKENS} tokens, rounds {a.rounds}, load average {load[0]:.1f} {load[1]:.1f}")
    print(f"1 process: {t1:.1f} s wall (runs {', '.join(f'{t:.1f}' for t in times['one'])})")
    print(f"2 ranks:   {t2:.1f} s wall (runs {', '.join(f'{t:.1f}' for t in times['two'])})")
    print(f"speed-up {t1 / t2:.2f}x; per-rank throughput vs 1 process {(t1 / t2) / 2:.2f}x")
    print(f"loaded arrays: {one.count} rows each, same order {same_order}, bit-identical {equal}, max |difference| {diff:.2e}")


if __name__ == "__main__":
    main()
