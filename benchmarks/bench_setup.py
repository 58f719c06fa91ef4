"""Set-up and removal cost of a capture, per forward: what a patching sweep or per-example edit pays
each time it opens a context. GPT-2 (4 blocks, small width), the 4 blocks' outputs.

    python benchmarks/bench_setup.py [--rounds 15] [--reps 40]

Variants, interleaved (CPU time, one thread; medians):
- set-up + removal alone: ``with hookkit.capture(model, "transformer.h.*")`` entered and left with no
  forward, 4 plain ``register_forward_hook`` + ``remove``, and nnsight's ``trace`` (when installed)
  cannot be timed without a forward, so it appears in the second table only;
- one forward with set-up and removal each time: bare forward, plain hooks, hookkit.capture,
  nnsight ``NNsight(model).trace(x)`` saving the 4 outputs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--rounds", type=int, default=15)
p.add_argument("--reps", type=int, default=40)
ARGS = p.parse_args()
H.set_threads(1)
H.block_torchvision()

import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, logging  # noqa: E402

import hookkit  # noqa: E402

logging.set_verbosity_error()
torch.set_num_threads(1)
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=64, n_head=4, vocab_size=512, n_positions=64)).eval()
x = torch.randint(0, 512, (1, 16))
blocks = [model.transformer.h[i] for i in range(4)]
SETUPS = 50  # set-ups per timed step of the first table


def plain_setup() -> None:
    keep = []
    hs = [b.register_forward_hook(lambda m, i, o: keep.append(o)) for b in blocks]
    for h in hs:
        h.remove()


def hookkit_setup() -> None:
    with hookkit.capture(model, "transformer.h.*"):
        pass


def repeat(fn):
    def setup() -> tuple:
        def step() -> None:
            for _ in range(SETUPS):
                fn()

        return step, lambda: None

    return setup


def fwd() -> None:
    with torch.no_grad():
        model(x)


def per_forward(kind: str):
    def setup() -> tuple:
        if kind == "bare":
            return fwd, lambda: None
        if kind == "plain":

            def step() -> None:
                keep = []
                hs = [b.register_forward_hook(lambda m, i, o: keep.append(o[0].detach())) for b in blocks]
                try:
                    fwd()
                finally:
                    for h in hs:
                        h.remove()

            return step, lambda: None
        if kind == "hookkit":

            def step() -> None:
                with hookkit.capture(model, "transformer.h.*") as cap, torch.no_grad():
                    model(x)
                cap["transformer.h.3"]

            return step, lambda: None
        from nnsight import NNsight

        nm = NNsight(model)

        def step() -> None:
            saved: list = []
            with torch.no_grad(), nm.trace(x):
                for i in range(4):
                    saved.append(nm.transformer.h[i].output.save())
            assert len(saved) == 4

        return step, lambda: None

    return setup


try:
    import nnsight  # noqa: F401

    have_nnsight = True
except ImportError:
    have_nnsight = False

first = H.run_interleaved(
    [("plain hooks x4", repeat(plain_setup)), ("hookkit.capture", repeat(hookkit_setup))], ARGS.rounds, ARGS.reps, warmup=3
)
print(f"machine: {H.machine()}; CPU time, medians of {ARGS.rounds} interleaved rounds")
print("\nSet-up + removal alone (4 GPT-2 blocks), no forward")
print(H.table([[n, f"{r.median_ms * 1e3 / SETUPS:.1f}"] for n, r in first.items()], ["variant", "us per set-up + removal"]))

variants = [("bare forward", per_forward("bare")), ("plain hooks", per_forward("plain")), ("hookkit.capture", per_forward("hookkit"))]
if have_nnsight:
    variants.append(("nnsight trace", per_forward("nnsight")))
second = H.run_interleaved(variants, ARGS.rounds, ARGS.reps, warmup=3)
print("\nOne forward (1x16 tokens) with set-up and removal each time, the 4 blocks' outputs kept")
rows = [
    [n, f"{r.median_ms * 1e3:.0f}", f"{H.ratio(second, n, 'bare forward'):.3f}", H.spread(second, n, "bare forward"), r.error]
    for n, r in second.items()
]
print(H.table(rows, ["variant", "us per forward", "x bare", "IQR", "error"]))
