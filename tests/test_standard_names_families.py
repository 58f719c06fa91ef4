"""Standard names on the families with gaps of their own: OPT's MLP inside its flattened region,
hook_rot_q/k on the partial-rotary families (GPT-J, Phi), direct logit attribution on Gemma 2 (post-
norms, final softcapping) and Paddle's nn.TransformerDecoder (cross-attention). Every value equals a
hand computation from the model's own weights (and TransformerLens's TransformerBridge where
installed). Float32, a handful of matmuls of width <= 64: ~1e-6; 1e-5 leaves a margin."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

import hookkit

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

ATOL = 1e-5
IDS = torch.tensor([[3, 7, 1, 9, 4], [2, 2, 8, 5, 11]])
SMALL = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 32, "intermediate_size": 64, "vocab_size": 50}


def close(a, b, atol=ATOL):
    a = a.detach().numpy() if hasattr(a, "detach") else np.asarray(a)
    b = b.detach().numpy() if hasattr(b, "detach") else np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    np.testing.assert_allclose(a, b, atol=atol, rtol=0)


def layer_norm_parts(x, eps):
    xc = x - x.mean(-1, keepdim=True)
    scale = (xc.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    return scale, xc / scale


def opt(pre_norm=True):
    torch.manual_seed(0)
    cfg = T.OPTConfig(
        num_hidden_layers=2,
        num_attention_heads=4,
        hidden_size=32,
        ffn_dim=64,
        vocab_size=50,
        word_embed_proj_dim=32,
        do_layer_norm_before=pre_norm,
        max_position_embeddings=16,
    )
    return T.OPTForCausalLM(cfg).eval()


def bridge_of(model, arch, tmp_path):
    """TransformerLens's TransformerBridge on a copy of ``model``, without a download (a local tokenizer)."""
    pytest.importorskip("transformer_lens.model_bridge")
    tokenizers = pytest.importorskip("tokenizers")
    from transformer_lens.model_bridge import TransformerBridge

    model.config._attn_implementation = "eager"
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel({f"t{i}": i for i in range(50)}, unk_token="t0"))
    T.PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="t0", eos_token="t0", bos_token="t0").save_pretrained(tmp_path)
    tok = T.PreTrainedTokenizerFast.from_pretrained(tmp_path)
    return TransformerBridge.boot_transformers(arch, hf_model=copy.deepcopy(model), tokenizer=tok)


# -- OPT: the MLP names inside the flattened region -----------------------------------------------------
@pytest.mark.parametrize("pre_norm", [True, False], ids=["pre-norm", "post-norm (350m)"])
def test_opt_every_name_equals_a_hand_computation(pre_norm):
    model = opt(pre_norm)
    names = hookkit.names(model)
    for want in ("mlp.hook_pre", "mlp.hook_post", "hook_mlp_out", "ln2.hook_scale", "ln2.hook_normalized"):
        assert f"blocks.1.{want}" in names
    assert ("blocks.0.hook_mlp_in" in names) == pre_norm
    out, cache = hookkit.run_with_cache(model, IDS)
    assert set(names) <= set(cache)
    x = cache["hook_embed"] + cache["hook_pos_embed"]
    for i, layer in enumerate(model.model.decoder.layers):
        close(cache[f"blocks.{i}.hook_resid_pre"], x)
        ln1_in = x if pre_norm else x + cache[f"blocks.{i}.hook_attn_out"]
        scale, normed = layer_norm_parts(ln1_in, layer.self_attn_layer_norm.eps)
        close(cache[f"blocks.{i}.ln1.hook_scale"], scale)
        close(cache[f"blocks.{i}.ln1.hook_normalized"], normed)
        mid = x + cache[f"blocks.{i}.hook_attn_out"] if pre_norm else layer.self_attn_layer_norm(ln1_in)
        close(cache[f"blocks.{i}.hook_resid_mid"], mid)
        scale, normed = layer_norm_parts(mid, layer.final_layer_norm.eps)
        if pre_norm:
            close(cache[f"blocks.{i}.hook_mlp_in"], mid)
            close(cache[f"blocks.{i}.ln2.hook_scale"], scale)  # [batch, pos, 1], not the layer's [batch * pos, 1]
            close(cache[f"blocks.{i}.ln2.hook_normalized"], normed)
        pre = layer.fc1(layer.final_layer_norm(mid) if pre_norm else mid)
        close(cache[f"blocks.{i}.mlp.hook_pre"], pre)
        close(cache[f"blocks.{i}.mlp.hook_post"], layer.activation_fn(pre))
        mlp_out = layer.fc2(layer.activation_fn(pre))
        assert tuple(cache[f"blocks.{i}.hook_mlp_out"].shape) == (2, 5, 32)
        close(cache[f"blocks.{i}.hook_mlp_out"], mlp_out)
        x = mid + mlp_out if pre_norm else layer.final_layer_norm(mid + mlp_out)
        if not pre_norm:
            close(cache[f"blocks.{i}.ln2.hook_scale"], layer_norm_parts(mid + mlp_out, layer.final_layer_norm.eps)[0])
        close(cache[f"blocks.{i}.hook_resid_post"], x)
    close(out.logits, model.lm_head(model.model.decoder.final_layer_norm(x) if pre_norm else x))


def test_opt_mlp_names_are_written_back_flattened_at_the_right_positions():
    model = opt()
    block = model.model.decoder.layers[0]
    other = torch.tensor([[5, 6, 7, 8, 9], [1, 2, 3, 4, 5]])
    with hookkit.capture(model, "blocks.0.mlp.hook_post") as src:
        model(other)
    with hookkit.patch(model, "blocks.0.mlp.hook_post", src, positions=[2]), hookkit.capture(model, "blocks.0.mlp.hook_*") as cap:
        model(IDS)
    assert not block._forward_pre_hooks  # the block's stamp went with the last flattened name
    got, clean, patched = cap["blocks.0.mlp.hook_post"], block.activation_fn(cap["blocks.0.mlp.hook_pre"]), src["blocks.0.mlp.hook_post"]
    close(got[:, 2], patched[:, 2])  # position 2 of each row is the other run's, the rest this run's
    close(got[:, [0, 1, 3, 4]], clean[:, [0, 1, 3, 4]])
    # zeroing the MLP's output: the block's output is its residual stream after attention
    with hookkit.ablate(model, "blocks.1.hook_mlp_out"):
        _, cache = hookkit.run_with_cache(model, IDS, names_filter="blocks.1.hook_resid_*")
    close(cache["blocks.1.hook_resid_post"], cache["blocks.1.hook_resid_mid"])
    with pytest.raises(ValueError, match=r"\[2, 5, 64\]"):
        with hookkit.edit(model, "blocks.0.mlp.hook_pre", lambda t, ev: t[:, :3]):
            model(IDS)
    with pytest.raises(hookkit.UnsupportedModel, match="read only"):
        with hookkit.edit(model, "blocks.0.ln2.hook_scale", lambda t, ev: t * 2):
            model(IDS)
    assert not block._forward_pre_hooks and not block.fc1._forward_hooks  # removed, also when the forward raised
    with hookkit.capture(model, "blocks.0.mlp.hook_pre"):
        twin = copy.deepcopy(model)  # the copy carries an inert stamp of the block
    close(twin(IDS).logits, model(IDS).logits)
    with pytest.raises(hookkit.LayerNotFound, match="closest: blocks.0.hook_mlp_out"):
        hookkit.capture(model, "blocks.0.hook_mlp_outt")


def test_opt_decompositions_and_logit_attribution_sum_back():
    model = opt()
    out, cache = hookkit.run_with_cache(model, IDS)
    final = cache["blocks.1.hook_resid_post"]
    close(cache.decompose_resid().sum(0), final)
    for expand in (True, False):
        close(cache.get_full_resid_decomposition(expand_neurons=expand).sum(0), final)
    neurons, labels = cache.stack_neuron_results(layer=1, return_labels=True)
    assert labels[:2] == ["L0N0", "L0N1"] and len(labels) == 64
    close(neurons.sum(0) + cache.W_out(0)[1], cache["blocks.0.hook_mlp_out"])
    dla = hookkit.logit_attribution(model, IDS, tokens=IDS[:, -1], incorrect_tokens=IDS[:, 0])
    want = out.logits[torch.arange(2), -1, IDS[:, -1]] - out.logits[torch.arange(2), -1, IDS[:, 0]]
    close(dla.values.sum(0), want, atol=1e-4)  # one more matmul over the vocabulary's columns


def test_opt_names_equal_transformer_bridge(tmp_path):
    model = opt()
    bridge = bridge_of(model, "facebook/opt-125m", tmp_path)
    logits, cache = hookkit.run_with_cache(model, IDS)
    theirs_out, theirs = bridge.run_with_cache(IDS)
    close(theirs_out, logits.logits)
    compared = [n for n in cache if n in theirs.keys()]
    assert "blocks.1.mlp.hook_pre" in compared and "blocks.1.ln2.hook_scale" in compared
    for name in compared:
        mine, want = cache[name], theirs[name]
        if ".ln2." in name:  # the bridge keeps ln2's values flattened ([batch * pos, d]); the values are the same
            mine = mine.reshape(want.shape)
        if name.endswith("hook_attn_scores"):  # the bridge's OPT adapter gives the probabilities under this name
            mine = mine.softmax(-1)
        close(mine.expand_as(want) if name == "hook_pos_embed" else mine, want)
    assert len(compared) >= len(hookkit.names(model)) - 2  # hook_mlp_in: the bridge's does not fire on OPT
    with hookkit.edit(model, "blocks.0.mlp.hook_post", lambda t, ev: t * 0.5):
        ours = model(IDS).logits
    close(ours, bridge.run_with_hooks(IDS, fwd_hooks=[("blocks.0.mlp.hook_post", lambda t, hook: t * 0.5)]), atol=1e-4)


# -- hook_rot_q / hook_rot_k on partial rotary families ------------------------------------------------------
def gptj():
    torch.manual_seed(0)
    return T.GPTJForCausalLM(T.GPTJConfig(n_layer=2, n_head=4, n_embd=32, rotary_dim=4, vocab_size=50, n_positions=16)).eval()


def phi():
    torch.manual_seed(0)
    return T.PhiForCausalLM(T.PhiConfig(**SMALL)).eval()  # partial_rotary_factor 0.5: 4 of 8 dims rotated


def test_gptj_rotary_names_rotate_the_first_rotary_dim_dims():
    from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb

    model = gptj()
    assert "blocks.0.attn.hook_rot_q" in hookkit.names(model)
    _, cache = hookkit.run_with_cache(model, IDS, names_filter="blocks.*.attn.hook_*")
    for i in range(2):
        q, k = cache[f"blocks.{i}.attn.hook_q"], cache[f"blocks.{i}.attn.hook_k"]
        sin, cos = model.transformer.rotary_emb(q, torch.arange(5)[None])
        for name, t in (("rot_q", q), ("rot_k", k)):
            want = torch.cat([apply_rotary_pos_emb(t[..., :4], sin, cos), t[..., 4:]], -1)
            assert tuple(cache[f"blocks.{i}.attn.hook_{name}"].shape) == (2, 5, 4, 8)
            close(cache[f"blocks.{i}.attn.hook_{name}"], want)
            assert float((want[:, 1:, :, :4] - t[:, 1:, :, :4]).abs().max()) > 1e-3  # the rotation moved something
            close(cache[f"blocks.{i}.attn.hook_{name}"][..., 4:], t[..., 4:])  # the rest passes through


def test_phi_rotary_names_and_writing_them():
    from transformers.models.phi.modeling_phi import apply_rotary_pos_emb

    model = phi()
    assert "blocks.1.attn.hook_rot_k" in hookkit.names(model)
    with pytest.raises(hookkit.LayerNotFound, match="closest: blocks.0.attn.hook_rot_q"):
        hookkit.capture(model, "blocks.0.attn.hook_rot_qq")
    _, cache = hookkit.run_with_cache(model, IDS, names_filter="blocks.*.attn.hook_*")
    q, k = (cache[f"blocks.1.attn.hook_{n}"].transpose(1, 2) for n in "qk")  # [batch, head, pos, d_head] as Phi's
    cos, sin = model.model.rotary_emb(q, torch.arange(5)[None])
    r = cos.shape[-1]
    assert r == 4
    q_rot, k_rot = apply_rotary_pos_emb(q[..., :r], k[..., :r], cos, sin)
    close(cache["blocks.1.attn.hook_rot_q"], torch.cat([q_rot, q[..., r:]], -1).transpose(1, 2))
    close(cache["blocks.1.attn.hook_rot_k"], torch.cat([k_rot, k[..., r:]], -1).transpose(1, 2))
    with hookkit.edit(model, "blocks.0.attn.hook_rot_k", lambda t, ev: t * 0), hookkit.capture(model, "blocks.0.attn.hook_[vz]") as cap:
        model(IDS)
    # every key scores 0: each query attends uniformly over its causal past, z is the running mean of v
    v = cap["blocks.0.attn.hook_v"]
    close(cap["blocks.0.attn.hook_z"], v.cumsum(1) / torch.arange(1, 6)[None, :, None, None])


@pytest.mark.parametrize("make,arch", [(phi, "microsoft/phi-2"), (gptj, "EleutherAI/gpt-j-6b")], ids=["phi", "gptj"])
def test_rotary_names_equal_transformer_bridge(make, arch, tmp_path):
    model = make()
    bridge = bridge_of(model, arch, tmp_path)
    _, cache = hookkit.run_with_cache(model, IDS)
    _, theirs = bridge.run_with_cache(IDS)
    compared = [n for n in cache if n in theirs.keys()]
    for name in compared:
        if make is gptj and name.endswith("hook_attn_scores"):  # the bridge's GPT-J adapter gives the probabilities under this name
            close(cache[name].softmax(-1), theirs[name])
            continue
        close(cache[name], theirs[name])
    if make is phi:
        assert "blocks.1.attn.hook_rot_q" in compared and "blocks.1.attn.hook_rot_k" in compared
    # the bridge's GPT-J adapter has no rotary hook points: ours are checked by hand above
    assert len(compared) >= len(hookkit.names(model)) - 4 * 2


# -- Gemma 2: logit attribution through its post-norms, before softcapping ----------------------------------
def gemma2(softcap=0.5):  # small logits: a small cap so the tanh bends them
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
        final_logit_softcapping=softcap,
    )
    model = T.Gemma2ForCausalLM(cfg).eval()
    with torch.no_grad():  # Gemma's norms start at weight 0 (scale 1 + 0): random ones, so the final norm's weight counts
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(0.0, 0.5)
    return model


def test_gemma2_logit_attribution_sums_to_the_logit_before_softcapping():
    model = gemma2()
    tokens, other = IDS[:, -1], IDS[:, 0]
    dla = hookkit.logit_attribution(model, IDS, tokens=tokens, incorrect_tokens=other)
    assert dla.labels == ["embed", "0_attn_out", "0_mlp_out", "1_attn_out", "1_mlp_out", "bias"]
    with torch.no_grad():
        final = model.model(IDS).last_hidden_state[:, -1]  # after the final norm
        pre = model.lm_head(final)  # the logits before the softcapping
        logits = model(IDS).logits[:, -1]
    want = pre[torch.arange(2), tokens] - pre[torch.arange(2), other]
    close(dla.values.sum(0), want)  # a sum of 6 rows, each a dot product over d_model = 32
    capped = logits[torch.arange(2), tokens] - logits[torch.arange(2), other]
    assert float((capped - want).abs().max()) > 1e-3  # softcapping changed the logits: the rows are the logit before it
    # each row: that component through the final norm's cached scale and weight (1 + w), dotted with W_U
    _, cache = hookkit.run_with_cache(model, IDS)
    norm = model.model.norm
    scale = cache["ln_final.hook_scale"][:, -1]
    direction = (model.lm_head.weight[tokens] - model.lm_head.weight[other]) * (1 + norm.weight)
    close(dla.values[1], (cache["blocks.0.hook_attn_out"][:, -1] / scale * direction).sum(-1))
    close(dla.values[4], (cache["blocks.1.hook_mlp_out"][:, -1] / scale * direction).sum(-1))
    with pytest.raises(hookkit.UnsupportedModel, match="not additive"):
        dla.heads()
    with pytest.raises(hookkit.UnsupportedModel, match="do not sum to it; decompose_resid"):
        cache.get_full_resid_decomposition()
    close(cache.decompose_resid().sum(0), cache["blocks.1.hook_resid_post"])  # what does sum
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    fig = dla.plot(row=1)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["attn", "MLP"]


def test_gemma2_logit_attribution_equals_transformer_bridge(tmp_path):
    model = gemma2()
    bridge = bridge_of(model, "google/gemma-2-2b", tmp_path)
    _, theirs = bridge.run_with_cache(IDS)
    resid, labels = theirs.decompose_resid(pos_slice=-1, return_labels=True)
    dla = hookkit.logit_attribution(model, IDS, tokens=IDS[:, -1])
    assert labels == dla.labels[:-1]
    # the bridge's logit_attrs leaves the final norm's weight out: folded in the stack, its rows are ours
    weight = 1 + model.model.norm.weight
    close(theirs.logit_attrs(resid * weight, IDS[:, -1], pos_slice=-1), dla.values[:-1])


# -- Paddle nn.TransformerDecoder -------------------------------------------------------------------------
def mha(paddle, attn, query, kv, mask):
    """Paddle's MultiHeadAttention by hand: (q, k, v [B, T, H, d], scores [B, H, Tq, Tk], z [B, Tq, H, d])."""
    q = attn.q_proj(query).reshape([2, query.shape[1], 4, 8])
    k, v = (p(kv).reshape([2, kv.shape[1], 4, 8]) for p in (attn.k_proj, attn.v_proj))
    scores = paddle.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(8)
    if mask is not None:
        scores = scores + mask
    z = paddle.einsum("bhqk,bkhd->bqhd", paddle.nn.functional.softmax(scores, -1), v)
    return q, k, v, scores, z


@pytest.mark.parametrize("pre_norm", [False, True], ids=["post-norm", "pre-norm"])
def test_paddle_transformer_decoder_names_equal_a_hand_computation(pre_norm):
    paddle = pytest.importorskip("paddle")
    paddle.seed(0)
    layer = paddle.nn.TransformerDecoderLayer(32, 4, 64, dropout=0.0, normalize_before=pre_norm)
    model = paddle.nn.TransformerDecoder(layer, 2, norm=paddle.nn.LayerNorm(32))
    model.eval()
    tgt, memory = paddle.randn([2, 5, 32]), paddle.randn([2, 7, 32])
    causal = paddle.triu(paddle.full([5, 5], -1e9), 1)
    names = hookkit.names(model)
    assert "blocks.1.cross_attn.hook_k" in names and "blocks.1.hook_resid_mid2" in names and "blocks.1.ln3.hook_scale" in names
    out, cache = hookkit.run_with_cache(model, (tgt, memory, causal))

    def c(name):
        return cache[name].numpy()

    x = tgt
    for i, block in enumerate(model.layers):
        close(c(f"blocks.{i}.hook_resid_pre"), x.numpy())
        q, k, v, scores, z = mha(paddle, block.self_attn, block.norm1(x) if pre_norm else x, block.norm1(x) if pre_norm else x, causal)
        pattern = paddle.nn.functional.softmax(scores, -1)
        for name, t in (("q", q), ("k", k), ("v", v), ("z", z), ("attn_scores", scores), ("pattern", pattern)):
            close(c(f"blocks.{i}.attn.hook_{name}"), t.numpy())
        attn_out = block.self_attn.out_proj(z.reshape([2, 5, 32]))
        close(c(f"blocks.{i}.hook_attn_out"), attn_out.numpy())
        ln1_in = x if pre_norm else x + attn_out
        xc = ln1_in - ln1_in.mean(-1, keepdim=True)
        close(c(f"blocks.{i}.ln1.hook_scale"), ((xc * xc).mean(-1, keepdim=True) + block.norm1._epsilon).sqrt().numpy())
        mid = x + attn_out if pre_norm else block.norm1(ln1_in)
        close(c(f"blocks.{i}.hook_resid_mid"), mid.numpy())
        cq, ck, cv, cscores, cz = mha(paddle, block.cross_attn, block.norm2(mid) if pre_norm else mid, memory, None)
        cpattern = paddle.nn.functional.softmax(cscores, -1)  # [batch, head, 5 target, 7 source positions]
        for name, t in (("q", cq), ("k", ck), ("v", cv), ("z", cz), ("attn_scores", cscores), ("pattern", cpattern)):
            close(c(f"blocks.{i}.cross_attn.hook_{name}"), t.numpy())
        cross_out = block.cross_attn.out_proj(cz.reshape([2, 5, 32]))
        close(c(f"blocks.{i}.hook_cross_attn_out"), cross_out.numpy())
        mid2 = mid + cross_out if pre_norm else block.norm2(mid + cross_out)
        close(c(f"blocks.{i}.hook_resid_mid2"), mid2.numpy())
        pre = block.linear1(block.norm3(mid2) if pre_norm else mid2)
        close(c(f"blocks.{i}.mlp.hook_pre"), pre.numpy())
        close(c(f"blocks.{i}.mlp.hook_post"), paddle.nn.functional.relu(pre).numpy())
        mlp_out = block.linear2(paddle.nn.functional.relu(pre))
        close(c(f"blocks.{i}.hook_mlp_out"), mlp_out.numpy())
        ln3_in = mid2 if pre_norm else mid2 + mlp_out
        xc = ln3_in - ln3_in.mean(-1, keepdim=True)
        close(c(f"blocks.{i}.ln3.hook_normalized"), (xc / ((xc * xc).mean(-1, keepdim=True) + block.norm3._epsilon).sqrt()).numpy())
        x = mid2 + mlp_out if pre_norm else block.norm3(mid2 + mlp_out)
        close(c(f"blocks.{i}.hook_resid_post"), x.numpy())
    close(out.numpy(), model.norm(x).numpy())
    if pre_norm:  # the residual stream is the sum of the blocks' three outputs
        stack, labels = cache.decompose_resid(incl_embeds=False, return_labels=True)
        assert labels[:3] == ["0_attn_out", "0_cross_attn_out", "0_mlp_out"]
        close((stack.sum(0) + cache["blocks.0.hook_resid_pre"]).numpy(), x.numpy())
        mid_stack = cache.decompose_resid(layer=1, mlp_input=True, incl_embeds=False)
        close((mid_stack.sum(0) + cache["blocks.0.hook_resid_pre"]).numpy(), c("blocks.1.hook_resid_mid2"))
        # the MLP's input is the stream after the cross-attention, through the FFN's norm (ln3)
        acc, labels = cache.accumulated_resid(layer=1, mlp_input=True, apply_ln=True, return_labels=True)
        assert labels == ["0_pre", "1_pre", "1_mid2"]
        close(acc[-1].numpy(), c("blocks.1.ln3.hook_normalized"))
        full, labels = cache.get_full_resid_decomposition(expand_neurons=False, return_labels=True)
        assert labels[:8] == [*(f"L0H{h}" for h in range(4)), *(f"L0C{h}" for h in range(4))]  # self-, then cross-attention heads
        close((full.sum(0) + cache["blocks.0.hook_resid_pre"]).numpy(), x.numpy())  # no embeddings: the stack's input
        cross = cache.W_O(0, "cross_attn")  # [head, d_head, d_model]
        per_head = paddle.einsum("bthd,hdm->btm", cache["blocks.0.cross_attn.hook_z"], cross)
        close((per_head + cache.b_O(0, "cross_attn")).numpy(), c("blocks.0.hook_cross_attn_out"))


def test_paddle_decoder_cross_attention_names_are_edited_and_refused_by_name():
    paddle = pytest.importorskip("paddle")
    paddle.seed(0)
    model = paddle.nn.TransformerDecoder(paddle.nn.TransformerDecoderLayer(32, 4, 64, dropout=0.0, normalize_before=True), 2)
    model.eval()
    tgt, memory = paddle.randn([2, 5, 32]), paddle.randn([2, 7, 32])
    with hookkit.ablate(model, "blocks.0.hook_cross_attn_out"), hookkit.capture(model, "blocks.0.hook_resid_mid*") as cap:
        model(tgt, memory)
    close(cap["blocks.0.hook_resid_mid2"].numpy(), cap["blocks.0.hook_resid_mid"].numpy())  # nothing added by the cross-attention
    with (
        hookkit.edit(model, "blocks.0.cross_attn.hook_v", lambda v, ev: v * 0),
        hookkit.capture(model, "blocks.0.cross_attn.hook_z") as cap,
    ):
        model(tgt, memory)
    assert float(cap["blocks.0.cross_attn.hook_z"].abs().max()) == 0.0
    uniform = paddle.full([2, 4, 5, 7], 1 / 7)  # every target position attends equally to the 7 source positions
    with (
        hookkit.edit(model, "blocks.0.cross_attn.hook_pattern", lambda p, ev: uniform),
        hookkit.capture(model, "blocks.0.cross_attn.hook_[vz]") as cap,
    ):
        model(tgt, memory)
    v = cap["blocks.0.cross_attn.hook_v"]
    close(cap["blocks.0.cross_attn.hook_z"].numpy(), v.mean(1, keepdim=True).expand([2, 5, 4, 8]).numpy())
    with pytest.raises(hookkit.LayerNotFound, match="closest: blocks.0.cross_attn.hook_z"):
        hookkit.capture(model, "blocks.0.cross_attn.hook_zz")


# -- gradients at views (heads, unflattened values) -----------------------------------------------------------
def test_gradients_reach_names_that_are_views_of_the_models_tensor():
    """capture(grads=True) and attribution_patching at names computed from the model's tensor (GPT-2's
    hook_q, a slice of the fused c_attn split into heads; OPT's unflattened mlp.hook_pre): the gradient
    is the model's, laid out as the name is."""
    torch.manual_seed(0)
    gpt2 = T.GPT2LMHeadModel(T.GPT2Config(n_layer=2, n_head=4, n_embd=32, vocab_size=50, n_positions=16)).eval()
    cases = [(gpt2, "blocks.0.attn.hook_q", gpt2.transformer.h[0].attn.c_attn, lambda g: g[..., :32].reshape(2, 5, 4, 8))]
    model = opt()
    cases.append((model, "blocks.0.mlp.hook_pre", model.model.decoder.layers[0].fc1, lambda g: g.reshape(2, 5, 64)))
    for m, name, module, layout in cases:
        seen = {}

        def keep(mod, grad_in, grad_out, seen=seen):
            seen["g"] = grad_out[0]

        handle = module.register_full_backward_hook(keep)
        try:
            with hookkit.capture(m, name, grads=True) as cap:
                m(IDS).logits.square().sum().backward()
        finally:
            handle.remove()
        close(cap.grads[name], layout(seen["g"]))
        assert not module._forward_hooks and not module._forward_pre_hooks
    metric = lambda out: out.logits[:, -1, 3] - out.logits[:, -1, 4]  # noqa: E731
    est = hookkit.attribution_patching(gpt2, IDS[:1], IDS[1:], "blocks.*.attn.hook_q", metric)
    assert est.shape == (2, 5) and np.isfinite(est).all() and np.abs(est).max() > 0


def test_paddle_transformer_names_its_encoder_and_decoder_separately():
    paddle = pytest.importorskip("paddle")
    paddle.seed(0)
    model = paddle.nn.Transformer(32, 4, 2, 2, 64, dropout=0.0)
    model.eval()
    src, tgt = paddle.randn([2, 7, 32]), paddle.randn([2, 5, 32])
    with pytest.raises(TypeError, match="nn.TransformerDecoder"):
        hookkit.names(model)  # one blocks list per model: its encoder's and its decoder's names are theirs
    with (
        hookkit.capture(model.encoder, "blocks.1.hook_resid_post") as enc,
        hookkit.capture(model.decoder, "blocks.1.cross_attn.hook_k") as dec,
    ):
        model(src, tgt)
    memory = model.encoder.norm(enc["blocks.1.hook_resid_post"])  # the encoder's output, the decoder's memory
    close(dec["blocks.1.cross_attn.hook_k"].numpy(), model.decoder.layers[1].cross_attn.k_proj(memory).reshape([2, 7, 4, 8]).numpy())
