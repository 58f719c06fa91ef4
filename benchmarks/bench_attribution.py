"""hookkit.attribute against captum (the benchmark environment: captum is no hookkit dependency).

    PYTHONPATH=$PWD/src /work/bench-venv/bin/python benchmarks/bench_attribution.py equal
    PYTHONPATH=$PWD/src /work/bench-venv/bin/python benchmarks/bench_attribution.py memory [--rounds 3]

``equal``: every method on a float64 MLP, CNN and BERT-style classifier (transformers config,
random weights), the same n_steps, rule and targets as captum's class of the same name; prints
max |hookkit - captum| / max |captum| per method, and for the deltas max |delta_h - delta_c| /
max |F(x) - F(b)|. Exits 1 if any exceeds 1e-6.

``memory``: layer integrated gradients at a GPT-2-style model's token embedding (GPT2LMHeadModel
from a config, 2 layers, width 128, vocabulary 1000; 2 prompts x 16 tokens; n_steps=256;
return_delta), each variant in its own process (one math thread): peak RSS growth over the RSS
before the first call (VmHWM after ``clear_refs`` reset, minus VmRSS before: no tracemalloc, which sees
no tensor memory) and the median CPU time of 3 calls, processes interleaved over rounds; the attributions and deltas of
every variant are compared with captum's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import block_torchvision, set_threads, table  # noqa: E402

BUDGET = 64 << 20  # max_memory of the hookkit variant, bytes
REPS = 3  # calls per process


# -- equality -----------------------------------------------------------------------------------------
def _rel(a, c) -> float:
    a, c = np.asarray(a, dtype=np.float64), np.asarray(c, dtype=np.float64)
    return float(np.abs(a - c).max() / max(np.abs(c).max(), 1e-300))


def equal() -> int:
    import torch
    from captum import attr as ca
    from torch import nn

    import hookkit

    torch.manual_seed(0)
    torch.set_default_dtype(torch.float64)
    rows: list[list[str]] = []
    worst = 0.0

    def check(model_name, what, ours, theirs, scale=None):
        nonlocal worst
        ours = ours.detach().numpy() if hasattr(ours, "detach") else ours
        theirs = theirs.detach().numpy() if hasattr(theirs, "detach") else theirs
        err = float(np.abs(ours - theirs).max() / scale) if scale is not None else _rel(ours, theirs)
        worst = max(worst, err)
        rows.append([model_name, what, f"{err:.1e}"])

    def np_(t):
        return t.detach().numpy()

    # the MLP and the CNN: float inputs, every method
    mlp = nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 12), nn.Softplus(), nn.Linear(12, 4))

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.relu1 = nn.Conv2d(2, 6, 3, padding=1), nn.ReLU()
            self.pool = nn.MaxPool2d(2)
            self.conv2, self.act2 = nn.Conv2d(6, 8, 3, padding=1), nn.Softplus()
            self.flat, self.fc = nn.Flatten(), nn.Linear(8 * 4 * 4, 5)

        def forward(self, x):
            return self.fc(self.flat(self.act2(self.conv2(self.pool(self.relu1(self.conv1(x)))))))

    cases = [
        ("MLP", mlp, "2", torch.randn(4, 10), [0, 3, 1, 2], 2),
        ("CNN", CNN(), "conv2", torch.randn(3, 2, 8, 8), [4, 0, 2], (1, 1, 2)),
    ]
    for name, model, lname, x, t, neuron in cases:
        model = model.double().eval()
        layer = dict(model.named_modules())[lname]
        b = 0.1 * torch.randn_like(x)
        f = model(x).gather(1, torch.tensor(t)[:, None])[:, 0] - model(b).gather(1, torch.tensor(t)[:, None])[:, 0]
        scale = float(f.detach().abs().max())
        for rule in ("gausslegendre", "riemann_trapezoid", "riemann_middle"):
            a, d = hookkit.attribute(model, lname, x, target=t, baselines=b, n_steps=32, rule=rule, return_delta=True)
            c, dc = ca.LayerIntegratedGradients(model, layer).attribute(
                x, b, target=t, n_steps=32, method=rule, return_convergence_delta=True
            )
            check(name, f"LayerIntegratedGradients ({rule})", a, c)
            check(name, f"  its delta ({rule})", d, dc, scale)
        a, d = hookkit.attribute(
            model,
            lname,
            x,
            "integrated_gradients",
            t,
            baselines=b,
            n_steps=32,
            attribute_to="input",
            internal_batch_size=10,
            return_delta=True,
        )
        c, dc = ca.LayerIntegratedGradients(model, layer).attribute(
            x, b, target=t, n_steps=32, attribute_to_layer_input=True, internal_batch_size=10, return_convergence_delta=True
        )
        check(name, "LayerIntegratedGradients (layer input, internal_batch_size=10)", a, c)
        check(name, "  its delta", d, dc, scale)
        a, d = hookkit.attribute(model, lname, x, "conductance", t, baselines=b, n_steps=32, return_delta=True)
        c, dc = ca.LayerConductance(model, layer).attribute(x, b, target=t, n_steps=32, return_convergence_delta=True)
        check(name, "LayerConductance", a, c)
        check(name, "  its delta", d, dc, scale)
        a = hookkit.attribute(model, lname, x, "conductance", t, baselines=b, n_steps=32, internal_batch_size=9)
        c = ca.LayerConductance(model, layer).attribute(x, b, target=t, n_steps=32, internal_batch_size=9)
        check(name, "LayerConductance (internal_batch_size=9)", a, c)
        check(
            name,
            "LayerGradientXActivation",
            hookkit.attribute(model, lname, x, "gradient_x_activation", t),
            ca.LayerGradientXActivation(model, layer).attribute(x, t),
        )
        check(
            name,
            "layer gradient (LayerGradientXActivation, multiply_by_inputs=False)",
            hookkit.attribute(model, lname, x, "gradient", t),
            ca.LayerGradientXActivation(model, layer, multiply_by_inputs=False).attribute(x, t),
        )
        check(name, "LayerActivation", hookkit.attribute(model, lname, x, "activation"), ca.LayerActivation(model, layer).attribute(x))
        a, d = hookkit.attribute(model, None, x, target=t, baselines=b, n_steps=32, return_delta=True)
        c, dc = ca.IntegratedGradients(model).attribute(x, b, target=t, n_steps=32, return_convergence_delta=True)
        check(name, "IntegratedGradients", a, c)
        check(name, "  its delta", d, dc, scale)
        xg = x.clone().requires_grad_()
        check(name, "Saliency", hookkit.attribute(model, None, x, "saliency", t), ca.Saliency(model).attribute(xg, t))
        check(
            name,
            "Saliency (abs=False) = gradient",
            hookkit.attribute(model, None, x, "gradient", t),
            ca.Saliency(model).attribute(xg, t, abs=False),
        )
        check(
            name, "InputXGradient", hookkit.attribute(model, None, x, "gradient_x_activation", t), ca.InputXGradient(model).attribute(xg, t)
        )
        a = hookkit.attribute(model, None, x, "smoothgrad", t, nt_samples=6, stdevs=0.2, seed=5)
        torch.manual_seed(5)
        c = ca.NoiseTunnel(ca.Saliency(model)).attribute(xg, nt_type="smoothgrad", nt_samples=6, stdevs=0.2, target=t, abs=False)
        check(name, "NoiseTunnel(Saliency, abs=False), same seed", a, c)
        kw = dict(baselines=b, n_steps=32, rule="riemann_trapezoid")
        check(
            name,
            "NeuronIntegratedGradients",
            hookkit.attribute(model, lname, x, neuron=neuron, **kw),
            ca.NeuronIntegratedGradients(model, layer).attribute(x, neuron, baselines=b, n_steps=32, method="riemann_trapezoid"),
        )
        check(
            name,
            "NeuronConductance",
            hookkit.attribute(model, lname, x, "conductance", t, neuron=neuron, **kw),
            ca.NeuronConductance(model, layer).attribute(x, neuron, baselines=b, target=t, n_steps=32),
        )
        check(
            name,
            "NeuronGradient",
            hookkit.attribute(model, lname, x, "gradient", neuron=neuron),
            ca.NeuronGradient(model, layer).attribute(xg, neuron),
        )

    # a BERT-style classifier: token ids, attributions at the embedding layer
    from transformers import BertConfig, BertForSequenceClassification

    cfg = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=32,
        num_labels=3,
    )
    bert = BertForSequenceClassification(cfg).double().eval()
    ids = torch.tensor([[2, 11, 23, 7, 41, 3], [2, 31, 5, 9, 3, 0], [2, 8, 8, 17, 60, 3]])
    mask = (ids != 0).long()
    pad = torch.tensor([[2, 0, 0, 0, 0, 3]]).repeat(3, 1)
    t = [1, 0, 2]

    def logits(ids, mask):
        return bert(ids, attention_mask=mask).logits

    fx = logits(ids, mask).gather(1, torch.tensor(t)[:, None])[:, 0]
    fb = logits(pad, mask).gather(1, torch.tensor(t)[:, None])[:, 0]
    scale = float((fx - fb).abs().max())
    fk = {"attention_mask": mask}
    for lname in ("bert.embeddings", "bert.encoder.layer.1.output"):
        layer = dict(bert.named_modules())[lname]
        a, d = hookkit.attribute(bert, lname, ids, target=t, baselines=pad, n_steps=32, forward_kwargs=fk, return_delta=True)
        c, dc = ca.LayerIntegratedGradients(logits, layer).attribute(
            ids, pad, target=t, additional_forward_args=(mask,), n_steps=32, return_convergence_delta=True
        )
        check("BERT", f"LayerIntegratedGradients at {lname}", a, c)
        check("BERT", "  its delta", d, dc, scale)
        check(
            "BERT",
            f"LayerGradientXActivation at {lname}",
            hookkit.attribute(bert, lname, ids, "gradient_x_activation", t, forward_kwargs=fk),
            ca.LayerGradientXActivation(logits, layer).attribute(ids, t, additional_forward_args=(mask,)),
        )
        check(
            "BERT",
            f"LayerActivation at {lname}",
            hookkit.attribute(bert, lname, ids, "activation", forward_kwargs=fk),
            ca.LayerActivation(logits, layer).attribute(ids, additional_forward_args=(mask,)),
        )
    print(table(rows, ["model", "method (captum's class)", "max |hookkit - captum| / max |captum|"]))
    print(f"\nworst: {worst:.1e}")
    return 0 if worst <= 1e-6 else 1


# -- memory and time on GPT-2 ---------------------------------------------------------------------------
def _gpt2():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=64)
    model = GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(1, 1000, (2, 16))
    pad = torch.zeros_like(ids)
    return model, ids, pad


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def child(variant: str, out: str) -> None:
    import time

    from captum.attr import LayerIntegratedGradients

    import hookkit

    model, ids, pad = _gpt2()
    token = 7
    model(ids)  # warm: kernels, allocator
    rss0 = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the high-water mark to the current RSS
    if variant.startswith("captum"):
        lig = LayerIntegratedGradients(lambda i: model(i).logits[:, -1], model.transformer.wte)
        ibs = None if variant == "captum" else int(variant.split("=")[1])

        def run():
            return lig.attribute(ids, pad, target=token, n_steps=256, internal_batch_size=ibs, return_convergence_delta=True)
    else:
        kw = {"hookkit": dict(max_memory=BUDGET), "hookkit-none": dict(internal_batch_size=None)}[variant]

        def run():
            return hookkit.attribute(
                model, "transformer.wte", ids, target=lambda o: o.logits[:, -1, token], baselines=pad, n_steps=256, return_delta=True, **kw
            )

    cpu = []
    for _ in range(REPS):  # the first call sets the peak; the CPU time is the median of all
        t0 = time.process_time()
        a, d = run()
        cpu.append(time.process_time() - t0)
    cpu = statistics.median(cpu)
    peak = _status("VmHWM")
    np.save(out + ".attr.npy", a.detach().numpy())
    np.save(out + ".delta.npy", d.detach().numpy())
    with open(out + ".json", "w") as f:
        json.dump({"cpu_s": cpu, "peak_mb": (peak - rss0) / 2**20, "rss0_mb": rss0 / 2**20}, f)


def memory(rounds: int) -> int:
    variants = ["captum", "hookkit", "hookkit-none", "captum-ibs=128"]
    got: dict[str, list[dict]] = {v: [] for v in variants}
    tmp = tempfile.mkdtemp(prefix="bench_attr_")
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    for r in range(rounds):
        for v in variants[r % len(variants) :] + variants[: r % len(variants)]:
            out = os.path.join(tmp, f"{v}-{r}")
            subprocess.run([sys.executable, __file__, "_child", "--variant", v, "--out", out], check=True, env=env)
            with open(out + ".json") as f:
                got[v].append(json.load(f))
    base_a = np.load(os.path.join(tmp, "captum-0.attr.npy"))
    base_d = np.load(os.path.join(tmp, "captum-0.delta.npy"))
    rows = []
    cap_peak = statistics.median(x["peak_mb"] for x in got["captum"])
    for v in variants:
        a = np.load(os.path.join(tmp, f"{v}-0.attr.npy"))
        d = np.load(os.path.join(tmp, f"{v}-0.delta.npy"))
        peak = statistics.median(x["peak_mb"] for x in got[v])
        ratios = [x["cpu_s"] / y["cpu_s"] for x, y in zip(got[v], got["captum"])]
        rows.append(
            [
                v,
                f"{peak:.0f}",
                f"{peak / cap_peak:.2f}x",
                f"{statistics.median(x['cpu_s'] for x in got[v]):.2f}",
                f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})",
                f"{_rel(a, base_a):.1e}",
                f"{np.abs(d - base_d).max():.1e}",
            ]
        )
    print(
        table(
            rows,
            ["variant", "peak RSS growth MB", "vs captum", "CPU s", "CPU vs captum (median, range)", "attr rel. diff", "delta abs. diff"],
        )
    )
    print(
        f"\nrounds: {rounds}; RSS before the call: {statistics.median(x['rss0_mb'] for x in got['captum']):.0f} MB; budget: {BUDGET >> 20} MB"
    )
    return 0


def main() -> int:
    set_threads(1)
    block_torchvision()
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["equal", "memory", "_child"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--variant")
    p.add_argument("--out")
    args = p.parse_args()
    if args.what == "equal":
        return equal()
    if args.what == "memory":
        return memory(args.rounds)
    child(args.variant, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
