"""What people look at in a notebook: HTML and text reprs that render, a select() that shows names."""

from __future__ import annotations

import warnings
from html.parser import HTMLParser

import numpy as np
import pytest

import hookkit
from hookkit.core.deprecation import HookkitDeprecationWarning


class Cells(HTMLParser):
    """Rows of a rendered table (cell texts), its caption, and whether tags balance."""

    def __init__(self, markup: str):
        super().__init__()
        self.rows: list[list[str]] = []
        self.caption, self.svgs, self.depth, self._in, self._cap = "", 0, 0, False, False
        self.feed(markup)

    def handle_starttag(self, tag, attrs):
        if tag == "br":  # a void element: no end tag
            return
        self.depth += 1
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self.rows[-1].append("")
            self._in = True
        elif tag == "caption":
            self._cap = True
        elif tag == "svg":
            self.svgs += 1

    def handle_endtag(self, tag):
        self.depth -= 1
        self._in = self._in and tag not in ("td", "th")
        self._cap = self._cap and tag != "caption"

    def handle_data(self, data):
        if self._in:
            self.rows[-1][-1] += data
        if self._cap:
            self.caption += data


def trained(fw):
    model = fw.mlp((5, 8, 3))
    acts, grads = hookkit.ActivationStats(model), hookkit.GradientStats(model)
    for _ in range(4):
        model(fw.randn(6, 5)).sum().backward()
    return model, acts, grads


def test_stats_text_and_html_reprs(fw):
    model, acts, grads = trained(fw)
    text = repr(acts)
    assert text.splitlines()[0] == "<hookkit.ActivationStats: 2 layers, 4 steps (0-3), active>"
    assert text.splitlines()[1].split() == ["layer", "mean", "std", "near_zero"]
    latest = acts.layer_stats("0")
    assert float(text.splitlines()[2].split()[1]) == pytest.approx(float(latest["mean"][-1]), rel=1e-3)
    table = Cells(acts._repr_html_())
    assert table.depth == 0 and table.caption.startswith("ActivationStats: 2 layers, 4 steps")
    assert [r[0] for r in table.rows[1:]] == ["0", "2"] and table.svgs == 2 * 3  # one sparkline per layer and statistic
    assert Cells(grads._repr_html_()).rows[0][:3] == ["layer", "records", "norm"]
    acts.remove(), grads.remove()
    assert repr(acts).splitlines()[0].endswith("removed>")


def test_loaded_stats_show_the_same(fw, tmp_path):
    model, acts, _ = trained(fw)
    acts.save(tmp_path / "run")
    loaded = hookkit.load_stats(tmp_path / "run")["activation_stats"]
    assert repr(loaded).splitlines()[1:] == repr(acts).splitlines()[1:]
    acts.remove()


def test_summary_html_has_one_row_per_call_and_no_wrapping(fw):
    model = fw.sequential(fw.sequential(fw.linear(5, 8), fw.relu()), fw.linear(8, 3))
    s = hookkit.summary(model, (2, 5))
    table = Cells(s._repr_html_())
    assert table.depth == 0
    assert len(table.rows) == 1 + len(s.rows)
    assert table.rows[0][0] == "Layer (type)" and table.rows[2][0].startswith("\u2003")  # depth shown as indentation
    assert "white-space:nowrap" in s._repr_html_()


def test_select_shows_names_and_globs_leave_out_the_root(fw, monkeypatch):
    monkeypatch.setattr("hookkit.core.deprecation._warned", set())  # warned once per process: see it here
    model = fw.sequential(fw.linear(5, 8), fw.relu(), fw.linear(8, 3))
    sel = hookkit.select(model, "[02]")
    assert repr(sel) == "Selection(['0', '2'])" and sel.names == ["0", "2"] and sel.layers[0] is model[0]
    assert [n for n, _ in sel] == ["0", "2"]  # still (name, layer) pairs
    with pytest.warns(
        HookkitDeprecationWarning, match=r"select\('\*'\) matching the model itself \(it now selects only the layers below"
    ) as seen:
        stars = hookkit.select(model, "*")
    assert seen[0].filename == __file__  # the user's line, not hookkit's
    assert stars.names == ["0", "1", "2"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert hookkit.select(model, hookkit.ALL).names == ["", "0", "1", "2"]
        assert repr(hookkit.select(model, "")) == "Selection(['(root)'])"


def test_figures_show_once(fw):
    import matplotlib.pyplot as plt

    model, acts, grads = trained(fw)
    plt.close("all")
    figs = [hookkit.viz.plot_layer_stats(acts, 0), hookkit.viz.gradient_flow(grads)]
    assert plt.get_fignums() == [] and all(f.canvas.manager is None for f in figs)
    acts.remove(), grads.remove()
    assert np.isfinite(acts.layer_stats("0")["mean"]).all()
