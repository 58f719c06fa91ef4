"""Paddle CPU statistics: hookkit's kernel route (dlpack, no copy) against Paddle's own ops (the
route hookkit takes on a GPU, or without a C compiler), on the outputs and gradients of one
training step of paddle.vision's resnet18 and on a GPT-2-sized logits tensor.

    /work/bench-venv/bin/python benchmarks/bench_stats_paddle.py    (or /work/venv/bin/python)

Least CPU time of 7 runs over the captured tensors, one thread.
"""

from __future__ import annotations

import _harness as H

H.set_threads(1)
H.keep_freed_memory()

import numpy as np  # noqa: E402
import paddle  # noqa: E402

import hookkit  # noqa: E402
from hookkit.backends import backend_for  # noqa: E402
from hookkit.backends.paddle import PaddleBackend  # noqa: E402


def main() -> None:
    paddle.seed(0)
    model = paddle.vision.models.resnet18(num_classes=10)
    names = [n for n, _ in hookkit.select(model, hookkit.WITH_PARAMS)]
    x = paddle.randn([8, 3, 64, 64])
    with hookkit.capture(model, names, grads=True) as cap:
        model(x).mean().backward()
    first = lambda v: v[0] if isinstance(v, tuple) else v  # noqa: E731
    workloads = {
        f"resnet18 8x3x64x64: {len(names)} outputs": [first(cap[n]) for n in names],
        "GPT-2-sized logits 4x64x50257": [paddle.randn([4, 64, 50257]) * 1.5 - 2.6],
    }
    be = backend_for(model)
    print("| tensors | statistic | Paddle ops | hookkit kernel | ratio |")
    print("|---|---|---|---|---|")
    for label, ts in workloads.items():
        calls = {
            "ActivationStats row": lambda t: be.activation_sums(t, 0.05).numpy(),
            "row + histogram (40 bins)": lambda t: [v.numpy() for v in be.activation_sums_hist(t, 0.05, 40, 0.0, 10.0)],
            "GradientStats row": lambda t: be.param_sums(t).numpy(),
        }
        for stat, call in calls.items():
            times = {}
            for routes in (False, True):
                PaddleBackend.host_routes = routes
                times[routes] = H.least_ms(lambda call=call, ts=ts: [call(t) for t in ts], 7)
            PaddleBackend.host_routes = True
            print(f"| {label} | {stat} | {times[False]:.1f} ms | {times[True]:.1f} ms | **{times[True] / times[False]:.2f}** |")
    n = sum(int(np.prod(t.shape)) for t in workloads[next(iter(workloads))])
    print(f"\n({n / 1e6:.1f} M values in the resnet18 outputs)")


if __name__ == "__main__":
    main()
