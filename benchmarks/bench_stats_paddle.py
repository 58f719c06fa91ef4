"""Paddle CPU statistics: hookkit's CPU route (the kernel reads the tensor through dlpack, no copy,
and writes the row into a preallocated buffer) against Paddle's own ops (the route hookkit takes
on a GPU, or without a C compiler) and against the route before issue 19 (the kernel, then a
``paddle.to_tensor(row, place=)`` per call), on the outputs of one training step of paddle.vision's
resnet18 and on a GPT-2-sized logits tensor.

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
from hookkit.backends.host_stats import HostRows  # noqa: E402


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
    print(
        "| tensors | statistic | Paddle ops | kernel + paddle.to_tensor per call (before) | hookkit's CPU route (kernel into a row) | ratio to Paddle ops |"
    )
    print("|---|---|---|---|---|---|")
    for label, ts in workloads.items():
        for stat, hist in (("ActivationStats row", False), ("row + histogram (40 bins)", True), ("GradientStats row", None)):
            rows = HostRows(40 if hist else 0)

            def ops(t, hist=hist):
                if hist is None:
                    return be.param_sums(t)
                return be.activation_sums_hist(t, 0.05, 40, 0.0, 10.0) if hist else be.activation_sums(t, 0.05)

            def kernel(t, hist=hist, rows=rows):
                if hist is None:
                    be.tensor_sums_into(rows, t, 0, 0)
                else:
                    be.activation_sums_into(rows, t, 0.05, 0, 0, (0.0, 10.0) if hist else None)

            def before(t, hist=hist, rows=rows):  # what the route did until issue 19: a Paddle tensor per row
                kernel(t)
                paddle.to_tensor(rows.rows[rows.n - 1, 3:], place=t.place)
                if hist:
                    paddle.to_tensor(rows.hist[rows.n - 1].astype(np.float32), place=t.place)

            times = [H.least_ms(lambda f=f, ts=ts, rows=rows: ([f(t) for t in ts], rows.take()), 7) for f in (ops, before, kernel)]
            print(f"| {label} | {stat} | {times[0]:.2f} ms | {times[1]:.2f} ms | {times[2]:.2f} ms | **{times[2] / times[0]:.2f}** |")
    n = sum(int(np.prod(t.shape)) for t in workloads[next(iter(workloads))])
    print(f"\n({n / 1e6:.1f} M values in the resnet18 outputs)")


if __name__ == "__main__":
    main()
