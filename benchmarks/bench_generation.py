"""Generation: capture during ``generate()`` vs bare ``generate()`` (and nnsight), and
``capture.sequence`` vs a full forward without cache, for every listed architecture.

    PYTHONPATH=$PWD/src /work/bench-venv/bin/python benchmarks/bench_generation.py [--rounds 12] [--reps 3]

Speed: GPT-2 (transformers GPT2LMHeadModel, 4 layers, width 128, 4 heads, random weights), batch 4
x 16-token prompts, greedy ``generate(max_new_tokens=32)`` with the KV cache, no EOS (32 tokens
every time), under torch.no_grad, one intra-op thread, CPU time. Variants, interleaved: bare
generate; ``hookkit.capture`` of every block's output (``transformer.h.*``) with the whole
sequence joined after each call (``cap.sequence``); nnsight's generation tracing saving every
block's output at every step, where nnsight installs.

Equality: for each architecture built from a small config (random weights), a batch of 2 with left
padding, greedy generate(max_new_tokens=6) captured, then ``cap.sequence`` of every decoder block
against one forward without cache over the processed tokens (same mask and position ids): the
largest absolute difference over the real (unpadded) positions.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--new", type=int, default=32)
    p.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    p.add_argument("--no-nnsight", action="store_true")
    p.add_argument("--only", default="", help="speed or equality (default both)")
    return p.parse_args()


ARGS = parse()
H.set_threads(1)
H.block_torchvision()
H.use_clock(ARGS.clock)

import torch  # noqa: E402
import transformers as tf  # noqa: E402

import hookkit  # noqa: E402

torch.set_num_threads(1)
tf.logging.set_verbosity_error()
warnings.filterwarnings("ignore")
B, PROMPT = 4, 16


# -- speed ------------------------------------------------------------------------------------------
def gpt2_model():
    torch.manual_seed(0)
    cfg = tf.GPT2Config(n_layer=4, n_embd=128, n_head=4, bos_token_id=0, eos_token_id=None, pad_token_id=0)
    return tf.GPT2LMHeadModel(cfg).eval()


def speed() -> None:
    model = gpt2_model()
    ids = torch.randint(1, model.config.vocab_size, (B, PROMPT), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    blocks = [f"transformer.h.{i}" for i in range(model.config.n_layer)]
    gen = {"attention_mask": mask, "max_new_tokens": ARGS.new, "min_new_tokens": ARGS.new, "do_sample": False}
    ref = model.generate(ids, **gen)

    def bare():
        def step():
            with torch.no_grad():
                return model.generate(ids, **gen)

        return step, lambda: None

    def hooked():
        cap = hookkit.capture(model, blocks)

        def step():
            with torch.no_grad():
                out = model.generate(ids, **gen)
            seqs = [cap.sequence(n) for n in blocks]
            assert seqs[0].shape[1] == PROMPT + ARGS.new - 1
            cap.clear()
            return out

        return step, cap.remove

    variants = [("bare generate", bare), ("hookkit capture (every block, joined)", hooked)]
    if not ARGS.no_nnsight:
        variants.append(("nnsight generate + .save()", nnsight_variant(model, ids, mask, blocks, gen, ref)))
    res = H.run_interleaved(variants, ARGS.rounds, ARGS.reps, warmup=1)
    n_tok = B * ARGS.new
    rows = []
    for name, r in res.items():
        if r.error:
            rows.append([name, "-", "-", "-", r.error])
            continue
        ratio = H.ratio(res, "bare generate", name)  # throughput relative to bare (>1: faster)
        rows.append(
            [name, f"{r.median_ms:.1f}", f"{n_tok / (r.median_ms / 1e3):.0f}", f"{ratio:.3f}", H.spread(res, "bare generate", name)]
        )
    print(H.machine())
    print(H.table(rows, ["variant", "ms / generate", "tokens/s", "tokens/s vs bare", "IQR"]))


def nnsight_variant(model, ids, mask, blocks, gen, ref):
    def setup():
        import nnsight
        from nnsight import NNsight

        wrapped = NNsight(model)
        layers = [wrapped.transformer.h[i] for i in range(len(blocks))]

        def step():
            # NNsight on a preloaded model without a tokenizer: the trace runs model.generate
            with torch.no_grad(), wrapped.trace(ids, fn=model.generate, **gen) as tracer:
                saved = nnsight.save([[] for _ in layers])
                for _ in tracer.iter[: ARGS.new]:
                    for keep, layer in zip(saved, layers):
                        keep.append(layer.output)
                out = tracer.result.save()
            assert len(saved[0]) == ARGS.new and torch.equal(out, ref)
            return out

        return step, lambda: None

    return setup


# -- equality -----------------------------------------------------------------------------------------
def small(cls, **kw):
    base = {"vocab_size": 100, "bos_token_id": 1, "eos_token_id": None, "pad_token_id": 0}
    return cls(**{**base, **kw})


DEC = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
ARCHS = {
    "GPT-2": (lambda: tf.GPT2LMHeadModel(small(tf.GPT2Config, n_layer=2, n_embd=32, n_head=2)), "transformer.h"),
    "Llama": (lambda: tf.LlamaForCausalLM(small(tf.LlamaConfig, **DEC)), "model.layers"),
    "Mistral": (lambda: tf.MistralForCausalLM(small(tf.MistralConfig, **DEC)), "model.layers"),
    "Qwen2": (lambda: tf.Qwen2ForCausalLM(small(tf.Qwen2Config, **DEC)), "model.layers"),
    "Gemma": (lambda: tf.GemmaForCausalLM(small(tf.GemmaConfig, head_dim=8, **DEC)), "model.layers"),
    "Phi": (lambda: tf.PhiForCausalLM(small(tf.PhiConfig, **DEC)), "model.layers"),
    "OPT": (
        lambda: tf.OPTForCausalLM(
            small(tf.OPTConfig, hidden_size=32, ffn_dim=64, num_hidden_layers=2, num_attention_heads=2, word_embed_proj_dim=32)
        ),
        "model.decoder.layers",
    ),
    "T5": (
        lambda: tf.T5ForConditionalGeneration(
            small(tf.T5Config, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=2, decoder_start_token_id=0)
        ),
        "decoder.block",
    ),
    "BART": (
        lambda: tf.BartForConditionalGeneration(
            small(
                tf.BartConfig,
                d_model=32,
                encoder_layers=2,
                decoder_layers=2,
                encoder_attention_heads=2,
                decoder_attention_heads=2,
                encoder_ffn_dim=64,
                decoder_ffn_dim=64,
                decoder_start_token_id=2,
                forced_bos_token_id=None,
                forced_eos_token_id=None,
            )
        ),
        "model.decoder.layers",
    ),
}


def equality() -> None:
    rows = []
    for arch, (make, stack) in ARCHS.items():
        try:
            torch.manual_seed(0)
            model = make().eval()
            ids = torch.randint(3, 100, (2, 7), generator=torch.Generator().manual_seed(0))
            mask = torch.ones_like(ids)
            mask[0, :3] = 0
            names = [f"{stack}.{i}" for i in range(2)]
            with hookkit.capture(model, names) as cap, torch.no_grad():
                out = model.generate(ids, attention_mask=mask, max_new_tokens=6, min_new_tokens=6, do_sample=False)
            processed = out[:, :-1]
            with hookkit.capture(model, names) as ref, torch.no_grad():
                if model.config.is_encoder_decoder:
                    model(input_ids=ids, attention_mask=mask, decoder_input_ids=processed, use_cache=False)
                    real = torch.ones(processed.shape, dtype=torch.bool)
                else:
                    fmask = torch.cat([mask, torch.ones(2, processed.shape[1] - mask.shape[1], dtype=mask.dtype)], 1)
                    pid = (fmask.cumsum(-1) - 1).masked_fill(fmask == 0, 0)
                    model(processed, attention_mask=fmask, position_ids=pid, use_cache=False)
                    real = fmask.bool()
            err = 0.0
            for n in names:
                full = ref[n]
                full = full if torch.is_tensor(full) else full[0]
                seq = cap.sequence(n)
                assert seq.shape == full.shape, (seq.shape, full.shape)
                err = max(err, float((seq - full)[real].abs().max()))
            rows.append([arch, type(model).__name__, str(tuple(seq.shape)), f"{err:.1e}", "yes" if err <= 1e-5 else "NO"])
        except Exception as exc:  # an architecture that does not build here: reported
            rows.append([arch, "-", "-", "-", f"{type(exc).__name__}: {exc}"[:120]])
    print(H.table(rows, ["architecture", "class", "sequence shape", "max abs error", "<= 1e-5"]))


if __name__ == "__main__":
    if ARGS.only in ("", "equality"):
        equality()
    if ARGS.only in ("", "speed"):
        speed()
