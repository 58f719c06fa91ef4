"""Generation and token positions: capture and edit across generate() steps, by absolute token
position, under a KV cache (transformers causal LMs, an encoder-decoder, Paddle's TransformerDecoder)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import hookkit
from hookkit.core.router import attached
from hookkit.core.validate import InvalidArgument

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")
tf.logging.set_verbosity_error()
warnings.filterwarnings("ignore", message=".*generation.*")

B, P, NEW = 2, 5, 4  # batch, prompt length, new tokens


def gpt2():
    cfg = tf.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=64, bos_token_id=1, eos_token_id=None, pad_token_id=0)
    return tf.GPT2LMHeadModel(cfg).eval()


def llama():
    cfg = tf.LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        vocab_size=100,
        bos_token_id=1,
        eos_token_id=None,
        pad_token_id=0,
    )
    return tf.LlamaForCausalLM(cfg).eval()


def qwen2():
    cfg = tf.Qwen2Config(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=100,
        bos_token_id=1,
        eos_token_id=None,
        pad_token_id=0,
    )
    return tf.Qwen2ForCausalLM(cfg).eval()


BLOCKS = {"gpt2": (gpt2, "transformer.h"), "llama": (llama, "model.layers"), "qwen2": (qwen2, "model.layers")}


def prompt(left_pad: bool = True):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(2, 100, (B, P), generator=g)
    mask = torch.ones_like(ids)
    if left_pad:
        mask[0, :2] = 0
        ids[0, :2] = 0
    return ids, mask


def full_inputs(tokens, mask):
    """The attention mask and position ids generate() uses, extended over ``tokens``."""
    extra = tokens.shape[1] - mask.shape[1]
    fmask = torch.cat([mask, torch.ones(mask.shape[0], extra, dtype=mask.dtype)], 1)
    pid = (fmask.cumsum(-1) - 1).masked_fill(fmask == 0, 0)
    return fmask, pid


def greedy(model, ids, mask, **kw):
    torch.manual_seed(0)
    return model.generate(
        ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False, output_logits=True, return_dict_in_generate=True, **kw
    )


def greedy_without_cache(model, ids, mask, layer, delta_at):
    """The reference: greedy decoding with full forwards (no cache), each edited by hand at the same
    absolute positions: ``delta_at(position) -> tensor to add or None``."""

    def add(out, ev):
        out = out.clone()
        for p in range(out.shape[1]):
            d = delta_at(p)
            if d is not None:
                out[:, p] = out[:, p] + d
        return out

    tokens, logits = ids, []
    with hookkit.edit(model, layer, add):
        for _ in range(NEW):
            fmask, pid = full_inputs(tokens, mask)
            step = model(tokens, attention_mask=fmask, position_ids=pid, use_cache=False).logits[:, -1]
            logits.append(step)
            tokens = torch.cat([tokens, step.argmax(-1, keepdim=True)], 1)
    return tokens, logits


# -- stitched sequences ----------------------------------------------------------------------------
@pytest.mark.parametrize("arch", sorted(BLOCKS))
def test_sequence_equals_full_forward_with_left_padding(arch):
    make, blocks = BLOCKS[arch]
    model = make()
    ids, mask = prompt()
    names = [f"{blocks}.0", f"{blocks}.1"]
    with hookkit.capture(model, names) as cap:
        out = greedy(model, ids, mask).sequences
    recs = cap.calls(names[1])
    assert [(r.gen_step, r.offset, r.output.shape[1]) for r in recs] == [(0, 0, P), (1, P, 1), (2, P + 1, 1), (3, P + 2, 1)]
    processed = out[:, :-1]  # the last new token is never fed back
    fmask, pid = full_inputs(processed, mask)
    with hookkit.capture(model, names) as ref:
        model(processed, attention_mask=fmask, position_ids=pid, use_cache=False)
    for name in names:
        seq = cap.sequence(name)
        assert seq.shape == (B, P + NEW - 1, 32)
        real = fmask.bool()  # padded slots attend to nothing real: compared where the mask is set
        torch.testing.assert_close(seq[real], ref[name][real], atol=1e-5, rtol=1e-5)


def test_sequence_static_cache_and_sampling_and_beams():
    model = gpt2()
    ids, mask = prompt(left_pad=False)
    for kw in ({"cache_implementation": "static"}, {"do_sample": True, "top_k": 5}):
        with hookkit.capture(model, "transformer.h.1") as cap:
            torch.manual_seed(0)
            out = model.generate(ids, attention_mask=mask, max_new_tokens=NEW, **{"do_sample": False, **kw})
        with hookkit.capture(model, "transformer.h.1") as ref:
            model(out[:, :-1], use_cache=False)
        torch.testing.assert_close(cap.sequence("transformer.h.1"), ref["transformer.h.1"], atol=1e-5, rtol=1e-5)
    with hookkit.capture(model, "transformer.h.1") as cap:
        model.generate(ids, attention_mask=mask, max_new_tokens=NEW, num_beams=3, do_sample=False)
    assert cap.sequence("transformer.h.1").shape == (B * 3, P + NEW - 1, 32)  # rows: beam slots as processed


def test_sequence_refuses_a_layer_that_does_not_see_every_position():
    model = gpt2()
    ids, mask = prompt()
    with hookkit.capture(model, ["lm_head", "transformer.h.0"], steps=range(1, 99)) as cap:
        greedy(model, ids, mask)
    with pytest.raises(InvalidArgument, match="start at position 5.*steps="):
        cap.sequence("transformer.h.0")  # step 0 was not recorded
    with hookkit.capture(model, "lm_head") as cap:
        greedy(model, ids, mask)
    with pytest.raises(
        InvalidArgument, match="'lm_head' does not see every position: at generation step 0 it gave 1 position where the forward fed 5"
    ):
        cap.sequence("lm_head")


def test_sequence_of_an_encoder_decoder():
    cfg = tf.T5Config(
        vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=2, decoder_start_token_id=0, pad_token_id=0, eos_token_id=None
    )
    model = tf.T5ForConditionalGeneration(cfg).eval()
    src = torch.randint(2, 100, (B, 6), generator=torch.Generator().manual_seed(0))
    names = ["encoder.block.1", "decoder.block.1"]
    with hookkit.capture(model, names) as cap:
        out = model.generate(src, max_new_tokens=NEW, do_sample=False)
    assert [r.gen_step for r in cap.calls("decoder.block.1")] == [0, 1, 2, 3]
    with hookkit.capture(model, names) as ref:
        model(input_ids=src, decoder_input_ids=out[:, :-1], use_cache=False)
    enc = cap.sequence("encoder.block.1")  # run once, outside the decoder's steps: as is
    torch.testing.assert_close(enc, ref["encoder.block.1"][0], atol=1e-5, rtol=1e-5)  # blocks return tuples: index 0
    torch.testing.assert_close(cap.sequence("decoder.block.1"), ref["decoder.block.1"][0], atol=1e-5, rtol=1e-5)


# -- edits at absolute positions during generation -------------------------------------------------
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_steer_at_absolute_positions_equals_edited_greedy_without_cache(arch):
    make, blocks = BLOCKS[arch]
    model = make()
    layer = f"{blocks}.0"
    ids, mask = prompt()
    v = torch.randn(32, generator=torch.Generator().manual_seed(3)) * 2
    where = [3, P + 1]  # one prompt position, one generated position (processed at step 2)
    with hookkit.steer(model, layer, v, positions=where):
        got = greedy(model, ids, mask)
    tokens, logits = greedy_without_cache(model, ids, mask, layer, lambda p: v if p in where else None)
    assert torch.equal(got.sequences, tokens)
    for a, b in zip(got.logits, logits):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    plain = greedy(model, ids, mask)
    assert not torch.allclose(plain.logits[-1], got.logits[-1])  # the steering did something
    assert attached(model.get_submodule(layer))["forward"] == 0


def test_patch_one_token_from_a_clean_run_into_a_corrupted_one():
    model = gpt2()
    layer = "transformer.h.1"
    ids, mask = prompt(left_pad=False)
    corrupt = ids.clone()
    corrupt[:, 2] = (corrupt[:, 2] + 7) % 98 + 2
    with hookkit.capture(model, layer) as clean:
        model(ids)  # a plain forward: its sequence is its output
    clean_seq = clean.sequence(layer)
    with hookkit.patch(model, layer, clean, positions=[2]):
        got = greedy(model, corrupt, mask)
    # the reference: full forwards without cache where position 2 is replaced by the clean value

    def put(out, ev):
        out = out.clone()
        out[:, 2] = clean_seq[:, 2]
        return out

    ref_tokens, ref_logits = corrupt, []
    with hookkit.edit(model, layer, put):
        for _ in range(NEW):
            step = model(ref_tokens, use_cache=False).logits[:, -1]
            ref_logits.append(step)
            ref_tokens = torch.cat([ref_tokens, step.argmax(-1, keepdim=True)], 1)
    assert torch.equal(got.sequences, ref_tokens)
    for a, b in zip(got.logits, ref_logits):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    # a patch value indexed by absolute position: the clean sequence covers positions 0..4
    with pytest.raises(ValueError, match=r"has 5 positions.*position 6 is patched at generation step 2"):
        with hookkit.patch(model, layer, clean_seq, positions=[6]):
            greedy(model, corrupt, mask)
    assert attached(model.get_submodule(layer))["forward"] == 0


def test_generated_edits_every_new_token_and_no_prompt_token():
    model = gpt2()
    ids, mask = prompt()
    seen = []

    def record(part, ev):
        seen.append((ev.gen_step, list(ev.selected), part.shape[1]))
        return part * 0

    with hookkit.edit(model, "transformer.h.1", record, positions="generated"), hookkit.capture(model, "transformer.h.1") as cap:
        greedy(model, ids, mask)
    assert seen == [(1, [5], 1), (2, [6], 1), (3, [7], 1)]  # step 0 (the prompt) untouched
    seq = cap.sequence("transformer.h.1")
    assert bool((seq[:, P:] == 0).all()) and bool((seq[:, :P].abs().sum(-1) > 0).all())
    seen.clear()
    with hookkit.edit(model, "transformer.h.1", record, positions="last"):
        greedy(model, ids, mask)
    assert seen == [(0, [4], 1), (1, [5], 1), (2, [6], 1), (3, [7], 1)]
    seen.clear()
    with hookkit.edit(model, "transformer.h.1", record, positions="prompt", steps=[0, 1]):
        greedy(model, ids, mask)
    assert seen == [(0, [0, 1, 2, 3, 4], 5)]


def test_capture_positions_and_steps():
    model = gpt2()
    ids, mask = prompt()
    with hookkit.capture(model, "transformer.h.0") as full:
        greedy(model, ids, mask)
    with hookkit.capture(model, "transformer.h.0", positions=[1, 6]) as some:
        greedy(model, ids, mask)
    recs = some.calls("transformer.h.0")
    assert [(r.gen_step, list(r.positions)) for r in recs] == [(0, [1]), (2, [6])]
    whole = full.sequence("transformer.h.0")
    torch.testing.assert_close(some.sequence("transformer.h.0"), whole[:, [1, 6]])
    with hookkit.capture(model, "transformer.h.0", steps=[2]) as one:
        greedy(model, ids, mask)
    assert [r.gen_step for r in one.calls("transformer.h.0")] == [2]


def test_ablate_and_steps_on_a_plain_forward():
    model = gpt2()
    ids, _ = prompt(left_pad=False)
    with hookkit.capture(model, "transformer.h.0") as cap, hookkit.ablate(model, "transformer.h.0", positions=slice(1, 3)):
        model(ids)
    out = cap["transformer.h.0"]
    assert bool((out[:, 1:3] == 0).all()) and bool((out[:, [0, 3, 4]] != 0).any(-1).all())
    with hookkit.capture(model, "transformer.h.0") as cap, hookkit.ablate(model, "transformer.h.0", steps=[1]):
        model(ids)  # a plain forward is step 0
    assert bool((cap["transformer.h.0"] != 0).any())


# -- errors ---------------------------------------------------------------------------------------------
def test_errors_name_what_is_wrong():
    model = gpt2()
    ids, mask = prompt()
    layer = model.transformer.h[0]
    with pytest.raises(InvalidArgument, match=r"position 7 past the end of the forward on layer 'transformer.h.0': it has 5"):
        with hookkit.steer(model, "transformer.h.0", torch.ones(32), positions=[2, 7]):
            model(ids)
    assert attached(layer)["forward"] == 0
    with pytest.raises(
        InvalidArgument, match=r"position 20 of positions=\[20\] never reached on layer 'transformer.h.0'.*ended at position 7"
    ):
        with hookkit.steer(model, "transformer.h.0", torch.ones(32), positions=[20]):
            greedy(model, ids, mask)
    assert attached(layer)["forward"] == 0
    with hookkit.steer(model, "transformer.h.0", torch.ones(32), positions=[20]) as h:
        greedy(model, ids, mask)
        assert h.missing() == {"transformer.h.0": [20]}
        h.reach = None  # no error at the end of this block: the test read it
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 4))
    with pytest.raises(InvalidArgument, match="Sequential has no known token axis.*token_dim="):
        hookkit.steer(mlp, "0", torch.ones(4), positions=[0])
    with pytest.raises(InvalidArgument, match=r"shape \[3, 4\]: no token axis 2"):
        with hookkit.steer(mlp, "0", torch.ones(4), positions=[0], token_dim=2):
            mlp(torch.ones(3, 4))
    with pytest.raises(InvalidArgument, match="positions"):
        hookkit.steer(model, "transformer.h.0", torch.ones(32), positions="newest")
    with pytest.raises(InvalidArgument, match="positions"):
        hookkit.patch(model, "transformer.h.0", torch.ones(1, 5, 32), positions=[-1])
    with pytest.raises(TypeError, match="steps"):
        hookkit.steer(model, "transformer.h.0", torch.ones(32), steps="first")
    with pytest.raises(ValueError, match=r"has 3 positions along the token axis \(0..2\); position 4"):
        with hookkit.patch(model, "transformer.h.0", torch.zeros(B, 3, 32), positions=[4]):
            model(ids)
    with pytest.raises(InvalidArgument, match="lm_head.*does not see every position"):
        with hookkit.steer(model, "lm_head", torch.ones(100), positions=[4]):
            greedy(model, ids, mask)
    assert all(attached(m)["forward"] == 0 for m in model.modules())


# -- Paddle's TransformerDecoder, incremental decoding with its cache --------------------------------
def test_paddle_transformer_decoder_incremental_decoding():
    paddle = pytest.importorskip("paddle")
    paddle.seed(0)
    d, steps = 16, 4
    dec = paddle.nn.TransformerDecoder(paddle.nn.TransformerDecoderLayer(d, 2, 32, dropout=0.0), 2)
    dec.eval()
    memory = paddle.randn([B, 3, d])
    tgt = paddle.randn([B, steps, d])
    v = paddle.ones([d]) * 0.5
    where = [1, 3]

    def incremental():
        cache = dec.gen_cache(memory)
        outs = []
        for t in range(steps):
            out, cache = dec(tgt[:, t : t + 1], memory, None, None, cache)
            outs.append(out)
        return paddle.concat(outs, 1)

    with hookkit.capture(dec, "layers.0") as cap, hookkit.steer(dec, "layers.0", v, positions=where):
        got = incremental()
    assert [(r.gen_step, r.offset) for r in cap.calls("layers.0")] == [(0, 0), (1, 1), (2, 2), (3, 3)]
    causal = paddle.triu(paddle.full([steps, steps], -1e9), 1)

    def shift(out, ev):
        add = np.zeros([1, steps, d], "float32")
        add[:, where] = 0.5
        return out + paddle.to_tensor(add)

    with hookkit.capture(dec, "layers.0") as ref, hookkit.edit(dec, "layers.0", shift):
        want = dec(tgt, memory, causal)
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-5)
    with hookkit.steer(dec, "layers.0", v, positions=where):  # one full forward: positions 1 and 3 at once
        np.testing.assert_allclose(dec(tgt, memory, causal).numpy(), want.numpy(), atol=1e-5)
    with hookkit.capture(dec, "layers.0") as clean:
        dec(tgt, memory, causal)
    with hookkit.patch(dec, "layers.0", clean, positions=[0, 2]), hookkit.capture(dec, "layers.0") as patched:
        dec(tgt * 0, memory, causal)
    np.testing.assert_allclose(patched["layers.0"].numpy()[:, [0, 2]], clean["layers.0"].numpy()[:, [0, 2]], atol=1e-6)
    assert not np.allclose(patched["layers.0"].numpy()[:, 1], clean["layers.0"].numpy()[:, 1])
    np.testing.assert_allclose(cap.sequence("layers.0").numpy(), ref["layers.0"].numpy(), atol=1e-5)
    with pytest.raises(InvalidArgument, match="position 9 .*never reached on layer 'layers.0'"):
        with hookkit.steer(dec, "layers.0", v, positions=[9]):
            incremental()


def test_steer_generated_the_same_under_static_cache_and_beam_search():
    model = gpt2()
    ids, mask = prompt()
    v = torch.randn(32, generator=torch.Generator().manual_seed(5)) * 3
    runs = {}
    for name, kw in {"dynamic": {}, "static": {"cache_implementation": "static"}}.items():
        with hookkit.steer(model, "transformer.h.0", v, positions="generated"):
            runs[name] = greedy(model, ids, mask, **kw)
    assert torch.equal(runs["dynamic"].sequences, runs["static"].sequences)
    for a, b in zip(runs["dynamic"].logits, runs["static"].logits):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    steps = []
    with hookkit.edit(
        model, "transformer.h.0", lambda part, ev: steps.append((ev.gen_step, part.shape[0], list(ev.selected))), positions="generated"
    ):
        model.generate(ids, attention_mask=mask, max_new_tokens=3, num_beams=2, do_sample=False)
    assert steps == [(1, 4, [5]), (2, 4, [6])]  # beam slots: batch 2 x 2 beams
