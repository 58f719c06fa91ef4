"""Operation sites (``"layer::op"``, issue 40) against a plain pre-hook and nnsight's ``.source``.

    cd benchmarks && PYTHONPATH=$PWD/../src:$PWD /work/bench-venv/bin/python bench_operations.py [--rounds 12]

A GPT-2-style model from a config (12 blocks, width 256, 4 heads, vocabulary 1000, random weights;
2 prompts x 32 tokens, no_grad, one math thread). Every variant records the residual stream
between attention and MLP (the result of ``hidden_states = attn_output + residual``) in every
block, ONE forward per step, set-up and removal included:

- ``bare``: the model alone;
- ``pre-hook ln_2``: ``register_forward_pre_hook`` on each block's ``ln_2`` keeping its input (the
  same tensor), removed after the forward: the floor;
- ``hookkit ln_2 inputs``: ``hookkit.capture(model, "transformer.h.*.ln_2", inputs=True)``;
- ``hookkit ops``: ``hookkit.capture(model, "transformer.h.*::add_0")``, the operation itself;
- ``nnsight .source``: ``model.transformer.h[i].source.hidden_states_1.output.save()`` in a trace
  (nnsight names the assignment; the same tensor).

Also: the first rewrite of GPT2Block.forward (source read, parsed, rewritten, compiled; the file
already in linecache as after any import, and cold), and one block's forward time while another
block has operation sites (its own forward is untouched). Values of every variant are checked equal.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import machine, ratio, run_interleaved, set_threads, spread, table  # noqa: E402

set_threads(1)

import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

import hookkit  # noqa: E402

N_LAYER = 12


def build() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=N_LAYER, n_embd=256, n_head=4, vocab_size=1000, n_positions=64, bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, 1000, (2, 32), generator=torch.Generator().manual_seed(1))
    return model, ids


def variants(model: torch.nn.Module, ids: torch.Tensor, got: dict) -> list:
    blocks = list(model.transformer.h)

    def bare():
        with torch.no_grad():
            model(ids)

    def pre_hook():
        kept = []
        handles = [b.ln_2.register_forward_pre_hook(lambda m, args: kept.append(args[0])) for b in blocks]
        with torch.no_grad():
            model(ids)
        for h in handles:
            h.remove()
        got["pre-hook ln_2"] = kept

    def hk_layer():
        with hookkit.capture(model, "transformer.h.*.ln_2", inputs=True, outputs=False) as cap, torch.no_grad():
            model(ids)
        got["hookkit ln_2 inputs"] = [cap[f"transformer.h.{i}.ln_2"][0] for i in range(N_LAYER)]

    def hk_ops():
        with hookkit.capture(model, "transformer.h.*::add_0") as cap, torch.no_grad():
            model(ids)
        got["hookkit ops"] = [cap[f"transformer.h.{i}::add_0"] for i in range(N_LAYER)]

    out = [("bare", bare), ("pre-hook ln_2", pre_hook), ("hookkit ln_2 inputs", hk_layer), ("hookkit ops", hk_ops)]
    try:
        import copy

        from nnsight import NNsight

        nn_model = NNsight(copy.deepcopy(model))  # its own copy (same weights): nnsight keeps its forward on the instances

        def nnsight_source():
            saved: list = []
            with torch.no_grad(), nn_model.trace(ids):
                for i in range(N_LAYER):  # nnsight runs the block elsewhere: a comprehension's result is not sent back
                    saved.append(nn_model.transformer.h[i].source.hidden_states_1.output.save())
            got["nnsight .source"] = saved

        out.append(("nnsight .source", nnsight_source))
    except ImportError:
        print("nnsight not installed: its row is skipped")
    return [(name, (lambda f=f: (f, lambda: None))) for name, f in out]


def first_rewrite_ms(model: torch.nn.Module) -> tuple[float, float]:
    """Median ms of the first rewrite of the block class's forward: (linecache warm, cold)."""
    import linecache

    from hookkit.sites.operations import install, rewrite

    def once(cold: bool) -> float:
        rewrite._cache.clear()
        for b in model.transformer.h:
            install._states.pop(b)
        if cold:
            linecache.clearcache()
        t0 = time.process_time()  # CPU time: the machine is shared
        hookkit.ops(model, "transformer.h.0")
        return (time.process_time() - t0) * 1e3

    warm = statistics.median(once(False) for _ in range(15))
    cold = statistics.median(once(True) for _ in range(15))
    t0 = time.process_time()
    for _ in range(100):
        hookkit.ops(model, "transformer.h.0")
    cached = (time.process_time() - t0) * 10
    print(f"listing again (cached): {cached:.3f} ms")
    return warm, cold


def other_block(model: torch.nn.Module, rounds: int) -> float:
    """Ratio of block 5's forward time with operation sites in block 0 to without, interleaved."""
    h = torch.randn(2, 32, 256)
    block = model.transformer.h[5]

    def timed() -> float:
        ts = []
        with torch.no_grad():
            for _ in range(40):
                t0 = time.process_time()
                block(h)
                ts.append(time.process_time() - t0)
        return statistics.median(ts)

    def with_sites() -> float:
        with hookkit.capture(model, "transformer.h.0::*"):
            return timed()

    ratios = []
    for r in range(rounds):  # ABBA: neither order is favoured
        if r % 2:
            w, base = with_sites(), timed()
        else:
            base, w = timed(), with_sites()
        ratios.append(w / base)
    return statistics.median(ratios)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--reps", type=int, default=10)
    a = p.parse_args()
    model, ids = build()
    got: dict = {}
    res = run_interleaved(variants(model, ids, got), rounds=a.rounds, reps=a.reps)
    ref = got["pre-hook ln_2"]
    for name, vals in got.items():
        assert len(vals) == N_LAYER and all(torch.equal(x, y) for x, y in zip(vals, ref)), f"{name}: values differ"
    print(f"machine: {machine()}; GPT-2 config {N_LAYER} blocks x 256, 2 x 32 tokens, one thread, CPU time")
    rows = []
    for name in res:
        r = res[name]
        rows.append(
            [
                name,
                r.error or f"{r.median_ms:.2f}",
                f"{ratio(res, name, 'bare'):.3f}",
                f"{ratio(res, name, 'pre-hook ln_2'):.3f}",
                spread(res, name, "pre-hook ln_2"),
            ]
        )
    print(table(rows, ["variant", "ms / forward", "x bare", "x pre-hook", "IQR vs pre-hook"]))
    warm, cold = first_rewrite_ms(model)
    print(f"first rewrite of GPT2Block.forward: {warm:.2f} ms (file in linecache), {cold:.2f} ms (cold: file read)")
    print(f"block 5 forward with operation sites in block 0 / without: {other_block(model, 16):.3f}")


if __name__ == "__main__":
    main()
