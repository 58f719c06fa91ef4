"""Where ScoreCAM's and AblationCAM's time goes, against pytorch-grad-cam (CPU time, interleaved).

    PYTHONPATH=$PWD/src /work/bench-venv/bin/python benchmarks/bench_cam_forwards.py [--repeats 5] [--steps 300]

1. ScoreCAM: the share of (image, channel) rows whose mask is all zero (they share one forward) on
   bench_cam's models with random weights, and on the ResNet-style and VGG-style CNNs trained on
   scikit-learn's digits (8 x 8 -> 32 x 32, 3 channels); the time with each of hookkit's two savings
   switched off (every row run; rows channels-first) against pytorch-grad-cam's, and the N x C forwards
   alone (16 rows per forward, channels-first, no mask: what both tools cannot avoid); one forward with
   channels-last vs channels-first inputs, also on 224 x 224 images and wider convolutions.
2. AblationCAM on ViTs of 2, 4 and 8 blocks (layer: the last block's ``norm1``): the rows multiply at
   that block, so the blocks before it run once on the inputs; pytorch-grad-cam runs the whole model
   on every ablated row. The time of the part after the block's inputs bounds hookkit from below.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
import bench_cam as B  # noqa: E402
import hookkit  # noqa: E402
from hookkit.analyses.cam import forwards  # noqa: E402
from hookkit.analyses.cam import template as camlib  # noqa: E402
from hookkit.analyses.targets import logits_of  # noqa: E402


def median_ms(ts: list[float]) -> float:
    return float(np.median(ts) * 1e3)


# -- ScoreCAM ------------------------------------------------------------------------------------------
def dead_share(model, layer, reshape, x) -> float:
    """The share of (image, channel) rows whose upsampled, min-max scaled mask is all zero."""
    kept = {}
    h = layer.register_forward_hook(lambda m, i, o: kept.__setitem__("a", o.detach().clone()))
    with torch.no_grad():
        model(x)
    h.remove()
    a = reshape(kept["a"]) if reshape else kept["a"]
    up = F.interpolate(a, x.shape[-2:], mode="bilinear", align_corners=True).flatten(2)
    lo, hi = up.amin(-1, keepdim=True), up.amax(-1, keepdim=True)
    return float((((up - lo) / (hi - lo + 1e-8)).amax(-1) == 0).float().mean())


def channels(model, layer, reshape, x) -> int:
    """The layer's number of channels."""
    kept = {}
    h = layer.register_forward_hook(lambda m, i, o: kept.__setitem__("a", o))
    with torch.no_grad():
        model(x[:1])
    h.remove()
    return (reshape(kept["a"]) if reshape else kept["a"]).shape[1]


def every_row(self, masks):
    """``LayerView.masked_scores`` without the shared zero input: every row runs."""
    m, run, x = self.m, self.run, self.x
    n, c = masks.shape[0], masks.shape[1]
    flat = m.reshape(masks, [n * c, 1, *self.size])
    classes = torch.as_tensor(run.classes)
    scores = []
    for lo in range(0, n * c, run.rows):
        rows = torch.arange(lo, min(lo + run.rows, n * c))
        logits = logits_of(self.be, run.forward_masked(x[rows // c] * flat[rows])).reshape(len(rows), -1)
        scores.append(logits.gather(1, classes[rows // c][:, None]))
    return torch.cat(scores).reshape(n, c)


@contextlib.contextmanager
def variant(share: bool, channels_last: bool):
    saved = forwards.LayerView.masked_scores, camlib._Run.forward_masked
    if not share:
        forwards.LayerView.masked_scores = every_row
    if not channels_last:
        camlib._Run.forward_masked = lambda self, rows: self.model(rows)
    try:
        yield
    finally:
        forwards.LayerView.masked_scores, camlib._Run.forward_masked = saved


VARIANTS = {"hookkit": (True, True), "no dead sharing": (False, True), "no channels-last": (True, False), "neither": (False, False)}


def scorecam_row(gc, label, model, ln, layer, reshape, vit, x, repeats) -> None:
    times = {v: [] for v in VARIANTS} | {"theirs": [], "forwards": []}
    n, c = len(x), channels(model, layer, reshape, x)
    rows = x.repeat(c, 1, 1, 1)  # N x C inputs, as many as ScoreCAM masks

    def forwards():  # the model alone on N x C rows, 16 per forward, as pytorch-grad-cam runs them
        with torch.no_grad():
            for lo in range(0, n * c, 16):
                model(rows[lo : lo + 16])

    for _ in range(repeats):  # interleaved
        t0 = time.process_time()
        forwards()
        times["forwards"].append(time.process_time() - t0)
        for v, flags in VARIANTS.items():
            with variant(*flags):
                t0 = time.process_time()
                ours = hookkit.cam(model, ln, x, "scorecam")
                times[v].append(time.process_time() - t0)
        t0 = time.process_time()
        theirs = B.theirs(gc, "scorecam", model, layer, reshape, vit, x, None)
        times["theirs"].append(time.process_time() - t0)
    t = median_ms(times["theirs"])
    cells = " | ".join(f"{median_ms(times[v]) / t:.2f}x" for v in VARIANTS)
    diff = float(np.abs(ours - theirs).max())
    alone = median_ms(times["forwards"]) / t
    print(f"| {label} | {dead_share(model, layer, reshape, x):.0%} | {cells} | {t:.0f} ms | {alone:.2f}x | {diff:.1e} |", flush=True)


def digits(n_train: int = 1500):
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32)[:, None] / 16.0
    x = F.interpolate(x, size=(32, 32), mode="bilinear", align_corners=False).repeat(1, 3, 1, 1)
    x = (x - x.mean()) / x.std()
    y = torch.tensor(d.target)
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def train(model, x, y, steps: int):
    model.train()
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        idx = torch.randint(0, len(x), (64,), generator=g)
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def scorecam_section(gc, repeats: int, steps: int) -> None:
    print("\nScoreCAM, batch of 8: share of all-zero masks, hookkit / pytorch-grad-cam with each saving switched off")
    print("\n| model | all-zero masks | " + " | ".join(VARIANTS) + " | pytorch-grad-cam | the forwards alone | max abs diff |")
    print("|---|---|" + "---|" * len(VARIANTS) + "---|---|---|")
    x = torch.randn(8, 3, 32, 32, generator=torch.Generator().manual_seed(5))
    for name, (model, ln, layer, reshape, vit) in B.models().items():
        scorecam_row(gc, f"{name}, random weights", model, ln, layer, reshape, vit, x, repeats)
    xtr, ytr, xte, yte = digits()
    torch.manual_seed(0)
    for name, (model, ln, layer, reshape, vit) in B.models().items():
        if name not in ("ResNet-style", "VGG-style"):
            continue
        train(model, xtr, ytr, steps)
        with torch.no_grad():
            acc = float((model(xte).argmax(1) == yte).float().mean())
        scorecam_row(gc, f"{name}, digits ({steps} steps, {acc:.0%} held out)", model, ln, layer, reshape, vit, xte[:8], repeats)


def layout_section(repeats: int) -> None:
    """One forward channels-first vs channels-last, beyond the 32 x 32 benchmark images."""

    class WideVGG(torch.nn.Module):
        def __init__(self):
            super().__init__()
            conv, relu, pool = torch.nn.Conv2d, torch.nn.ReLU, torch.nn.MaxPool2d
            self.f = torch.nn.Sequential(conv(3, 64, 3, padding=1), relu(), pool(2), conv(64, 128, 3, padding=1), relu(), pool(2),
                                         conv(128, 256, 3, padding=1), relu(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                         torch.nn.Linear(256, 10))  # fmt: skip

        def forward(self, x):
            return self.f(x)

    ms = B.models()
    cases = [("ResNet-style", ms["ResNet-style"][0], 32, 16), ("ResNet-style", ms["ResNet-style"][0], 224, 8),
             ("VGG-style", ms["VGG-style"][0], 32, 16), ("VGG, 64-128-256 channels", WideVGG().eval(), 112, 4),
             ("ViT (tokens)", ms["ViT (tokens)"][0], 32, 16), ("Swin-style (NHWC)", ms["Swin-style (NHWC)"][0], 32, 16)]  # fmt: skip
    print("\nOne forward, channels-last input / channels-first input (CPU time, median):")
    print("\n| model | input | channels-last / channels-first |")
    print("|---|---|---|")
    for name, model, size, bs in cases:
        x = torch.randn(bs, 3, size, size)
        ts = {"cf": [], "cl": []}
        with torch.no_grad():
            for _ in range(repeats):
                for fmt in ts:
                    xx = x.contiguous(memory_format=torch.channels_last) if fmt == "cl" else x
                    t0 = time.process_time()
                    model(xx)
                    ts[fmt].append(time.process_time() - t0)
        print(f"| {name} | {bs} x 3 x {size} x {size} | {median_ms(ts['cl']) / median_ms(ts['cf']):.2f}x |", flush=True)


# -- AblationCAM on deeper ViTs ------------------------------------------------------------------------
def ablation_section(gc, repeats: int) -> None:
    print("\nAblationCAM on ViTs (layer: the last block's norm1), batch of 8: hookkit / pytorch-grad-cam, and the time of")
    print("the rows after the block's inputs alone (32 channels x 8 images through the last block and the head)")
    print("\n| blocks | hookkit / pytorch-grad-cam | hookkit | pytorch-grad-cam | after the block, alone | max abs diff |")
    print("|---|---|---|---|---|---|")
    x = torch.randn(8, 3, 32, 32, generator=torch.Generator().manual_seed(5))
    for depth in (2, 4, 8):
        torch.manual_seed(0)
        model = B.ViT(depth=depth).eval()
        ln, layer = f"blocks.{depth - 1}.norm1", model.blocks[depth - 1].norm1
        with torch.no_grad():
            t = model.embed(x).flatten(2).transpose(1, 2)
            t = torch.cat([model.cls.expand(8, -1, -1), t], 1) + model.pos
            rows = model.blocks[:-1](t).repeat(32, 1, 1)

        def suffix(model=model, rows=rows):
            with torch.no_grad():
                for lo in range(0, len(rows), 128):
                    model.head(model.norm(model.blocks[-1](rows[lo : lo + 128]))[:, 0])

        ts = {"ours": [], "theirs": [], "suffix": []}
        for _ in range(repeats):
            t0 = time.process_time()
            ours = hookkit.cam(model, ln, x, "ablationcam")
            ts["ours"].append(time.process_time() - t0)
            t0 = time.process_time()
            theirs = B.theirs(gc, "ablationcam", model, layer, B.vit_reshape, True, x, None)
            ts["theirs"].append(time.process_time() - t0)
            t0 = time.process_time()
            suffix()
            ts["suffix"].append(time.process_time() - t0)
        o, th, s = (median_ms(ts[k]) for k in ("ours", "theirs", "suffix"))
        print(
            f"| {depth} | {o / th:.2f}x | {o:.0f} ms | {th:.0f} ms | {s:.0f} ms ({s / th:.2f}x) | {np.abs(ours - theirs).max():.1e} |",
            flush=True,
        )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    torch.set_num_threads(1)
    gc = B.import_grad_cam()
    scorecam_section(gc, args.repeats, args.steps)
    layout_section(args.repeats)
    ablation_section(gc, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
