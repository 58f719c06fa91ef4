"""Attention heads (heads= on capture, ablate, patch, steer, edit), the family registry and
attention_patterns, against hand computations on unmodified models: transformers GPT-2, Llama with
grouped-query attention and rotary embeddings, BERT (tiny configs, random weights) and Paddle's
nn.TransformerEncoder / nn.MultiHeadAttention."""

from __future__ import annotations

import numpy as np
import pytest

import hookkit
from hookkit.core import architectures
from hookkit.core.errors import UnsupportedModel
from hookkit.core.router import attached
from hookkit.core.validate import InvalidArgument
from tolerance import assert_close, sum_ops

# a hand-built reference against hookkit's path (other GEMM shapes, a batched norm and unembedding):
# the rounding of a norm and a product over a hidden size of at most 64
HIDDEN_OPS = 2 * sum_ops(64)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()


# -- models ------------------------------------------------------------------------------------------
def gpt2():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=61, n_positions=16, bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg).eval(), "transformer.h.{}.attn", "c_proj", 8


def llama():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        num_hidden_layers=2,
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=48,
        vocab_size=61,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
    )
    return transformers.LlamaForCausalLM(cfg).eval(), "model.layers.{}.self_attn", "o_proj", 8


def bert():
    torch.manual_seed(0)
    cfg = transformers.BertConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=48, vocab_size=61, pad_token_id=0
    )
    return transformers.BertModel(cfg).eval(), "encoder.layer.{}.attention", "output.dense", 8


FAMILIES = {"gpt2": gpt2, "llama": llama, "bert": bert}


def paddle_encoder():
    paddle = pytest.importorskip("paddle")
    paddle.seed(0)
    layer = paddle.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0)
    enc = paddle.nn.TransformerEncoder(layer, 2)
    enc.eval()
    return enc


def ids(b=2, t=7, seed=0):
    return torch.as_tensor(np.random.default_rng(seed).integers(1, 61, (b, t)))


def logits(out):
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


def reference(model, proj, edit):
    """The model's output with ``edit(z)`` applied to the projection's input by a plain native pre-hook."""
    h = proj.register_forward_pre_hook(lambda mod, args: (edit(args[0].clone()),))
    try:
        with torch.no_grad():
            return logits(model(ids()))
    finally:
        h.remove()


def nothing_attached(*layers):
    return all(not any(attached(layer).values()) for layer in layers)


def sub(model, path):
    for part in path.split("."):
        model = getattr(model, part)
    return model


# -- capture -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", FAMILIES)
def test_capture_heads_reshaped_back_is_the_projection_input(family):
    model, attn, proj, d = FAMILIES[family]()
    name = attn.format(1)
    with hookkit.capture(model, name, heads=True) as cap, hookkit.capture(model, f"{name}.{proj}", inputs=True, outputs=False) as ref:
        model(ids())
    rec, z = cap[name], ref[f"{name}.{proj}"][0]
    assert tuple(rec.shape) == (2, 4, 7, d)
    assert torch.equal(rec.permute(0, 2, 1, 3).reshape(z.shape), z)
    with hookkit.capture(model, name, heads=[3, 1]) as two:
        model(ids())
    assert torch.equal(two[name], rec[:, [3, 1]])
    assert two.calls(name)[0].call == 0


def test_capture_heads_paddle_mha():
    paddle = pytest.importorskip("paddle")
    enc = paddle_encoder()
    x = paddle.randn([2, 5, 16])
    with hookkit.capture(enc, "layers.0.self_attn", heads=True) as cap:
        with hookkit.capture(enc, "layers.0.self_attn.out_proj", inputs=True, outputs=False) as ref:
            enc(x)
    rec, z = cap["layers.0.self_attn"], ref["layers.0.self_attn.out_proj"][0]
    assert list(rec.shape) == [2, 4, 5, 4]
    np.testing.assert_array_equal(rec.transpose([0, 2, 1, 3]).reshape(z.shape).numpy(), z.numpy())


# -- ablate, steer, patch, edit: against a native pre-hook on the projection ------------------------------
@pytest.mark.parametrize("family", FAMILIES)
def test_ablate_heads_equals_zeroing_the_slice_before_the_projection(family):
    model, attn, proj, d = FAMILIES[family]()
    name = attn.format(0)

    def zero(z):
        z[..., 1 * d : 2 * d] = 0
        z[..., 3 * d : 4 * d] = 0
        return z

    want = reference(model, sub(model, f"{name}.{proj}"), zero)
    with torch.no_grad():
        plain = logits(model(ids()))
        with hookkit.ablate(model, name, heads=[1, 3]):
            got = logits(model(ids()))
    assert torch.equal(got, want)
    assert not torch.allclose(got, plain)
    assert nothing_attached(sub(model, f"{name}.{proj}"))


def test_ablate_heads_mean_steer_and_edit_gpt2():
    model, attn, proj, d = gpt2()
    name, layer = attn.format(1), sub(model, attn.format(1) + ".c_proj")

    def mean(z):
        z[..., 2 * d : 3 * d] = z[..., 2 * d : 3 * d].mean(0, keepdim=True)
        return z

    with torch.no_grad(), hookkit.ablate(model, name, heads=2, mode="mean"):
        got = logits(model(ids()))
    assert torch.equal(got, reference(model, layer, mean))

    v = torch.linspace(-1, 1, d)

    def add(z):
        z[..., 0:d] += 2.0 * v
        z[..., 3 * d : 4 * d] += 2.0 * v
        return z

    with torch.no_grad(), hookkit.steer(model, name, v, scale=2.0, heads=[0, 3]):
        got = logits(model(ids()))
    assert torch.allclose(got, reference(model, layer, add), atol=1e-6)

    per_head = torch.stack([v, -v])  # one vector per selected head

    def add2(z):
        z[..., d : 2 * d] += v
        z[..., 2 * d : 3 * d] -= v
        return z

    with torch.no_grad(), hookkit.steer(model, name, per_head, heads=[1, 2]):
        got = logits(model(ids()))
    assert torch.allclose(got, reference(model, layer, add2), atol=1e-6)

    def double(z):
        z[..., d : 2 * d] *= 2
        return z

    seen = []

    def fn(rec, ev):
        seen.append(tuple(rec.shape))
        return rec * 2

    with torch.no_grad(), hookkit.edit(model, name, fn, heads=[1]):
        got = logits(model(ids()))
    assert seen == [(2, 1, 7, d)]
    assert torch.equal(got, reference(model, layer, double))


@pytest.mark.parametrize("family", ["llama", "bert"])
def test_patch_heads_from_a_capture_equals_copying_the_slice(family):
    model, attn, proj, d = FAMILIES[family]()
    name = attn.format(1)
    clean, corrupt = ids(seed=1), ids(seed=2)
    with torch.no_grad():
        with hookkit.capture(model, name, heads=[0, 2]) as cap, hookkit.capture(model, f"{name}.{proj}", inputs=True, outputs=False) as zc:
            model(clean)
        z_clean = zc[f"{name}.{proj}"][0]

        def copy(mod, args):
            z = args[0].clone()
            for h in (0, 2):
                z[..., h * d : (h + 1) * d] = z_clean[..., h * d : (h + 1) * d]
            return (z,)

        handle = sub(model, f"{name}.{proj}").register_forward_pre_hook(copy)
        want = logits(model(corrupt))
        handle.remove()
        with hookkit.patch(model, name, cap, heads=[0, 2]):
            got = logits(model(corrupt))
        assert torch.equal(got, want)
        with hookkit.patch(model, name, cap[name], heads=[0, 2]):  # the record itself
            assert torch.equal(logits(model(corrupt)), want)
        with (
            pytest.raises(ValueError, match=r"patch\(\): values must be shaped \[2, 3, 7, 8\] for layer"),
            hookkit.patch(model, name, cap, heads=[0, 1, 2]),
        ):
            model(corrupt)
    assert nothing_attached(sub(model, f"{name}.{proj}"))


def test_ablate_heads_paddle_equals_zeroing_the_slice():
    paddle = pytest.importorskip("paddle")
    enc = paddle_encoder()
    x = paddle.randn([2, 5, 16])
    proj = enc.layers[1].self_attn.out_proj

    def zero(layer, args):
        z = args[0].clone()
        z[:, :, 4:8] = 0
        return (z,)

    h = proj.register_forward_pre_hook(zero)
    want = enc(x).numpy()
    h.remove()
    with hookkit.ablate(enc, "layers.1.self_attn", heads=[1]):
        got = enc(x).numpy()
    np.testing.assert_array_equal(got, want)
    assert not np.allclose(got, enc(x).numpy())


def test_head_layout_describes_an_unknown_attention_module():
    class Attn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv, self.out = torch.nn.Linear(12, 36), torch.nn.Linear(12, 12)

        def forward(self, x):
            q, k, v = self.qkv(x).chunk(3, -1)
            return self.out(torch.nn.functional.scaled_dot_product_attention(q, k, v))

    model = torch.nn.Sequential(Attn()).eval()
    x = torch.randn(2, 5, 12)
    with pytest.raises(UnsupportedModel, match=r"layer '0' \(Attn\).*gpt2 \(GPT2Attention\).*head_layout="):
        hookkit.ablate(model, "0", heads=[0])
    with pytest.raises(UnsupportedModel, match="known families"):
        hookkit.capture(model, "0", heads=True)
    assert nothing_attached(model[0], model[0].out)

    def zero(mod, args):
        z = args[0].clone()
        z[..., 4:8] = 0
        return (z,)

    h = model[0].out.register_forward_pre_hook(zero)
    want = model(x)
    h.remove()
    with hookkit.ablate(model, "0", heads=[1], head_layout=("out", 3, 4)):
        assert torch.equal(model(x), want)
    for bad in [("out", 3), ("out", 0, 4), (1, 3, 4), "out"]:
        with pytest.raises(ValueError, match="head_layout"):
            hookkit.ablate(model, "0", heads=[1], head_layout=bad)
    with pytest.raises(UnsupportedModel, match="no submodule 'nope'"):
        hookkit.ablate(model, "0", heads=[1], head_layout=("nope", 3, 4))
    with (
        pytest.raises(ValueError, match=r"ablate\(\): head_layout must be the layout of the input of .*: \[\.\.\., 16\] \(4 heads x 4\)"),
        hookkit.ablate(model, "0", heads=[1], head_layout=("out", 4, 4)),
    ):
        model(x)
    assert nothing_attached(model[0].out)


def test_heads_argument_errors():
    model, attn, _, _ = gpt2()
    name = attn.format(0)
    for bad, match in [([4], r"\[0, 3\]"), ([1, 1], "distinct"), ("all", "True"), ([], "True"), (1.5, "True")]:
        with pytest.raises(ValueError, match=match):
            hookkit.ablate(model, name, heads=bad)
    with pytest.raises(InvalidArgument, match="heads"):
        hookkit.capture(model, name, heads=True, grads=True)
    with (
        pytest.raises(ValueError, match=r"steer\(\): vector must be of shape \[8\] .* or \[2, 8\] .*; got .*shape \[5\]"),
        hookkit.steer(model, name, torch.ones(5), heads=[0, 1]),
    ):
        model(ids())
    with pytest.raises(
        ValueError, match=r"edit\(\): fn must be a function returning the record's shape \[2, 2, 7, 8\] .*; got .*shape \[2, 1, 7, 8\]"
    ):
        with hookkit.edit(model, name, lambda rec, ev: rec[:, :1], heads=[0, 1]):
            model(ids())
    with pytest.raises(
        ValueError, match=r"ablate\(\): mean must be shaped \[2, 7, 8\] \(\[H_selected, T, d_head\]\) for layer .*; got .*shape \[3\]"
    ):
        with hookkit.ablate(model, name, mode="mean", mean=torch.ones(3), heads=[0, 1]):
            model(ids())
    assert nothing_attached(sub(model, name + ".c_proj"))


def test_registry_token_dim_and_a_registered_family():
    model, _, _, _ = llama()
    assert architectures.token_dim(model) == 1
    assert architectures.token_dim(torch.nn.Linear(2, 2), default=None) is None
    assert architectures.stack_family(model).final_norm == "model.norm"
    lay = architectures.head_layout(model.model.layers[0].self_attn, "a")
    assert (lay.proj, lay.n_heads, lay.d_head, lay.family) == ("o_proj", 4, 8, "llama")

    class MyAttention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.heads, self.size, self.proj = 2, 3, torch.nn.Linear(6, 6)

        def forward(self, x):
            return self.proj(x)

    fam = architectures.AttentionFamily("mine", ("MyAttention",), ("proj",), ("heads",), ("size",))
    architectures.register_attention(fam)
    try:
        m = torch.nn.Sequential(MyAttention())
        with hookkit.capture(m, "0", heads=True) as cap:
            m(torch.randn(1, 4, 6))
        assert tuple(cap["0"].shape) == (1, 2, 4, 3)
    finally:
        architectures.ATTENTION_FAMILIES.remove(fam)


# -- attention patterns --------------------------------------------------------------------------------
def eager_attentions(model, inputs):
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            return model(**inputs, output_attentions=True).attentions
    finally:
        model.set_attn_implementation("sdpa")


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("padded", [False, True])
def test_attention_patterns_equal_eager_output_attentions(family, padded):
    model, attn, _, _ = FAMILIES[family]()
    model.set_attn_implementation("sdpa")
    inputs = {"input_ids": ids()}
    if padded:
        mask = torch.ones(2, 7, dtype=torch.long)
        mask[1, :3] = 0
        inputs["attention_mask"] = mask
    pats = hookkit.attention_patterns(model, inputs)
    ref = eager_attentions(model, inputs)
    assert list(pats) == [attn.format(0), attn.format(1)]
    for i in range(2):
        assert tuple(pats[attn.format(i)].shape) == (2, 4, 7, 7)
        assert_close(pats[attn.format(i)], ref[i], dtype=torch.float32, n_ops=HIDDEN_OPS)
    two = hookkit.attention_patterns(model, inputs, layers=attn.format(1), heads=[3, 0])
    assert_close(two[attn.format(1)], ref[1][:, [3, 0]], dtype=torch.float32, n_ops=HIDDEN_OPS)


def test_attention_patterns_keep_sdpa_and_the_output(monkeypatch):
    from transformers.modeling_utils import AttentionInterface
    from transformers.models.llama import modeling_llama

    model, attn, _, _ = llama()
    model.set_attn_implementation("sdpa")
    before = dict(AttentionInterface._global_mapping)

    def no_eager(*args, **kwargs):
        raise AssertionError("the eager attention ran")

    monkeypatch.setattr(modeling_llama, "eager_attention_forward", no_eager)
    x = ids()
    with torch.no_grad():
        want = model(x).logits
    with hookkit.capture(model, "lm_head") as cap:
        pats = hookkit.attention_patterns(model, x, layers=attn.format(0), heads=[2])
    assert torch.equal(cap["lm_head"], want)
    assert tuple(pats[attn.format(0)].shape) == (2, 1, 7, 7)
    per_layer = hookkit.attention_patterns(model, x, heads={attn.format(1): [0, 3]})  # other layers: every head
    assert tuple(per_layer[attn.format(0)].shape) == (2, 4, 7, 7) and tuple(per_layer[attn.format(1)].shape) == (2, 2, 7, 7)
    torch.testing.assert_close(per_layer[attn.format(0)][:, [2]], pats[attn.format(0)])
    assert dict(AttentionInterface._global_mapping) == before
    assert model.training is False


def test_attention_patterns_paddle_equal_need_weights():
    paddle = pytest.importorskip("paddle")
    enc = paddle_encoder()
    x = paddle.randn([2, 5, 16])
    mask = paddle.to_tensor(np.tril(np.ones((5, 5), bool))[None, None])
    pats = hookkit.attention_patterns(enc, (x, mask), heads=[1, 2])
    with hookkit.capture(enc, "layers.*.self_attn", inputs=True) as cap:
        enc(x, mask)
    for i, name in enumerate(["layers.0.self_attn", "layers.1.self_attn"]):
        att = enc.layers[i].self_attn
        att.need_weights = True
        q = cap.calls(name)[-1].inputs[0]
        ref = att(q, q, q, mask)[1][:, [1, 2]]
        att.need_weights = False
        np.testing.assert_allclose(pats[name].numpy(), ref.numpy(), atol=1e-5)
    assert nothing_attached(enc.layers[0].self_attn.q_proj)


def test_attention_patterns_errors():
    model, attn, _, _ = gpt2()
    with pytest.raises(UnsupportedModel, match="GPT2MLP.*known families"):
        hookkit.attention_patterns(model, ids(), layers="transformer.h.0.mlp")
    with pytest.raises(InvalidArgument, match="heads"):
        hookkit.attention_patterns(model, ids(), heads=[9])
    with pytest.raises(UnsupportedModel, match="no attention layer"):
        hookkit.attention_patterns(torch.nn.Linear(3, 3), torch.randn(2, 3))
    with pytest.raises(ValueError, match="inputs"):
        hookkit.attention_patterns(model, "text")


def test_more_families_t5_vit_neox_patterns_and_heads():
    torch.manual_seed(0)
    x = ids()
    t5 = transformers.T5ForConditionalGeneration(
        transformers.T5Config(d_model=32, d_kv=8, num_heads=4, d_ff=48, num_layers=1, num_decoder_layers=1, vocab_size=61)
    ).eval()
    inputs = {"input_ids": x, "decoder_input_ids": x[:, :3]}
    enc, cross = "encoder.block.0.layer.0.SelfAttention", "decoder.block.0.layer.1.EncDecAttention"
    pats = hookkit.attention_patterns(t5, inputs, layers=[enc, cross])  # relative position bias, cross attention
    t5.set_attn_implementation("eager")
    with torch.no_grad():
        ref = t5(**inputs, output_attentions=True)
    assert_close(pats[enc], ref.encoder_attentions[0], dtype=torch.float32, n_ops=HIDDEN_OPS)
    assert_close(pats[cross], ref.cross_attentions[0], dtype=torch.float32, n_ops=HIDDEN_OPS)
    with hookkit.capture(t5, cross, heads=[1]) as cap:
        t5(**inputs)
    assert tuple(cap[cross].shape) == (2, 1, 3, 8)

    neox = transformers.GPTNeoXForCausalLM(
        transformers.GPTNeoXConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=48, vocab_size=61)
    ).eval()
    pats = hookkit.attention_patterns(neox, x)
    neox.set_attn_implementation("eager")
    with torch.no_grad():
        ref = neox(x, output_attentions=True)
    assert_close(pats["gpt_neox.layers.0.attention"], ref.attentions[0], dtype=torch.float32, n_ops=HIDDEN_OPS)
    lens = hookkit.logit_lens(neox, x)
    assert_close(lens.logits[-1], ref.logits, dtype=torch.float32, n_ops=HIDDEN_OPS)

    vit = transformers.ViTModel(
        transformers.ViTConfig(
            hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=48, image_size=16, patch_size=8
        )
    ).eval()
    px = torch.randn(2, 3, 16, 16)
    (name,) = [n for n, m in vit.named_modules() if type(m).__name__ == "ViTAttention"]
    pats = hookkit.attention_patterns(vit, px, heads=[2])
    vit.set_attn_implementation("eager")
    with torch.no_grad():
        ref = vit(px, output_attentions=True)
    assert_close(pats[name], ref.attentions[0][:, [2]], dtype=torch.float32, n_ops=HIDDEN_OPS)
