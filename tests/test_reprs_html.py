"""What users print shows as a table in Jupyter (``_repr_html_``), with escaped names and counts in
the right number ("1 layer", "2 layers")."""

from __future__ import annotations

import copy

import numpy as np

import hookkit
from hookkit.core.registry import backend_for


def test_capture_repr_counts_and_table(fw):
    model = fw.mlp()
    with hookkit.capture(model, "0") as cap:
        model(fw.randn(4, 5))
    assert repr(cap) == "<hookkit.capture 1 layer, 1 record, removed>"
    page = cap._repr_html_()
    assert "<table" in page and "1 layer, 1 record" in page and "[4, 10] float32" in page
    with hookkit.capture(model, ["0", "2"]) as cap2:
        pass
    assert repr(cap2) == "<hookkit.capture 2 layers, 0 records, removed>"
    assert "never ran" in cap2._repr_html_()


def test_selection_table_escapes_names(fw):
    model = fw.mlp()
    sel = hookkit.select(model, "0")
    page = sel._repr_html_()
    assert "Selection: 1 layer" in page and ">0</td>" in page and "Linear" in page
    assert "Selection: 3 layers" in hookkit.select(model, hookkit.LEAVES)._repr_html_()


def test_statistics_repr_plural(fw):
    model = fw.mlp()
    with hookkit.ActivationStats(model, "0") as stats:
        model(fw.randn(2, 5))
    assert "1 layer," in repr(stats)


def test_features_table(fw, tmp_path):
    model = fw.mlp()
    feats = hookkit.extract(model, [fw.randn(1, 5)], "0", tmp_path / "f")
    assert "1 sample " in repr(feats)
    page = feats._repr_html_()
    assert "<table" in page and "1 sample, 1 array" in page and "[1, 10]" in page


def test_diff_table_marks_rows(fw):
    model = fw.mlp()
    other = copy.deepcopy(model)
    d = hookkit.diff(model, other, fw.randn(3, 5))
    page = d._repr_html_()
    assert page.count("<tr") == 1 + len(d.rows) and "diff: a (" in page


def test_lens_result_table(torch_fw):
    import torch

    from hookkit.analyses.transformer.lens import LensResult

    logits = torch.zeros(2, 1, 3, 7)
    logits[0, 0, :, 4] = 10.0  # point 0: token 4 everywhere, nearly sure
    res = LensResult(["embeddings", "h.0"], [0, 1, 2], logits, backend_for(logits))
    assert repr(res) == "<LensResult 2 points x 3 positions>"
    page = res._repr_html_()
    assert "2 points x 3 positions" in page and "4 (1.00)" in page
    ids, probs = res.top(1)
    assert np.isclose(probs[1, 0, 0, 0], 1 / 7, rtol=1e-6)  # point 1: uniform
