"""``run_with_cache`` derives the norms' ``hook_scale`` and ``hook_normalized`` when they are first read
(from a reference to the norm's input), not in the forward: the values equal the forward-time ones
(``capture``, which computes them in the forward) bit for bit and a hand computation to float32
rounding; each is computed once; every ``ActivationCache`` method reads them; an in-place write into
the norm's input is seen, by the model (kept again eagerly) or by the user (the read refused)."""

from __future__ import annotations

import numpy as np
import pytest

import hookkit
from hookkit.analyses.transformer.derived import Derived

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
import tiny_transformers as tiny  # noqa: E402

ATOL = 1e-5  # float32: a mean and a square root over 32 values of O(1)
IDS = torch.tensor([[3, 7, 1, 9, 4], [2, 2, 8, 5, 11]])
NORMS = ("ln1.hook_scale", "ln1.hook_normalized", "ln2.hook_scale", "ln2.hook_normalized")


def gpt2(attn="sdpa"):
    return tiny.gpt2(attn, bos_token_id=0, eos_token_id=0)


def llama():
    return tiny.llama(bos_token_id=0, eos_token_id=0)


def norm_names(model):
    return [n for n in hookkit.names(model) if n.endswith(("hook_scale", "hook_normalized"))]


def derived(cache):
    return [n for n, v in cache._values.items() if isinstance(v, Derived)]


def hand(x, kind, eps):
    xc = x - x.mean(-1, keepdim=True) if kind == "layer" else x
    scale = (xc.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    return scale, xc / scale


@pytest.mark.parametrize("make, kind", [(gpt2, "layer"), (llama, "rms")])
def test_derived_values_equal_the_forward_time_values_and_a_hand_computation(make, kind):
    model = make()
    names = norm_names(model)
    with torch.no_grad():
        _, cache = hookkit.run_with_cache(model, IDS)
        with hookkit.capture(model, names) as cap:  # computed in the forward
            model(IDS)
    assert set(names) <= set(derived(cache))  # nothing computed yet
    assert list(cache) == hookkit.names(model)  # in TransformerLens's order, as before
    for name in names:
        assert torch.equal(cache[name], cap[name]), name
    for i, block in enumerate(model.model.layers if kind == "rms" else model.transformer.h):
        norm = block.input_layernorm if kind == "rms" else block.ln_1
        eps = norm.variance_epsilon if kind == "rms" else norm.eps
        scale, normed = hand(cache[f"blocks.{i}.hook_resid_pre"], kind, eps)
        np.testing.assert_allclose(cache[f"blocks.{i}.ln1.hook_scale"].numpy(), scale.numpy(), atol=ATOL, rtol=0)
        np.testing.assert_allclose(cache[f"blocks.{i}.ln1.hook_normalized"].numpy(), normed.numpy(), atol=ATOL, rtol=0)
    assert not set(names) & set(derived(cache))


def test_a_derived_value_is_computed_once_on_first_read(monkeypatch):
    model = gpt2()
    m = hookkit.backends.backend_for(model).family("tensor_math")
    calls = []
    real = type(m).norm_scale
    monkeypatch.setattr(type(m), "norm_scale", lambda self, *a: calls.append(1) or real(self, *a))
    with torch.no_grad():
        _, cache = hookkit.run_with_cache(model, IDS)
    assert calls == []  # the forward computed no norm value
    first = cache["blocks.0.ln1.hook_scale"]
    assert cache["blocks.0.ln1.hook_scale"] is first and cache["scale", 0, "ln1"] is first
    cache["blocks.0.ln1.hook_normalized"]
    assert len(calls) == 1
    assert "blocks.1.ln2.hook_scale" in cache and ("scale", None) in cache and "blocks.9.ln1.hook_scale" not in cache
    assert len(calls) == 1  # `in` derives nothing


def eager_cache(model):
    """The same cache with every value computed in the forward (``device=`` keeps values eagerly)."""
    with torch.no_grad():
        return hookkit.run_with_cache(model, IDS, device="cpu")[1]


def test_every_cache_method_reads_the_derived_values():
    model = gpt2()
    eager = eager_cache(model)
    assert not derived(eager)
    methods = {
        "items": lambda c: dict(c.items()),
        "values": lambda c: dict(zip(c.keys(), c.values())),
        "dict": lambda c: dict(c),
        "get": lambda c: {n: c.get(n) for n in norm_names(model)},
    }
    final, ln2 = "ln_final.hook_scale", "blocks.1.ln2.hook_scale"  # the scale each method divides by
    methods |= {
        final: lambda c: c.accumulated_resid(apply_ln=True, incl_mid=True),
        ln2: lambda c: c.decompose_resid(apply_ln=True, mlp_input=True, layer=1),
        "blocks.1.ln1.hook_scale": lambda c: c.stack_head_results(1, apply_ln=True),
        final + " (neurons)": lambda c: c.stack_neuron_results(2, apply_ln=True, neuron_slice=slice(0, 4)),  # + each hook_post
        ln2 + " (apply_ln_to_stack)": lambda c: c.apply_ln_to_stack(c.decompose_resid(), 1, mlp_input=True),
        final + " (logit_attrs)": lambda c: c.logit_attrs(c.decompose_resid(pos_slice=-1), tokens=IDS[:, -1], pos_slice=-1),
        final + " (full)": lambda c: c.get_full_resid_decomposition(apply_ln=True, expand_neurons=False),
    }
    for what, read in methods.items():
        with torch.no_grad():
            cache = hookkit.run_with_cache(model, IDS)[1]
        fresh = len(derived(cache))
        assert fresh >= len(norm_names(model))
        got, want = read(cache), read(eager)
        if isinstance(got, dict):
            assert list(got) == list(want), what
            assert all(torch.equal(got[n], want[n]) for n in got), what
            assert not set(got) & set(derived(cache)), what  # every value read is kept
        else:
            assert torch.equal(got, want), what
            assert what.split()[0] not in derived(cache), what  # the scale it read, now kept
            posts = 2 if "neurons" in what else 0  # the MLPs' hook_post, replayed from hook_pre
            assert len(derived(cache)) == fresh - 1 - posts, what  # and no other


class AddsInPlace(torch.nn.LayerNorm):
    """A norm that writes into its input (the block's residual stream) after normalizing it."""

    def forward(self, x):
        out = super().forward(x)
        x.add_(1.0)
        return out


def test_a_norm_input_the_model_writes_in_place_is_kept_again_eagerly():
    model = gpt2()
    ln = AddsInPlace(32, eps=model.transformer.h[0].ln_2.eps)
    ln.load_state_dict(model.transformer.h[0].ln_2.state_dict())
    model.transformer.h[0].ln_2 = ln
    seen = {}
    plain = ln.register_forward_pre_hook(lambda m, a: seen.__setitem__("in", a[0].clone()))
    try:
        with torch.no_grad():
            _, cache = hookkit.run_with_cache(model, IDS)
    finally:
        plain.remove()
    assert "blocks.0.ln2.hook_scale" not in derived(cache)  # kept again by the second forward, computed there
    scale, normed = hand(seen["in"], "layer", ln.eps)
    np.testing.assert_allclose(cache["blocks.0.ln2.hook_scale"].numpy(), scale.numpy(), atol=ATOL, rtol=0)
    np.testing.assert_allclose(cache["blocks.0.ln2.hook_normalized"].numpy(), normed.numpy(), atol=ATOL, rtol=0)
    assert torch.equal(cache["blocks.0.hook_resid_mid"], seen["in"])  # as the norm read it


def test_a_kept_tensor_written_in_place_by_the_user_before_the_read_is_refused():
    model = gpt2()
    with torch.no_grad():
        _, cache = hookkit.run_with_cache(model, IDS)
    want = eager_cache(model)
    kept = cache["blocks.0.ln1.hook_scale"]  # read before the write: the forward's value, kept
    resid = cache["blocks.0.hook_resid_pre"]  # the same tensor as ln1's and (GPT-2) the embeddings' sum
    resid.mul_(2.0)
    assert torch.equal(kept, want["blocks.0.ln1.hook_scale"])
    assert torch.equal(cache["blocks.0.ln1.hook_scale"], kept)
    with pytest.raises(hookkit.UnsupportedModel, match=r"'blocks\.0\.ln1\.hook_normalized' is derived .* written in place"):
        cache["blocks.0.ln1.hook_normalized"]
    assert torch.equal(cache["blocks.1.ln1.hook_scale"], want["blocks.1.ln1.hook_scale"])  # other norms' inputs untouched


def test_names_filter_and_device_keep_their_meaning():
    model = gpt2()
    with torch.no_grad():
        _, cache = hookkit.run_with_cache(model, IDS, names_filter="blocks.*.ln1.hook_normalized")
    assert list(cache) == ["blocks.0.ln1.hook_normalized", "blocks.1.ln1.hook_normalized"] == derived(cache)
    want = eager_cache(model)
    assert all(torch.equal(cache[n], want[n]) for n in cache)


def test_paddle_norm_values_are_derived_alike():
    paddle = pytest.importorskip("paddle")
    model = tiny.paddle_encoder(pre_norm=True)
    src = paddle.randn([2, 5, 32])
    names = norm_names(model)
    _, cache = hookkit.run_with_cache(model, src)
    with hookkit.capture(model, names) as cap:
        model(src)
    assert set(names) <= set(derived(cache))
    for name in names:
        np.testing.assert_array_equal(cache[name].numpy(), cap[name].numpy())
    scale, normed = hand(cache["blocks.1.hook_resid_post"], "layer", model.norm._epsilon)
    np.testing.assert_allclose(cache["ln_final.hook_scale"].numpy(), scale.numpy(), atol=ATOL, rtol=0)
    np.testing.assert_allclose(cache["ln_final.hook_normalized"].numpy(), normed.numpy(), atol=ATOL, rtol=0)
    _, cache = hookkit.run_with_cache(model, src)
    cache["blocks.0.hook_resid_pre"].scale_(2.0)  # written in place before the read: the norm's read refused
    with pytest.raises(hookkit.UnsupportedModel, match="written in place"):
        cache["blocks.0.ln1.hook_scale"]


# -- attention scores and patterns of a call run by the library's kernel --------------------------------
def causal_scores(q, k):
    """q, k [B, T, H, d] -> scores [B, H, T, T], masked positions at the dtype's minimum (as transformers' mask)."""
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / q.shape[-1] ** 0.5
    mask = torch.ones(q.shape[1], q.shape[1], dtype=torch.bool).tril()
    return scores, mask


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_scores_and_pattern_are_derived_from_the_calls_query_and_key(monkeypatch, attn):
    """Nothing reads the scores in the forward: the model's own attention function runs (SDPA's kernel,
    or the eager function), and the scores and pattern are derived from the call's query and key when
    read, once per layer, equal to a forward-time capture's and a hand computation."""
    model = gpt2(attn)
    fam = hookkit.backends.backend_for(model).family("attention")
    calls = []
    real = type(fam).scores
    monkeypatch.setattr(type(fam), "scores", lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    with torch.no_grad():
        bare = model(IDS).logits
        out, cache = hookkit.run_with_cache(model, IDS)
    assert torch.equal(out.logits, bare)  # the model's own attention, untouched
    assert calls == []  # no scores computed in the forward
    names = [n for n in cache if n.endswith(("hook_attn_scores", "hook_pattern"))]
    assert len(names) == 4 and set(names) <= set(derived(cache))
    with torch.no_grad(), hookkit.capture(model, names) as cap:  # computed in the forward (beside SDPA, or by the eager ops)
        model(IDS)
    calls.clear()
    for name in names:
        assert torch.equal(cache[name], cap[name]), name
    assert len(calls) == 2  # once per layer, the pattern from the kept scores
    for i in range(2):
        scores, mask = causal_scores(cache[f"blocks.{i}.attn.hook_q"], cache[f"blocks.{i}.attn.hook_k"])
        got = cache[f"blocks.{i}.attn.hook_attn_scores"]
        np.testing.assert_allclose(got.numpy()[..., mask], scores.numpy()[..., mask], atol=ATOL, rtol=0)
        assert (got[..., ~mask] < -1e30).all()  # masked as TransformerLens: a large negative value
        want = scores.masked_fill(~mask, float("-inf")).softmax(-1)
        np.testing.assert_allclose(cache[f"blocks.{i}.attn.hook_pattern"].numpy(), want.numpy(), atol=ATOL, rtol=0)


def test_a_kept_query_written_in_place_before_the_pattern_is_read_is_refused():
    model = gpt2()
    with torch.no_grad():
        _, cache = hookkit.run_with_cache(model, IDS)
    cache["blocks.1.attn.hook_q"].zero_()  # a view of the fused projection the call's query is a view of
    with pytest.raises(hookkit.UnsupportedModel, match=r"'blocks\.1\.attn\.hook_pattern' is derived .* written in place"):
        cache["blocks.1.attn.hook_pattern"]
    assert cache["blocks.0.attn.hook_pattern"].shape == (2, 4, 5, 5)  # another layer's: derived


def test_patterns_alone_and_a_forward_recording_gradients_give_the_same_values():
    model = gpt2()
    with torch.no_grad(), hookkit.capture(model, "blocks.*.attn.hook_pattern") as cap:
        model(IDS)
    with hookkit.capture(model, "blocks.*.attn.hook_pattern") as cap_graded:  # the eager operations (gradients reach them)
        model(IDS)
    with torch.no_grad():
        _, alone = hookkit.run_with_cache(model, IDS, names_filter="blocks.*.attn.hook_pattern")
    _, graded = hookkit.run_with_cache(model, IDS, names_filter="blocks.*.attn.hook_pattern")  # computed in the forward, handed over
    assert list(alone) == list(graded) == ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"]
    for name in alone:
        assert torch.equal(alone[name], cap[name]) and torch.equal(graded[name], cap_graded[name].detach()), name
        assert not graded[name].requires_grad


@pytest.mark.parametrize("make", [gpt2, llama])
def test_an_mlps_hook_post_is_replayed_from_hook_pre_bit_for_bit(make):
    model = make()  # GPT-2: act(hook_pre); Llama: act_fn(hook_pre) * hook_pre_linear
    posts = [n for n in hookkit.names(model) if n.endswith("mlp.hook_post")]
    with torch.no_grad():
        _, cache = hookkit.run_with_cache(model, IDS)
        with hookkit.capture(model, posts) as cap:
            model(IDS)
    assert set(posts) <= set(derived(cache))  # not kept: a [batch, pos, d_mlp] tensor less per block
    for name in posts:
        assert torch.equal(cache[name], cap[name]), name
    with torch.no_grad():  # without hook_pre among the kept names, hook_post is kept as it is
        _, alone = hookkit.run_with_cache(model, IDS, names_filter="blocks.*.mlp.hook_post")
    assert not derived(alone) and all(torch.equal(alone[n], cap[n]) for n in posts)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):  # under autocast, read after it
        _, low = hookkit.run_with_cache(model, IDS)
        with hookkit.capture(model, posts) as low_cap:
            model(IDS)
    assert all(low[n].dtype == torch.bfloat16 and torch.equal(low[n], low_cap[n]) for n in posts)


def test_hook_post_is_kept_not_replayed_where_something_acts_on_the_activation():
    model = gpt2()
    act = model.transformer.h[0].mlp.act
    with torch.no_grad():
        base = hookkit.run_with_cache(model, IDS)[1]
        bare = base["blocks.0.mlp.hook_post"]
        handle = act.register_forward_hook(lambda m, a, o: o * 2)  # someone's hook changes the activation's output
        try:
            _, cache = hookkit.run_with_cache(model, IDS)
        finally:
            handle.remove()
        assert "blocks.0.mlp.hook_post" not in derived(cache) and "blocks.1.mlp.hook_post" in derived(cache)
        assert torch.equal(cache["blocks.0.mlp.hook_post"], bare * 2)
        with hookkit.edit(model, "blocks.1.mlp.hook_post", lambda t, ev: t + 1):  # an edit on the value itself
            _, edited = hookkit.run_with_cache(model, IDS)
    assert "blocks.1.mlp.hook_post" not in derived(edited)
    assert torch.equal(edited["blocks.1.mlp.hook_post"], base["blocks.1.mlp.hook_post"] + 1)


def test_a_kept_hook_pre_written_in_place_by_the_model_keeps_hook_post_again():
    model = gpt2()
    for block in model.transformer.h:  # an activation that writes into its input (ReLU(inplace=True) would)
        block.mlp.act = torch.nn.ReLU(inplace=True)
    with torch.no_grad():
        with hookkit.capture(model, ["blocks.*.mlp.hook_pre", "blocks.*.mlp.hook_post"]) as cap:
            model(IDS)
        _, cache = hookkit.run_with_cache(model, IDS)
    for i in range(2):  # hook_pre kept again by the copying forward (before the ReLU), hook_post with it
        assert (cache[f"blocks.{i}.mlp.hook_pre"] < 0).any()
        assert torch.equal(cache[f"blocks.{i}.mlp.hook_post"], cache[f"blocks.{i}.mlp.hook_pre"].clamp(min=0))
        assert torch.equal(cache[f"blocks.{i}.mlp.hook_post"], cap[f"blocks.{i}.mlp.hook_post"])


def test_names_at_one_module_boundary_share_one_native_hook():
    model = gpt2()
    attn = model.transformer.h[0].attn
    seen = []
    handle = attn.register_forward_pre_hook(lambda m, a: seen.append(len(attn.c_attn._forward_hooks)))
    try:
        with torch.no_grad():
            _, cache = hookkit.run_with_cache(model, IDS, names_filter="blocks.0.attn.hook_[qkv]")
    finally:
        handle.remove()
    assert list(cache) == ["blocks.0.attn.hook_q", "blocks.0.attn.hook_k", "blocks.0.attn.hook_v"]
    assert seen == [1]  # one hook on c_attn for the three names
    assert not attn.c_attn._forward_hooks
    with torch.no_grad():
        x = model.transformer.wte(IDS) + model.transformer.wpe(torch.arange(5))
        want = attn.c_attn(model.transformer.h[0].ln_1(x)).split(32, -1)
    for name, w in zip(cache, want):
        np.testing.assert_allclose(cache[name].numpy(), w.reshape(2, 5, 4, 8).numpy(), atol=ATOL, rtol=0)
