"""What the edge-case fixes cost (issue "trust at the edges"): least CPU time, one thread.

    PYTHONPATH=src /work/main/.venv/bin/python benchmarks/bench_edges.py

1. ``GradientStats`` numbers the backwards of each forward (one row per backward): per gradient
   event a counter lookup, per backward one end-of-backward callback. Measured as one training step
   of a 12-layer MLP (batch 64, width 256) with GradientStats on every Linear, against the same with
   the counter replaced by a constant (what it cost before), and against the bare step.
2. The root's pre-hook notes the frame of the root call (to tell a forward inside a forward from
   one that raised): a forward of a 12-layer MLP with one capture on its last layer, against the
   same with the frame not passed.
3. ``extract`` fingerprints the weights (sha256 of every parameter and buffer): seconds per GB.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402

H.set_threads(1)

import torch  # noqa: E402

import hookkit  # noqa: E402
from hookkit.backends import backend_for  # noqa: E402
from hookkit.core import clock as clock_mod  # noqa: E402
from hookkit.observers.stats import backwards  # noqa: E402

torch.set_num_threads(1)
torch.manual_seed(0)
layers = []
for _ in range(12):
    layers += [torch.nn.Linear(256, 256), torch.nn.ReLU()]
model = torch.nn.Sequential(*layers)
x = torch.randn(64, 256)


def step() -> None:
    model(x).square().mean().backward()


def gradient_stats(counter: bool):
    original = backwards.BackwardCounter.index
    if not counter:
        backwards.BackwardCounter.index = lambda self, step: 0
    try:
        stats = hookkit.GradientStats(model, torch.nn.Linear)
    finally:
        backwards.BackwardCounter.index = original
    return stats


def ratios(rounds: int = 5) -> None:
    bare, old, new = [], [], []
    for _ in range(rounds):  # interleaved: bare, counter off, counter on
        bare.append(H.least_ms(step))
        with gradient_stats(False):
            old.append(H.least_ms(step))
        with gradient_stats(True):
            new.append(H.least_ms(step))
    b, o, n = (sorted(v)[len(v) // 2] for v in (bare, old, new))
    print(
        f"1. training step: bare {b:.2f} ms; GradientStats without backward numbering {o:.2f} ms ({o / b:.3f}x); with it {n:.2f} ms ({n / b:.3f}x); new/old {n / o:.3f}"
    )


def nested(rounds: int = 5) -> None:
    original = clock_mod.Clock.tick

    def no_frame(self, transformed=False, frame=None, root=None):
        return original(self, transformed)

    with_frame: list[float] = []
    without: list[float] = []
    fwd = lambda: model(x)  # noqa: E731
    with torch.no_grad(), hookkit.capture(model, "22", keep="last"):
        for r in range(rounds):  # the order alternates between rounds
            for variant in ("with", "without") if r % 2 == 0 else ("without", "with"):
                if variant == "with":
                    with_frame.append(H.least_ms(fwd))
                    continue
                clock_mod.Clock.tick = no_frame
                try:
                    without.append(H.least_ms(fwd))
                finally:
                    clock_mod.Clock.tick = original
    a, b = sorted(with_frame)[rounds // 2], sorted(without)[rounds // 2]
    print(
        f"2. forward with a capture: frame noted {a * 1e3:.1f} us, not noted {b * 1e3:.1f} us (difference {1e3 * (a - b):+.1f} us per forward)"
    )


def digest() -> None:
    from hookkit.observers.extract import _weights

    big = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(16)])  # 268 MB of float32
    nbytes = sum(p.numel() * p.element_size() for p in big.parameters())
    be = backend_for(big)
    t0 = time.process_time()
    _weights(big, be)
    dt = time.process_time() - t0
    print(f"3. weights digest: {nbytes / 2**20:.0f} MiB in {dt:.2f} s CPU ({dt / (nbytes / 2**30):.2f} s per GiB)")


if __name__ == "__main__":
    print(H.machine() if hasattr(H, "machine") else "")
    ratios()
    nested()
    digest()
