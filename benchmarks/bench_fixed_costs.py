"""hookkit's two fixed costs, interleaved in one run (CPU time, one thread, medians):

1. set-up + removal: ``with hookkit.capture(gpt2, "transformer.h.*"): pass`` on a 4-block GPT-2
   against four plain ``register_forward_hook`` + ``remove`` (goal: at most 2.5x);
2. per call: a forward of 64 ``nn.Identity`` layers each with a no-op ``hookkit.on_forward`` against
   the same forward with a no-op plain forward hook on each (goal: at most 1.10x).

    python benchmarks/bench_fixed_costs.py [--rounds 21] [--reps 40] [--profile setup|dispatch]

``--profile``: cProfile of one side instead of the timings (where the fixed cost goes).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--rounds", type=int, default=21)
p.add_argument("--reps", type=int, default=40)
p.add_argument("--profile", choices=["setup", "dispatch"])
ARGS = p.parse_args()
H.set_threads(1)
H.block_torchvision()

import torch  # noqa: E402
from torch import nn  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, logging  # noqa: E402

import hookkit  # noqa: E402

logging.set_verbosity_error()
torch.set_num_threads(1)
torch.manual_seed(0)
gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=64, n_head=4, vocab_size=512, n_positions=64)).eval()
blocks = [gpt2.transformer.h[i] for i in range(4)]
SETUPS = 50  # set-ups per timed step
ids = nn.Sequential(*[nn.Identity() for _ in range(64)])
x = torch.ones(1)


def plain_setup() -> None:
    keep: list = []
    hs = [b.register_forward_hook(lambda m, i, o: keep.append(o)) for b in blocks]
    for h in hs:
        h.remove()


def hookkit_setup() -> None:
    with hookkit.capture(gpt2, "transformer.h.*"):
        pass


def repeat(fn):  # noqa: ANN001, ANN201
    def setup() -> tuple:
        def step() -> None:
            for _ in range(SETUPS):
                fn()

        return step, lambda: None

    return setup


def fwd() -> None:
    with torch.no_grad():
        ids(x)


def noop_plain() -> tuple:
    hs = [layer.register_forward_hook(lambda m, i, o: None) for layer in ids]
    return fwd, lambda: [h.remove() for h in hs]


def noop_on_forward() -> tuple:
    h = hookkit.on_forward(ids, hookkit.LEAVES, lambda m, i, o: None)
    return fwd, h.remove


if ARGS.profile:
    import cProfile
    import pstats

    if ARGS.profile == "setup":
        work = hookkit_setup
    else:
        step, done = noop_on_forward()
        work = step
    for _ in range(200):
        work()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(3000):
        work()
    pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(25)
    sys.exit()

res = H.run_interleaved(
    [
        ("plain hooks x4: register + remove", repeat(plain_setup)),
        ("hookkit.capture 4 blocks: with ...: pass", repeat(hookkit_setup)),
        ("64 Identity, no-op plain hooks", noop_plain),
        ("64 Identity, no-op hookkit.on_forward", noop_on_forward),
    ],
    ARGS.rounds,
    ARGS.reps,
    warmup=5,
)
print(f"machine: {H.machine()}; CPU time, medians of {ARGS.rounds} interleaved rounds")
rows = [
    [
        "set-up + removal (us each)",
        f"{res['plain hooks x4: register + remove'].median_ms * 1e3 / SETUPS:.1f}",
        f"{res['hookkit.capture 4 blocks: with ...: pass'].median_ms * 1e3 / SETUPS:.1f}",
        f"{H.ratio(res, 'hookkit.capture 4 blocks: with ...: pass', 'plain hooks x4: register + remove'):.2f}",
        H.spread(res, "hookkit.capture 4 blocks: with ...: pass", "plain hooks x4: register + remove"),
        "2.5",
    ],
    [
        "no-op observer per forward (us)",
        f"{res['64 Identity, no-op plain hooks'].median_ms * 1e3:.1f}",
        f"{res['64 Identity, no-op hookkit.on_forward'].median_ms * 1e3:.1f}",
        f"{H.ratio(res, '64 Identity, no-op hookkit.on_forward', '64 Identity, no-op plain hooks'):.3f}",
        H.spread(res, "64 Identity, no-op hookkit.on_forward", "64 Identity, no-op plain hooks"),
        "1.10",
    ],
]
print(H.table(rows, ["fixed cost", "plain hooks", "hookkit", "x plain", "IQR of x", "goal"]))
errors = [f"{n}: {r.error}" for n, r in res.items() if r.error]
if errors:
    print("errors:", *errors, sep="\n  ")
