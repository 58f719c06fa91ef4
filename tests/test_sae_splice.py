"""hookkit.splice: an SAE in a model's call path, its features a site every verb takes."""

from __future__ import annotations

import numpy as np
import pytest

import hookkit
from hookkit.core.errors import LayerNotFound
from hookkit.core.validate import InvalidArgument
from hookkit.sae import SAE
from sae_helpers import random_weights

D, DS = 10, 24
# float32: one SAE decode difference (sums of DS products of O(1) values) added to O(1) activations
TOL = dict(rtol=1e-5, atol=1e-5)


def _mlp(fw):
    return fw.sequential(fw.linear(5, D), fw.relu(), fw.linear(D, 3))


def _sae(fw, rng, arch="standard", **kw):
    w = random_weights(arch, D, DS, rng, d_out=kw.pop("d_out", None))
    return SAE.from_arrays(**w, architecture=arch, framework=fw.name, **kw), w


def test_error_term_keeps_the_output_and_exposes_the_features(fw, rng):
    model = _mlp(fw)
    sae, _ = _sae(fw, rng)
    x = fw.randn(4, 5)
    plain = fw.numpy(model(x))
    keys = set(model.state_dict())
    with hookkit.splice(model, "1", sae) as sp, hookkit.capture(model, [sp.features, "1"]) as cap:
        out = model(x)
        assert set(model.state_dict()) == keys and "1.sae" not in dict(
            model.named_sublayers() if fw.name == "paddle" else model.named_modules()
        )
    np.testing.assert_array_equal(fw.numpy(out), plain)  # nothing edited the features: x itself
    assert sp.features == "1.sae"
    feats = fw.numpy(cap[sp.features])
    assert feats.shape == (4, DS) and (feats > 0).any()
    np.testing.assert_array_equal(feats, fw.numpy(sae.encode(cap["1"])))
    with hookkit.splice(model, "1", sae) as sp:
        assert hookkit.select(model, "1.sae").layers == [sp.layer]  # the name typed as a plain string
        assert hookkit.select(model, [sp.layer, "0"]).names == ["0", "1.sae"]  # the object, beside layers
        other = _mlp(fw)
        with pytest.raises(LayerNotFound, match="not open on this model"):
            hookkit.select(other, sp.features)
        assert "1.sae" not in hookkit.select(model, hookkit.ALL).names  # never by a glob or preset
    with pytest.raises(LayerNotFound):
        hookkit.select(model, "1.sae")  # gone with the splice
    assert hookkit.remove_all(model) == 0


def test_steering_a_feature_adds_its_decoder_row(fw, rng):
    model = _mlp(fw)
    sae, w = _sae(fw, rng)
    x = fw.randn(4, 5)
    with hookkit.splice(model, "1", sae) as sp, sp.steer_features(7, by=3.0):
        out = fw.numpy(model(x))
    with hookkit.steer(model, "1", fw.tensor(3.0 * w["W_dec"][7])):
        by_hand = fw.numpy(model(x))
    np.testing.assert_allclose(out, by_hand, **TOL)
    assert np.abs(out - fw.numpy(model(x))).max() > 1e-3  # the steer changed something
    with hookkit.splice(model, "1", sae) as sp, hookkit.steer(model, sp.features, fw.tensor(np.eye(DS, dtype=np.float32)[7] * 3.0)):
        np.testing.assert_allclose(fw.numpy(model(x)), by_hand, **TOL)  # the plain verb on the features' site


def test_ablating_a_feature_removes_its_contribution(fw, rng):
    model = _mlp(fw)
    sae, w = _sae(fw, rng)
    x = fw.randn(6, 5)
    with hookkit.capture(model, "1") as cap:
        model(x)
    f = fw.numpy(sae.encode(cap["1"]))
    on = int(np.argmax((f > 0).sum(0)))
    with hookkit.splice(model, "1", sae) as sp, sp.ablate_features(on):
        out = fw.numpy(model(x))
    delta = -f[:, on : on + 1] * w["W_dec"][on]
    with hookkit.edit(model, "1", lambda o, ev: o + fw.tensor(delta.astype(np.float32))):
        np.testing.assert_allclose(out, fw.numpy(model(x)), **TOL)


def test_without_error_term_the_reconstruction_replaces_the_activation(fw, rng):
    model = _mlp(fw)
    sae, _ = _sae(fw, rng, "topk", k=4)
    x = fw.randn(4, 5)
    with hookkit.splice(model, "1", sae, error_term=False):
        out = fw.numpy(model(x))
    with hookkit.edit(model, "1", lambda o, ev: sae(o)):
        np.testing.assert_allclose(out, fw.numpy(model(x)), **TOL)


def test_transcoder_reads_one_site_and_writes_another(fw, rng):
    model = _mlp(fw)
    w = random_weights("skip_transcoder", D, DS, rng, d_out=D)
    tc = SAE.from_arrays(**w, architecture="skip_transcoder", framework=fw.name)
    x = fw.randn(4, 5)
    with hookkit.capture(model, "0") as cap:
        plain = fw.numpy(model(x))
    with hookkit.splice(model, "0", tc, output_site="1") as sp, hookkit.capture(model, sp.features) as fc:
        np.testing.assert_allclose(fw.numpy(model(x)), plain, **TOL)
    np.testing.assert_array_equal(fw.numpy(fc[sp.features]), fw.numpy(tc.encode(cap["0"])))
    with hookkit.splice(model, "0", tc, output_site="1", error_term=False):
        out = fw.numpy(model(x))
    with hookkit.edit(model, "1", lambda o, ev: tc(cap["0"])):
        np.testing.assert_allclose(out, fw.numpy(model(x)), **TOL)
    with pytest.raises(InvalidArgument, match="output_site"):
        hookkit.splice(model, "0", tc)


def test_several_saes_top_k_and_firing_frequency(fw, rng):
    model = _mlp(fw)
    a, _ = _sae(fw, rng)
    b, _ = _sae(fw, rng, "topk", k=3)
    x = fw.randn(8, 5)
    with hookkit.splice(model, "0", a) as s0, hookkit.splice(model, "1", b) as s1:
        with hookkit.capture(model, [s0.features, s1.features]) as cap, s1.capture_top(3) as top, s1.feature_stats() as fs:
            with hookkit.capture(model, s1.features, top_k=3) as ctop:
                model(x)
                model(x)
    dense = fw.numpy(cap[s1.features])
    values, indices = (fw.numpy(t) for t in top.records[-1])
    assert len(top.records) == 2 and top.records[-1]._fields == ("values", "indices")
    by_hand = -np.sort(-dense, -1)[:, :3]  # capture(top_k=) == sp.capture_top == a top-k by hand
    for got_v, got_i in (ctop[s1.features], top.records[-1]):
        np.testing.assert_array_equal(fw.numpy(got_v), by_hand)
        np.testing.assert_array_equal(np.take_along_axis(dense, fw.numpy(got_i), -1), by_hand)  # ties (zeros): any index
    np.testing.assert_array_equal(np.sort(values, -1), np.sort(np.sort(dense, -1)[:, -3:], -1))
    np.testing.assert_array_equal(np.take_along_axis(dense, indices, -1), values)
    freq = fs.frequency()
    np.testing.assert_allclose(freq, (dense > 0).mean(0))
    np.testing.assert_array_equal(fs.dead(), np.flatnonzero((dense > 0).sum(0) == 0))
    assert fs.tokens == 16 and len(fs.dead()) > 0  # k=3 of 24 over 8 rows: some never fire
    with hookkit.splice(model, "1", b), pytest.raises(InvalidArgument, match="taken"):
        hookkit.splice(model, "1", a)


def test_activation_stats_take_the_features_site(fw, rng):
    model = _mlp(fw)
    sae, _ = _sae(fw, rng)
    x = fw.randn(8, 5)
    with hookkit.splice(model, "1", sae) as sp, hookkit.capture(model, sp.features) as cap:
        with hookkit.ActivationStats(model, sp.features, near_zero=0.0) as stats:
            model(x)
    assert stats.layer_stats(sp.features)["near_zero"][0] == pytest.approx((fw.numpy(cap[sp.features]) <= 0).mean())


def test_width_mismatch_names_the_site_and_d_in(fw, rng):
    model = _mlp(fw)
    w = random_weights("standard", 7, DS, rng)
    sae = SAE.from_arrays(**w, framework=fw.name)
    with hookkit.splice(model, "1", sae), pytest.raises(InvalidArgument, match=r"d_in=7 does not match '1'.*width 10"):
        model(fw.randn(2, 5))
    assert hookkit.remove_all(model) == 0


def test_other_framework_sae_is_refused(torch_fw, rng):
    pytest.importorskip("paddle")
    sae, _ = _sae(type("P", (), {"name": "paddle"})(), rng)
    with pytest.raises(InvalidArgument, match="sae.to"):
        hookkit.splice(_mlp(torch_fw), "1", sae)


def test_features_during_generate(rng):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_embd=D, n_head=2, vocab_size=50, n_positions=32)).eval()
    sae, w = _sae(type("T", (), {"name": "torch"})(), rng)
    ids = torch.randint(0, 50, (1, 5))
    plain = model.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=0)
    with hookkit.splice(model, "transformer.h.0.mlp", sae) as sp, hookkit.capture(model, sp.features) as cap:
        out = model.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert torch.equal(out, plain)
    assert cap.sequence(sp.features).shape == (1, 7, DS)
    with hookkit.splice(model, "transformer.h.0.mlp", sae) as sp, hookkit.capture(model, "transformer.h.0.mlp") as site:
        with sp.steer_features(2, by=5.0, positions="generated") as st:
            model.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=0)
    with hookkit.capture(model, "transformer.h.0.mlp") as clean:
        model.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert not st.missing()
    prompt_part = site.sequence("transformer.h.0.mlp")[:, :5]
    torch.testing.assert_close(prompt_part, clean.sequence("transformer.h.0.mlp")[:, :5])  # the prompt is untouched


def test_site_defaults_to_the_saes_hook_name(fw, rng):
    model = _mlp(fw)
    w = random_weights("standard", D, DS, rng)
    sae = SAE.from_arrays(**w, hook_name="1", framework=fw.name)
    with hookkit.splice(model, None, sae) as sp:
        assert sp.site == "1" and sp.features == "1.sae"
    with pytest.raises(InvalidArgument, match="hook_name"):
        hookkit.splice(model, None, SAE.from_arrays(**w, framework=fw.name))


def test_patching_features_flows_through_the_decoder(fw, rng):
    model = _mlp(fw)
    sae, w = _sae(fw, rng)
    clean, corrupt = fw.randn(4, 5), fw.randn(4, 5)
    with hookkit.splice(model, "1", sae) as sp:
        with hookkit.capture(model, [sp.features, "1"]) as cap:
            model(clean)
        with hookkit.capture(model, [sp.features, "1"]) as cc:
            model(corrupt)
        with hookkit.patch(model, sp.features, cap):
            out = fw.numpy(model(corrupt))
    delta = (fw.numpy(cap[sp.features]) - fw.numpy(cc[sp.features])) @ w["W_dec"]
    with hookkit.edit(model, "1", lambda o, ev: o + fw.tensor(delta.astype(np.float32))):
        np.testing.assert_allclose(out, fw.numpy(model(corrupt)), **TOL)


def test_features_equal_sae_lens_encode_of_the_site(torch_fw, tmp_path):
    sae_lens = pytest.importorskip("sae_lens")
    import torch

    torch.manual_seed(0)
    theirs = sae_lens.TopKSAE(sae_lens.TopKSAEConfig(d_in=D, d_sae=DS, k=4))
    with torch.no_grad():
        for p in theirs.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    theirs.save_model(str(tmp_path))
    model = _mlp(torch_fw)
    x = torch.randn(6, 5)
    with hookkit.splice(model, "1", SAE.load(tmp_path, like=model)) as sp, hookkit.capture(model, [sp.features, "1"]) as cap:
        model(x)
    with torch.no_grad():
        torch.testing.assert_close(cap[sp.features], theirs.encode(cap["1"]), rtol=0, atol=1e-6)


def test_splice_at_an_operation_site(fw, rng):
    class Residual(fw.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.lin = fw.linear(D, D)

        def forward(self, x):
            return x + self.lin(x)

    model = fw.sequential(fw.linear(5, D), Residual(), fw.linear(D, 3))
    sae, w = _sae(fw, rng)
    x = fw.randn(4, 5)
    with hookkit.capture(model, "1::add_0") as site:
        plain = fw.numpy(model(x))
    with hookkit.splice(model, "1::add_0", sae) as sp:
        with hookkit.capture(model, sp.features) as cap:
            np.testing.assert_array_equal(fw.numpy(model(x)), plain)
        with sp.steer_features(4, by=2.0):
            steered = fw.numpy(model(x))
    assert sp.features == "1::add_0.sae"
    np.testing.assert_array_equal(fw.numpy(cap[sp.features]), fw.numpy(sae.encode(site["1::add_0"])))
    with hookkit.edit(model, "1::add_0", lambda o, ev: o + fw.tensor(2.0 * w["W_dec"][4])):
        np.testing.assert_allclose(steered, fw.numpy(model(x)), **TOL)
