"""hookkit.graph: recording one forward's graph against the bare forward, TorchLens and torchview;
drawing a 24-block GPT-2-style config at depth 2 (recording + Graphviz's dot layout).

    cd benchmarks && PYTHONPATH=$PWD/../src:$PWD /work/bench-venv/bin/python bench_graph.py [--rounds 6 --reps 5] [--no-peers] [--profile]

Variants, interleaved, CPU time of the process (one intra-op thread), eval mode, no gradients:
bare: ``model(input_ids=ids)``; hookkit.graph: ``hookkit.graph(model, {"input_ids": ids}, depth=2)``
end to end (hooks placed and removed, modes and buffers saved and put back, the graph built);
torchview: ``draw_graph(model, input_data=..., depth=2, save_graph=False)`` (its Graphviz source
built, nothing rendered); TorchLens: ``torchlens.trace(model, ..., save="none")`` (metadata only).
Models: transformers' GPT-2 with random weights: "gpt2-small 12x768" (GPT-2 small's shape, 128
tokens), "gpt2 12x256" (128 tokens), "gpt2 24x64" (16 tokens: tiny layers, the per-call cost shows);
"plain 12x256": a pre-LN transformer in plain PyTorch (128 tokens), which torchview can trace. Draw: wall time of graph() + svg() on gpt2-24x64, best of 5.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402

H.set_threads(1)
H.block_torchvision()

import torch  # noqa: E402
import transformers  # noqa: E402

import hookkit  # noqa: E402

transformers.logging.set_verbosity_error()


def gpt2(blocks: int, width: int, heads: int) -> torch.nn.Module:
    cfg = transformers.GPT2Config(
        n_layer=blocks, n_embd=width, n_head=heads, vocab_size=1000, n_positions=256, bos_token_id=0, eos_token_id=0
    )
    torch.manual_seed(0)
    return transformers.GPT2Model(cfg).eval()


class Block(torch.nn.Module):
    """A pre-LN transformer block in plain PyTorch (torchview cannot trace transformers' GPT-2)."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.qkv, self.proj = torch.nn.LayerNorm(d), torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.ln2, self.up, self.act, self.down = (
            torch.nn.LayerNorm(d),
            torch.nn.Linear(d, 4 * d),
            torch.nn.GELU(),
            torch.nn.Linear(4 * d, d),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1) @ v
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down(self.act(self.up(self.ln2(x))))


class Plain(torch.nn.Module):
    def __init__(self, blocks: int, d: int, heads: int):
        super().__init__()
        self.emb = torch.nn.Embedding(1000, d)
        self.blocks = torch.nn.Sequential(*[Block(d, heads) for _ in range(blocks)])
        self.ln_f, self.head = torch.nn.LayerNorm(d), torch.nn.Linear(d, 1000)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.ln_f(self.blocks(self.emb(input_ids))))


def variants(model: torch.nn.Module, ids: torch.Tensor, peers: bool = True) -> list[tuple[str, H.Setup]]:
    def bare():
        def step():
            with torch.no_grad():
                model(ids)

        return step, lambda: None

    def graph():
        return (lambda: hookkit.graph(model, (ids,), depth=2)), lambda: None

    out = [("bare", bare), ("hookkit.graph", graph)]
    if not peers:
        return out
    try:
        import torchview

        def tv():
            return (lambda: torchview.draw_graph(model, input_data=[ids], depth=2, save_graph=False)), lambda: None

        out.append(("torchview", tv))
    except ImportError:
        pass
    try:
        import torchlens

        def tl():
            return (lambda: torchlens.trace(model, input_args=(ids,), save=None)), lambda: None

        out.append(("TorchLens", tl))
    except ImportError:
        pass
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-peers", action="store_true", help="bare and hookkit.graph only (quicker A/B runs)")
    ap.add_argument("--profile", action="store_true", help="cProfile of 20 graph() calls on gpt2 12x256, then exit")
    args = ap.parse_args()
    H.keep_freed_memory()
    if args.profile:
        profile()
        return
    print(H.machine())
    rows = []
    configs = {
        "gpt2-small 12x768": ("gpt2", 12, 768, 12, 128),
        "gpt2 12x256": ("gpt2", 12, 256, 4, 128),
        "gpt2 24x64": ("gpt2", 24, 64, 4, 16),
        "plain 12x256": ("plain", 12, 256, 4, 128),
    }
    for label, (kind, blocks, width, heads, tokens) in configs.items():
        torch.manual_seed(0)
        model = gpt2(blocks, width, heads) if kind == "gpt2" else Plain(blocks, width, heads).eval()
        ids = torch.randint(0, 1000, (1, tokens))
        res = H.run_interleaved(variants(model, ids, not args.no_peers), args.rounds, args.reps, slow={"TorchLens": 1, "torchview": 2})
        for name, r in res.items():
            if r.error:
                rows.append([label, name, "error", r.error[:80], ""])
                continue
            rows.append([label, name, f"{r.median_ms:.1f}", f"{H.ratio(res, name, 'bare'):.2f}x", H.spread(res, name, "bare")])
    print(H.table(rows, ["model", "variant", "ms (median)", "vs bare", "spread"]))

    model = gpt2(24, 64, 4)
    ids = torch.randint(0, 1000, (1, 16))
    best, best_rec = float("inf"), float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        g = hookkit.graph(model, {"input_ids": ids}, depth=2)
        t1 = time.perf_counter()
        svg = g.svg()
        t2 = time.perf_counter()
        best, best_rec = min(best, t2 - t0), min(best_rec, t1 - t0)
    print(
        f"draw gpt2-24x64 at depth 2: {len(g.nodes)} nodes, {len(g.edges)} edges, SVG {len(svg) // 1024} KiB: "
        f"{best:.2f} s wall (recording {best_rec:.2f} s, dot layout + SVG the rest), best of 5"
    )


def profile() -> None:
    import cProfile
    import gc
    import pstats

    model, ids = gpt2(12, 256, 4), torch.randint(0, 1000, (1, 128))
    for _ in range(3):
        hookkit.graph(model, (ids,), depth=2)
    gc.disable()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(20):
        hookkit.graph(model, (ids,), depth=2)
    prof.disable()
    gc.enable()
    pstats.Stats(prof).sort_stats("tottime").print_stats("hookkit", 30)


if __name__ == "__main__":
    main()
