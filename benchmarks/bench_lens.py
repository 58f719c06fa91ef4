"""Patching sweeps and attention patterns on an unmodified GPT-2: hookkit vs the plain loop,
TransformerLens and eager attention.

    PYTHONPATH=src /work/bench-venv/bin/python benchmarks/bench_lens.py [--threads 1] [--rounds 3]

1. ``patching_sweep`` over 4 blocks x 64 positions (transformers GPT2LMHeadModel, 4 layers, width 64 and 128,
   4 heads, vocabulary 1000, one 64-token prompt; logit difference at the last position):
   * plain loop: one corrupted forward per cell, the clean block output copied in at that position
     by a native forward hook (256 forwards);
   * hookkit: one clean forward, then 4 forwards of 64 patched copies each;
   * TransformerLens 4.x (if installed): ``TransformerBridge`` booted on a copy of the same model,
     ``run_with_cache`` + ``patching.get_act_patch_resid_pre`` (its resid_pre of block l+1 is the
     output of block l: compared on those rows).
2. ``attention_patterns`` of 2 of 4 layers (GPT-2, 4 layers, width 256, 8 heads, batch 4 x 256 tokens)
   vs one SDPA forward (the model as it is) and the eager forward that ``output_attentions=True`` needs.

CPU time of this process (the machine is shared); variants interleaved, median over rounds.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--pattern-rounds", type=int, default=10)
    p.add_argument("--no-tl", action="store_true", help="skip TransformerLens")
    p.add_argument("--widths", default="64,128", help="comma list of GPT-2 widths for the sweep")
    return p.parse_args()


ARGS = parse()
H.set_threads(ARGS.threads)
H.block_torchvision()
os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

import hookkit  # noqa: E402

torch.set_num_threads(ARGS.threads)
transformers.logging.set_verbosity_error()


def metric(out):
    logits = out.logits if hasattr(out, "logits") else out
    return logits[:, -1, 3] - logits[:, -1, 5]


# -- 1. the sweep ----------------------------------------------------------------------------------------
def sweep_model(width: int = 128):
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=4, n_embd=width, n_head=4, vocab_size=1000, n_positions=64, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    g = torch.Generator().manual_seed(1)
    clean, corrupt = torch.randint(0, 1000, (1, 64), generator=g), torch.randint(0, 1000, (1, 64), generator=g)
    return model, clean, corrupt


def plain_loop(model, clean, corrupt):
    blocks = model.transformer.h
    with torch.no_grad():
        stored = {}
        hooks = [b.register_forward_hook(lambda m, a, o, i=i: stored.__setitem__(i, o)) for i, b in enumerate(blocks)]
        model(clean)
        for h in hooks:
            h.remove()
        out = np.zeros((len(blocks), clean.shape[1]))
        for i, block in enumerate(blocks):
            for p in range(clean.shape[1]):

                def patch(m, a, o, i=i, p=p):
                    o = o.clone()
                    o[:, p] = stored[i][:, p]
                    return o

                h = block.register_forward_hook(patch)
                out[i, p] = metric(model(corrupt)).mean().item()
                h.remove()
    return out


def tl_bridge(model):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformer_lens.model_bridge import TransformerBridge

    vocab = {f"t{i}": i for i in range(model.config.vocab_size)}
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="t0")), unk_token="t0", pad_token="t1", eos_token="t2"
    )
    bridge = TransformerBridge.boot_transformers("gpt2", hf_model=copy.deepcopy(model), tokenizer=tok)
    bridge.eval()
    return bridge


def tl_sweep(bridge, clean, corrupt):
    from transformer_lens import patching

    with torch.no_grad():
        _, cache = bridge.run_with_cache(clean)
        return patching.get_act_patch_resid_pre(bridge, corrupt, cache, lambda logits: metric(logits).mean()).numpy()


def bench_sweep(width: int) -> list[str]:
    model, clean, corrupt = sweep_model(width)
    got = hookkit.patching_sweep(model, clean, corrupt, "transformer.h.*", metric)
    ref = plain_loop(model, clean, corrupt)
    lines = [f"width {width}: hookkit vs plain loop: max |difference| {np.abs(got - ref).max():.2e} over {got.size} cells"]
    variants = [
        ("plain loop (256 forwards)", lambda: (lambda: plain_loop(model, clean, corrupt), lambda: None)),
        (
            "hookkit patching_sweep",
            lambda: (lambda: hookkit.patching_sweep(model, clean, corrupt, "transformer.h.*", metric), lambda: None),
        ),
    ]
    bridge = None
    if not ARGS.no_tl:
        try:
            bridge = tl_bridge(model)
            tl = tl_sweep(bridge, clean, corrupt)
            lines.append(
                f"TransformerLens resid_pre rows 1-3 vs hookkit block rows 0-2: max |difference| {np.abs(tl[1:] - got[:3]).max():.2e}"
            )
            variants.append(("TransformerLens get_act_patch_resid_pre", lambda: (lambda: tl_sweep(bridge, clean, corrupt), lambda: None)))
        except Exception as exc:  # noqa: BLE001 - a peer that does not install or boot: report it
            lines.append(f"TransformerLens skipped: {type(exc).__name__}: {exc}"[:200])
    res = H.run_interleaved(variants, rounds=ARGS.rounds, reps=1, warmup=1)
    base = variants[0][0]
    rows = [
        [name, f"{res[name].median_ms / 1e3:.2f}", f"{H.ratio(res, base, name):.1f}x" if name != base else "1x"] for name, _ in variants
    ]
    return lines + ["", H.table(rows, ["variant", "CPU s per sweep", "speed-up vs plain loop"])]


# -- 2. attention patterns ----------------------------------------------------------------------------------
def bench_patterns() -> list[str]:
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=4, n_embd=256, n_head=8, vocab_size=1000, n_positions=256, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    model.set_attn_implementation("sdpa")
    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    ids = torch.randint(0, 1000, (4, 256))
    layers = ["transformer.h.1.attn", "transformer.h.3.attn"]
    pats = hookkit.attention_patterns(model, ids, layers=layers)
    with torch.no_grad():
        ref = eager(ids, output_attentions=True).attentions
    diff = max((pats[n] - ref[i]).abs().max().item() for n, i in zip(layers, (1, 3)))

    def sdpa():
        with torch.no_grad():
            model(ids)

    def eager_attn():
        with torch.no_grad():
            eager(ids, output_attentions=True)

    variants = [
        ("one SDPA forward (the model as it is)", lambda: (sdpa, lambda: None)),
        (
            "hookkit attention_patterns, 2 of 4 layers",
            lambda: (lambda: hookkit.attention_patterns(model, ids, layers=layers), lambda: None),
        ),
        ("eager forward, output_attentions=True", lambda: (eager_attn, lambda: None)),
    ]
    res = H.run_interleaved(variants, rounds=ARGS.pattern_rounds, reps=3, warmup=1)
    base = variants[0][0]
    rows = [[name, f"{res[name].median_ms:.1f}", f"{H.ratio(res, name, base):.2f}", H.spread(res, name, base)] for name, _ in variants]
    return [
        f"patterns vs eager output_attentions: max |difference| {diff:.2e}",
        "",
        H.table(rows, ["variant", "CPU ms", "x SDPA forward", "IQR"]),
    ]


if __name__ == "__main__":
    print(H.machine())
    for width in [int(w) for w in ARGS.widths.split(",")]:
        print("\n".join(bench_sweep(width)))
        print()
    print()
    print("\n".join(bench_patterns()))
