"""Standard names on OPT (issue 41): its decoder layer flattens the residual stream to
``[batch * pos, d_model]`` around the MLP; hookkit shows those names as ``[batch, pos, d]`` (one
pre-hook per block notes the call's ``[batch, pos]``). ``run_with_cache`` of every name against the
bare forward, the bare forward plus the copies kept, and TransformerLens's TransformerBridge.

    cd benchmarks && PYTHONPATH=$PWD/../src:$PWD /work/bench-venv/bin/python bench_names_opt.py [--rounds 6]

An OPT model from a config (12 blocks, width 256, 4 heads, FFN 1024, vocabulary 1000, random
weights, eager attention on every side as the bridge forces it); 4 prompts x 128 tokens, no_grad,
one math thread, CPU time; variants interleaved, ONE forward per step, set-up and removal included:

- ``bare``: the model alone;
- ``bare + copies``: plain forward (pre-)hooks on the modules holding the names, each keeping a
  clone of the value in TransformerLens's layout (the floor of any cache of these names);
- ``hookkit run_with_cache``: ``hookkit.run_with_cache(model, ids)``, every name;
- ``hookkit, MLP names``: only the names inside the flattened region (``mlp.hook_*``,
  ``hook_mlp_in``, ``hook_mlp_out``, ``ln2.*``);
- ``bridge run_with_cache``: ``TransformerBridge.boot_transformers("facebook/opt-125m", hf_model=copy)``
  then ``bridge.run_with_cache(ids)`` (every hook it has).

Also the values of the names both offer checked equal.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import machine, ratio, run_interleaved, set_threads, spread, table  # noqa: E402

set_threads(1)

import torch  # noqa: E402
from transformers import OPTConfig, OPTForCausalLM, PreTrainedTokenizerFast  # noqa: E402

import hookkit  # noqa: E402
from hookkit.backends import backend_for  # noqa: E402
from hookkit.sites.names import table as name_table  # noqa: E402
from hookkit.sites.names_flat import FlatView  # noqa: E402

FLAT = ("mlp.hook_", "hook_mlp_in", "hook_mlp_out", "ln2.")


def build() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    cfg = OPTConfig(
        num_hidden_layers=12,
        hidden_size=256,
        num_attention_heads=4,
        ffn_dim=1024,
        vocab_size=1000,
        word_embed_proj_dim=256,
        max_position_embeddings=128,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=1,
        attn_implementation="eager",
    )
    model = OPTForCausalLM(cfg).eval()
    ids = torch.randint(2, 1000, (4, 128), generator=torch.Generator().manual_seed(1))
    return model, ids


def bridge_of(model: torch.nn.Module):
    from tokenizers import Tokenizer, models
    from transformer_lens.model_bridge import TransformerBridge

    folder = tempfile.mkdtemp()
    tk = Tokenizer(models.WordLevel({f"t{i}": i for i in range(1000)}, unk_token="t0"))
    PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="t0", eos_token="t0", bos_token="t0").save_pretrained(folder)
    tok = PreTrainedTokenizerFast.from_pretrained(folder)
    return TransformerBridge.boot_transformers("facebook/opt-125m", hf_model=copy.deepcopy(model), tokenizer=tok)


def variants(model: torch.nn.Module, ids: torch.Tensor, got: dict) -> list:
    be = backend_for(model)
    points = [p for p in name_table(model).values() if "::" not in getattr(p.module, "name", "")]

    def bare():
        with torch.no_grad():
            model(ids)

    def record(p, t):
        if isinstance(p.part, FlatView):  # the copy's own unflattening: the batch and positions known here
            t = t.reshape(4, 128, -1)
            return p.part.inner.get(be, t)[0].clone()
        return p.part.get(be, t)[0].clone()

    def copies():
        kept: dict = {}
        handles = []
        for p in points:
            if not isinstance(p.module, torch.nn.Module):
                continue  # hook_resid_mid: an operation site, no module boundary
            if p.event == "out":
                fn = lambda m, a, o, p=p: kept.__setitem__(p.name, record(p, o if torch.is_tensor(o) else o[p.index]))  # noqa: E731
                handles.append(p.module.register_forward_hook(fn))
            else:
                fn = lambda m, a, p=p: kept.__setitem__(p.name, record(p, a[0]))  # noqa: E731
                handles.append(p.module.register_forward_pre_hook(fn))
        with torch.no_grad():
            model(ids)
        for h in handles:
            h.remove()
        got["bare + copies"] = kept

    def hookkit_cache():
        with torch.no_grad():
            _, cache = hookkit.run_with_cache(model, ids)
        got["hookkit run_with_cache"] = cache

    def hookkit_mlp():
        with torch.no_grad():
            hookkit.run_with_cache(model, ids, names_filter=lambda n: any(f in n for f in FLAT))

    out = [
        ("bare", bare),
        ("bare + copies", copies),
        ("hookkit run_with_cache", hookkit_cache),
        ("hookkit, MLP names", hookkit_mlp),
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


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--reps", type=int, default=2)
    a = p.parse_args()
    model, ids = build()
    got: dict = {}
    res = run_interleaved(variants(model, ids, got), rounds=a.rounds, reps=a.reps)
    mine = got["hookkit run_with_cache"]
    for name, value in got["bare + copies"].items():
        assert torch.equal(mine[name], value), name
    theirs = got.get("bridge run_with_cache")
    if theirs is not None:
        both = [n for n in mine if n in theirs and n != "hook_pos_embed"]
        worst = max(float((mine[n].reshape(theirs[n].shape) - theirs[n]).abs().max()) for n in both)
        print(f"{len(both)} names both offer: largest difference {worst:.2e}")
    print(f"machine: {machine()}; OPT config 12 blocks x 256 (FFN 1024), 4 x 128 tokens, eager attention, one thread, CPU time")
    rows = []
    for name in res:
        r = res[name]
        rows.append(
            [
                name,
                r.error or f"{r.median_ms:.1f}",
                f"{ratio(res, name, 'bare'):.3f}",
                f"{ratio(res, name, 'bare + copies'):.3f}",
                spread(res, name, "bare + copies"),
            ]
        )
    print(table(rows, ["variant", "ms / forward", "x bare", "x bare + copies", "IQR vs copies"]))
    if theirs is not None:
        print(f"hookkit / bridge: {ratio(res, 'hookkit run_with_cache', 'bridge run_with_cache'):.3f}")


if __name__ == "__main__":
    main()
