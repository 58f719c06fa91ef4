"""hookkit.extract: throughput vs the bare forward loop, and peak memory flat in the number of samples.

    /work/bench-venv/bin/python benchmarks/bench_extract.py throughput [--rounds 8] [--markdown FILE]
    /work/bench-venv/bin/python benchmarks/bench_extract.py rss [--markdown FILE]

throughput: one step = one pass over the same batches (interleaved rounds, process CPU time, the
writer thread included, one intra-op thread):
  * GPT-2 (GPT2Model, 6 layers, width 256, 4 heads), 8 batches of 8 x 64 tokens: residual stream
    (the 6 blocks' outputs) reduced to one vector per sample (mean over tokens):
    bare loop | hookkit.extract(reduce="mean:1") | plain forward hooks + torch.save per batch |
    TorchLens extract_dataset(pool token_mean, unmasked) when installed
  * Paddle resnet18 (paddle.vision.models), 8 batches of 16 x 3 x 64 x 64: the pooled feature (avgpool):
    bare loop | hookkit.extract(reduce="mean:2,3") | plain forward post hooks + paddle.save per batch
rss: each run in its own process (peak RSS from ru_maxrss): GPT-2 (4 layers, width 128), batches of
50 x 32 tokens, the 4 blocks' full outputs (no reduction: 64 KB per sample) for 1,000 and 10,000
samples: the bare loop | hookkit.extract (shard_size 16MB, and the default 64MB) |
hookkit.capture(keep="all") | capture(keep="last"); plus the time load_features takes to open the 10,000-sample folder.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["throughput", "rss", "_child"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--batches", type=int, default=8)
    p.add_argument("--only", default="", help="throughput workloads: gpt2,paddle")
    p.add_argument("--no-torchlens", action="store_true")
    p.add_argument("--markdown", default="")
    p.add_argument("--samples", type=int, default=1000, help="_child: samples")
    p.add_argument("--variant", default="extract", help="_child: bare | extract | extract64 | capture_all | capture_last")
    p.add_argument("--tmp", default="", help="folder for the features written (default: a temporary one)")
    return p.parse_args()


ARGS = parse()
H.set_threads(ARGS.threads)
H.block_torchvision()


def _folders() -> tuple:
    """``(root, folder)``: ``folder()`` is a new output folder under ``root`` at every call (so that
    extract never resumes across rounds)."""
    root = _tmp()
    counter = [0]

    def folder() -> str:
        counter[0] += 1
        return os.path.join(root, str(counter[0]))

    return root, folder


def _tmp() -> str:
    return tempfile.mkdtemp(prefix="bench-extract-", dir=ARGS.tmp or None)


# -- throughput -----------------------------------------------------------------------------------
def gpt2_variants() -> list:
    import torch
    from transformers import GPT2Config, GPT2Model

    import hookkit

    torch.set_num_threads(ARGS.threads)
    torch.manual_seed(0)
    model = GPT2Model(GPT2Config(n_layer=6, n_embd=256, n_head=4)).eval()
    batches = [torch.randint(0, 50257, (8, 64)) for _ in range(ARGS.batches)]
    blocks = [f"h.{i}" for i in range(6)]
    root, folder = _folders()

    def bare():
        def step():
            with torch.no_grad():
                for x in batches:
                    model(x)

        return step, lambda: None

    def extract():
        return (lambda: hookkit.extract(model, batches, blocks, folder(), reduce="mean:1", progress=False)), lambda: None

    def plain_save():
        store: dict = {}
        handles = [model.get_submodule(n).register_forward_hook(lambda m, i, o, n=n: store.__setitem__(n, o.mean(1))) for n in blocks]

        def step():
            out = folder()
            os.makedirs(out)
            with torch.no_grad():
                for k, x in enumerate(batches):
                    model(x)
                    torch.save(dict(store), os.path.join(out, f"{k}.pt"))

        return step, lambda: [h.remove() for h in handles]

    variants = [("bare", bare), ("hookkit.extract", extract), ("plain hooks + torch.save", plain_save)]
    if not ARGS.no_torchlens:
        try:
            import torchlens

            stimuli = torch.cat(batches)
            # module outputs by selector; token_mean over unmasked tokens (no padding here), recorded as such
            selectors = {n: torchlens.module(n) for n in blocks}
            pool = {"preset": "token_mean", "unmasked": True}

            def tl():
                def step():
                    torchlens.extract_dataset(model, stimuli, selectors, batch_size=8, output_dir=folder(), progress=False, pool=pool)

                return step, lambda: None

            variants.append(("TorchLens extract_dataset", tl))
        except ImportError:
            print("torchlens not installed: skipped", file=sys.stderr)
    return variants, lambda: shutil.rmtree(root, ignore_errors=True)


def paddle_variants() -> list:
    import paddle
    from paddle.vision.models import resnet18

    import hookkit

    paddle.set_device("cpu")
    paddle.seed(0)
    model = resnet18()
    model.eval()
    batches = [paddle.randn([16, 3, 64, 64]) for _ in range(ARGS.batches)]
    root, folder = _folders()

    def bare():
        def step():
            with paddle.no_grad():
                for x in batches:
                    model(x)

        return step, lambda: None

    def extract():
        return (lambda: hookkit.extract(model, batches, "avgpool", folder(), reduce="mean:2,3", progress=False)), lambda: None

    def plain_save():
        store: dict = {}
        h = model.avgpool.register_forward_post_hook(lambda m, i, o: store.__setitem__("avgpool", o.mean(axis=[2, 3])))

        def step():
            out = folder()
            os.makedirs(out)
            with paddle.no_grad():
                for k, x in enumerate(batches):
                    model(x)
                    paddle.save(dict(store), os.path.join(out, f"{k}.pdparams"))

        return step, h.remove

    return [("bare", bare), ("hookkit.extract", extract), ("plain hooks + paddle.save", plain_save)], lambda: shutil.rmtree(
        root, ignore_errors=True
    )


def throughput() -> str:
    H.keep_freed_memory()
    info = H.machine()
    out = [f"`{' '.join(['python', *sys.argv])}` · {info['cpu']} · {info['cores']} cores · Python {info['python']} · {info['date']}"]
    work = {"gpt2": ("GPT-2 (6 layers, width 256), residual stream, mean over tokens", gpt2_variants)}
    work["paddle"] = ("Paddle resnet18, pooled feature (avgpool)", paddle_variants)
    only = [w for w in ARGS.only.split(",") if w] or list(work)
    for key in only:
        title, build = work[key]
        variants, cleanup = build()
        try:
            res = H.run_interleaved(variants, ARGS.rounds, ARGS.reps, warmup=1, slow={"TorchLens extract_dataset": 1})
        finally:
            cleanup()
        rows = []
        for name, _ in variants:
            r = res[name]
            if r.error:
                rows.append([name, "error", r.error, "", ""])
                continue
            rows.append([name, f"{r.median_ms:.0f}", f"{H.ratio(res, name, 'bare'):.3f}", H.spread(res, name, "bare"), str(len(r.times))])
        header = ["variant", "ms per pass (median)", "x bare", "x bare IQR", "passes"]
        out += [f"\n#### {title}, {ARGS.batches} batches per pass\n", H.table(rows, header)]
    return "\n".join(out)


# -- peak RSS -------------------------------------------------------------------------------------
def child() -> None:
    import torch
    from transformers import GPT2Config, GPT2Model

    import hookkit

    torch.set_num_threads(ARGS.threads)
    torch.manual_seed(0)
    model = GPT2Model(GPT2Config(n_layer=4, n_embd=128, n_head=4, n_positions=64)).eval()
    blocks = [f"h.{i}" for i in range(4)]

    def data():
        g = torch.Generator().manual_seed(1)
        for _ in range(ARGS.samples // 50):
            yield torch.randint(0, 50257, (50, 32), generator=g)

    with torch.no_grad():  # warm the allocator and the model before the baseline
        model(torch.randint(0, 50257, (50, 32)))
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    report = {"variant": ARGS.variant, "samples": ARGS.samples}
    if ARGS.variant.startswith("extract"):
        out = os.path.join(_tmp(), "f")
        size = "64MB" if ARGS.variant == "extract64" else "16MB"
        hookkit.extract(model, data(), blocks, out, shard_size=size, progress=False)
        t1 = time.perf_counter()
        feats = hookkit.load_features(out)
        report["open_s"] = time.perf_counter() - t1
        report["disk_mb"] = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out)) / 2**20
        report["shards"] = len(os.listdir(out)) - 1
        assert feats.count == ARGS.samples
        shutil.rmtree(os.path.dirname(out))
    elif ARGS.variant == "bare":
        with torch.no_grad():
            for x in data():
                model(x)
        t1 = time.perf_counter()
        report["records"] = 0
    else:
        keep = "all" if ARGS.variant == "capture_all" else "last"
        with hookkit.capture(model, blocks, keep=keep) as cap, torch.no_grad():
            for x in data():
                model(x)
        report["records"] = sum(len(cap.calls(b)) for b in blocks)
        t1 = time.perf_counter()
    report["run_s"] = t1 - t0
    report["base_mb"] = base
    report["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(report))


def rss() -> str:
    info = H.machine()
    rows = []
    env = dict(os.environ, OMP_NUM_THREADS=str(ARGS.threads))
    for variant in ("bare", "extract", "extract64", "capture_last", "capture_all"):
        for n in (1000, 10000):
            cmd = [sys.executable, __file__, "_child", "--samples", str(n), "--variant", variant, "--threads", str(ARGS.threads)]
            if ARGS.tmp:
                cmd += ["--tmp", ARGS.tmp]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
            if done.returncode:
                rows.append([variant, str(n), "error", done.stderr.strip().splitlines()[-1][:150], "", "", ""])
                continue
            r = json.loads(done.stdout.strip().splitlines()[-1])
            extra = (
                f"{r['disk_mb']:.0f} MB in {r['shards']} shards; open {r['open_s'] * 1e3:.1f} ms"
                if "disk_mb" in r
                else f"{r['records']} records"
            )
            rows.append([variant, f"{n:,}", f"{r['peak_mb']:.0f}", f"{r['peak_mb'] - r['base_mb']:+.0f}", f"{r['run_s']:.1f}", extra])
            print(rows[-1], file=sys.stderr)
    header = ["variant", "samples", "peak RSS MB", "peak - baseline MB", "run s (wall)", "written / held"]
    head = f"`{' '.join(['python', *sys.argv])}` · {info['cpu']} · {info['cores']} cores · Python {info['python']} · {info['date']}"
    return head + "\n\n" + H.table(rows, header)


if __name__ == "__main__":
    if ARGS.what == "_child":
        child()
        sys.exit(0)
    text = throughput() if ARGS.what == "throughput" else rss()
    print(text)
    if ARGS.markdown:
        with open(ARGS.markdown, "a") as f:
            f.write(text + "\n")
