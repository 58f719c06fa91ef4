"""Issue 43, item 4: the GPU checks (skipped without CUDA; no GPU on the development machines).

1. ``from_pretrained(device_map="auto", max_memory={0: ..., "cpu": ...})`` across the GPU and the CPU
   (a GPT-2-style model whose later blocks do not fit the GPU budget): capture (``to="cpu"``),
   steer, logit_lens, attribute, generation with ``positions=`` and diff give the values of the same
   model in memory on the GPU (float32, TF32 off: tolerance 1e-4 for reordered sums).
2. The dry run's training-memory estimate of a model built on the meta device, standing for CUDA
   tensors (``summary(..., device="cuda")``), against the same model really on the GPU: the estimate of
   the real summary and the measured peak of one real step (``torch.cuda.max_memory_allocated``).

    PYTHONPATH=$PWD/src python benchmarks/gpu_big_models.py
"""

from __future__ import annotations

import sys
import tempfile

import torch

import hookkit


def mb(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def check_dispatched() -> None:
    import transformers

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=6, n_embd=512, n_head=8, vocab_size=4096, n_positions=512)
    ref = transformers.GPT2LMHeadModel(config).eval()
    folder = tempfile.mkdtemp()
    ref.save_pretrained(folder)
    ref = ref.cuda()
    placed = transformers.GPT2LMHeadModel.from_pretrained(
        folder, device_map="auto", max_memory={0: "40MiB", "cpu": "4GiB"}, local_files_only=True
    ).eval()
    devices = {str(p.device) for p in placed.parameters()}
    print("device map:", placed.hf_device_map, "parameter devices:", devices)
    ids = torch.randint(0, 4096, (2, 64), device="cuda")
    layers = ["transformer.h.0", "transformer.h.5"]

    def same(a, b, what):
        torch.testing.assert_close(b.float().cpu(), a.float().cpu(), rtol=1e-4, atol=1e-4, msg=what)
        print("ok", what)

    with hookkit.capture(ref, layers) as ca:
        ref(ids)
    with hookkit.capture(placed, layers, to="cpu") as cb:
        placed(ids)
    for name in layers:
        assert cb[name].device.type == "cpu"
        same(ca[name], cb[name], f"capture {name}")
    v = torch.linspace(-1, 1, 512)  # on the CPU: moved to each layer's execution device
    with hookkit.steer(ref, "transformer.h.5", v):
        a = ref(ids).logits
    with hookkit.steer(placed, "transformer.h.5", v):
        b = placed(ids).logits
    same(a, b, "steer")
    same(torch.as_tensor(hookkit.logit_lens(ref, ids).logits), torch.as_tensor(hookkit.logit_lens(placed, ids).logits), "logit_lens")
    tgt = lambda out: out.logits[:, -1, 7]  # noqa: E731
    same(
        torch.as_tensor(hookkit.attribute(ref, "transformer.wte", ids, target=tgt, n_steps=8)),
        torch.as_tensor(hookkit.attribute(placed, "transformer.wte", ids, target=tgt, n_steps=8)),
        "attribute",
    )
    with hookkit.steer(ref, "transformer.h.5", v, positions="generated"):
        ga = ref.generate(ids[:1, :8], max_new_tokens=6, do_sample=False, pad_token_id=0)
    with hookkit.steer(placed, "transformer.h.5", v, positions="generated"):
        gb = placed.generate(ids[:1, :8], max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert torch.equal(ga.cpu(), gb.cpu()), (ga, gb)
    print("ok generate")
    d = hookkit.diff(ref, placed, ids, atol=1e-4, rtol=1e-4)
    print("diff first divergence:", d.first)


def check_estimate() -> None:
    import transformers

    config = transformers.GPT2Config(n_layer=4, n_embd=512, n_head=8, vocab_size=8192, n_positions=512)
    inputs = {"input_ids": (8, 256)}
    with torch.device("meta"):
        meta = transformers.GPT2LMHeadModel(config)
    dry = hookkit.summary(meta, inputs, dtypes="long", mode="train", optimizer=torch.optim.Adam(meta.parameters()), device="cuda")
    torch.manual_seed(0)
    real = transformers.GPT2LMHeadModel(config).cuda()
    s = hookkit.summary(real, inputs, dtypes="long", mode="train", optimizer=torch.optim.Adam(real.parameters()))
    t, td = s.training, dry.training
    print(
        f"dry-run estimate {mb(td['estimate'])}; real estimate {mb(t['estimate'])}; measured peak {mb(t['measured'])} ({t['measured_how']})"
    )
    print(f"dry run / measured: {td['estimate'] / t['measured']:.3f}; saved bytes dry {mb(dry.saved_bytes)} real {mb(s.saved_bytes)}")
    for part in ("params", "gradients", "optimizer_state", "saved", "transient"):
        print(f"  {part}: dry {mb(td[part])} real {mb(t[part])}")


if __name__ == "__main__":
    if not torch.cuda.is_available():
        print("no CUDA device: skipped (run this on a GPU machine)")
        sys.exit(0)
    print(torch.cuda.get_device_name(0), torch.__version__)
    check_dispatched()
    check_estimate()
