"""Training-step cost of activation / gradient statistics: hookkit vs fastai's ActivationStats.

    /work/bench-venv/bin/python benchmarks/bench_stats.py --rounds 48 --reps 1 --warmup 1

(one step per variant per round: this VM's speed drifts between rounds of a few seconds, so the
finest interleaving gives the steadiest ratios; options: --threads, --only gpt2,cnn, --malloc)

Workloads (CPU, random weights, train mode): one step = forward + backward + AdamW step +
zero_grad, of
  * GPT-2 (transformers GPT2LMHeadModel, 4 layers, width 128, 4 heads), batch 4 x 64 tokens,
    language-model loss on the inputs; a new batch each step (64 random batches, cycled)
  * the ResNet-style CNN of bench_capture.py (width 32), 8x3x64x64, cross-entropy on 10 classes
fastai: its own ``ActivationStats(with_hist=...).hook`` driven by its own ``Hooks`` on the
modules fastai picks (``flatten_model`` + ``has_params``), with HookCallback's defaults
(detach=True, cpu=True), and ``hooks.stored`` appended to a list after every step, as its
``after_batch`` does. hookkit: ``ActivationStats(model, hist=...)`` (default layers: WITH_PARAMS)
and ``GradientStats(model)``; their results are read once per round, outside the timing.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--threads", type=int, default=1)
p.add_argument("--rounds", type=int, default=16)
p.add_argument("--reps", type=int, default=4)
p.add_argument("--warmup", type=int, default=2, help="untimed steps after attaching, per variant and round")
p.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
p.add_argument("--only", default="", help="comma list of workloads: gpt2,cnn")
p.add_argument("--markdown", default="", help="append the tables to this file")
p.add_argument("--profile", default="", help="cProfile this variant on the GPT-2 and print the top")
p.add_argument("--malloc", choices=["keep", "default"], default="keep", help="keep: freed memory stays mapped (stable); default: glibc's")
ARGS = p.parse_args()
KEPT = ARGS.malloc == "keep" and H.keep_freed_memory()
H.set_threads(ARGS.threads)
H.block_torchvision()
H.use_clock(ARGS.clock)

import torch  # noqa: E402
from torch import nn  # noqa: E402

import hookkit  # noqa: E402
from _models import SmallResNet, gpt2_training_step  # noqa: E402

torch.set_num_threads(ARGS.threads)


gpt2_step = gpt2_training_step


def cnn_step() -> tuple[nn.Module, callable]:
    torch.manual_seed(0)
    model = SmallResNet(32).train()
    batches = itertools.cycle([(torch.randn(8, 3, 64, 64), torch.randint(0, 10, (8,))) for _ in range(64)])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> None:
        x, y = next(batches)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()

    return model, step


def variants(model: nn.Module, train_step: callable) -> tuple[list[tuple[str, H.Setup]], dict[str, int]]:
    try:
        from fastai.callback.hook import ActivationStats as FastaiStats
        from fastai.callback.hook import (
            Hooks,
            flatten_model,  # fastai.layers.flatten_model, as hook.py uses it
            has_params,
        )

        modules = [m for m in flatten_model(model) if has_params(m)]  # fastai's default selection
    except ImportError:  # fastai not installed (the GPU script's dry run in CI): its rows are left out
        modules = None

    def bare() -> tuple:
        return train_step, lambda: None

    def fastai(hist: bool) -> H.Setup:
        def setup() -> tuple:
            cb = FastaiStats(with_hist=hist)
            hooks = Hooks(modules, cb.hook, is_forward=True, detach=True, cpu=True)
            stats = []

            def step() -> None:
                train_step()
                stats.append(hooks.stored)  # fastai's after_batch

            return step, hooks.remove

        return setup

    def hk_act(hist: bool) -> H.Setup:
        def setup() -> tuple:
            s = hookkit.ActivationStats(model, hist=hist)
            return train_step, lambda: (s.to_numpy(), s.remove())

        return setup

    def hk_grad() -> tuple:
        s = hookkit.GradientStats(model)
        return train_step, lambda: (s.to_numpy(), s.remove())

    def hk_both() -> tuple:  # the GPU script's row: both observers of a training run at once
        a, g = hookkit.ActivationStats(model, hist=True), hookkit.GradientStats(model)
        return train_step, lambda: (a.to_numpy(), g.to_numpy(), a.remove(), g.remove())

    counts = {"fastai": len(modules or ()), "hookkit": len(hookkit.select(model, hookkit.WITH_PARAMS))}
    rows = [
        ("bare", bare),
        ("fastai ActivationStats", fastai(False)),
        ("hookkit.ActivationStats", hk_act(False)),
        ("fastai ActivationStats, hist", fastai(True)),
        ("hookkit.ActivationStats(hist=True)", hk_act(True)),
        ("hookkit.GradientStats", hk_grad),
        ("hookkit.ActivationStats(hist=True) + GradientStats", hk_both),
    ]
    return [(name, setup) for name, setup in rows if modules is not None or not name.startswith("fastai")], counts


PAIRS = {
    "hookkit.ActivationStats": "fastai ActivationStats",
    "hookkit.ActivationStats(hist=True)": "fastai ActivationStats, hist",
}


def report(title: str, res: dict[str, H.Result]) -> str:
    rows = []
    for name, r in res.items():
        if r.error:
            rows.append([name, "failed", "", "", "", r.error.replace("|", "/")])
            continue
        x = H.ratio(res, name, "bare")
        vs = ""
        if name in PAIRS and PAIRS[name] in res:
            fa = H.ratio(res, PAIRS[name], "bare")
            vs = f"{(x - 1) / (fa - 1):.2f}" if fa > 1 else "n/a (fastai ~ bare)"
        rows.append([name, f"{r.median_ms:.1f}", f"{x:.3f}", H.spread(res, name, "bare"), vs, f"{len(r.times)} steps"])
    head = ["variant", "ms/step (median)", "x bare", "x bare IQR", "overhead / fastai's overhead", "n"]
    return f"\n#### {title}\n\n" + H.table(rows, head) + "\n"


def profile(name: str) -> None:
    import cProfile
    import pstats

    model, step = gpt2_step()
    vs, _ = variants(model, step)
    fn, teardown = dict(vs)[name]()
    for _ in range(2):
        fn()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(5):
        fn()
    pr.disable()
    teardown()
    pstats.Stats(pr).sort_stats("tottime").print_stats(25)


def main() -> None:
    import transformers

    try:
        import fastai
    except ImportError:
        fastai = None

    if ARGS.profile:
        return profile(ARGS.profile)
    only = set(ARGS.only.split(",")) if ARGS.only else {"gpt2", "cnn"}
    m = H.machine()
    out = [
        f"`{' '.join(['python', *sys.argv])}` — {m['date']}, {m['cpu']}, {m['cores']} cores, "
        f"torch.set_num_threads({ARGS.threads}), {ARGS.clock} clock, Python {m['python']}, torch {torch.__version__}, "
        f"transformers {transformers.__version__}, fastai {fastai.__version__ if fastai else 'not installed'}, "
        f"freed memory {'kept (mallopt)' if KEPT else 'returned to the OS (glibc default)'}"
    ]
    for key, build, title in (
        ("gpt2", gpt2_step, "GPT-2 4x128, batch 4x64 tokens, training step (AdamW)"),
        ("cnn", cnn_step, "ResNet-style CNN width 32, 8x3x64x64, training step (AdamW)"),
    ):
        if key not in only:
            continue
        model, step = build()
        vs, counts = variants(model, step)
        res = H.run_interleaved(vs, ARGS.rounds, ARGS.reps, warmup=ARGS.warmup)
        out.append(report(f"{title}; layers hooked: fastai {counts['fastai']}, hookkit {counts['hookkit']}", res))
        print(out[-1], flush=True)
    print(out[0])
    if ARGS.markdown:
        with open(ARGS.markdown, "a") as f:
            f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
