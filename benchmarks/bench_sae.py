"""Sparse autoencoders: hookkit.splice vs a plain hook and SAELens; hookkit.train_sae vs SAELens's trainer.

    cd benchmarks && PYTHONPATH=$PWD/../src:$PWD /work/bench-venv/bin/python bench_sae.py [--rounds 6] [--skip-train]

1. Splice with the error term (outputs unchanged, features exposed) of a top-k SAE (d_sae 8x the
   width, k=32) at block 6 of a 12-block GPT-2 (GPT2LMHeadModel, width 256, 4 heads, vocabulary 1000),
   batch 4 x 64 tokens, under no_grad:
   * bare forward;
   * plain hook, encode only: ``register_forward_hook`` computing ``sae.encode`` of the block's
     output and keeping it (what a splice whose features nothing edits computes);
   * plain hook, full error term: encode, decode, ``recon + (x - recon)`` returned (SAELens's arithmetic);
   * ``hookkit.splice`` + ``hookkit.capture(model, sp.features)``;
   * SAELens (if installed): ``HookedSAETransformer`` of the same shape, ``run_with_cache_with_saes``
     (use_error_term=True, names_filter: the SAE's feature activations) vs its own bare forward.
2. Training (if SAELens is installed): the same activations (a synthetic sparse dictionary, d_in 64,
   512 true directions, 8 active per row, noise), the same hyper-parameters (top-k, d_sae 512, k 8,
   batch 1024, lr 1e-3, aux-k coefficient 1/32, 300 steps): explained variance and L0 on held-out rows,
   samples/s; peak memory of ``train_sae`` streaming an ``extract`` folder of 100k vs 1M rows.

CPU time of this process (the machine is shared); variants interleaved, median over rounds.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--reps", type=int, default=4)
    p.add_argument("--skip-train", action="store_true")
    p.add_argument("--skip-memory", action="store_true")
    p.add_argument("--memory-child", default="")
    return p.parse_args()


ARGS = parse()
H.set_threads(ARGS.threads)
H.block_torchvision()
os.environ.setdefault("TQDM_DISABLE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import hookkit  # noqa: E402

torch.set_num_threads(ARGS.threads)
WIDTH, DSAE, K, SITE = 256, 2048, 32, 6


def memory_child(folder: str) -> None:
    hookkit.train_sae(folder, 256, "topk", k=8, steps=200, batch_size=1024, buffer_size=16384, framework="torch")
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)


if ARGS.memory_child:
    memory_child(ARGS.memory_child)
    sys.exit(0)


def random_sae(rng: np.random.Generator) -> hookkit.SAE:
    W_dec = rng.normal(size=(DSAE, WIDTH)).astype(np.float32)
    W_dec /= np.linalg.norm(W_dec, axis=1, keepdims=True)
    return hookkit.SAE.from_arrays(
        W_enc=W_dec.T.copy(),
        b_enc=np.zeros(DSAE, np.float32),
        W_dec=W_dec,
        b_dec=np.zeros(WIDTH, np.float32),
        architecture="topk",
        k=K,
        framework="torch",
    )


def splice_table() -> None:
    import transformers

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=12, n_embd=WIDTH, n_head=4, vocab_size=1000, n_positions=64)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, 1000, (4, 64))
    sae = random_sae(np.random.default_rng(0))
    block = model.transformer.h[SITE]
    kept: list = []
    plain_ref = model(ids).logits
    with hookkit.splice(model, f"transformer.h.{SITE}", sae):
        assert torch.equal(model(ids).logits, plain_ref)

    def bare():
        def step():
            with torch.no_grad():
                model(ids)

        return step, lambda: None

    def plain_encode():
        def hook(m, args, out):
            kept.append(sae.encode(out if torch.is_tensor(out) else out[0]))

        h = block.register_forward_hook(hook)

        def step():
            with torch.no_grad():
                model(ids)
            kept.clear()

        return step, h.remove

    def plain_full():
        def hook(m, args, out):
            x = out if torch.is_tensor(out) else out[0]
            f = sae.encode(x)
            kept.append(f)
            recon = sae.decode(f)
            new = recon + (x - recon)
            return new if torch.is_tensor(out) else (new, *out[1:])

        h = block.register_forward_hook(hook)

        def step():
            with torch.no_grad():
                model(ids)
            kept.clear()

        return step, h.remove

    def hk():
        sp = hookkit.splice(model, f"transformer.h.{SITE}", sae)
        cap = hookkit.capture(model, sp.features)

        def step():
            with torch.no_grad():
                model(ids)
            cap.clear()

        def down():
            cap.remove()
            sp.remove()

        return step, down

    variants = [
        ("bare", bare),
        ("plain hook (encode)", plain_encode),
        ("plain hook (full error term)", plain_full),
        ("hookkit.splice + capture", hk),
    ]
    res = H.run_interleaved(variants, ARGS.rounds, ARGS.reps)
    print("\n#### splice, 12-block GPT-2 width 256, top-k SAE d_sae 2048 k 32 at block 6, batch 4 x 64\n")
    print("| variant | ms/step (median) | x bare | x plain hook (encode) | x plain hook (full) |")
    print("|---|---|---|---|---|")
    for name, _ in variants:
        r = res[name]
        if r.error:
            print(f"| {name} | failed: {r.error} | | | |")
            continue
        print(
            f"| {name} | {r.median_ms:.2f} | {H.ratio(res, name, 'bare'):.3f} | {H.ratio(res, name, 'plain hook (encode)'):.3f} | {H.ratio(res, name, 'plain hook (full error term)'):.3f} |"
        )
    sae_lens_table(sae)


def sae_lens_table(sae: hookkit.SAE) -> None:
    try:
        from sae_lens import HookedSAETransformer, TopKSAE, TopKSAEConfig
        from transformer_lens import HookedTransformerConfig
    except Exception as exc:  # noqa: BLE001 - peer absent: say so
        print(f"\nSAELens not run: {type(exc).__name__}: {exc}")
        return
    tcfg = HookedTransformerConfig(
        n_layers=12, d_model=WIDTH, n_heads=4, d_head=WIDTH // 4, n_ctx=64, d_vocab=1000, act_fn="gelu_new", normalization_type="LN"
    )
    model = HookedSAETransformer(tcfg).eval()
    theirs = TopKSAE(TopKSAEConfig(d_in=WIDTH, d_sae=DSAE, k=K))
    theirs.cfg.metadata.hook_name = f"blocks.{SITE}.hook_resid_post"
    with torch.no_grad():
        for key, t in sae.weights.items():
            getattr(theirs, key).copy_(t)
    ids = torch.randint(0, 1000, (4, 64))
    acts = f"blocks.{SITE}.hook_resid_post.hook_sae_acts_post"

    def bare():
        def step():
            with torch.no_grad():
                model(ids)

        return step, lambda: None

    def with_saes():
        def step():
            with torch.no_grad():
                model.run_with_cache_with_saes(ids, saes=[theirs], use_error_term=True, names_filter=[acts])

        return step, lambda: None

    variants = [("TL bare", bare), ("SAELens run_with_cache_with_saes", with_saes)]
    res = H.run_interleaved(variants, ARGS.rounds, ARGS.reps)
    print("\n#### SAELens on a HookedSAETransformer of the same shape (its own bare forward as base)\n")
    print("| variant | ms/step (median) | x its bare |")
    print("|---|---|---|")
    for name, _ in variants:
        print(f"| {name} | {res[name].median_ms:.2f} | {H.ratio(res, name, 'TL bare'):.3f} |")


# -- training ---------------------------------------------------------------------------------------
D_IN, TRUE, ACTIVE = 64, 512, 8


def synthetic(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(1234)
    dirs = rng.normal(size=(TRUE, D_IN)).astype(np.float32)
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    rng = np.random.default_rng(seed)
    out = np.empty((n, D_IN), np.float32)
    for s in range(0, n, 65536):
        m = min(65536, n - s)
        idx = rng.integers(0, TRUE, size=(m, ACTIVE))
        mag = rng.exponential(1.0, size=(m, ACTIVE)).astype(np.float32)
        out[s : s + m] = np.einsum("mk,mkd->md", mag, dirs[idx]) + 0.05 * rng.normal(size=(m, D_IN)).astype(np.float32)
    return out


def ev_l0(sae: hookkit.SAE, x: np.ndarray) -> tuple[float, float]:
    t = torch.from_numpy(x)
    with torch.no_grad():
        f = sae.encode(t)
        out = sae.decode(f).numpy()
    return 1 - ((out - x) ** 2).sum(-1).mean() / ((x - x.mean(0)) ** 2).sum(-1).mean(), float((f > 0).float().sum(-1).mean())


def train_table() -> None:
    try:
        from sae_lens import SAETrainer
        from sae_lens.config import SAETrainerConfig
        from sae_lens.saes.topk_sae import TopKTrainingSAE, TopKTrainingSAEConfig
    except Exception as exc:  # noqa: BLE001
        print(f"\nSAELens trainer not run: {type(exc).__name__}: {exc}")
        return
    steps, batch, lr = 300, 1024, 1e-3
    data = synthetic(steps * batch, 0)
    held = synthetic(8192, 1)
    rows = []
    t0 = time.process_time()
    run = hookkit.train_sae(
        data,
        512,
        "topk",
        k=8,
        steps=steps,
        batch_size=batch,
        lr=lr,
        aux_k_coefficient=1 / 32,
        buffer_size=65536,
        log_every=steps,
        framework="torch",
    )
    t_hk = time.process_time() - t0
    rows.append(("hookkit.train_sae", *ev_l0(run.sae, held), steps * batch / t_hk))
    torch.manual_seed(0)
    theirs = TopKTrainingSAE(TopKTrainingSAEConfig(d_in=D_IN, d_sae=512, k=8, aux_loss_coefficient=1 / 32))
    perm = np.random.default_rng(0).permutation(len(data))
    shuffled = torch.from_numpy(data[perm])

    def provider():
        while True:
            for s in range(0, len(shuffled), batch):
                yield shuffled[s : s + batch]

    trainer = SAETrainer(
        SAETrainerConfig(total_training_samples=steps * batch, train_batch_size_samples=batch, lr=lr, lr_end=lr), theirs, provider()
    )
    t0 = time.process_time()
    trainer.fit()
    t_sl = time.process_time() - t0
    with tempfile.TemporaryDirectory() as d:
        theirs.save_inference_model(d)
        rows.append(("SAELens SAETrainer", *ev_l0(hookkit.SAE.load(d), held), steps * batch / t_sl))
    print("\n#### training: top-k d_sae 512 k 8 on 64-d synthetic activations, 300 steps x 1024 rows, lr 1e-3\n")
    print("| trainer | explained variance (held out) | L0 | samples/s (CPU time) |")
    print("|---|---|---|---|")
    for name, ev, l0, sps in rows:
        print(f"| {name} | {ev:.4f} | {l0:.2f} | {sps:,.0f} |")


def memory_table() -> None:
    print("\n#### peak memory of train_sae streaming an extract folder (200 steps x 1024 rows, buffer 16384)\n")
    print("| rows in the folder | folder MB | peak RSS MB |")
    print("|---|---|---|")
    model = torch.nn.Sequential(torch.nn.Identity())
    for n in (100_000, 1_000_000):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "feats")
            chunk = 50_000
            hookkit.extract(
                model, (torch.from_numpy(synthetic(min(chunk, n - s), s)) for s in range(0, n, chunk)), "0", out, progress=False
            )
            size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out)) / 2**20
            env = dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH", ""))
            peak = subprocess.run(
                [sys.executable, __file__, "--memory-child", out], capture_output=True, text=True, env=env, check=True
            ).stdout.split()[-1]
            print(f"| {n:,} | {size:.0f} | {peak} |")


splice_table()
if not ARGS.skip_train:
    train_table()
if not ARGS.skip_memory:
    memory_table()
