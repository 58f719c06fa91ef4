"""Where the time of the statistics goes (issue 19): a GPT-2 training step with hookkit's statistics
against their floor and the obvious alternatives, variants interleaved in one process.

    /work/bench-venv/bin/python benchmarks/bench_stats_floor.py --only act,hist --rounds 40
    /work/bench-venv/bin/python benchmarks/bench_stats_floor.py --only grad,every --rounds 40
    /work/bench-venv/bin/python benchmarks/bench_stats_floor.py --callgrind act   # instruction counts

Workload: bench_stats.py's GPT-2 (4 layers, width 128, batch 4 x 64, AdamW step, a new batch each
step), one intra-op thread, CPU time, freed memory kept mapped. Layers: hookkit.WITH_PARAMS (the
28 layers fastai's has_params picks). Variants, by group:

  act    plain hook, no-op: torch's own cost of 28 forward hooks (the dispatch floor)
         hookkit no-op consumer: ``hookkit.on_forward`` doing nothing (hookkit's dispatch)
         floor: a plain hook handing each output to the C kernel, which writes its row into a
           preallocated buffer (one read of each output; nothing else)
         naive: a plain hook with torch's three reductions (mean, std, count <= 0.05) kept as tensors
         fastai ActivationStats (its hook body, its Hooks, cpu=True) / hookkit.ActivationStats
  core   bare, floor, fastai, hookkit.ActivationStats only (more rounds in the same time)
  hist   the same with histograms (40 bins over (0, 10)): floor (kernel), fastai, hookkit
  grad   plain tensor hooks doing GradientStats' work with torch ops ([sum, norm, max |g|] of each
         output gradient and parameter gradient), the same hooks with the kernel (floor),
         hookkit.GradientStats
  every  ActivationStats and GradientStats with every=1, 10, 100 (wandb's log_freq)

``--callgrind GROUP`` runs the group's variants one after the other (2 steps each after one
warm-up step) under callgrind's client requests and prints instructions per step: exact and
insensitive to the load of a shared machine (memory stalls are not in them: the CPU-time rounds
show those). Run it as ``valgrind --tool=callgrind --instr-atstart=no python ... --callgrind act``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402
from _models import gpt2_training_step  # noqa: E402

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--rounds", type=int, default=40)
p.add_argument("--reps", type=int, default=1)
p.add_argument("--warmup", type=int, default=1)
p.add_argument("--only", default="act,hist,grad,every")
p.add_argument("--callgrind", default="", help="a group: instruction counts per step under valgrind")
p.add_argument("--markdown", default="", help="append the tables to this file")
ARGS = p.parse_args()
H.keep_freed_memory()
H.set_threads(1)
H.block_torchvision()

import numpy as np  # noqa: E402
import torch  # noqa: E402

import hookkit  # noqa: E402
from hookkit.backends import host_stats  # noqa: E402

torch.set_num_threads(1)
K = host_stats.kernels


MODEL, STEP = gpt2_training_step()
LAYERS = [m for _, m in hookkit.select(MODEL, hookkit.WITH_PARAMS)]


def first(o):
    return o[0] if isinstance(o, tuple) else o


def plain(make_hook):
    """Plain ``register_forward_hook`` on every layer; ``make_hook()`` -> (hook, collect)."""

    def setup():
        hook, collect = make_hook()
        handles = [m.register_forward_hook(hook) for m in LAYERS]
        return STEP, lambda: ([h.remove() for h in handles], collect())

    return setup


def floor_hook(hist: bool):
    def make():
        rows = np.zeros((4096, 6))
        hists = np.zeros((4096, 40)) if hist else None
        k = [0]

        def hook(m, i, o):
            x = first(o).detach().numpy()
            if hist:
                K.activation(x, 0.05, rows, k[0], 0, 0, 1, 1, hists, 0.0, 10.0)
            else:
                K.activation(x, 0.05, rows, k[0], 0, 0)
            k[0] = (k[0] + 1) % len(rows)

        return hook, lambda: None

    return make


def naive_hook():
    kept = []

    def hook(m, i, o):
        o = first(o).detach()
        kept.append(torch.stack((o.mean(), o.std(), (o <= 0.05).sum().float())))

    return hook, kept.clear


def fastai(hist: bool):
    from fastai.callback.hook import ActivationStats as FastaiStats
    from fastai.callback.hook import Hooks

    def setup():
        cb = FastaiStats(with_hist=hist)
        hooks = Hooks(LAYERS, cb.hook, is_forward=True, detach=True, cpu=True)
        stored = []

        def step():
            STEP()
            stored.append(hooks.stored)  # fastai's after_batch

        return step, hooks.remove

    return setup


def hk(make):
    def setup():
        s = make()
        return STEP, lambda: (s.to_numpy() if hasattr(s, "to_numpy") else None, s.remove())

    return setup


def grad_hooks(kernel: bool):
    """GradientStats' work with plain hooks: a tensor hook on each output (placed by a forward hook)
    and a hook on each direct parameter, each reducing the gradient to [sum, norm, max |g|]."""

    def setup():
        kept = []
        rows = np.zeros((4096, 6))
        k = [0]

        def reduce(g):
            if kernel:
                x, factor = g.detach().numpy(), 1
                if not x.flags.c_contiguous:
                    x, factor = host_stats.compact(x)
                K.tensor(x, rows, k[0], 0, 0, factor)
                k[0] = (k[0] + 1) % len(rows)
            else:
                lo, hi = torch.aminmax(g)
                kept.append(torch.stack((g.sum(), torch.linalg.vector_norm(g), torch.maximum(-lo, hi))))

        def fwd(m, i, o):
            o = first(o)
            if o.requires_grad:
                o.register_hook(reduce)

        params = {id(q): q for m in LAYERS for q in m.parameters(recurse=False) if q.requires_grad}
        handles = [m.register_forward_hook(fwd) for m in LAYERS] + [q.register_hook(reduce) for q in params.values()]
        return STEP, lambda: ([h.remove() for h in handles], kept.clear())

    return setup


def bare():
    return STEP, lambda: None


GROUPS = {
    "act": [
        ("bare", bare),
        ("plain hook, no-op", plain(lambda: (lambda m, i, o: None, lambda: None))),
        ("hookkit no-op consumer", hk(lambda: hookkit.on_forward(MODEL, hookkit.WITH_PARAMS, lambda layer, inputs, output: None))),
        ("floor: plain hook + kernel", plain(floor_hook(False))),
        ("naive: plain hook + 3 torch reductions", plain(naive_hook)),
        ("fastai ActivationStats", fastai(False)),
        ("hookkit.ActivationStats", hk(lambda: hookkit.ActivationStats(MODEL))),
    ],
    "core": [  # the three that the targets compare, for more rounds in the same time
        ("bare", bare),
        ("floor: plain hook + kernel", plain(floor_hook(False))),
        ("fastai ActivationStats", fastai(False)),
        ("hookkit.ActivationStats", hk(lambda: hookkit.ActivationStats(MODEL))),
    ],
    "hist": [
        ("bare", bare),
        ("floor (hist): plain hook + kernel", plain(floor_hook(True))),
        ("fastai ActivationStats, hist", fastai(True)),
        ("hookkit.ActivationStats(hist=True)", hk(lambda: hookkit.ActivationStats(MODEL, hist=True))),
    ],
    "grad": [
        ("bare", bare),
        ("plain tensor hooks + torch ops", grad_hooks(False)),
        ("floor: plain tensor hooks + kernel", grad_hooks(True)),
        ("hookkit.GradientStats", hk(lambda: hookkit.GradientStats(MODEL))),
    ],
    "every": [("bare", bare)]
    + [(f"ActivationStats(every={n})", hk(lambda n=n: hookkit.ActivationStats(MODEL, every=n))) for n in (1, 10, 100)]
    + [(f"GradientStats(every={n})", hk(lambda n=n: hookkit.GradientStats(MODEL, every=n))) for n in (1, 10, 100)],
}
VERSUS = {  # overhead / this variant's overhead
    "hookkit.ActivationStats": ("fastai ActivationStats", "floor: plain hook + kernel"),
    "hookkit.ActivationStats(hist=True)": ("fastai ActivationStats, hist", "floor (hist): plain hook + kernel"),
    "hookkit.GradientStats": ("plain tensor hooks + torch ops", "floor: plain tensor hooks + kernel"),
}


def callgrind(group: str) -> None:
    """Instructions per step of each variant of ``group`` (valgrind --tool=callgrind --instr-atstart=no)."""
    cg = H.callgrind_client()
    for name, setup in GROUPS[group]:
        step, teardown = setup()
        step()
        cg.on()
        for _ in range(2):
            step()
        cg.dump(name.encode())
        teardown()
    print("per-step instructions: ir = totals of each dump / 2 (see callgrind.out.* 'desc: Trigger' lines)")


def main() -> None:
    import fastai
    import transformers

    if ARGS.callgrind:
        return callgrind(ARGS.callgrind)
    m = H.machine()
    out = [
        f"`{' '.join(['python', *sys.argv])}` — {m['date']}, {m['cpu']}, {m['cores']} cores, one intra-op thread, CPU time, "
        f"Python {m['python']}, torch {torch.__version__}, transformers {transformers.__version__}, fastai {fastai.__version__}, "
        f"load average {os.getloadavg()[0]:.1f} at the end"
    ]
    for group in ARGS.only.split(","):
        res = H.run_interleaved(GROUPS[group], ARGS.rounds, ARGS.reps, warmup=ARGS.warmup)
        rows = []
        for name, r in res.items():
            if r.error:
                rows.append([name, "failed: " + r.error.replace("|", "/"), "", "", ""])
                continue
            x = H.ratio(res, name, "bare")
            vs = ""
            if name in VERSUS:
                a, b = (H.ratio(res, v, "bare") - 1 for v in VERSUS[name])
                vs = f"{(x - 1) / a:.2f} of {VERSUS[name][0]}'s; {(x - 1) / b:.2f}x the floor's" if a > 0 and b > 0 else "n/a"
            rows.append([name, f"{r.median_ms:.1f}", f"{x:.3f}", H.spread(res, name, "bare"), vs])
        table = H.table(rows, ["variant", "ms/step (median)", "x bare", "x bare IQR", "overhead vs"])
        out.append(f"\n#### {group}: GPT-2 4x128, batch 4x64, AdamW step; {ARGS.rounds} rounds\n\n{table}\n")
        print(out[-1], flush=True)
    out[0] = out[0].replace("at the end", f"at the end: {os.getloadavg()[0]:.1f}")
    print(out[0])
    if ARGS.markdown:
        with open(ARGS.markdown, "a") as f:
            f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
