"""Models larger than the machine (issue 43).

1. The meta dry run of a Llama-3-70B config (hidden 8192, 80 layers, 64 heads, 8 KV heads,
   intermediate 28672, vocabulary 128256), batch 1 x 4096 tokens, built under
   ``accelerate.init_empty_weights()``: ``hookkit.summary`` (eval: every column) and
   ``hookkit.summary(mode="train", optimizer=AdamW)`` + ``memory_plan`` (FSDP over 8 ranks, bf16,
   checkpointing), each in a fresh process (wall time, peak RSS from ``resource.getrusage``), beside
   ``accelerate estimate-memory``'s figures for the same model (its functions on the same empty model:
   ``calculate_maximum_sizes``, ``estimate_training_usage``; the CLI needs the hub).
2. A disk-offloaded GPT-2-style model (8 blocks x 256, 4 of them on disk through accelerate's
   ``AlignDevicesHook``, batch 4 x 128): the offloaded forward alone, with ``hookkit.capture`` of 4
   blocks (``keep="last"``), and with ``to="cpu"``; interleaved rounds, CPU time, one thread.

    cd benchmarks && PYTHONPATH=$PWD/../src:$PWD /work/bench-venv/bin/python bench_big_models.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import block_torchvision, machine, ratio, run_interleaved, set_threads, spread, table  # noqa: E402

set_threads(1)
block_torchvision()

LLAMA_70B = dict(
    hidden_size=8192,
    intermediate_size=28672,
    num_hidden_layers=80,
    num_attention_heads=64,
    num_key_value_heads=8,
    vocab_size=128256,
    max_position_embeddings=8192,
)

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
import torch, transformers, accelerate, hookkit
from accelerate.utils import calculate_maximum_sizes
from accelerate.commands.estimate import estimate_training_usage
mode = sys.argv[1]
config = transformers.LlamaConfig(**json.loads(sys.argv[2]))
t_import = time.perf_counter()
with accelerate.init_empty_weights():
    model = transformers.LlamaForCausalLM(config)
t_build = time.perf_counter()
out = {"import_s": t_import - t0, "build_s": t_build - t_import}
if mode == "accelerate":
    total, largest = calculate_maximum_sizes(model)
    out.update(total_bytes=int(total), params=int(total) // 4, largest_layer_bytes=int(largest[0]),
               training=estimate_training_usage(int(total), "float32"))
else:
    kw = dict(mode="train", optimizer=torch.optim.AdamW(model.parameters())) if mode == "train" else {}
    s = hookkit.summary(model, {"input_ids": (1, 4096)}, dtypes="long", **kw)
    out["summary_s"] = time.perf_counter() - t_build
    out.update(params=s.total_params, mult_adds=s.total_mult_adds, saved=s.saved_bytes, rows=len(s.all_rows))
    if mode == "train":
        t1 = time.perf_counter()
        plan = s.memory_plan(ranks=8, sharding="fsdp", checkpointing="blocks", param_dtype="bfloat16", master_weights=True)
        out["plan_s"] = time.perf_counter() - t1
        out.update(training=s.training, plan=plan.to_dict())
out["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
out["total_s"] = time.perf_counter() - t0
print("RESULT " + json.dumps(out))
"""


def child(mode: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, mode, json.dumps(LLAMA_70B)], capture_output=True, text=True, timeout=600, env=os.environ
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(line[len("RESULT ") :])


def gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"


def meta_part() -> None:
    acc, ev, tr = child("accelerate"), child("eval"), child("train")
    print("\n### Llama-3-70B config, batch 1 x 4096 tokens, meta device (fresh process each)\n")
    rows = [
        [
            "accelerate estimate-memory (its functions)",
            f"{acc['params']:,}",
            "--",
            f"{acc['build_s']:.1f}",
            "--",
            f"{acc['maxrss_mb']:.0f}",
        ],
        [
            "hookkit.summary (eval: every column)",
            f"{ev['params']:,}",
            f"{ev['mult_adds']:.3e}",
            f"{ev['build_s']:.1f}",
            f"{ev['summary_s']:.1f}",
            f"{ev['maxrss_mb']:.0f}",
        ],
        [
            "hookkit.summary(mode='train', AdamW) + memory_plan",
            f"{tr['params']:,}",
            f"{tr['mult_adds']:.3e}",
            f"{tr['build_s']:.1f}",
            f"{tr['summary_s'] + tr['plan_s']:.1f}",
            f"{tr['maxrss_mb']:.0f}",
        ],
    ]
    print(table(rows, ["what", "parameters", "mult-adds", "build s", "summary s", "peak RSS MB"]))
    t, plan = tr["training"], tr["plan"]
    a = acc["training"]
    print(
        f"\naccelerate (float32, parameters only): model {gib(a['model'])}, gradients {gib(a['gradients'])}, "
        f"optimizer {gib(a['optimizer'])}, step {gib(a['step'])}; largest layer {gib(acc['largest_layer_bytes'])}"
    )
    print(
        f"hookkit (float32, one process, AdamW): params {gib(t['params'])} + gradients {gib(t['gradients'])} + "
        f"optimizer state {gib(t['optimizer_state'])} + saved activations {gib(t['saved'])} + transient {gib(t['transient'])} "
        f"= {gib(t['estimate'])}"
    )
    parts = ", ".join(f"{k} {gib(v)}" for k, v in plan["parts"].items())
    print(f"memory_plan(ranks=8, fsdp, checkpointing=blocks, bf16, fp32 master weights): {parts}; total {gib(plan['total'])} per rank")
    print(f"(saved for backward, float32, no checkpointing: {gib(tr['saved'])}; import {tr['import_s']:.1f} s)")


def offload_part() -> None:
    import copy

    import accelerate
    import torch
    import transformers

    import hookkit

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=8, n_embd=256, n_head=8, vocab_size=2048, n_positions=256)
    ref = transformers.GPT2LMHeadModel(config).eval()
    device_map = {f"transformer.{n}": "cpu" for n in ("wte", "wpe", "drop", "ln_f")} | {"lm_head": "cpu"}
    device_map |= {f"transformer.h.{i}": ("disk" if i % 2 else "cpu") for i in range(8)}
    folder = tempfile.mkdtemp(prefix="hookkit-offload-")
    placed = accelerate.dispatch_model(copy.deepcopy(ref), device_map=device_map, offload_dir=folder)
    ids = torch.randint(0, 2048, (4, 128), generator=torch.Generator().manual_seed(0))
    blocks = [f"transformer.h.{i}" for i in (1, 3, 5, 7)]  # the four offloaded blocks

    def bare():
        def step():
            with torch.no_grad():
                placed(ids)

        return step, lambda: None

    def captured(to=None):
        def setup():
            cap = hookkit.capture(placed, blocks, keep="last", to=to)

            def step():
                with torch.no_grad():
                    placed(ids)

            return step, cap.remove

        return setup

    def in_memory():
        def step():
            with torch.no_grad():
                ref(ids)

        return step, lambda: None

    variants = [("offloaded forward", bare), ("capture 4 blocks", captured()), ("capture 4 blocks, to='cpu'", captured("cpu"))]
    variants.append(("same model in memory", in_memory))
    results = run_interleaved(variants, rounds=8, reps=10)
    base = "offloaded forward"
    print("\n### Disk-offloaded GPT-2-style model (8 x 256, blocks 1, 3, 5, 7 on disk), batch 4 x 128, no grad\n")
    rows = []
    for name, _ in variants:
        r = results[name]
        rows.append([name, f"{r.median_ms:.1f}", f"{ratio(results, name, base):.3f}", spread(results, name, base)])
    print(table(rows, ["variant", "median ms", f"/ {base}", "IQR of ratio"]))


if __name__ == "__main__":
    print(machine())
    which = sys.argv[1:] or ["meta", "offload"]
    if "meta" in which:
        meta_part()
    if "offload" in which:
        offload_part()
