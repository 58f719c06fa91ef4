"""hookkit.attribute's propagation methods against captum and zennit (peers of the benchmark
environment only).

    cd benchmarks && PYTHONPATH=$PWD/../src:$PWD /work/bench-venv/bin/python bench_attribution_propagation.py equal
    cd benchmarks && PYTHONPATH=$PWD/../src:$PWD /work/bench-venv/bin/python bench_attribution_propagation.py time [--rounds 5]

``equal``: float64, a small CNN (conv-relu-conv-relu-avgpool-linear-tanh-linear, flattening in its
forward: captum's LRP has no rule for nn.Flatten) and a ReLU/tanh MLP; each method against
captum's class of the same name (LRP at captum's defaults) and zennit's composites; prints
max |hookkit - peer| / max |peer|. Exits 1 if any exceeds 1e-6 (1e-5 for zennit).

``time``: one call of each method on the CNN, 32 samples of 2x16x16, float32, one math thread;
hookkit, captum and zennit variants interleaved over rounds; the median CPU time per call and the
ratio to the peer.
"""

from __future__ import annotations

import argparse
import os
import sys
import types

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import machine, ratio, run_interleaved, set_threads, table, use_clock  # noqa: E402


def _stub_torchvision() -> None:
    """zennit imports torchvision's ResNet blocks at import time; only the names are needed."""
    import torch

    resnet = types.ModuleType("torchvision.models.resnet")
    resnet.Bottleneck = type("Bottleneck", (torch.nn.Module,), {})  # type: ignore[attr-defined]
    resnet.BasicBlock = type("BasicBlock", (torch.nn.Module,), {})  # type: ignore[attr-defined]
    for name, mod in (
        ("torchvision", types.ModuleType("torchvision")),
        ("torchvision.models", types.ModuleType("m")),
        ("torchvision.models.resnet", resnet),
    ):
        sys.modules[name] = mod


def models(dtype, size=8, n=3):
    import torch
    from torch import nn

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.r1, self.c2, self.r2 = nn.Conv2d(2, 4, 3), nn.ReLU(), nn.Conv2d(4, 3, 3, padding=1), nn.ReLU()
            self.pool, self.l1, self.t, self.l2 = nn.AvgPool2d(2), nn.Linear(3 * ((size - 2) // 2) ** 2, 5), nn.Tanh(), nn.Linear(5, 4)

        def forward(self, x):
            return self.l2(self.t(self.l1(self.pool(self.r2(self.c2(self.r1(self.c1(x))))).flatten(1))))

    torch.manual_seed(0)
    cnn = CNN().to(dtype).eval()
    mlp = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 3)).to(dtype).eval()
    g = torch.Generator().manual_seed(1)
    xc, bc = torch.randn(n, 2, size, size, generator=g, dtype=dtype), 0.1 * torch.randn(n, 2, size, size, generator=g, dtype=dtype)
    xm, bm = torch.randn(n, 6, generator=g, dtype=dtype), 0.1 * torch.randn(n, 6, generator=g, dtype=dtype)
    return [("CNN", cnn, xc, bc), ("MLP", mlp, xm, bm)]


def _zennit(model, x, composite, target=1):
    import torch
    from zennit.attribution import Gradient

    out = model(x).detach()
    seed = torch.zeros_like(out)
    seed[:, target] = out[:, target]
    with Gradient(model, composite) as attributor:
        return attributor(x.clone().requires_grad_(), seed)[1]


def equal() -> int:
    import warnings

    import torch
    from captum import attr as ca

    _stub_torchvision()
    from zennit.composites import EpsilonGammaBox, EpsilonPlusFlat

    import hookkit

    warnings.filterwarnings("ignore")

    def cases_for(mname, model, x, b):
        dist = b[:2]
        cases = [
            ("deeplift", "captum DeepLift", lambda: ca.DeepLift(model).attribute(x, b, target=1), {"baselines": b}, None, 1e-6),
            (
                "deeplift_shap",
                "captum DeepLiftShap",
                lambda: ca.DeepLiftShap(model).attribute(x, dist, target=1),
                {"baselines": dist},
                None,
                1e-6,
            ),
            ("guided_backprop", "captum GuidedBackprop", lambda: ca.GuidedBackprop(model).attribute(x, target=1), {}, None, 1e-6),
            ("deconvolution", "captum Deconvolution", lambda: ca.Deconvolution(model).attribute(x, target=1), {}, None, 1e-6),
            ("lrp", "captum LRP (defaults)", lambda: ca.LRP(model).attribute(x, target=1), {}, None, 1e-6),
            ("lrp", "zennit EpsilonPlusFlat", lambda: _zennit(model, x, EpsilonPlusFlat()), {"composite": "EpsilonPlusFlat"}, None, 1e-5),
            (
                "lrp",
                "zennit EpsilonGammaBox",
                lambda: _zennit(model, x, EpsilonGammaBox(low=-3.0, high=3.0)),
                {"composite": ("EpsilonGammaBox", {"low": -3.0, "high": 3.0})},
                None,
                1e-5,
            ),
        ]
        if mname == "CNN":
            cases += [
                (
                    "guided_gradcam",
                    "captum GuidedGradCam (c2)",
                    lambda: ca.GuidedGradCam(model, model.c2).attribute(x, target=1),
                    {},
                    "c2",
                    1e-6,
                ),
                (
                    "deeplift",
                    "captum LayerDeepLift (c2)",
                    lambda: ca.LayerDeepLift(model, model.c2).attribute(x, b, target=1),
                    {"baselines": b},
                    "c2",
                    1e-6,
                ),
                ("lrp", "captum LayerLRP (c2)", lambda: ca.LayerLRP(model, model.c2).attribute(x, target=1), {}, "c2", 1e-6),
            ]
        return cases

    rows, worst = [], 0.0
    for mname, model, x, b in models(torch.float64):
        for method, peer, theirs, kw, layer, tol in cases_for(mname, model, x, b):
            c = theirs().detach().numpy()
            h = hookkit.attribute(model, layer, x, method=method, target=1, **kw).numpy()
            err = float(np.abs(h - c).max() / max(np.abs(c).max(), 1e-300))
            worst = max(worst, err / tol)
            rows.append([mname, method, peer, f"{err:.1e}", "ok" if err <= tol else "FAIL"])
    print(table(rows, ["model", "method", "against", "max rel. diff", "within tol."]))
    return 0 if worst <= 1.0 else 1


def timing(rounds: int) -> None:
    import warnings

    import torch
    from captum import attr as ca

    _stub_torchvision()
    from zennit.composites import EpsilonPlusFlat

    import hookkit

    warnings.filterwarnings("ignore")
    use_clock("cpu")
    _, model, x, b = models(torch.float32, size=16, n=32)[0]
    dist = b[:4]
    methods = [
        ("deeplift", lambda: ca.DeepLift(model).attribute(x, b, target=1), {"baselines": b}),
        ("deeplift_shap", lambda: ca.DeepLiftShap(model).attribute(x, dist, target=1), {"baselines": dist}),
        (
            "gradient_shap",
            lambda: ca.GradientShap(model).attribute(x, dist, target=1, n_samples=8),
            {"baselines": dist, "n_samples": 8, "stdevs": 0.0, "seed": 0},
        ),
        ("guided_backprop", lambda: ca.GuidedBackprop(model).attribute(x, target=1), {}),
        ("lrp", lambda: ca.LRP(model).attribute(x, target=1), {}),
        ("lrp EpsilonPlusFlat", lambda: _zennit(model, x, EpsilonPlusFlat()), {"composite": "EpsilonPlusFlat"}),
    ]

    def ours(method, kw):
        return lambda: (lambda: hookkit.attribute(model, None, x, method=method, target=1, **kw), lambda: None)

    def theirs(peer):
        return lambda: (peer, lambda: None)

    rows = []
    for name, peer, kw in methods:
        res = run_interleaved([("hookkit", ours(name.split()[0], kw)), ("peer", theirs(peer))], rounds=rounds, reps=5, warmup=1)
        rows.append(
            [
                name,
                "zennit" if "Epsilon" in name else "captum",
                f"{res['hookkit'].median_ms:.1f}",
                f"{res['peer'].median_ms:.1f}",
                f"{ratio(res, 'hookkit', 'peer'):.2f}",
            ]
        )
    print(table(rows, ["method", "peer", "hookkit ms", "peer ms", "hookkit / peer"]))
    print(machine())


if __name__ == "__main__":
    set_threads(1)
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["equal", "time"])
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    if a.mode == "equal":
        sys.exit(equal())
    timing(a.rounds)
