"""hookkit.diff: finding a deliberate change in a ported model, fp32 vs bf16 autocast, cost, memory.

    PYTHONPATH=src /work/bench-venv/bin/python benchmarks/bench_diff.py port      # 12-block transformer torch -> Paddle
    PYTHONPATH=src /work/bench-venv/bin/python benchmarks/bench_diff.py autocast  # GPT-2 fp32 vs bf16 autocast
    PYTHONPATH=src /work/bench-venv/bin/python benchmarks/bench_diff.py cost [--rounds 8 --reps 3]
    PYTHONPATH=src /work/bench-venv/bin/python benchmarks/bench_diff.py memory

port: a 12-block pre-LN transformer (width 128, 4 heads, MLP 512, vocabulary 512) written in PyTorch
and in Paddle with the same layer names, weights copied with hookkit.port_weights, then one change
inside block 7 of the Paddle model: (a) a weight scaled by 1.001, (b) a square weight transposed,
(c) the gradient of a layer scaled by 1.001 (a wrong backward kernel, simulated with on_output_grad).
autocast: transformers' GPT-2 (4 layers, width 128) against itself under torch.autocast("cpu", bfloat16).
cost: diff(a, b, backward=True) against one forward + backward (autograd.grad / paddle.grad w.r.t. the
parameters) of each model bare, interleaved, CPU time of the process.
memory: tracemalloc's peak of host allocations (the numpy records) during diff, against the bytes of
a's records and the largest output x the number of calls.
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402

H.set_threads(1)
H.block_torchvision()

import numpy as np  # noqa: E402
import paddle  # noqa: E402
import torch  # noqa: E402

import hookkit  # noqa: E402

D, HEADS, VOCAB, BLOCKS = 128, 4, 512, 12


def _attention(nn, torch_side: bool):
    base = nn.Module if torch_side else nn.Layer

    class Attention(base):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(D, 3 * D)
            self.proj = nn.Linear(D, D)

        def forward(self, x):
            b, t, d = x.shape
            h = d // HEADS
            if torch_side:
                q, k, v = self.qkv(x).reshape(b, t, 3, HEADS, h).permute(2, 0, 3, 1, 4)
                att = torch.softmax(q @ k.transpose(-1, -2) / h**0.5, dim=-1)
                return self.proj((att @ v).permute(0, 2, 1, 3).reshape(b, t, d))
            q, k, v = self.qkv(x).reshape([b, t, 3, HEADS, h]).transpose([2, 0, 3, 1, 4])
            att = paddle.nn.functional.softmax(q @ k.transpose([0, 1, 3, 2]) / h**0.5, axis=-1)
            return self.proj((att @ v).transpose([0, 2, 1, 3]).reshape([b, t, d]))

    return Attention


def transformer(framework: str, blocks: int = BLOCKS):
    """The same pre-LN transformer in either framework, with the same layer names."""
    torch_side = framework == "torch"
    nn = torch.nn if torch_side else paddle.nn
    base = nn.Module if torch_side else nn.Layer
    Attention = _attention(nn, torch_side)

    class Block(base):
        def __init__(self):
            super().__init__()
            self.ln1, self.attn, self.ln2 = nn.LayerNorm(D), Attention(), nn.LayerNorm(D)
            self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class LM(base):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(VOCAB, D)
            self.blocks = (nn.ModuleList if torch_side else nn.LayerList)([Block() for _ in range(blocks)])
            self.ln_f = nn.LayerNorm(D)
            self.head = nn.Linear(D, VOCAB)

        def forward(self, ids):
            x = self.wte(ids)
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln_f(x))

    return LM()


def pair(blocks: int = BLOCKS):
    torch.manual_seed(0)
    paddle.seed(0)
    src, dst = transformer("torch", blocks), transformer("paddle", blocks)
    hookkit.port_weights(src, dst)
    return src, dst


def ids(batch: int = 4, t: int = 32) -> np.ndarray:
    return np.random.default_rng(0).integers(0, VOCAB, size=(batch, t)).astype("int64")


def _first(d, phase):
    r = d.first_in(phase)
    return "none" if r is None else f"`{r.where}` ({r.phase}, rel err {r.rel_err:.2g})"


def cmd_port(args) -> None:
    x = ids()
    rows = []
    src, dst = pair()
    d = hookkit.diff(src, dst, x, backward=True)
    worst = max(r.rel_err for r in d.rows)
    rows.append(
        [
            "ported, unchanged",
            _first(d, "forward"),
            _first(d, "output-grad"),
            _first(d, "param-grad"),
            f"{len(d.rows)} pairs; largest rel err {worst:.1e}",
        ]
    )

    def scaled(m):
        w = m.blocks[7].mlp[2].weight
        w.set_value(w.numpy() * 1.001)
        return "blocks.7.mlp.2.weight x 1.001", None

    def transposed(m):
        w = m.blocks[7].attn.proj.weight  # square [128, 128]
        w.set_value(np.ascontiguousarray(w.numpy().T))
        return "blocks.7.attn.proj.weight transposed (square)", None

    def grad_edit(m):
        return "gradient of blocks.7.mlp.1 (GELU) x 1.001", hookkit.on_output_grad(m, "blocks.7.mlp.1", lambda layer, g: g * 1.001)

    for change in (scaled, transposed, grad_edit):
        for local in (False, True):
            src, dst = pair()
            what, handle = change(dst)
            t0 = time.perf_counter()
            d = hookkit.diff(src, dst, x, backward=True, local=local)
            wall = time.perf_counter() - t0
            if handle is not None:
                handle.remove()
            label = what + (" (local=True)" if local else "")
            rows.append(
                [label, _first(d, "forward"), _first(d, "output-grad"), _first(d, "param-grad"), f"{len(d.rows)} pairs, {wall:.1f} s wall"]
            )
    print(
        H.table(
            rows,
            [
                "change in the Paddle model",
                "first forward divergence",
                "first output-grad divergence",
                "first param-grad divergence",
                "notes",
            ],
        )
    )


class Autocast(torch.nn.Module):
    """Runs the model it wraps under bfloat16 autocast (its layers are the wrapped model's: names m.*)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, *args, **kwargs):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.m(*args, **kwargs)


def cmd_autocast(args) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=128, n_head=4, vocab_size=512, n_positions=64, use_cache=False)).eval()
    x = ids(2, 32)
    d = hookkit.diff(model, Autocast(model), x, map=lambda n: f"m.{n}", layers=[":leaves", ""], backward=args.backward, local=args.local)
    print("first divergence:", d.first)
    header, body, _ = d.table()
    keep = [i for i, r in enumerate(d.rows) if r.grows or r is d.first or r.layer in ("", "lm_head")]
    print(H.table([[body[i][j] for j in (1, 2, 5, 8, 9, 10, 11)] for i in keep], [header[j] for j in (1, 2, 5, 8, 9, 10, 11)]))
    for phase in ("forward", "output-grad") if args.backward else ("forward",):
        print(f"\n{phase}: relative error ||a-b||/||a|| by block and sublayer")
        cols = ["ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.act", "mlp.c_proj"]
        err = {r.layer: r.rel_err for r in d.rows if r.phase == phase}
        table = [[f"h.{i}"] + [f"{err.get(f'transformer.h.{i}.{c}', float('nan')):.2e}" for c in cols] for i in range(4)]
        print(H.table(table, ["block", *cols]))
        print("ln_f", f"{err.get('transformer.ln_f', float('nan')):.2e}", "lm_head", f"{err.get('lm_head', float('nan')):.2e}")
    if args.plot:
        d.plot().savefig(args.plot, dpi=90)


def _bare(model, framework: str, x: np.ndarray):
    if framework == "torch":
        params = [p for p in model.parameters() if p.requires_grad]
        t = torch.from_numpy(x)

        def step():
            torch.autograd.grad(model(t).sum(), params)

    else:
        params = [p for p in model.parameters() if not p.stop_gradient]
        t = paddle.to_tensor(x)

        def step():
            paddle.grad([model(t).sum()], params)

    return step


def cmd_cost(args) -> None:
    src, dst = pair()
    src.eval()
    dst.eval()
    x = ids(args.batch, args.tokens)
    bare_a, bare_b = _bare(src, "torch", x), _bare(dst, "paddle", x)
    variants = [
        ("bare a + b", lambda: ((lambda: (bare_a(), bare_b())), lambda: None)),
        ("diff backward", lambda: ((lambda: hookkit.diff(src, dst, x, backward=True)), lambda: None)),
        ("diff forward", lambda: ((lambda: hookkit.diff(src, dst, x)), lambda: None)),
    ]
    res = H.run_interleaved(variants, rounds=args.rounds, reps=args.reps, warmup=1)
    for name in ("bare a + b", "diff backward", "diff forward"):
        r = res[name]
        extra = "" if name == "bare a + b" else f"  ratio {H.ratio(res, name, 'bare a + b'):.2f} (IQR {H.spread(res, name, 'bare a + b')})"
        print(f"{name:15s} {r.median_ms:8.1f} ms CPU{extra}{'  ' + r.error if r.error else ''}")
    print(H.machine())


def cmd_memory(args) -> None:
    src, dst = pair()
    x = ids(args.batch, args.tokens)
    for backward in (False, True):
        d = hookkit.diff(src, dst, x, backward=backward)  # warm
        tracemalloc.start()
        d = hookkit.diff(src, dst, x, backward=backward)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        fwd = [r for r in d.rows if r.phase == "forward"]
        sizes = [int(np.prod(r.shape)) * 4 for r in d.rows]
        records = sum(sizes)
        largest = max(sizes)
        print(
            f"backward={backward}: {len(d.rows)} rows ({len(fwd)} forward calls); a's records {records / 2**20:.1f} MiB; "
            f"largest x rows {largest * len(d.rows) / 2**20:.1f} MiB; traced host peak {peak / 2**20:.1f} MiB "
            f"(peak / records {peak / records:.2f}); two full captures would hold {2 * records / 2**20:.1f} MiB"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["port", "autocast", "cost", "memory"])
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--backward", action="store_true", help="autocast: also compare gradients")
    p.add_argument("--plot", default="", help="autocast: save the error-by-depth plot here")
    p.add_argument("--local", action="store_true", help="autocast: each layer's own error (diff(local=True))")
    args = p.parse_args()
    {"port": cmd_port, "autocast": cmd_autocast, "cost": cmd_cost, "memory": cmd_memory}[args.what](args)


if __name__ == "__main__":
    main()
