"""hookkit.attribute_generation's result in the report and in a notebook (the token heat map: target
tokens x the tokens before them, token texts as labels, escaped), and the embedding layer found without
``layer=`` on both frameworks (a twin causal LM written here: Paddle equal to torch)."""

from __future__ import annotations

import html as html_lib
import re

import numpy as np
import pytest

import hookkit
from hookkit.core.errors import HookkitError
from models import hooks_left
from tolerance import assert_close


def twin_lm(fw, vocab=20, positions=9):
    """A causal LM: token and position embeddings, a running mean, a head; no get_input_embeddings()."""
    fw.seed(0)

    class LM(fw.Layer):
        def __init__(self):
            super().__init__()
            self.emb = fw.nn.Embedding(vocab, 6)
            self.pos = fw.nn.Embedding(positions, 6)
            self.head = fw.linear(6, vocab)

        def forward(self, ids):
            n = ids.shape[1]
            e = self.emb(ids) + self.pos(fw.tensor(np.arange(n)[None], dtype="int64"))
            steps = fw.tensor(np.arange(1, n + 1, dtype=np.float32).reshape(1, -1, 1))
            return self.head(fw.lib.tanh(fw.lib.cumsum(e, 1) / steps))

    return LM()


def _copy(torch_fw, tm, pm):
    pm.emb.weight.set_value(torch_fw.numpy(tm.emb.weight))
    pm.pos.weight.set_value(torch_fw.numpy(tm.pos.weight))
    pm.head.weight.set_value(torch_fw.numpy(tm.head.weight).T)
    pm.head.bias.set_value(torch_fw.numpy(tm.head.bias))


def test_paddle_finds_the_embedding_layer_and_equals_torch(torch_fw, paddle_fw):
    tm, pm = twin_lm(torch_fw), twin_lm(paddle_fw)
    _copy(torch_fw, tm, pm)
    ids = np.array([[3, 9, 4, 1]])
    for method in ("integrated_gradients", "gradient_x_activation"):
        got = []
        for fw, m in ((torch_fw, tm), (paddle_fw, pm)):
            found = hookkit.attribute_generation(m, fw.tensor(ids, dtype="int64"), [5, 7], method, n_steps=8)
            named = hookkit.attribute_generation(m, fw.tensor(ids, dtype="int64"), [5, 7], method, n_steps=8, layer="emb")
            np.testing.assert_array_equal(found.token_attr, named.token_attr)  # the token table, not the positions'
            got.append(found.token_attr)
            assert hooks_left(m) == []
        np.testing.assert_allclose(got[1], got[0], rtol=1e-4, atol=1e-5, err_msg=method)
    # the attributions are those of the token embedding: by hand for gradient x input at the last target
    import torch

    seq = torch.tensor([[3, 9, 4, 1, 5]])
    e = tm.emb(seq).detach().requires_grad_(True)
    h = e + tm.pos(torch.arange(5)[None])
    out = tm.head(torch.tanh(torch.cumsum(h, 1) / torch.arange(1, 6).reshape(1, -1, 1)))
    torch.log_softmax(out[0, -1], -1)[7].backward()
    # the same forward and backward ops (log_softmax over 20, the head, tanh, the running mean); the sum
    # over the 6 dims is float64 there, float32 here, of terms of size |grad * e|
    gxe = (e.grad * e).detach()
    assert_close(got[0][1], gxe.sum(-1)[0].double(), dtype="float32", n_ops=16, scale=float(gxe.abs().sum(-1).max()))


def test_without_one_embedding_of_the_vocabulary_size_layer_is_asked_for(fw):
    model = twin_lm(fw, vocab=20, positions=20)  # two tables of 20 rows: which one is the tokens'?
    with pytest.raises(
        HookkitError, match=r"attribute_generation\(\): layer.*no get_input_embeddings\(\).*'emb' \(20 rows\), 'pos' \(20 rows\)"
    ):
        hookkit.attribute_generation(model, fw.tensor([[1, 2, 3]], dtype="int64"), [4], "integrated_gradients", n_steps=4)
    assert hooks_left(model) == []
    res = hookkit.attribute_generation(model, fw.tensor([[1, 2, 3]], dtype="int64"), [4], n_steps=4, layer="emb")
    assert res.token_attr.shape == (1, 3)


def _result(fw):
    model = twin_lm(fw)
    res = hookkit.attribute_generation(model, fw.tensor([[3, 9, 4]], dtype="int64"), [5, 7], "feature_ablation")
    res.tokens = ["<b>", "caf\u00e9", "x & y", "'q'", '"z"']  # texts that must be escaped
    return res


def _cells(html):
    return re.findall(r"<td[^>]*>([^<]*)</td>", html)


def test_the_heat_map_shows_every_attribution_with_escaped_labels(fw):
    res = _result(fw)
    page = res._repr_html_()
    assert page == res.html()
    for label in res.tokens:
        assert html_lib.escape(label) in page
    assert "<b>" not in page and "&lt;b&gt;" in page and "x &amp; y" in page and "caf\u00e9" in page
    cells = _cells(page)
    assert len(cells) == res.token_attr.size  # one cell per (target, token), blank where nothing is before it
    for cell, value in zip(cells, res.token_attr.reshape(-1)):
        assert cell == ("" if np.isnan(value) else f"{value:.2g}")
    titles = re.findall(r'<td title="[^"]*: ([-0-9.e+]+)"', page)
    finite = res.token_attr[np.isfinite(res.token_attr)]
    np.testing.assert_allclose([float(t) for t in titles], finite, rtol=1e-5)  # the exact values in the tooltips
    # the strongest cell is the most opaque, in its sign's colour
    alphas = [float(a) for a in re.findall(r"rgba\(\d+,\d+,\d+,([0-9.]+)\)", page)]
    assert max(alphas) == 1.0 and alphas[int(np.argmax(np.abs(finite)))] == 1.0
    with pytest.raises(HookkitError, match=r"tokens.*one text per token of ids \(5\).*2 texts"):
        res.html(tokens=["a", "b"])


def test_the_report_shows_the_heat_map_as_a_section(fw, tmp_path):
    res = _result(fw)
    path = hookkit.report([], tmp_path / "r.html", attributions=res)
    page = path.read_text(encoding="utf-8")
    assert re.findall(r'<section id="([a-z-]+)">', page) == ["generation-attribution"]
    section = page[page.index('<section id="generation-attribution">') :]
    assert res.html() in section and "2 target tokens after 3 input tokens, feature_ablation" in section
    assert "&lt;b&gt;" in section
    # given as a source beside other results, and two of them: one heat map each
    page = hookkit.report([res, res], tmp_path / "two.html").read_text(encoding="utf-8")
    assert page.count('class="hookkit-token-heatmap"') == 2
    with pytest.raises(HookkitError, match=r"report\(\): attributions.*attribute_generation"):
        hookkit.report([], tmp_path / "bad.html", attributions="not a result")


@pytest.mark.slow
def test_the_report_with_a_heat_map_opens_in_a_browser(torch_fw, tmp_path):
    from test_report import CHROMIUM, browser_check

    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium; .ci/run installs it)")
    path = hookkit.report([], tmp_path / "r.html", attributions=_result(torch_fw))
    result = browser_check(path)
    assert result["bad"] == 0 and result["console_errors"] == []
