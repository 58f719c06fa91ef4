"""Standard names (issue 41): ``hookkit.run_with_cache`` of every standard name against
TransformerLens's TransformerBridge ``run_with_cache`` and the bare forward plus the copies kept.

    cd benchmarks && PYTHONPATH=$PWD/../src:$PWD /work/bench-venv/bin/python bench_names.py [--rounds 6]

A GPT-2-style model from a config (12 blocks, width 256, 4 heads, vocabulary 1000, random weights,
eager attention on every side as the bridge forces it); 4 prompts x 128 tokens, no_grad, one math
thread, CPU time; variants interleaved, ONE forward per step, set-up and removal included:

- ``bare``: the model alone;
- ``bare + copies``: plain forward (pre-)hooks on the modules holding the names, each keeping a
  clone of the value in TransformerLens's layout (the floor of a cache that copies);
- ``bare + references``: the same hooks keeping the values detached, not copied (the floor of a cache
  that keeps the model's own tensors, as TransformerLens and hookkit do);
- ``bare + references of what hookkit keeps``: the same without the norms' values and the MLPs'
  ``hook_post`` (hookkit derives them when read): the floor of hookkit's own forward;
- ``hookkit run_with_cache``: ``hookkit.run_with_cache(model, ids)``, every name, the attention
  patterns (computed beside the model's attention) included; the norms' ``hook_scale`` and
  ``hook_normalized`` are derived when read, so this row does not compute them;
- ``hookkit run_with_cache + reading every value``: the same, then every value read once
  (``dict(cache.items())``: the norms' values computed), as the bridge's are all computed;
- ``hookkit, no patterns``: the same without ``hook_pattern`` (what ``bare + copies`` covers);
- ``bare, SDPA model``: the same model with SDPA attention, alone;
- ``hookkit, SDPA model``: every name and pattern on a copy of the model with SDPA attention (as
  deployed; its kernel runs untouched, the scores and patterns derived when read);
- ``bridge run_with_cache``: ``TransformerBridge.boot_transformers("gpt2", hf_model=copy)`` then
  ``bridge.run_with_cache(ids)`` (every hook it has; its own copy of the same weights).

Also the bytes each cache keeps, and the values of the names both offer checked equal.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import keep_freed_memory, machine, ratio, run_interleaved, set_threads, spread, table  # noqa: E402

set_threads(1)

import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast  # noqa: E402

import hookkit  # noqa: E402
from hookkit.backends import backend_for  # noqa: E402
from hookkit.sites.names import table as name_table  # noqa: E402


def build() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    cfg = GPT2Config(
        n_layer=12, n_embd=256, n_head=4, vocab_size=1000, n_positions=128, bos_token_id=0, eos_token_id=0, attn_implementation="eager"
    )
    model = GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, 1000, (4, 128), generator=torch.Generator().manual_seed(1))
    return model, ids


def bridge_of(model: torch.nn.Module):
    from tokenizers import Tokenizer, models
    from transformer_lens.model_bridge import TransformerBridge

    folder = tempfile.mkdtemp()
    tk = Tokenizer(models.WordLevel({f"t{i}": i for i in range(1000)}, unk_token="t0"))
    PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="t0", eos_token="t0", bos_token="t0").save_pretrained(folder)
    tok = PreTrainedTokenizerFast.from_pretrained(folder)
    return TransformerBridge.boot_transformers("gpt2", hf_model=copy.deepcopy(model), tokenizer=tok)


def variants(model: torch.nn.Module, ids: torch.Tensor, got: dict) -> list:
    be = backend_for(model)
    points = list(name_table(model).values())

    def bare():
        with torch.no_grad():
            model(ids)

    def plain_hooks(keep, skip=()):
        kept: dict = {}
        handles = []
        for p in points:
            if not isinstance(p.module, torch.nn.Module) or p.name.endswith(skip):
                continue  # hook_attn_scores / hook_pattern: no module holds them
            if p.event == "out":
                fn = lambda m, a, o, p=p: kept.__setitem__(p.name, keep(p.part.get(be, o if torch.is_tensor(o) else o[p.index])[0]))  # noqa: E731
                handles.append(p.module.register_forward_hook(fn))
            else:
                fn = lambda m, a, p=p: kept.__setitem__(p.name, keep(p.part.get(be, a[0])[0]))  # noqa: E731
                handles.append(p.module.register_forward_pre_hook(fn))
        with torch.no_grad():
            model(ids)
        for h in handles:
            h.remove()
        return kept

    def copies():
        got["bare + copies"] = plain_hooks(lambda t: t.clone())

    def references():
        plain_hooks(lambda t: t.detach())

    def references_kept():  # what hookkit's forward keeps: no norm values, no patterns, no hook_post (derived when read)
        plain_hooks(lambda t: t.detach(), ("hook_scale", "hook_normalized", "mlp.hook_post"))

    def hookkit_cache():
        with torch.no_grad():
            _, cache = hookkit.run_with_cache(model, ids)
        got["hookkit run_with_cache"] = cache

    def hookkit_cache_read():
        with torch.no_grad():
            _, cache = hookkit.run_with_cache(model, ids)
            dict(cache.items())

    def hookkit_no_patterns():
        with torch.no_grad():
            hookkit.run_with_cache(model, ids, names_filter=lambda n: not n.endswith("hook_pattern"))

    sdpa = copy.deepcopy(model)
    sdpa.config._attn_implementation = "sdpa"  # the model as deployed: its fast attention kept

    def bare_sdpa():
        with torch.no_grad():
            sdpa(ids)

    def hookkit_sdpa():
        with torch.no_grad():
            _, cache = hookkit.run_with_cache(sdpa, ids)
        got["hookkit, SDPA model"] = cache

    out = [
        ("bare", bare),
        ("bare + copies", copies),
        ("bare + references", references),
        ("bare + references of what hookkit keeps", references_kept),
        ("hookkit run_with_cache", hookkit_cache),
        ("hookkit run_with_cache + reading every value", hookkit_cache_read),
        ("hookkit, no patterns", hookkit_no_patterns),
        ("bare, SDPA model", bare_sdpa),
        ("hookkit, SDPA model", hookkit_sdpa),
    ]
    try:
        bridge = bridge_of(model)

        def bridge_cache():
            with torch.no_grad():
                _, cache = bridge.run_with_cache(ids)
            got["bridge run_with_cache"] = cache

        out.append(("bridge run_with_cache", bridge_cache))
    except ImportError:
        print("transformer-lens not installed: its row is skipped")
    return [(name, (lambda f=f: (f, lambda: None))) for name, f in out]


def kept_mb(cache) -> float:
    return sum(v.numel() * v.element_size() for v in cache.values()) / 2**20


def held_mb(tensors) -> float:
    """The memory the tensors hold alive: each storage once (references to one tensor share it)."""
    seen = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(seen.values()) / 2**20


def held_before_reading(cache) -> float:
    """What a fresh hookkit cache holds: its tensors and the norms' inputs its derived names read."""
    from hookkit.analyses.transformer.derived import Derived

    kept = []
    for v in cache._values.values():
        fields = ("tensor", "query", "key", "scores", "pattern") if isinstance(v, Derived) else ()
        kept += [getattr(v.source, f) for f in fields if getattr(v.source, f, None) is not None] or ([] if fields else [v])
    return held_mb(kept)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--reps", type=int, default=3)
    a = p.parse_args()
    kept_freed = keep_freed_memory()  # every variant on the same stable allocator (see _harness)
    model, ids = build()
    got: dict = {}
    res = run_interleaved(variants(model, ids, got), rounds=a.rounds, reps=a.reps)
    mine = got["hookkit run_with_cache"]
    fresh_mb = held_before_reading(mine)
    for name, value in got["bare + copies"].items():  # every name but the patterns (no module holds them)
        assert torch.equal(mine[name], value), name
    for name, value in got["hookkit, SDPA model"].items():
        assert float((value - mine[name]).abs().max()) < 1e-4, name  # SDPA against eager: float32 rounding
    theirs = got.get("bridge run_with_cache")
    if theirs is not None:
        worst = max(float((mine[n].float() - theirs[n].float()).abs().max()) for n in mine if n in theirs and n != "hook_pos_embed")
        print(f"names both offer: largest difference {worst:.2e}")
    print(
        f"machine: {machine()}; GPT-2 config 12 blocks x 256, 4 x 128 tokens, eager attention, one thread, CPU time; glibc keeps freed memory: {kept_freed}"
    )
    rows = []
    for name in res:
        r = res[name]
        rows.append(
            [
                name,
                r.error or f"{r.median_ms:.1f}",
                f"{ratio(res, name, 'bare'):.3f}",
                f"{ratio(res, name, 'bare + copies'):.3f}",
                f"{ratio(res, name, 'bare + references'):.3f}",
                spread(res, name, "bare + copies"),
            ]
        )
    print(table(rows, ["variant", "ms / forward", "x bare", "x bare + copies", "x bare + references", "IQR vs copies"]))
    if theirs is not None:
        print(f"hookkit / bridge: {ratio(res, 'hookkit run_with_cache', 'bridge run_with_cache'):.3f}")
        print(
            "hookkit reading every value / bridge: "
            f"{ratio(res, 'hookkit run_with_cache + reading every value', 'bridge run_with_cache'):.3f}"
        )
        print(f"hookkit on the SDPA model / bridge: {ratio(res, 'hookkit, SDPA model', 'bridge run_with_cache'):.3f}")
        print(f"hookkit on the SDPA model / the bare SDPA model: {ratio(res, 'hookkit, SDPA model', 'bare, SDPA model'):.3f}")
        print(f"0.8x the bridge / bare: {0.8 * ratio(res, 'bridge run_with_cache', 'bare'):.3f}")
        print(f"kept: hookkit {len(mine)} names, {kept_mb(mine):.1f} MiB; bridge {len(theirs)} hooks, {kept_mb(theirs):.1f} MiB")
        print(
            f"held alive (each storage once): hookkit before reading {fresh_mb:.1f} MiB, after reading every value "
            f"{held_mb(mine.values()):.1f} MiB; bridge {held_mb(theirs.values()):.1f} MiB"
        )


if __name__ == "__main__":
    main()
