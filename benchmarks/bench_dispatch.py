"""Per-call cost of a hook, in microseconds: what hookkit adds over a plain hook.

    python benchmarks/bench_dispatch.py [--layers 200] [--rounds 20] [--reps 50] [--profile]
    python benchmarks/bench_dispatch.py --identity [--layers 64]

``--identity``: a Sequential of ``--layers`` ``nn.Identity``, one no-op hook on each: the forward
with ``hookkit.on_forward`` against the same forward with plain ``register_forward_hook`` hooks.

A Sequential of ``--layers`` ReLUs on a 1-element tensor, so that the hooks are nearly all
the work; a step is one forward (plus emptying what was kept). Reported: CPU microseconds per
hooked layer call above the bare forward. ``--profile`` prints cProfile of hookkit.capture.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--layers", type=int, default=200)
p.add_argument("--rounds", type=int, default=20)
p.add_argument("--reps", type=int, default=50)
p.add_argument("--profile", action="store_true")
p.add_argument("--identity", action="store_true", help="nn.Identity layers, no-op hooks: on_forward vs plain hooks")
p.add_argument("--gc", action="store_true", help="keep the garbage collector on while timing")
p.add_argument(
    "--baseline",
    metavar="COMMIT",
    help="also time hookkit.capture of this git commit, imported side by side as package hookkit_base",
)
ARGS = p.parse_args()
H.set_threads(1)
H.block_torchvision()

import torch  # noqa: E402
from torch import nn  # noqa: E402

import hookkit  # noqa: E402

torch.set_num_threads(1)
model = nn.Sequential(*[(nn.Identity() if ARGS.identity else nn.ReLU()) for _ in range(ARGS.layers)])
x = torch.ones(1)
named = hookkit.select(model, hookkit.LEAVES)


def fwd() -> None:
    with torch.no_grad():
        model(x)


def bare() -> tuple:
    return fwd, lambda: None


def plain(n: int = 1):
    def setup() -> tuple:
        store = {name: [] for name, _ in named}
        hs = []
        for name, layer in named:
            keep = store[name].append
            for _ in range(n):
                hs.append(layer.register_forward_hook(lambda m, i, o, keep=keep: keep(o.detach())))

        def step() -> None:
            fwd()
            for v in store.values():
                v.clear()

        return step, lambda: [h.remove() for h in hs]

    return setup


def caps(n: int):
    def setup() -> tuple:
        cs = [hookkit.capture(model, hookkit.LEAVES) for _ in range(n)]

        def step() -> None:
            fwd()
            for c in cs:
                c.clear()

        return step, lambda: [c.remove() for c in cs]

    return setup


def observers(n: int):
    def setup() -> tuple:
        hs = [hookkit.on_forward(model, hookkit.LEAVES, lambda m, i, o: None, priority=hookkit.OBSERVER) for _ in range(n)]
        return fwd, lambda: [h.remove() for h in hs]

    return setup


def cap_obs() -> tuple:
    c = hookkit.capture(model, hookkit.LEAVES)
    hs = [hookkit.on_forward(model, hookkit.LEAVES, lambda m, i, o: None, priority=hookkit.OBSERVER) for _ in range(2)]

    def step() -> None:
        fwd()
        c.clear()

    return step, lambda: [h.remove() for h in (c, *hs)]


if ARGS.profile:
    import cProfile
    import pstats

    c = hookkit.capture(model, hookkit.LEAVES)
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(200):
        fwd()
        c.clear()
    pr.disable()
    c.remove()
    pstats.Stats(pr).sort_stats("tottime").print_stats(15)
    sys.exit()


def baseline_package(commit: str) -> object:
    """The tree of ``commit`` as an importable package ``hookkit_base`` (a temp dir on sys.path)."""
    import importlib
    import re
    import subprocess
    import tempfile

    root = Path(tempfile.mkdtemp())
    repo = Path(__file__).resolve().parents[1]
    tar = subprocess.run(["git", "archive", commit, "src/hookkit"], cwd=repo, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(root)], input=tar, check=True)
    pkg = root / "src" / "hookkit"
    for f in pkg.rglob("*.py"):
        f.write_text(re.sub(r"\bhookkit\.", "hookkit_base.", f.read_text()).replace("from hookkit import", "from hookkit_base import"))
    pkg.rename(root / "hookkit_base")
    sys.path.insert(0, str(root))
    return importlib.import_module("hookkit_base")


def base_caps() -> tuple:
    c = BASE.capture(model, BASE.LEAVES)

    def step() -> None:
        fwd()
        c.clear()

    return step, c.remove


def noop_plain() -> tuple:
    hs = [layer.register_forward_hook(lambda m, i, o: None) for _, layer in named]
    return fwd, lambda: [h.remove() for h in hs]


def noop_on_forward() -> tuple:
    h = hookkit.on_forward(model, hookkit.LEAVES, lambda m, i, o: None)
    return fwd, h.remove


if ARGS.identity:
    res = H.run_interleaved(
        [("bare", bare), ("plain no-op hooks", noop_plain), ("hookkit.on_forward no-op", noop_on_forward)],
        ARGS.rounds,
        ARGS.reps,
        warmup=10,
    )
    base = res["bare"].median_ms
    print(f"machine: {H.machine()}; CPU time, medians of {ARGS.rounds} interleaved rounds of {ARGS.reps} forwards")
    rows = [
        [
            n,
            f"{r.median_ms * 1e3:.1f}",
            f"{(r.median_ms - base) * 1e3 / ARGS.layers:.3f}",
            f"{H.ratio(res, n, 'plain no-op hooks'):.3f}",
            H.spread(res, n, "plain no-op hooks"),
        ]
        for n, r in res.items()
    ]
    print(H.table(rows, ["variant", "us per forward", "us per hooked call above bare", "x plain hooks", "IQR"]))
    sys.exit()

variants = [
    ("bare", bare),
    ("plain hook", plain(1)),
    ("hookkit.capture", caps(1)),
    ("hookkit on_forward no-op", observers(1)),
    ("hookkit 3 captures", caps(3)),
    ("hookkit capture + 2 no-op observers", cap_obs),
    ("plain hook x3", plain(3)),
]
if ARGS.baseline:
    BASE = baseline_package(ARGS.baseline)
    variants.insert(3, (f"hookkit.capture at {ARGS.baseline}", base_caps))

    def base_observer() -> tuple:
        h = BASE.on_forward(model, BASE.LEAVES, lambda m, i, o: None, priority=BASE.OBSERVER)
        return fwd, h.remove

    variants.insert(5, (f"hookkit on_forward no-op at {ARGS.baseline}", base_observer))
res = H.run_interleaved(variants, ARGS.rounds, ARGS.reps, warmup=5, gc_on=ARGS.gc)
base = res["bare"].median_ms
rows = [[n, f"{r.median_ms * 1e3 / ARGS.layers:.2f}", f"{(r.median_ms - base) * 1e3 / ARGS.layers:.2f}"] for n, r in res.items()]
print(H.table(rows, ["variant", "us per layer call (total)", "us per layer call above bare"]))
