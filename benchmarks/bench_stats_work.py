"""The statistics' own work per training step, measured directly: hookkit vs fastai's hook body.

End-to-end step ratios (bench_stats.py) carry +-15% noise on a shared machine; the statistics are
the only thing that differs between the variants, so this times exactly that, with little noise:
one training step's hooked outputs (and output/parameter gradients) are captured once, then
fastai's own ``ActivationStats.hook`` and hookkit's per-call work (the backend primitives its
consumers call) run over them, repeated (least of 15 runs). Dispatch (~1-5 us per call) is left
out on both sides.

    /work/bench-venv/bin/python benchmarks/bench_stats_work.py
"""

from __future__ import annotations

import _harness as H

H.set_threads(1)
H.block_torchvision()
H.keep_freed_memory()  # as bench_stats.py: the step, not the page faults of its 51 MB logits

import torch  # noqa: E402
from torch import nn  # noqa: E402

import hookkit  # noqa: E402
from _models import SmallResNet  # noqa: E402
from hookkit.backends import backend_for  # noqa: E402
from hookkit.backends.host_stats import HostRows  # noqa: E402

torch.set_num_threads(1)


def workloads():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=128, n_head=4)).train()
    ids = torch.randint(0, gpt2.config.vocab_size, (4, 64))
    yield "GPT-2 4x128, batch 4x64", gpt2, lambda: gpt2(input_ids=ids, labels=ids).loss
    torch.manual_seed(0)
    cnn = SmallResNet(32).train()
    x, y = torch.randn(8, 3, 64, 64), torch.randint(0, 10, (8,))
    yield "ResNet-style CNN w32, 8x3x64x64", cnn, lambda: nn.functional.cross_entropy(cnn(x), y)


def main() -> None:
    from fastai.callback.hook import ActivationStats as FastaiStats

    print(
        "| workload | fastai hook body | hookkit ActivationStats | ratio | fastai hist | hookkit hist | ratio | GradientStats work | x training step |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for label, model, loss_fn in workloads():
        be = backend_for(model)
        names = [n for n, _ in hookkit.select(model, hookkit.WITH_PARAMS)]  # fastai's default layers too
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step(loss_fn=loss_fn, opt=opt) -> None:
            loss_fn().backward()
            opt.step()
            opt.zero_grad()

        step_ms = H.least_ms(step, 5)
        with hookkit.capture(model, names, grads=True) as cap:
            loss_fn().backward()
        first = lambda v: v[0] if isinstance(v, tuple) else v  # noqa: E731
        outs = [first(cap[n]) for n in names]
        grads = [first(cap.grads[n]) for n in names]
        params = {id(p): p for _, m in hookkit.select(model, names) for p in m.parameters(recurse=False)}  # tied: once
        pgrads = [p.grad for p in params.values() if p.grad is not None]
        row = [label]
        for hist in (False, True):
            fastai_hook = FastaiStats(with_hist=hist).hook
            fa = H.least_ms(lambda: [fastai_hook(None, None, o) for o in outs])  # noqa: B023

            rows = HostRows(40 if hist else 0)

            def hk(outs=outs, be=be, hist=hist, rows=rows) -> None:
                for o in outs:  # what the consumer does: the CPU route first, the framework's ops if not
                    if not be.activation_sums_into(rows, o, 0.05, 0, 0, (0.0, 10.0) if hist else None):
                        be.activation_sums_hist(o, 0.05, 40, 0.0, 10.0) if hist else be.activation_sums(o, 0.05)
                rows.take()

            h = H.least_ms(hk)
            row += [f"{fa:.1f} ms", f"{h:.1f} ms", f"**{h / fa:.2f}**"]
        grows = HostRows()

        def gk(grads=grads, pgrads=pgrads, be=be, grows=grows) -> None:
            for x in (*grads, *pgrads):
                if not be.tensor_sums_into(grows, x, 0, 0):
                    be.param_sums(x)
            grows.take()

        g = H.least_ms(gk)
        row += [f"{g:.1f} ms", f"**{1 + g / step_ms:.3f}x** of {step_ms:.0f} ms"]
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
