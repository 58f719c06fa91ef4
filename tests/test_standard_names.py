"""TransformerLens's standard names on unmodified models (``hookkit.names``, names as layer specs,
``run_with_cache`` and its ActivationCache methods, ``logit_attribution``): every value equals a hand
computation from the model's own weights (and TransformerLens's TransformerBridge where installed);
decompositions sum back to the residual stream and to the logits. Float32 throughout: values that
go through a handful of matmuls of width <= 64 agree to ~1e-6; 1e-5 leaves a margin."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

import hookkit
from tolerance import assert_close

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from tiny_transformers import gpt2, llama, paddle_encoder, pythia  # noqa: E402

ATOL = 1e-5  # float32, sums of <= 64 products of O(1) values


def close(a, b, atol=ATOL):
    a = a.detach().numpy() if hasattr(a, "detach") else np.asarray(a)
    b = b.detach().numpy() if hasattr(b, "detach") else np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    np.testing.assert_allclose(a, b, atol=atol, rtol=0)


def gemma2():
    torch.manual_seed(0)
    cfg = T.Gemma2Config(
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        hidden_size=32,
        intermediate_size=64,
        vocab_size=50,
        max_position_embeddings=16,
        final_logit_softcapping=None,  # the logits a linear function of the residual stream
    )
    return T.Gemma2ForCausalLM(cfg).eval()


IDS = torch.tensor([[3, 7, 1, 9, 4], [2, 2, 8, 5, 11]])


def layer_norm_parts(x, eps):
    xc = x - x.mean(-1, keepdim=True)
    scale = (xc.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    return scale, xc / scale


def causal_attention(q, k, v):
    """q [B, T, H, d], k/v [B, T, Hkv, d] -> z [B, T, H, d] (grouped-query: each kv head serves H/Hkv heads)."""
    rep = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(rep, 2), v.repeat_interleave(rep, 2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
    mask = torch.ones(q.shape[1], q.shape[1], dtype=torch.bool).tril()
    pattern = scores.masked_fill(~mask, float("-inf")).softmax(-1)
    return torch.einsum("bhqk,bkhd->bqhd", pattern, v)


# -- names ---------------------------------------------------------------------------------------------
def test_names_lists_transformer_lens_names_in_order():
    names = hookkit.names(gpt2())
    assert names[:4] == ["hook_embed", "hook_pos_embed", "blocks.0.hook_resid_pre", "blocks.0.ln1.hook_scale"]
    assert names[-2:] == ["ln_final.hook_scale", "ln_final.hook_normalized"]
    assert "blocks.1.attn.hook_z" in names and "blocks.1.mlp.hook_post" in names
    neox = hookkit.names(pythia())
    assert "blocks.0.hook_resid_mid" not in neox and "blocks.0.ln2.hook_scale" in neox  # parallel attention and MLP
    assert "blocks.0.mlp.hook_pre_linear" in hookkit.names(llama())


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_gpt2_every_name_equals_a_hand_computation(attn):
    model = gpt2(attn)
    with hookkit.capture(model, hookkit.names(model)) as cap:
        out = model(IDS, output_hidden_states=True)
    tr = model.transformer
    for i, block in enumerate(tr.h):
        x = out.hidden_states[i]
        close(cap[f"blocks.{i}.hook_resid_pre"], x)
        scale, normed = layer_norm_parts(x, block.ln_1.eps)
        close(cap[f"blocks.{i}.ln1.hook_scale"], scale)
        close(cap[f"blocks.{i}.ln1.hook_normalized"], normed)
        q, k, v = (t.reshape(2, 5, 4, 8) for t in block.attn.c_attn(block.ln_1(x)).split(32, -1))
        for name, t in zip("qkv", (q, k, v)):
            close(cap[f"blocks.{i}.attn.hook_{name}"], t)
        z = causal_attention(q, k, v)
        close(cap[f"blocks.{i}.attn.hook_z"], z)
        attn_out = block.attn.c_proj(z.reshape(2, 5, 32))
        close(cap[f"blocks.{i}.hook_attn_out"], attn_out)
        mid = x + attn_out
        close(cap[f"blocks.{i}.hook_resid_mid"], mid)
        pre = block.mlp.c_fc(block.ln_2(mid))
        close(cap[f"blocks.{i}.mlp.hook_pre"], pre)
        close(cap[f"blocks.{i}.mlp.hook_post"], block.mlp.act(pre))
        mlp_out = block.mlp.c_proj(block.mlp.act(pre))
        close(cap[f"blocks.{i}.hook_mlp_out"], mlp_out)
        close(cap[f"blocks.{i}.hook_resid_post"], mid + mlp_out)
    close(cap["hook_embed"], tr.wte(IDS))
    _, cache = hookkit.run_with_cache(model, IDS, names_filter=["blocks.*.attn.hook_pattern", "blocks.0.attn.hook_[qk]"])
    assert list(cache) == ["blocks.0.attn.hook_q", "blocks.0.attn.hook_k", "blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"]
    q, k = cache["blocks.0.attn.hook_q"], cache["blocks.0.attn.hook_k"]
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(8)
    close(cache["blocks.0.attn.hook_pattern"], scores.masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), float("-inf")).softmax(-1))
    close(cap["ln_final.hook_scale"], layer_norm_parts(out.hidden_states[-2] if False else cap["blocks.1.hook_resid_post"], tr.ln_f.eps)[0])


def test_pythia_interleaved_qkv_and_parallel_residual():
    model = pythia()
    with hookkit.capture(model, ["blocks.0.**hook_*", "blocks.0.attn.hook_*"]) as cap:
        model(IDS)
    layer = model.gpt_neox.layers[0]
    x = cap["blocks.0.hook_resid_pre"]
    qkv = layer.attention.query_key_value(layer.input_layernorm(x)).view(2, 5, 4, 24)
    for j, name in enumerate("qkv"):
        close(cap[f"blocks.0.attn.hook_{name}"], qkv[..., 8 * j : 8 * (j + 1)])
    close(cap["blocks.0.hook_attn_out"], layer.attention.dense(cap["blocks.0.attn.hook_z"].reshape(2, 5, 32)))
    close(cap["blocks.0.ln2.hook_normalized"], layer_norm_parts(x, layer.post_attention_layernorm.eps)[1])
    close(cap["blocks.0.hook_resid_post"], x + cap["blocks.0.hook_attn_out"] + cap["blocks.0.hook_mlp_out"])


def test_llama_grouped_query_heads_and_gated_mlp():
    model = llama()
    with hookkit.capture(model, ["blocks.0.**hook_*"]) as cap:
        model(IDS)
    layer = model.model.layers[0]
    x = cap["blocks.0.hook_resid_pre"]
    eps = layer.input_layernorm.variance_epsilon
    scale = (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    close(cap["blocks.0.ln1.hook_scale"], scale)
    h = layer.input_layernorm(x)
    close(cap["blocks.0.attn.hook_q"], layer.self_attn.q_proj(h).reshape(2, 5, 4, 8))
    assert tuple(cap["blocks.0.attn.hook_k"].shape) == (2, 5, 2, 8)  # the key/value heads, as TransformerLens
    close(cap["blocks.0.attn.hook_v"], layer.self_attn.v_proj(h).reshape(2, 5, 2, 8))
    close(cap["blocks.0.hook_resid_mid"], x + cap["blocks.0.hook_attn_out"])
    mlp = layer.mlp
    close(cap["blocks.0.mlp.hook_post"], mlp.act_fn(cap["blocks.0.mlp.hook_pre"]) * cap["blocks.0.mlp.hook_pre_linear"])


def test_rotary_names_are_the_operation_sites_outputs_and_can_be_written():
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    model = llama()
    with hookkit.capture(model, "blocks.1.attn.hook_*") as cap:
        model(IDS)
    q, k = cap["blocks.1.attn.hook_q"], cap["blocks.1.attn.hook_k"]
    cos, sin = model.model.rotary_emb(q, torch.arange(5)[None])
    q_rot, k_rot = apply_rotary_pos_emb(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
    close(cap["blocks.1.attn.hook_rot_q"], q_rot.transpose(1, 2))
    close(cap["blocks.1.attn.hook_rot_k"], k_rot.transpose(1, 2))  # [batch, pos, kv head, d_head]
    with hookkit.edit(model, "blocks.0.attn.hook_rot_k", lambda k, ev: k * 0):
        _, cache = hookkit.run_with_cache(model, IDS, names_filter="blocks.0.attn.hook_pattern")
    uniform = torch.ones(5, 5).tril() / torch.arange(1, 6)[:, None]  # every key scores 0: uniform over the causal past
    close(cache["blocks.0.attn.hook_pattern"], uniform.expand(2, 4, 5, 5))


# -- every verb takes names ----------------------------------------------------------------------------
def test_edits_through_names_put_values_back_in_the_models_layout():
    model = gpt2()
    with hookkit.ablate(model, "transformer.h.0.attn", heads=[1]):
        want = model(IDS).logits
    with hookkit.edit(model, "blocks.0.attn.hook_z", lambda z, ev: torch.cat([z[:, :, :1], z[:, :, 1:2] * 0, z[:, :, 2:]], 2)):
        got = model(IDS).logits
    close(got, want)
    # writing q of GPT-2's fused c_attn leaves k and v as they were
    with hookkit.capture(model, "blocks.0.attn.hook_[kv]") as before:
        model(IDS)
    with hookkit.edit(model, "blocks.0.attn.hook_q", lambda q, ev: q * 0), hookkit.capture(model, "blocks.0.attn.hook_*") as after:
        model(IDS)
    assert float(after["blocks.0.attn.hook_q"].abs().max()) == 0.0
    close(after["blocks.0.attn.hook_k"], before["blocks.0.attn.hook_k"])
    v = torch.randn(32)
    with hookkit.steer(model, "blocks.1.hook_resid_pre", v), hookkit.capture(model, "blocks.[01].hook_resid_p*") as cap:
        steered = model(IDS).logits
    close(cap["blocks.1.hook_resid_pre"], cap["blocks.0.hook_resid_post"] + v)  # the block's input, steered
    with hookkit.steer(model, "transformer.h.0", v):
        close(model(IDS).logits, steered)  # as steering the output of the block before


def test_patch_interleaved_names_from_another_run():
    model = pythia()
    other = torch.tensor([[5, 6, 7, 8, 9], [1, 2, 3, 4, 5]])
    with hookkit.capture(model, "blocks.1.attn.hook_v") as src:
        model(other)
    with hookkit.patch(model, "blocks.1.attn.hook_v", src), hookkit.capture(model, "blocks.1.attn.hook_[qv]") as cap:
        model(IDS)
    close(cap["blocks.1.attn.hook_v"], src["blocks.1.attn.hook_v"])
    assert hookkit.select(model, "blocks.*.hook_resid_post").names == ["blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]


# -- the cache -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [gpt2, pythia, llama, gemma2], ids=["gpt2", "pythia", "llama-gqa", "gemma2"])
def test_decompositions_sum_back_to_the_residual_stream_and_the_logits(make):
    model = make()
    logits, cache = hookkit.run_with_cache(model, IDS)
    logits = logits.logits
    final = cache[f"blocks.{cache.n_layers - 1}.hook_resid_post"]
    resid, labels = cache.decompose_resid(return_labels=True)
    assert labels[0] == "embed" and labels[-1] == "1_mlp_out"
    close(resid.sum(0), final)
    close(
        cache.decompose_resid(layer=1, mlp_input=True).sum(0),
        cache["blocks.1.hook_resid_mid"]
        if "blocks.1.hook_resid_mid" in cache
        else cache["blocks.0.hook_resid_post"] + cache["blocks.1.hook_attn_out"],
    )
    acc, acc_labels = cache.accumulated_resid(return_labels=True)
    assert acc_labels == ["0_pre", "1_pre", "final_post"]
    close(acc[1], cache["blocks.1.hook_resid_pre"])
    # through the final norm: the stack's logit attributions sum to the normalized stream's projection
    tokens = IDS[:, -1]
    attrs = cache.logit_attrs(resid[:, :, -1], tokens=tokens, pos_slice=-1)
    w_u, _ = cache.W_U()
    normalized = cache["ln_final.hook_normalized"][:, -1]
    close(attrs.sum(0), (normalized * w_u[:, tokens].T).sum(-1))
    if make is gemma2:  # heads pass a norm before the residual stream: normed attn_out/mlp_out rows (test_standard_names_families.py)
        dla = hookkit.logit_attribution(model, IDS, tokens=tokens)
        close(dla.values.sum(0), logits[torch.arange(2), -1, tokens], atol=1e-4)
        return
    for expand in (True, False):
        close(cache.get_full_resid_decomposition(expand_neurons=expand).sum(0), final)
    heads = cache.stack_head_results(layer=1)
    close(heads.sum(0) + cache.b_O(0), cache["blocks.0.hook_attn_out"])
    dla = hookkit.logit_attribution(model, IDS, tokens=tokens, incorrect_tokens=IDS[:, 0])
    assert dla.labels[0] == "embed" and "L1H3" in dla.labels and dla.labels[-1] == "bias"
    assert tuple(dla.values.shape) == (len(dla.labels), 2)
    want = logits[torch.arange(2), -1, tokens] - logits[torch.arange(2), -1, IDS[:, 0]]
    close(dla.values.sum(0), want, atol=1e-4)  # one more matmul over the vocabulary's columns
    assert dla.heads().shape == (2, 4)


def test_run_with_cache_keeps_what_names_filter_names():
    model = gpt2()
    out, cache = hookkit.run_with_cache(model, IDS, names_filter="blocks.*.hook_resid_post")
    assert list(cache) == ["blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]
    close(out.logits, model(IDS).logits)
    assert cache["resid_post", 1] is cache["blocks.1.hook_resid_post"]
    _, cache = hookkit.run_with_cache(model, IDS, names_filter=lambda n: n.endswith("hook_z"))
    assert len(cache) == 2
    with pytest.raises(KeyError, match="closest: blocks.0.attn.hook_z"):
        cache["blocks.0.attn.hook_zz"]
    for m in model.modules():  # nothing left placed
        assert not m._forward_hooks and not m._forward_pre_hooks and "forward" not in vars(m), m


def test_logit_attribution_plot():
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    dla = hookkit.logit_attribution(gpt2(), IDS, tokens=4)
    open_before = set(plt.get_fignums())
    fig = dla.plot(row=0)
    assert set(plt.get_fignums()) == open_before  # not registered with pyplot: nothing left open
    assert fig.axes and np.isclose(float(dla.values.sum()), float(dla.values.sum(0).sum()))


# -- errors ------------------------------------------------------------------------------------------------
def test_unknown_names_are_refused_with_close_matches():
    model = gpt2()
    with pytest.raises(hookkit.LayerNotFound, match="closest: blocks.0.hook_resid_mid"):
        hookkit.capture(model, "blocks.0.hook_resid_mdi")
    with pytest.raises(hookkit.LayerNotFound, match="hookkit.names"):
        hookkit.capture(model, "blocks.7.hook_resid_pre")
    with pytest.raises(hookkit.LayerNotFound, match="closest: .*hook_resid_post"):
        hookkit.names(pythia()) and hookkit.capture(pythia(), "blocks.0.hook_resid_mid")
    with pytest.raises(hookkit.LayerNotFound, match="knows no standard names"):
        hookkit.capture(torch.nn.Sequential(torch.nn.Linear(2, 2)), "blocks.0.hook_resid_pre")
    # a model whose layers are really named so (TransformerLens's own HookPoints) keeps its layers
    hooked = torch.nn.Module()
    hooked.blocks = torch.nn.ModuleList([torch.nn.Module()])
    hooked.blocks[0].hook_resid_pre = torch.nn.Identity()
    assert hookkit.select(hooked, "blocks.*.hook_resid_pre").names == ["blocks.0.hook_resid_pre"]
    with pytest.raises(TypeError, match="names"):
        hookkit.names(torch.nn.Sequential(torch.nn.Linear(2, 2)))
    with pytest.raises(hookkit.LayerNotFound, match="closest: blocks.0.attn.hook_pattern"):
        hookkit.capture(model, "blocks.0.attn.hook_patern")
    with pytest.raises(hookkit.LayerNotFound, match="closest: blocks.0.hook_resid_mid"):
        hookkit.run_with_cache(model, IDS, names_filter=["blocks.0.hook_resid_mdi"])
    with pytest.raises(TypeError, match="names_filter"):
        hookkit.run_with_cache(model, IDS, names_filter=3)


def test_computed_names_are_read_only_and_shapes_are_checked():
    model = gpt2()
    with pytest.raises(hookkit.UnsupportedModel, match="'blocks.0.ln1.hook_scale' is read only"):
        with hookkit.edit(model, "blocks.0.ln1.hook_scale", lambda s, ev: s * 2):
            model(IDS)
    with pytest.raises(ValueError, match=r"\[2, 5, 4, 8\]"):
        with hookkit.edit(model, "blocks.0.attn.hook_q", lambda q, ev: q[:, :, :2]):
            model(IDS)
    close(model(IDS).logits, gpt2()(IDS).logits)  # removed, also when the forward raised


# -- TransformerLens's TransformerBridge, where installed (not in CI) --------------------------------------
@pytest.mark.parametrize(
    "make,arch", [(gpt2, "gpt2"), (pythia, "EleutherAI/pythia-14m"), (llama, "meta-llama/Llama-3.2-1B"), (gemma2, "google/gemma-2-2b")]
)
def test_every_name_equals_transformer_bridge(make, arch, tmp_path):
    pytest.importorskip("transformer_lens.model_bridge")
    tokenizers = pytest.importorskip("tokenizers")
    from transformer_lens.model_bridge import TransformerBridge

    model = make()
    model.config._attn_implementation = "eager"
    names = hookkit.names(model)
    logits, cache = hookkit.run_with_cache(model, IDS)
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel({f"t{i}": i for i in range(50)}, unk_token="t0"))
    T.PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="t0", eos_token="t0", bos_token="t0").save_pretrained(tmp_path)
    bridge = TransformerBridge.boot_transformers(
        arch, hf_model=copy.deepcopy(model), tokenizer=T.PreTrainedTokenizerFast.from_pretrained(tmp_path)
    )
    out, theirs = bridge.run_with_cache(IDS)
    close(out, logits.logits)
    compared = 0
    assert "blocks.1.attn.hook_pattern" in cache and "blocks.1.attn.hook_attn_scores" in theirs.keys()
    for name in cache:
        if name in theirs.keys():
            mine = cache[name]
            close(mine.expand_as(theirs[name]) if name == "hook_pos_embed" else mine, theirs[name])
            compared += 1
    assert compared >= len(names) - 2 * cache.n_layers  # hook_mlp_in (HookedTransformer's) is not the bridge's
    resid = cache.decompose_resid()
    close(cache.logit_attrs(resid[:, :, -1], IDS[:, -1], pos_slice=-1), theirs.logit_attrs(resid[:, :, -1], IDS[:, -1], pos_slice=-1))

    # patched and ablated runs equal the bridge's hooked runs
    def zero_head(z, hook=None):
        z = z.clone()
        z[:, :, 1] = 0
        return z

    steer = torch.randn(32, generator=torch.Generator().manual_seed(3))
    with (
        hookkit.edit(model, "blocks.0.attn.hook_z", lambda z, ev: zero_head(z)),
        hookkit.steer(model, "blocks.1.hook_resid_mid" if "blocks.1.hook_resid_mid" in cache else "blocks.1.hook_resid_pre", steer),
    ):
        ours = model(IDS).logits
    where = "blocks.1.hook_resid_mid" if "blocks.1.hook_resid_mid" in cache else "blocks.1.hook_resid_pre"
    theirs_out = bridge.run_with_hooks(IDS, fwd_hooks=[("blocks.0.attn.hook_z", zero_head), (where, lambda r, hook: r + steer)])
    close(ours, theirs_out, atol=1e-4)  # through two blocks and the unembedding


# -- Paddle: nn.TransformerEncoder -------------------------------------------------------------------------
@pytest.mark.parametrize("pre_norm", [False, True], ids=["post-norm", "pre-norm"])
def test_paddle_transformer_encoder_names_equal_a_hand_computation(pre_norm):
    paddle = pytest.importorskip("paddle")
    model = paddle_encoder(pre_norm)
    src = paddle.randn([2, 5, 32])
    names = hookkit.names(model)
    assert names[0] == "blocks.0.hook_resid_pre" and names[-1] == "ln_final.hook_normalized"
    out, cache = hookkit.run_with_cache(model, src)
    x = src
    for i, block in enumerate(model.layers):
        attn = block.self_attn
        q, k, v = (p(block.norm1(x) if pre_norm else x).reshape([2, 5, 4, 8]) for p in (attn.q_proj, attn.k_proj, attn.v_proj))
        close(cache[f"blocks.{i}.attn.hook_q"].numpy(), q.numpy())
        scores = paddle.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(8)
        close(cache[f"blocks.{i}.attn.hook_attn_scores"].numpy(), scores.numpy())
        pattern = paddle.nn.functional.softmax(scores, -1)
        close(cache[f"blocks.{i}.attn.hook_pattern"].numpy(), pattern.numpy())
        z = paddle.einsum("bhqk,bkhd->bqhd", pattern, v)
        close(cache[f"blocks.{i}.attn.hook_z"].numpy(), z.numpy())
        attn_out = attn.out_proj(z.reshape([2, 5, 32]))
        close(cache[f"blocks.{i}.hook_attn_out"].numpy(), attn_out.numpy())
        mid = x + attn_out if pre_norm else block.norm1(x + attn_out)
        close(cache[f"blocks.{i}.hook_resid_mid"].numpy(), mid.numpy())
        pre = block.linear1(block.norm2(mid) if pre_norm else mid)
        close(cache[f"blocks.{i}.mlp.hook_pre"].numpy(), pre.numpy())
        mlp_out = block.linear2(paddle.nn.functional.relu(pre))
        close(cache[f"blocks.{i}.hook_mlp_out"].numpy(), mlp_out.numpy())
        ln2_in = mid if pre_norm else mid + mlp_out
        xc = ln2_in - ln2_in.mean(-1, keepdim=True)
        close(cache[f"blocks.{i}.ln2.hook_scale"].numpy(), ((xc * xc).mean(-1, keepdim=True) + block.norm2._epsilon).sqrt().numpy())
        x = mid + mlp_out if pre_norm else block.norm2(mid + mlp_out)
        close(cache[f"blocks.{i}.hook_resid_post"].numpy(), x.numpy())
    close(out.numpy(), model.norm(x).numpy())
    if pre_norm:  # the residual stream is a sum of the blocks' outputs
        total = cache.decompose_resid(incl_embeds=False).sum(0) + cache["blocks.0.hook_resid_pre"]
        close(total.numpy(), x.numpy())
        heads = cache.stack_head_results(layer=1)
        close((heads.sum(0) + cache.b_O(0)).numpy(), cache["blocks.0.hook_attn_out"].numpy())


def test_a_family_is_one_registry_entry(monkeypatch):
    from hookkit.core import architectures, standard_names
    from hookkit.core.standard_names import IN, NameFamily, Point, norm, register_names

    monkeypatch.setattr(standard_names, "NAME_FAMILIES", list(standard_names.NAME_FAMILIES))
    monkeypatch.setattr(architectures, "STACK_FAMILIES", list(architectures.STACK_FAMILIES))

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln, self.fc = torch.nn.LayerNorm(8), torch.nn.Linear(8, 8)

        def forward(self, x):
            return x + self.fc(self.ln(x))

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.layers, self.final = torch.nn.Embedding(10, 8), torch.nn.ModuleList([Block(), Block()]), torch.nn.LayerNorm(8)

        def forward(self, ids):
            x = self.embed(ids)
            for block in self.layers:
                x = block(x)
            return self.final(x)

    model = Tiny()
    with pytest.raises(TypeError, match="register_names"):
        hookkit.names(model)
    architectures.register_stack(architectures.StackFamily("tiny", "layers", "final"))
    register_names(
        NameFamily(
            "tiny",
            ("Block",),
            attn="{b}.fc",
            points={
                "hook_embed": Point("embed"),
                "blocks.{i}.hook_resid_pre": Point("{b}", IN, "first"),
                "blocks.{i}.hook_mlp_out": Point("{b}.fc"),
                "blocks.{i}.hook_resid_post": Point("{b}"),
                "ln_final.hook_scale": Point("final", IN, "first", norm("scale", "layer")),
            },
        )
    )
    assert hookkit.names(model)[:3] == ["hook_embed", "blocks.0.hook_resid_pre", "blocks.0.hook_mlp_out"]
    ids = torch.tensor([[1, 2, 3]])
    _, cache = hookkit.run_with_cache(model, ids)
    close(cache.decompose_resid(mode="mlp").sum(0), cache["blocks.1.hook_resid_post"])
    with pytest.raises(TypeError, match="a NameFamily"):
        register_names("tiny")


def test_analyses_and_statistics_take_names():
    model = gpt2()
    clean, corrupt = IDS[:1], IDS[1:]

    def metric(out):
        return out.logits[:, -1, 3] - out.logits[:, -1, 4]

    layers = "blocks.*.hook_resid_pre"
    grid = hookkit.patching_sweep(model, clean, corrupt, layers, metric)
    assert grid.shape == (2, 5)
    with torch.no_grad():
        base = float(metric(model(corrupt))[0])
        with hookkit.capture(model, "blocks.1.hook_resid_pre") as src:
            model(clean)
        with hookkit.patch(model, "blocks.1.hook_resid_pre", src, positions=[2]):
            want = float(metric(model(corrupt))[0])
    assert grid[1, 2] == pytest.approx(want, abs=1e-5) and want != pytest.approx(base)  # the metric with that cell patched
    est = hookkit.attribution_patching(model, clean, corrupt, layers, metric)
    assert est.shape == (2, 5) and np.isfinite(est).all()
    lens = hookkit.logit_lens(model, IDS, layers="blocks.*.hook_resid_post")
    assert lens.names == ["blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]
    close(lens.logits[-1], model(IDS).logits)  # the last block's output through the final norm: the logits
    with hookkit.ActivationStats(model, "blocks.*.hook_mlp_out") as stats:
        model(IDS)
    assert stats.names == ["blocks.0.hook_mlp_out", "blocks.1.hook_mlp_out"]


def _config(kind):
    small = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 32, "intermediate_size": 64, "vocab_size": 50}
    return {
        "gptj": lambda: T.GPTJForCausalLM(T.GPTJConfig(n_layer=2, n_head=4, n_embd=32, rotary_dim=4, vocab_size=50, n_positions=16)),
        "mistral": lambda: T.MistralForCausalLM(T.MistralConfig(num_key_value_heads=2, **small)),
        "qwen2": lambda: T.Qwen2ForCausalLM(T.Qwen2Config(num_key_value_heads=2, **small)),
        "phi": lambda: T.PhiForCausalLM(T.PhiConfig(**small)),
        "opt": lambda: T.OPTForCausalLM(
            T.OPTConfig(num_hidden_layers=2, num_attention_heads=4, hidden_size=32, ffn_dim=64, vocab_size=50, word_embed_proj_dim=32)
        ),
        "bert": lambda: T.BertModel(T.BertConfig(**small)),
    }[kind]().eval()


@pytest.mark.parametrize("kind", ["gptj", "mistral", "qwen2", "phi", "opt", "bert"])
def test_every_family_offers_its_names_and_they_chain(kind):
    model = _config(kind)
    names = hookkit.names(model)
    out, cache = hookkit.run_with_cache(model, IDS)
    assert set(names) <= set(cache)
    close(cache["blocks.1.hook_resid_pre"], cache["blocks.0.hook_resid_post"])  # one block's output is the next one's input
    assert tuple(cache["blocks.0.attn.hook_z"].shape) == (2, 5, 4, 8)
    if kind == "bert":
        close(out.last_hidden_state, cache["blocks.1.hook_resid_post"])
        close(
            cache["blocks.0.hook_resid_mid"],
            cache["blocks.0.ln1.hook_normalized"] * model.encoder.layer[0].attention.output.LayerNorm.weight
            + model.encoder.layer[0].attention.output.LayerNorm.bias,
        )
    elif kind == "opt":  # its MLP names are unflattened (test_standard_names_families.py)
        close(cache["blocks.0.hook_resid_mid"], cache["blocks.0.hook_resid_pre"] + cache["blocks.0.hook_attn_out"])
        close(cache["blocks.0.hook_resid_post"], cache["blocks.0.hook_resid_mid"] + cache["blocks.0.hook_mlp_out"])
    else:
        parallel = "blocks.0.hook_resid_mid" not in cache
        mid = cache["blocks.0.hook_resid_pre"] + cache["blocks.0.hook_attn_out"]
        close(cache["blocks.0.hook_resid_post"], mid + cache["blocks.0.hook_mlp_out"])
        if not parallel:
            close(cache["blocks.0.hook_resid_mid"], mid)


def test_remove_all_clears_names_and_the_operation_sites_they_hold():
    model = llama()
    attn = model.model.layers[0].self_attn
    norm = model.model.layers[0].post_attention_layernorm
    cap = hookkit.capture(model, ["blocks.0.hook_resid_mid", "blocks.0.attn.hook_rot_[qk]"]).__enter__()
    model(IDS)
    assert norm._forward_pre_hooks and "forward" in attn.__dict__  # a native pre-hook, the rewritten forward installed
    assert cap["blocks.0.attn.hook_rot_k"].shape == (2, 5, 2, 8)
    assert hookkit.remove_all(model) >= 2
    assert not norm._forward_pre_hooks and "forward" not in attn.__dict__
    with hookkit.capture(model, "blocks.0.attn.hook_rot_q") as again:  # placed afresh after remove_all
        model(IDS)
    close(again["blocks.0.attn.hook_rot_q"], cap["blocks.0.attn.hook_rot_q"])


# -- attention scores: the pattern before its softmax ---------------------------------------------------
PAD = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])  # right padding: every query row keeps a key


def hand_scores(q, k, scale, pad):
    """q [B, T, H, d], k [B, T, Hkv, d] -> (q k^T * scale [B, H, T, T], the positions kept: causal,
    padded keys out); masked positions are float32's lowest value (transformers' masks, the bridge's)."""
    k = k.repeat_interleave(q.shape[2] // k.shape[2], 2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    keep = torch.ones(5, 5, dtype=torch.bool).tril()[None, None] & pad.bool()[:, None, None, :]
    return s, keep.expand_as(s)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("make", [gpt2, llama], ids=["gpt2", "llama-gqa"])
def test_attn_scores_equal_a_hand_computation_and_softmax_to_the_pattern(make, attn):
    model = make()
    model.config._attn_implementation = attn
    _, cache = hookkit.run_with_cache(
        model, {"input_ids": IDS, "attention_mask": PAD}, names_filter=["blocks.*.attn.hook_attn_scores", "blocks.*.attn.hook_*"]
    )
    assert "blocks.0.attn.hook_attn_scores" in cache and "blocks.1.attn.hook_attn_scores" in cache
    rotary = "blocks.0.attn.hook_rot_q" in cache
    for i in range(2):
        scores = cache[f"blocks.{i}.attn.hook_attn_scores"]
        assert tuple(scores.shape) == (2, 4, 5, 5)
        q, k = (cache[f"blocks.{i}.attn.hook_{'rot_' if rotary else ''}{n}"] for n in "qk")
        want, keep = hand_scores(q, k, 8**-0.5, PAD)
        assert_close(scores[keep], want[keep], n_ops=8)  # a dot product of 8 terms
        assert bool((scores[~keep] == torch.finfo(torch.float32).min).all())  # masked exactly (the padded keys too)
        # the pattern is the softmax of the scores (eager: the probabilities the layer returned)
        assert_close(scores.softmax(-1), cache[f"blocks.{i}.attn.hook_pattern"], n_ops=8)


def test_attn_scores_of_pythia_softmax_to_the_pattern():
    model = pythia()
    _, cache = hookkit.run_with_cache(model, IDS, names_filter=["blocks.0.attn.hook_attn_scores", "blocks.0.attn.hook_pattern"])
    assert list(cache) == ["blocks.0.attn.hook_attn_scores", "blocks.0.attn.hook_pattern"]
    scores = cache["blocks.0.attn.hook_attn_scores"]
    assert bool((scores[..., 0, 1:] == torch.finfo(torch.float32).min).all())  # causal: the first query sees one key
    assert_close(scores.softmax(-1), cache["blocks.0.attn.hook_pattern"], n_ops=8)
    _, alone = hookkit.run_with_cache(model, IDS, names_filter="blocks.1.attn.hook_attn_scores")
    assert list(alone) == ["blocks.1.attn.hook_attn_scores"]
    with hookkit.capture(model, "blocks.0.attn.hook_attn_scores") as cap:  # a site like any other name
        model(IDS)
    assert torch.equal(cap["blocks.0.attn.hook_attn_scores"], scores)


@pytest.mark.parametrize("make,arch", [(gpt2, "gpt2"), (llama, "meta-llama/Llama-3.2-1B")], ids=["gpt2", "llama-gqa"])
def test_attn_scores_with_padding_equal_transformer_bridge(make, arch, tmp_path):
    pytest.importorskip("transformer_lens.model_bridge")
    tokenizers = pytest.importorskip("tokenizers")
    from transformer_lens.model_bridge import TransformerBridge

    model = make()
    model.config._attn_implementation = "sdpa"  # hookkit's side keeps SDPA; the bridge runs eagerly
    _, cache = hookkit.run_with_cache(model, {"input_ids": IDS, "attention_mask": PAD}, names_filter="blocks.*.attn.hook_[ap]*")
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel({f"t{i}": i for i in range(50)}, unk_token="t0"))
    T.PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="t0", eos_token="t0", bos_token="t0").save_pretrained(tmp_path)
    bridge = TransformerBridge.boot_transformers(
        arch, hf_model=copy.deepcopy(model), tokenizer=T.PreTrainedTokenizerFast.from_pretrained(tmp_path)
    )
    _, theirs = bridge.run_with_cache(IDS, attention_mask=PAD)
    for i in range(2):
        for name in (f"blocks.{i}.attn.hook_attn_scores", f"blocks.{i}.attn.hook_pattern"):
            close(cache[name], theirs[name])  # masked positions: float32's lowest value on both sides
