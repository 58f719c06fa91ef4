"""``blocks.{i}.attn.hook_attn_scores`` and ``hook_pattern`` as sites in every verb: read beside the
model's own attention kernel (SDPA or eager), edited by running that layer's attention eagerly for
that forward only. Every edited result equals a hand computation from the layer's own queries, keys
and values; SDPA and eager models give the same edited result; the model is left as found (no hook,
the library's attention functions back, its attention implementation unchanged), also when the
forward raises. Float32: dot products of 8 terms and softmaxes of <= 5 keys."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import hookkit
from tolerance import assert_close

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
import tiny_transformers as tiny  # noqa: E402
from tiny_transformers import gpt2  # noqa: E402

IDS = torch.tensor([[3, 7, 1, 9, 4], [2, 2, 8, 5, 11]])
N_OPS = 64  # a dot product of 8 terms, a softmax over 5 keys, a weighted sum of 5 values, a few layers after


def llama(attn="eager"):
    return tiny.llama(attn)


MAKERS = pytest.mark.parametrize("make", [gpt2, llama], ids=["gpt2", "llama-gqa"])


def qkv(cache, i):
    """The layer's queries and keys as its attention function saw them (rotated where rotary), values."""
    rot = "rot_" if f"blocks.{i}.attn.hook_rot_q" in cache else ""
    return cache[f"blocks.{i}.attn.hook_{rot}q"], cache[f"blocks.{i}.attn.hook_{rot}k"], cache[f"blocks.{i}.attn.hook_v"]


def hand_attention(q, k, v, edit_scores=None, edit_pattern=None):
    """Eager attention written out: q [B, T, H, d], k/v [B, T, Hkv, d] -> (scores, pattern, z [B, T, H, d]);
    causal positions masked at float32's lowest value (the model's mask), the edits applied in between."""
    rep = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(rep, 2), v.repeat_interleave(rep, 2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * q.shape[-1] ** -0.5
    keep = torch.ones(q.shape[1], q.shape[1], dtype=torch.bool).tril()
    s = s.masked_fill(~keep, torch.finfo(s.dtype).min)
    if edit_scores is not None:
        s = edit_scores(s)
    p = s.softmax(-1)
    if edit_pattern is not None:
        p = edit_pattern(p)
    return s, p, torch.einsum("bhqk,bkhd->bqhd", p, v)


def no_first_key(p, ev=None):
    """Head 1 attends nowhere to position 0, NOT renormalized (the other keys keep their weights)."""
    p = p.clone()
    p[:, 1, :, 0] = 0
    return p


def forbid_key_1(s, ev=None):
    """Every query of every head barred from key 1 with -inf (query 0 already could not see it)."""
    s = s.clone()
    s[..., 1] = float("-inf")
    return s


def library_functions():
    from transformers.modeling_utils import AttentionInterface

    return dict(AttentionInterface._global_mapping)


def assert_left_as_found(model, before_mapping, attn):
    assert model.config._attn_implementation == attn
    assert library_functions() == before_mapping
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


# -- reading -------------------------------------------------------------------------------------------
@MAKERS
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_every_reading_verb_takes_them_and_leaves_the_output_alone(make, attn):
    model = make(attn)
    names = hookkit.names(model)
    assert names.index("blocks.0.attn.hook_v") < names.index("blocks.0.attn.hook_attn_scores") < names.index("blocks.0.attn.hook_pattern")
    assert names.index("blocks.0.attn.hook_pattern") < names.index("blocks.0.attn.hook_z")  # TransformerLens's order
    bare = model(IDS).logits
    before = library_functions()
    with hookkit.capture(model, ["blocks.*.attn.hook_pattern", "blocks.*.attn.hook_attn_scores", "blocks.*.attn.hook_*"]) as cap:
        with hookkit.ActivationStats(model, "blocks.*.attn.hook_pattern", train_only=False) as stats, torch.no_grad():
            out = model(IDS).logits
        assert torch.equal(out, bare)  # reading: the library's own kernel (or the same eager operations)
        with_grads = model(IDS).logits  # recording gradients: the eager operations, so that they reach the pattern
        assert cap["blocks.0.attn.hook_pattern"].grad_fn is None  # capture detaches
    assert_close(with_grads, bare, n_ops=N_OPS)
    for i in range(2):
        s, p, _ = hand_attention(*qkv(cap, i))
        assert_close(cap[f"blocks.{i}.attn.hook_attn_scores"], s, n_ops=N_OPS)
        assert_close(cap[f"blocks.{i}.attn.hook_pattern"], p, n_ops=N_OPS)
    assert stats.names == ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"]
    mean = np.asarray(stats.layer_stats("blocks.1.attn.hook_pattern")["mean"], dtype=float)
    np.testing.assert_allclose(mean, 0.2, rtol=1e-6)  # each query's row sums to 1 over 5 keys
    assert_left_as_found(model, before, attn)


# -- editing -------------------------------------------------------------------------------------------
@MAKERS
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_an_edited_pattern_equals_the_hand_computed_eager_attention(make, attn):
    model = make(attn)
    bare = model(IDS).logits
    before = library_functions()
    with hookkit.capture(model, ["blocks.0.attn.hook_*", "blocks.0.hook_attn_out"]) as cap:
        with hookkit.edit(model, "blocks.0.attn.hook_pattern", no_first_key):
            edited = model(IDS).logits
    assert_left_as_found(model, before, attn)
    q, k, v = qkv(cap, 0)
    _, p, z = hand_attention(q, k, v, edit_pattern=no_first_key)
    assert_close(cap["blocks.0.attn.hook_pattern"], p, n_ops=N_OPS)  # observers see what the edit made
    assert float(cap["blocks.0.attn.hook_pattern"][:, 1, :, 0].abs().max()) == 0.0
    assert_close(cap["blocks.0.attn.hook_z"], z, n_ops=N_OPS)
    # the rest of the model unchanged: the hand-computed z patched in gives the edited logits
    with hookkit.patch(model, "blocks.0.attn.hook_z", {"blocks.0.attn.hook_z": z}):
        assert_close(model(IDS).logits, edited, n_ops=N_OPS)
    assert not torch.allclose(edited, bare)
    assert torch.equal(model(IDS).logits, bare)  # nothing left behind


@MAKERS
def test_sdpa_and_eager_models_give_the_same_edited_result(make):
    eager, sdpa = make("eager"), make("sdpa")
    got = {}
    for label, model in (("eager", eager), ("sdpa", sdpa)):
        with (
            hookkit.edit(model, "blocks.*.attn.hook_pattern", no_first_key),
            hookkit.edit(model, "blocks.1.attn.hook_attn_scores", forbid_key_1),
        ):
            got[label] = model(IDS).logits
    assert_close(got["sdpa"], got["eager"], n_ops=N_OPS)
    assert sdpa.config._attn_implementation == "sdpa" and eager.config._attn_implementation == "eager"


@MAKERS
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_scores_edited_with_minus_inf_equal_the_hand_computation(make, attn):
    model = make(attn)
    with hookkit.capture(model, ["blocks.0.attn.hook_*"]) as cap:
        with hookkit.edit(model, "blocks.0.attn.hook_attn_scores", forbid_key_1):
            model(IDS)
    s, p, z = hand_attention(*qkv(cap, 0), edit_scores=forbid_key_1)
    got = cap["blocks.0.attn.hook_attn_scores"]
    assert bool(torch.isneginf(got[..., 1]).all())
    assert_close(got[..., [0, 2, 3, 4]], s[..., [0, 2, 3, 4]], n_ops=N_OPS)
    assert float(cap["blocks.0.attn.hook_pattern"][..., 1].abs().max()) == 0.0  # the softmax of the edited scores
    assert_close(cap["blocks.0.attn.hook_pattern"], p, n_ops=N_OPS)
    assert_close(cap["blocks.0.attn.hook_z"], z, n_ops=N_OPS)


def test_patch_ablate_steer_and_a_sweep_take_the_pattern():
    model = gpt2("sdpa")
    other = torch.tensor([[5, 5, 5, 5, 5], [1, 2, 3, 4, 6]])
    with hookkit.capture(model, ["blocks.0.attn.hook_pattern", "blocks.0.attn.hook_z"]) as clean:
        clean_logits = model(other).logits
    with hookkit.patch(model, "blocks.0.attn.hook_pattern", clean), hookkit.capture(model, "blocks.0.attn.hook_*") as cap:
        model(IDS)
    assert torch.equal(cap["blocks.0.attn.hook_pattern"], clean["blocks.0.attn.hook_pattern"])
    _, _, z = hand_attention(*qkv(cap, 0), edit_pattern=lambda p: clean["blocks.0.attn.hook_pattern"])
    assert_close(cap["blocks.0.attn.hook_z"], z, n_ops=N_OPS)
    with hookkit.ablate(model, "blocks.*.attn.hook_pattern"), hookkit.capture(model, "blocks.*.attn.hook_z") as zeroed:
        model(IDS)
    assert all(float(zeroed[f"blocks.{i}.attn.hook_z"].abs().max()) == 0.0 for i in range(2))  # no attention, no z
    with hookkit.steer(model, "blocks.0.attn.hook_attn_scores", torch.tensor([0.0, -1e9, 0.0, 0.0, 0.0])):
        with hookkit.capture(model, "blocks.0.attn.hook_pattern") as steered:
            model(IDS)
    assert float(steered["blocks.0.attn.hook_pattern"][:, :, 1:, 1].max()) < 1e-6  # key 1 steered away
    assert torch.isfinite(clean_logits).all()
    # positions= on a pattern selects query positions (its axis 2, no token_dim= needed): only the last
    # query's row comes from the clean run; token_dim=2 says the same; a capture keeps those rows
    with torch.no_grad(), hookkit.capture(model, "blocks.0.attn.hook_pattern") as base:
        model(IDS)
    for extra in ({}, {"token_dim": 2}):
        with torch.no_grad(), hookkit.patch(model, "blocks.0.attn.hook_pattern", clean, positions=[4], **extra):
            with hookkit.capture(model, "blocks.0.attn.hook_pattern") as rows:
                model(IDS)
        got, want_clean, want_base = (c["blocks.0.attn.hook_pattern"] for c in (rows, clean, base))
        assert torch.equal(got[:, :, 4], want_clean[:, :, 4]) and torch.equal(got[:, :, :4], want_base[:, :, :4]), extra
    with torch.no_grad(), hookkit.capture(model, ["blocks.0.attn.hook_pattern", "blocks.0.hook_resid_pre"], positions=[3, 4]) as some:
        model(IDS)
    assert torch.equal(some["blocks.0.attn.hook_pattern"], want_base[:, :, 3:5])  # [batch, head, 2 queries, keys]
    assert some["blocks.0.hook_resid_pre"].shape == (2, 2, 32)  # the model's token axis for the others
    with torch.no_grad(), hookkit.ablate(model, "blocks.0.attn.hook_pattern", positions=[0]):
        with hookkit.capture(model, "blocks.0.attn.hook_pattern") as zero_first:
            model(IDS)
    assert float(zero_first["blocks.0.attn.hook_pattern"][:, :, 0].abs().max()) == 0.0
    assert torch.equal(zero_first["blocks.0.attn.hook_pattern"][:, :, 1:], want_base[:, :, 1:])


def test_a_patching_sweep_over_the_patterns_query_positions():
    model = gpt2("sdpa")
    clean, corrupt = IDS[:1], IDS[1:]

    def metric(out):
        return out.logits[:, -1, 3] - out.logits[:, -1, 4]

    grid = hookkit.patching_sweep(model, clean, corrupt, "blocks.*.attn.hook_pattern", metric)
    assert grid.shape == (2, 5)  # [layers, query positions]
    with torch.no_grad():
        with hookkit.capture(model, "blocks.1.attn.hook_pattern") as src:
            model(clean)

        def row_4(p, ev):  # the last query position attends as in the clean run
            p = p.clone()
            p[:, :, 4] = src["blocks.1.attn.hook_pattern"][:, :, 4]
            return p

        with hookkit.edit(model, "blocks.1.attn.hook_pattern", row_4):
            want = float(metric(model(corrupt))[0])
        base = float(metric(model(corrupt))[0])
    assert grid[1, 4] == pytest.approx(want, abs=1e-5) and want != pytest.approx(base)
    assert grid[1, 2] == pytest.approx(base, abs=1e-5)  # an earlier query of the last block cannot reach the last logits


def test_everything_is_restored_when_the_forward_raises():
    model = gpt2("sdpa")
    bare = model(IDS).logits
    before = library_functions()

    def boom(p, ev):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        with hookkit.edit(model, "blocks.0.attn.hook_pattern", boom):
            model(IDS)
    assert_left_as_found(model, before, "sdpa")
    assert torch.equal(model(IDS).logits, bare)
    with pytest.raises(ValueError, match=r"\[2, 4, 5, 5\]"):
        with hookkit.edit(model, "blocks.0.attn.hook_pattern", lambda p, ev: p[:, :2]):
            model(IDS)
    assert_left_as_found(model, before, "sdpa")
    hookkit.edit(model, "blocks.0.attn.hook_pattern", no_first_key)
    hookkit.remove_all(model)  # remove_all finds the routed attention too
    assert_left_as_found(model, before, "sdpa")
    assert torch.equal(model(IDS).logits, bare)


def test_an_attention_function_with_arguments_hookkit_cannot_run_eagerly_is_refused_when_edited(monkeypatch):
    model = gpt2("sdpa")
    from transformers.models.gpt2 import modeling_gpt2

    forward = modeling_gpt2.GPT2Attention.forward

    def with_sinks(self, *args, **kwargs):
        return forward(self, *args, s_aux=torch.zeros(4), **kwargs)

    monkeypatch.setattr(modeling_gpt2.GPT2Attention, "forward", with_sinks)
    with hookkit.capture(model, "blocks.0.attn.hook_pattern") as cap:  # reading: the library's function runs
        model(IDS)
    assert cap["blocks.0.attn.hook_pattern"].shape == (2, 4, 5, 5)
    with pytest.raises(hookkit.UnsupportedModel, match="s_aux"):
        with hookkit.edit(model, "blocks.0.attn.hook_pattern", no_first_key):
            model(IDS)


# -- TransformerLens's TransformerBridge, where installed (not in CI) --------------------------------------
@pytest.mark.parametrize("make,arch", [(gpt2, "gpt2"), (llama, "meta-llama/Llama-3.2-1B")], ids=["gpt2", "llama-gqa"])
def test_an_edited_pattern_equals_transformer_bridge_run_with_hooks(make, arch, tmp_path):
    pytest.importorskip("transformer_lens.model_bridge")
    tokenizers = pytest.importorskip("tokenizers")
    from transformer_lens.model_bridge import TransformerBridge

    model = make("sdpa")  # hookkit's side keeps SDPA; the bridge runs eagerly
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel({f"t{i}": i for i in range(50)}, unk_token="t0"))
    T.PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="t0", eos_token="t0", bos_token="t0").save_pretrained(tmp_path)
    bridge = TransformerBridge.boot_transformers(
        arch, hf_model=copy.deepcopy(model), tokenizer=T.PreTrainedTokenizerFast.from_pretrained(tmp_path)
    )
    theirs = bridge.run_with_hooks(
        IDS,
        fwd_hooks=[
            ("blocks.0.attn.hook_pattern", lambda p, hook: no_first_key(p)),
            ("blocks.1.attn.hook_attn_scores", lambda s, hook: forbid_key_1(s)),
        ],
    )
    with (
        hookkit.edit(model, "blocks.0.attn.hook_pattern", no_first_key),
        hookkit.edit(model, "blocks.1.attn.hook_attn_scores", forbid_key_1),
    ):
        mine = model(IDS).logits
    assert_close(mine, theirs, n_ops=N_OPS)


# -- Paddle: nn.MultiHeadAttention computes its attention eagerly; the names are its softmax's input and output
def test_paddle_encoder_pattern_and_scores_are_editable_and_equal_a_hand_computation():
    paddle = pytest.importorskip("paddle")
    paddle.seed(0)
    model = paddle.nn.TransformerEncoder(paddle.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0), 2)
    model.eval()
    src = paddle.randn([2, 5, 32])
    names = hookkit.names(model)
    assert "blocks.0.attn.hook_attn_scores" in names and "blocks.1.attn.hook_pattern" in names
    bare = model(src)

    def no_first(p, ev):
        keep = paddle.ones_like(p)
        keep[:, 1, :, 0] = 0
        return p * keep

    with hookkit.capture(model, "blocks.0.attn.hook_*") as cap, hookkit.edit(model, "blocks.0.attn.hook_pattern", no_first):
        edited = model(src)
    q, k, v = (cap[f"blocks.0.attn.hook_{n}"] for n in "qkv")
    scores = paddle.einsum("bqhd,bkhd->bhqk", q, k) / 8**0.5
    assert_close(cap["blocks.0.attn.hook_attn_scores"].numpy(), scores.numpy(), n_ops=N_OPS)
    pattern = no_first(paddle.nn.functional.softmax(scores, -1), None)
    assert_close(cap["blocks.0.attn.hook_pattern"].numpy(), pattern.numpy(), n_ops=N_OPS)
    z = paddle.einsum("bhqk,bkhd->bqhd", pattern, v)
    assert_close(cap["blocks.0.attn.hook_z"].numpy(), z.numpy(), n_ops=N_OPS)
    assert not np.allclose(edited.numpy(), bare.numpy())
    np.testing.assert_array_equal(model(src).numpy(), bare.numpy())  # removed with the context


# -- what run_with_cache keeps ------------------------------------------------------------------------------
class AddsInPlace(torch.nn.LayerNorm):
    """A final norm that writes into its input (the last block's output) before normalizing it."""

    def forward(self, x):
        x.add_(1.0)
        return super().forward(x)


def test_run_with_cache_keeps_references_and_sees_a_tensor_written_in_place_after():
    model = gpt2("sdpa")
    with torch.no_grad():
        _, cache = hookkit.run_with_cache(model, IDS, names_filter=["blocks.*.hook_resid_post", "blocks.*.attn.hook_[qkv]"])
    # references, not copies: q, k and v are views of the fused projection's one output
    q, k, v = (cache[f"blocks.0.attn.hook_{n}"] for n in "qkv")
    assert q.untyped_storage().data_ptr() == k.untyped_storage().data_ptr() == v.untyped_storage().data_ptr()
    ln = AddsInPlace(32)
    ln.load_state_dict(model.transformer.ln_f.state_dict())
    model.transformer.ln_f = ln
    seen = {}
    plain = model.transformer.h[1].register_forward_hook(
        lambda m, a, o: seen.__setitem__("post", (o[0] if isinstance(o, tuple) else o).clone())
    )
    try:
        with torch.no_grad():
            _, cache = hookkit.run_with_cache(model, IDS, names_filter=["blocks.*.hook_resid_post", "ln_final.hook_scale"])
    finally:
        plain.remove()
    assert torch.equal(cache["blocks.1.hook_resid_post"], seen["post"])  # as the block returned it, before the norm wrote into it
    assert names_point(model, "ln_final.hook_scale") is ln  # the names follow the model's modules
    model.train()
    with pytest.raises(hookkit.UnsupportedModel, match="blocks.1.hook_resid_post.*in training mode"):
        hookkit.run_with_cache(model, IDS, names_filter="blocks.1.hook_resid_post")


def names_point(model, name):
    return hookkit.select(model, name)[0][1].module


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_attribution_patching_reaches_the_pattern_through_the_eager_path(attn):
    model = gpt2(attn)
    clean, corrupt = IDS[:1], IDS[1:]

    def metric(out):
        return out.logits[:, -1, 3] - out.logits[:, -1, 4]

    est = hookkit.attribution_patching(model, clean, corrupt, "blocks.*.attn.hook_pattern", metric)
    assert est.shape == (2, 5)  # [layers, query positions]
    # by hand: (clean - corrupted pattern) times the metric's gradient at the corrupted pattern, per query
    with torch.no_grad(), hookkit.capture(model, "blocks.1.attn.hook_pattern") as src:
        model(clean)
    held = {}
    with hookkit.edit(model, "blocks.1.attn.hook_pattern", lambda p, ev: held.setdefault("p", p.detach().requires_grad_())):
        metric(model(corrupt)).sum().backward()
    want = ((src["blocks.1.attn.hook_pattern"] - held["p"].detach()) * held["p"].grad).sum((1, 3))[0]
    assert_close(torch.as_tensor(est[1]), want, n_ops=N_OPS, scale=float(want.abs().max()))
    assert float(want.abs().max()) > 0


def _family(kind, attn):
    from test_standard_names import _config, gemma2, pythia

    torch.manual_seed(0)
    model = {"gemma2": gemma2, "pythia": pythia}.get(kind, lambda: _config(kind))()
    model.config._attn_implementation = attn
    for m in model.modules():  # transformers' SDPA refuses Gemma 2's softcap: both sides without it
        if getattr(m, "attn_logit_softcapping", None) is not None:
            m.attn_logit_softcapping = None
    return model


@pytest.mark.parametrize("kind", ["pythia", "gemma2", "gptj", "mistral", "qwen2", "phi", "opt", "bert"])
def test_every_family_edits_its_pattern_alike_on_eager_and_sdpa(kind):
    """The edited run is the same whichever kernel the model was deployed with (softcapped Gemma 2,
    partial rotary GPT-J / Phi, an encoder), and differs from the unedited one."""
    got = {}
    for attn in ("eager", "sdpa"):
        model = _family(kind, attn)
        out = model(IDS)
        bare = out.logits if hasattr(out, "logits") else out.last_hidden_state
        with torch.no_grad(), hookkit.edit(model, "blocks.0.attn.hook_pattern", no_first_key):
            out = model(IDS)
        got[attn] = out.logits if hasattr(out, "logits") else out.last_hidden_state
        assert not torch.allclose(got[attn], bare)
    assert_close(got["sdpa"], got["eager"], n_ops=N_OPS)


@pytest.mark.parametrize(
    "kind,attn", [("opt", "model.decoder.layers.0.self_attn"), ("gptj", "transformer.h.0.attn"), ("phi", "model.layers.0.self_attn")]
)
def test_the_attention_registry_knows_opt_gptj_and_phi_heads(kind, attn):
    """Their attention modules are in the registry (so their patterns are names): heads= on the module
    equals zeroing that head's slice of hook_z."""
    model = _family(kind, "sdpa")
    with torch.no_grad(), hookkit.ablate(model, attn, heads=[1]):
        by_heads = model(IDS).logits

    def zero_head_1(z, ev):
        z = z.clone()
        z[:, :, 1] = 0
        return z

    with torch.no_grad(), hookkit.edit(model, "blocks.0.attn.hook_z", zero_head_1):
        by_name = model(IDS).logits
    assert torch.equal(by_heads, by_name)


def test_gpt2_reordered_eager_attention_offers_no_pattern_names_and_says_why():
    """GPT-2's ``reorder_and_upcast_attn`` under eager attention computes its scores in a method of its
    own, not the attention function: hookkit offers no hook_pattern there (rather than a name that never
    fires) and says why when one is asked for; with SDPA the option does not apply and the names are there."""

    def make(attn):
        cfg = T.GPT2Config(
            n_layer=2, n_head=4, n_embd=32, vocab_size=50, n_positions=16, reorder_and_upcast_attn=True, attn_implementation=attn
        )
        return T.GPT2LMHeadModel(cfg).eval()

    ids = torch.tensor([[3, 7, 1, 9, 4]])
    eager = make("eager")
    assert not [n for n in hookkit.names(eager) if n.endswith(("hook_pattern", "hook_attn_scores"))]
    with torch.no_grad():
        _, cache = hookkit.run_with_cache(eager, ids)
    assert "blocks.0.attn.hook_z" in cache and "blocks.0.attn.hook_pattern" not in cache
    with pytest.raises(hookkit.LayerNotFound, match="reorder_and_upcast_attn=True under eager attention"):
        hookkit.capture(eager, "blocks.0.attn.hook_pattern")
    sdpa = make("sdpa")
    with torch.no_grad(), hookkit.capture(sdpa, "blocks.*.attn.hook_pattern") as cap:
        sdpa(ids)
    assert cap["blocks.1.attn.hook_pattern"].shape == (1, 4, 5, 5)
