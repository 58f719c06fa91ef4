"""hookkit.feature_views: top-activating contexts, histograms and decoder top tokens of SAE features."""

from __future__ import annotations

import numpy as np

import hookkit
from hookkit.sae import SAE
from sae_helpers import random_weights

D, DS, V = 8, 24, 30


def _model(fw):
    fw.seed(0)
    return fw.sequential(fw.nn.Embedding(V, D), fw.linear(D, D), fw.linear(D, V))


def test_views_match_a_pass_over_all_the_data(fw, rng, tmp_path):
    model = _model(fw)
    w = random_weights("standard", D, DS, rng)
    w["b_enc"] = np.abs(w["b_enc"]) + 0.2  # most features fire on some tokens, none on all
    sae = SAE.from_arrays(**w, framework=fw.name)
    batches = [fw.tensor(rng.integers(0, V, size=(3, 7)), dtype="int64") for _ in range(4)]
    feats = [0, 5, 11]
    with hookkit.splice(model, "1", sae) as sp:
        views = hookkit.feature_views(model, sp, batches, feats, top=4, window=2, unembed="2", top_tokens=3)
        with hookkit.capture(model, sp.features) as cap:
            for b in batches:
                model(b)
    acts = np.concatenate([fw.numpy(r.output) for r in cap.records()])  # [12, 7, DS]
    ids = np.concatenate([fw.numpy(b) for b in batches])
    for f in feats:
        v = views[f]
        a = acts[..., f]
        want = np.sort(a[a > 0])[::-1][:4]
        np.testing.assert_allclose([c.activation for c in v.contexts], want, rtol=1e-6)
        for c in v.contexts:
            assert a[c.sample, c.position] == np.float32(c.activation)
            assert c.tokens[c.center] == ids[c.sample, c.position]
            assert c.tokens == list(ids[c.sample, max(0, c.position - 2) : c.position + 3])
        assert 0 < v.fired == int((a > 0).sum()) <= a.size == v.seen and v.counts.sum() == v.fired
        logits = fw.numpy(sae.W_dec)[f] @ fw.numpy(model[2].weight if fw.name == "paddle" else model[2].weight.T) + fw.numpy(model[2].bias)
        assert [t for t, _ in v.top_tokens] == list(np.argsort(-logits)[:3])
    page = views.save(tmp_path / "f.html", tokens=[f"<t{i}>" for i in range(V)])
    text = open(page).read()
    assert "feature 11" in text and "&lt;t" in text and "<t" + "1>" not in text  # token text is escaped
    assert views._repr_html_().startswith('<div class="hookkit-features"')


def test_views_are_a_section_of_the_report_written_to_disk(fw, rng, tmp_path):
    import html

    import pytest

    from hookkit.core.errors import ArgumentTypeError
    from test_report import assert_self_contained, section_ids

    model = _model(fw)
    w = random_weights("standard", D, DS, rng)
    w["b_enc"] = np.abs(w["b_enc"]) + 0.2
    sae = SAE.from_arrays(**w, framework=fw.name)
    batches = [fw.tensor(rng.integers(0, V, size=(2, 6)), dtype="int64") for _ in range(2)]
    tokens = ["<script>alert(1)</script>", *(f"<t{i}>&" for i in range(1, V))]  # token texts are data
    with hookkit.splice(model, "1", sae, name="<b>feats</b>") as sp:
        views = hookkit.feature_views(model, sp, batches, [3, 7], top=3, window=1, unembed="2", top_tokens=2, tokens=tokens)
    stats = hookkit.ActivationStats(model, "1")
    model(batches[0])
    stats.remove()
    path = hookkit.report(stats, tmp_path / "r.html", features=views)
    page = path.read_text(encoding="utf-8")  # the file as written
    assert section_ids(page)[-1] == "sae-features" and section_ids(page)[0] == "activations"
    assert_self_contained(page)
    body = page.split('<section id="sae-features">', 1)[1]
    for f in (3, 7):
        v = views[f]
        assert f"<h3>feature {f}</h3>" in body and f"fired on {v.fired} of {v.seen} tokens" in body
        for c in v.contexts:
            assert f"<td>{c.activation:.3f}</td><td>{c.sample}:{c.position}</td>" in body
            assert f">{html.escape(tokens[c.tokens[c.center]])}</b>" in body  # the token it fired on, highlighted, escaped
        assert all(f"<code>{html.escape(tokens[t])}</code>" in body for t, _ in v.top_tokens)
    assert "<script>" not in page and "<t1>" not in page and "<b>feats</b>" not in page
    assert "<code>&lt;b&gt;feats&lt;/b&gt;</code>" in body

    alone = hookkit.report([], tmp_path / "alone.html", features=[views, views]).read_text(encoding="utf-8")
    assert section_ids(alone) == ["sae-features"] and alone.count("<h3>feature 3</h3>") == 2
    for bad in ("views", {3: views[3]}, [views, None]):
        with pytest.raises(ArgumentTypeError, match=r"report\(\).*features.*feature_views"):
            hookkit.report([], tmp_path / "bad.html", features=bad)
    assert not (tmp_path / "bad.html").exists()
