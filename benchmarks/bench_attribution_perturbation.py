"""hookkit.attribute's perturbation methods against captum's (the benchmark environment: captum is no
hookkit dependency).

    cd benchmarks && PYTHONPATH=$PWD/../src:$PWD /work/bench-venv/bin/python bench_attribution_perturbation.py [--rounds 2]
    cd benchmarks && PYTHONPATH=$PWD/../src:$PWD /work/bench-venv/bin/python bench_attribution_perturbation.py generation [--rounds 2]
    cd benchmarks && PYTHONPATH=$PWD/../src:$PWD /work/bench-venv/bin/python bench_attribution_perturbation.py curve [--rounds 3]

``generation``: ``attribute_generation`` with integrated gradients (64 steps) of 32 given target
tokens after a 16-token prompt of the GPT-2-style model below, against captum's
``LLMGradientAttribution(LayerIntegratedGradients(model, wte))`` at its defaults (a stand-in
tokenizer: text is space-separated ids); CPU time and peak RSS growth of one call per process, and
the difference of the ``[32, 16]`` attributions (``attribute_prefix=False``: captum's meaning, the
generated tokens before a target held as they are).

Occlusion, feature ablation and Shapley value sampling on two models, each variant in its own process
(one math thread), processes interleaved over rounds:
- a CNN (3 conv layers, 4 images 3 x 32 x 32): occlusion with 4 x 4 windows at stride 4 (64
  windows), feature ablation and Shapley sampling (4 orders) over the same 64 patches;
- a GPT-2-style LM (GPT2LMHeadModel from a config, 2 layers, width 128, vocabulary 1000; 2 prompts x
  16 tokens), explaining the last position's logit of one token, perturbing token ids to the pad id
  0: occlusion with windows of 2 tokens, feature ablation per token, Shapley sampling (8 orders).
Variants: captum at its default ``perturbations_per_eval=1`` and at 16 and 256, hookkit at its
default budget and with ``max_memory=16 MB``. Per variant and method, after one warm-up call: the
median CPU time of 3 calls; then the peak RSS growth of a call over the RSS before it (VmHWM
after a ``clear_refs`` reset; the median of 3 such measurements, one alone is bimodal across processes), with glibc told to mmap blocks of 16 KB and more and to trim its heap
(``_peak_growth``): RSS then follows the live bytes for either library, where with glibc's defaults
a call's peak hides in what the warm-up left in the free lists; and for the deterministic methods the
largest difference from captum's attributions relative to their largest. Peaks are compared with
captum at its best ``perturbations_per_eval``: at its default it keeps one perturbation of the batch
in flight.

``peaks``: the peak RSS growth of every variant in one process per model, interleaved (the same
allocator state for all).

``curve``: the CPU time per row of a no-grad forward against the rows per forward, for the CNN
channels-first (as captum feeds it) and channels-last (as hookkit does on the CPU), and the LM.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import block_torchvision, set_threads, table  # noqa: E402

REPS = 3
SMALL = 16 << 20
VARIANTS = ["captum", "captum-ppe=16", "captum-ppe=256", "hookkit", "hookkit-16MB"]
METHODS = ["occlusion", "feature_ablation", "shapley_sampling"]
TOKEN = 7
GEN_TOKENS = 32


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


_LIBC = ctypes.CDLL("libc.so.6")
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


def _peak_growth(run) -> int:
    """Peak RSS growth of one ``run()`` over the RSS before it, in bytes, with glibc made to give freed
    memory back (blocks of 16 KB and more mmapped, the heap trimmed): RSS then follows the live bytes,
    so a call does not hide its peak in memory an earlier call left in the allocator's free lists (with
    glibc's defaults the growth after a warm-up call is mostly that allocator's noise, for either side)."""
    _LIBC.mallopt(M_MMAP_THRESHOLD, 16 << 10)
    _LIBC.mallopt(M_TRIM_THRESHOLD, 0)
    run()
    _LIBC.malloc_trim(0)
    rss0 = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the high-water mark to the current RSS
    run()
    return _status("VmHWM") - rss0


def _cnn():
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
    ).eval()  # fmt: skip
    x = torch.randn(4, 3, 32, 32)
    patches = torch.arange(64).reshape(8, 8).repeat_interleave(4, 0).repeat_interleave(4, 1)
    mask = patches.expand(3, 32, 32).unsqueeze(0).contiguous()
    spec = {
        "occlusion": (
            {"sliding_window_shapes": (3, 4, 4), "strides": (3, 4, 4)},
            {"sliding_window_shapes": (3, 4, 4), "strides": (3, 4, 4)},
        ),
        "feature_ablation": ({"feature_mask": mask}, {"feature_mask": mask}),
        "shapley_sampling": ({"feature_mask": mask, "n_samples": 4}, {"feature_mask": mask, "n_samples": 4}),
    }
    return model, model, x, 3, 3, spec


def _gpt2():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=64)
    model = GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(1, 1000, (2, 16))
    spec = {
        "occlusion": ({"sliding_window_shapes": (2,)}, {"sliding_window_shapes": (2,)}),
        "feature_ablation": ({}, {}),
        "shapley_sampling": ({"n_samples": 8}, {"n_samples": 8}),
    }
    return model, (lambda i: model(input_ids=i).logits[:, -1]), ids, TOKEN, (lambda o: o.logits[:, -1, TOKEN]), spec


def _runs(model_name: str, variant: str) -> dict:
    """method -> a call of ``variant`` on the model (built once per process)."""
    import torch
    from captum import attr as ca

    import hookkit

    model, forward, x, cap_target, hk_target, spec = (_cnn if model_name == "cnn" else _gpt2)()
    with torch.no_grad():
        forward(x)  # warm: kernels, allocator
    runs = {}
    for method in METHODS:
        hk_kw, cap_kw = spec[method]
        if variant.startswith("captum"):
            ppe = int(variant.split("=")[1]) if "=" in variant else 1
            cls = {"occlusion": ca.Occlusion, "feature_ablation": ca.FeatureAblation, "shapley_sampling": ca.ShapleyValueSampling}[method]
            algo = cls(forward)

            def run(algo=algo, cap_kw=cap_kw, ppe=ppe):
                torch.manual_seed(0)
                return algo.attribute(x, target=cap_target, baselines=0, perturbations_per_eval=ppe, **cap_kw)
        else:
            extra = {"max_memory": SMALL} if variant == "hookkit-16MB" else {}

            def run(hk_kw=hk_kw, method=method, extra=extra):
                return hookkit.attribute(model, None, x, method, target=hk_target, baselines=0, seed=0, **hk_kw, **extra)

        runs[method] = run
    return runs


def peaks(rounds: int) -> int:
    """Peak RSS growth of every variant in ONE process per model, the variants interleaved over ``rounds``
    rounds (after a warm-up call each): the allocator and the process's other state are the same for
    all, where a process per variant adds a bimodal process-to-process spread."""
    for model_name in ("cnn", "gpt2"):
        runs = {v: _runs(model_name, v) for v in VARIANTS}
        for v in VARIANTS:
            for run in runs[v].values():
                run()
        got: dict = {(v, m): [] for v in VARIANTS for m in METHODS}
        for r in range(rounds):
            for v in VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]:
                for m in METHODS:
                    got[v, m].append(_peak_growth(runs[v][m]) / 2**20)
        rows = []
        for m in METHODS:
            med = {v: statistics.median(got[v, m]) for v in VARIANTS}
            least = min(med["captum-ppe=16"], med["captum-ppe=256"])
            rows += [[m, v, f"{med[v]:.2f}", f"{med[v] / least:.2f}x"] for v in VARIANTS]
        print(f"\n{model_name}: peak RSS growth in one process, median of {rounds} interleaved rounds")
        print(table(rows, ["method", "variant", "peak MB", "vs captum's smaller batched peak (ppe 16 or 256)"]))
    return 0


def child(model_name: str, variant: str, out: str) -> None:

    runs = _runs(model_name, variant)
    res = {}
    for method, run in runs.items():
        run()  # warm: first-call set-up of either library (imports, caches) is not the method's memory
        cpu = []
        for _ in range(REPS):
            t0 = time.process_time()
            a = run()
            cpu.append(time.process_time() - t0)
        res[method] = {"cpu_s": statistics.median(cpu)}
        np.save(f"{out}.{method}.npy", a.detach().numpy())
    for method, run in runs.items():  # after every timed call: the allocator set for measuring
        # the median of 3: one call's growth is bimodal across processes (the same call 6 or 12 MB, either library)
        res[method]["peak_mb"] = statistics.median(_peak_growth(run) for _ in range(3)) / 2**20
    with open(out + ".json", "w") as f:
        json.dump(res, f)


class _IdTokenizer:
    """The little of a tokenizer captum's ``TextTokenInput`` reads: text is space-separated ids."""

    def encode(self, text, return_tensors=None):
        import torch

        return torch.tensor([[int(t) for t in text.split()]])

    def convert_ids_to_tokens(self, ids):
        return [str(i) for i in ids]

    def decode(self, ids, **kw):
        return " ".join(str(int(i)) for i in ids)

    def __call__(self, text, **kw):  # the offsets captum's pretty-printing of the targets reads
        out, offsets, pos = [], [], 0
        for tok in text.split(" "):
            out.append(int(tok))
            offsets.append((pos, pos + len(tok)))
            pos += len(tok) + 1
        return {"input_ids": out, "offset_mapping": offsets}


def generation_child(variant: str, out: str) -> None:
    """Integrated gradients (64 steps) of 32 target tokens after a 16-token prompt, GPT-2-style model."""
    import torch

    import hookkit

    model, _, ids, _, _, _ = _gpt2()
    prompt, targets = ids[:1], torch.randint(1, 1000, (GEN_TOKENS,))
    model(prompt)
    if variant == "captum-llm":
        from captum.attr import LayerIntegratedGradients, LLMGradientAttribution, TextTokenInput

        llm = LLMGradientAttribution(LayerIntegratedGradients(model, model.transformer.wte), _IdTokenizer())
        inp = TextTokenInput(" ".join(str(int(t)) for t in prompt[0]), _IdTokenizer(), baselines=0)

        def run():
            return llm.attribute(inp, target=targets, n_steps=64).token_attr.detach().numpy()
    else:

        def run():
            return hookkit.attribute_generation(model, prompt, targets, n_steps=64, max_memory=SMALL, attribute_prefix=False).input_attr

    rss0 = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    t0 = time.process_time()
    a = run()
    cpu = time.process_time() - t0
    np.save(out + ".npy", a)
    with open(out + ".json", "w") as f:
        json.dump({"cpu_s": cpu, "peak_mb": (_status("VmHWM") - rss0) / 2**20}, f)


def generation(rounds: int) -> int:
    tmp = tempfile.mkdtemp(prefix="bench_gen_")
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    variants = ["captum-llm", "hookkit"]
    got: dict[str, list[dict]] = {v: [] for v in variants}
    for r in range(rounds):
        for v in variants[r % 2 :] + variants[: r % 2]:
            out = os.path.join(tmp, f"{v}-{r}")
            subprocess.run([sys.executable, __file__, "_gen", "--variant", v, "--out", out], check=True, env=env)
            with open(out + ".json") as f:
                got[v].append(json.load(f))
    ref = np.load(os.path.join(tmp, "captum-llm-0.npy"))
    rows = []
    for v in variants:
        a = np.load(os.path.join(tmp, f"{v}-0.npy"))
        rows.append(
            [
                v,
                f"{statistics.median(x['cpu_s'] for x in got[v]):.2f}",
                f"{statistics.median(x['peak_mb'] for x in got[v]):.1f}",
                f"{np.abs(a - ref).max() / np.abs(ref).max():.1e}",
            ]
        )
    print(
        f"\ngeneration: integrated gradients (64 steps), {GEN_TOKENS} targets after 16 prompt tokens; hookkit max_memory={SMALL >> 20} MB"
    )
    print(table(rows, ["variant", "CPU s (first call)", "peak RSS growth MB", "rel. diff from captum"]))
    return 0


def bench(rounds: int) -> int:
    tmp = tempfile.mkdtemp(prefix="bench_pert_")
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    for model_name in ("cnn", "gpt2"):
        got: dict[str, list[dict]] = {v: [] for v in VARIANTS}
        for r in range(rounds):
            for v in VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]:
                out = os.path.join(tmp, f"{model_name}-{v}-{r}")
                subprocess.run(
                    [sys.executable, __file__, "_child", "--model", model_name, "--variant", v, "--out", out], check=True, env=env
                )
                with open(out + ".json") as f:
                    got[v].append(json.load(f))
        rows = []
        for method in METHODS:
            ref = np.load(os.path.join(tmp, f"{model_name}-captum-0.{method}.npy"))
            cap_cpu = [x[method]["cpu_s"] for x in got["captum"]]
            best = min(("captum-ppe=16", "captum-ppe=256"), key=lambda v: statistics.median(x[method]["cpu_s"] for x in got[v]))
            best_cpu = [x[method]["cpu_s"] for x in got[best]]
            best_peak = statistics.median(x[method]["peak_mb"] for x in got[best])
            for v in VARIANTS:
                cpu = [x[method]["cpu_s"] for x in got[v]]
                a = np.load(os.path.join(tmp, f"{model_name}-{v}-0.{method}.npy"))
                diff = "-" if method == "shapley_sampling" else f"{np.abs(a - ref).max() / max(np.abs(ref).max(), 1e-30):.1e}"
                peak = statistics.median(x[method]["peak_mb"] for x in got[v])
                rows.append(
                    [
                        method,
                        v,
                        f"{statistics.median(cpu):.3f}",
                        f"{statistics.median(c / b for c, b in zip(cpu, cap_cpu)):.2f}x",
                        f"{statistics.median(c / b for c, b in zip(cpu, best_cpu)):.2f}x",
                        f"{peak:.1f}",
                        f"{peak / best_peak:.2f}x" if best_peak >= 1 else "-",
                        diff,
                    ]
                )
        print(f"\n{model_name}: (best captum ppe per method: the faster of 16 and 256)")
        print(table(rows, ["method", "variant", "CPU s", "vs captum", "vs captum best", "peak MB", "peak vs captum best", "rel. diff"]))
    print(f"\nrounds: {rounds}; {REPS} calls per process, median CPU time; one math thread")
    return 0


def curve(rounds: int) -> int:
    """The CPU time per perturbed row of a no-grad forward against the rows per forward: the CNN with its
    images as given (channels-first, captum's) and channels-last (``conv_layout``, hookkit's), the
    GPT-2-style LM; rounds interleaved, medians. Where it flattens is where larger chunks only cost memory."""
    import torch

    set_threads(1)
    cnn, _, x, _, _, _ = _cnn()
    lm, forward, ids, _, _, _ = _gpt2()
    cases = {
        "cnn channels-first": (cnn, lambda r: x.repeat(r // 4, 1, 1, 1), [4, 8, 16, 32, 64, 128, 256]),
        "cnn channels-last": (
            cnn,
            lambda r: x.repeat(r // 4, 1, 1, 1).contiguous(memory_format=torch.channels_last),
            [4, 8, 16, 32, 64, 128, 256],
        ),
        "gpt2": (forward, lambda r: ids.repeat(r // 2, 1), [2, 4, 8, 16, 32, 64, 128]),
    }
    got: dict[tuple[str, int], list[float]] = {}
    total = 256
    with torch.no_grad():
        for _ in range(rounds):
            for name, (f, make, sizes) in cases.items():
                for r in sizes:
                    rows = make(r)
                    f(rows)
                    t0 = time.process_time()
                    for _ in range(total // r):
                        f(rows)
                    got.setdefault((name, r), []).append((time.process_time() - t0) / (total // r * r) * 1e6)
    out = []
    for name, (_, _, sizes) in cases.items():
        out.append([name] + [f"{r}: {statistics.median(got[(name, r)]):.0f}" for r in sizes])
    print(f"\nCPU microseconds per row of a no-grad forward, by rows per forward ({rounds} rounds, medians; one math thread)")
    print(table(out, ["model"] + [f"size {i + 1}" for i in range(7)]))
    return 0


def main() -> int:
    set_threads(1)
    block_torchvision()
    p = argparse.ArgumentParser()
    p.add_argument("what", nargs="?", default="bench", choices=["bench", "generation", "curve", "peaks", "_child", "_gen"])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--model")
    p.add_argument("--variant")
    p.add_argument("--out")
    args = p.parse_args()
    if args.what == "_child":
        child(args.model, args.variant, args.out)
        return 0
    if args.what == "_gen":
        generation_child(args.variant, args.out)
        return 0
    if args.what == "generation":
        return generation(args.rounds)
    if args.what == "curve":
        return curve(args.rounds)
    if args.what == "peaks":
        set_threads(1)
        return peaks(args.rounds)
    return bench(args.rounds)


if __name__ == "__main__":
    sys.exit(main())
