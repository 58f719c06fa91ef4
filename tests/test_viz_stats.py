"""Statistics plots: the plotted data are the recorded arrays, ``ax=`` is honoured, errors are clear."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import hookkit  # noqa: E402
from hookkit.core.errors import HookkitError, LayerNotFound  # noqa: E402
from hookkit.viz import color_dim, gradient_flow, hist, plot_layer_stats  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _train(fw, model, steps: int = 5, batch: int = 16) -> None:
    """A few real optimizer steps of ``model`` (5 -> 3 classes) on random data."""
    opt = fw.adam(model, lr=1e-2)
    rng = np.random.default_rng(1)
    for _ in range(steps):
        x = fw.tensor(rng.normal(size=(batch, 5)))
        y = fw.labels(rng.integers(0, 3, size=batch))
        loss = fw.cross_entropy(model(x), y)
        loss.backward()
        fw.step(opt)


@pytest.fixture
def recorded(fw):
    """(activation stats with histograms, gradient stats) of a small MLP trained 5 steps."""
    model = fw.mlp((5, 16, 8, 3))
    model.train()
    with hookkit.ActivationStats(model, hist=True, bins=20, range=(0, 4)) as acts, hookkit.GradientStats(model) as grads:
        _train(fw, model)
    return acts, grads


# -- plot_layer_stats ---------------------------------------------------------------------------
def test_plot_layer_stats_plots_the_three_series(recorded):
    acts, _ = recorded
    name = acts.names[1]
    data = acts.layer_stats(name)
    assert len(data["mean"]) == 5
    fig = plot_layer_stats(acts, name)
    assert len(fig.axes) == 3
    for ax, key in zip(fig.axes, ("mean", "std", "near_zero")):
        (line,) = ax.get_lines()
        np.testing.assert_allclose(line.get_ydata(), data[key])
        np.testing.assert_array_equal(line.get_xdata(), data["step"])
    assert fig._suptitle.get_text() == name


def test_plot_layer_stats_by_index_and_into_given_axes(recorded):
    acts, _ = recorded
    fig, axes = plt.subplots(2, 3)
    out = plot_layer_stats(acts, -1, ax=axes[1])
    assert out is fig
    last = acts.layer_stats(acts.names[-1])
    np.testing.assert_allclose(axes[1][1].get_lines()[0].get_ydata(), last["std"])
    assert all(not ax.get_lines() for ax in axes[0])
    # one Axes: the three series as labelled lines on it
    fig2, ax = plt.subplots()
    assert plot_layer_stats(acts, 0, ax=ax) is fig2
    assert [line.get_label() for line in ax.get_lines()] == ["mean", "std", "near_zero"]
    np.testing.assert_allclose(ax.get_lines()[2].get_ydata(), acts.layer_stats(acts.names[0])["near_zero"])


# -- color_dim / hist ---------------------------------------------------------------------------
def test_color_dim_is_log1p_histograms_stacked_over_steps(recorded):
    acts, _ = recorded
    name = acts.names[0]
    h = np.asarray(acts.layer_stats(name)["hist"], dtype=np.float64)
    assert h.shape == (5, 20)
    fig = color_dim(acts, name)
    (im,) = fig.axes[0].get_images()
    image = np.asarray(im.get_array())
    assert image.shape == (20, 5)  # bins up, steps across (fastai's layout)
    np.testing.assert_allclose(image, np.log1p(h.T))
    assert im.origin == "lower"
    lo, hi = acts.hist_range
    assert im.get_extent()[2:] == [lo, hi]


def test_hist_latest_step_and_mean(recorded):
    acts, _ = recorded
    name = acts.names[1]
    h = np.asarray(acts.layer_stats(name)["hist"], dtype=np.float64)
    fig = hist(acts, name)
    heights = [p.get_height() for p in fig.axes[0].patches]
    np.testing.assert_allclose(heights, h[-1])
    edges = np.linspace(*acts.hist_range, acts.bins + 1)
    np.testing.assert_allclose([p.get_x() for p in fig.axes[0].patches], edges[:-1], atol=1e-6)
    fig, ax = plt.subplots()
    assert hist(acts, name, at="mean", ax=ax) is fig
    np.testing.assert_allclose([p.get_height() for p in ax.patches], h.mean(axis=0))
    np.testing.assert_allclose([p.get_height() for p in hist(acts, name, at=0).axes[0].patches], h[0])


def test_color_dim_into_given_axes(recorded):
    acts, _ = recorded
    fig, (a, b) = plt.subplots(1, 2)
    assert color_dim(acts, 1, ax=b) is fig
    assert not a.get_images() and len(b.get_images()) == 1


# -- gradient_flow ------------------------------------------------------------------------------
def test_gradient_flow_lines_one_per_layer_log_scale(recorded):
    _, grads = recorded
    fig = gradient_flow(grads)
    ax = fig.axes[0]
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == list(grads.names)
    for line, name in zip(lines, grads.names):
        data = grads.layer_stats(name)
        assert len(data["norm"]) == 5
        np.testing.assert_allclose(line.get_ydata(), data["norm"])
    assert ax.get_yscale() == "log"
    # mean can be negative: linear scale by default
    assert gradient_flow(grads, "mean").axes[0].get_yscale() == "linear"


def test_gradient_flow_heatmap_and_param_source(recorded):
    _, grads = recorded
    fig, ax = plt.subplots()
    assert gradient_flow(grads, "max_abs", source="params", style="heatmap", ax=ax) is fig
    (im,) = ax.get_images()
    expected = np.stack([grads.param_stats(n)["max_abs"] for n in grads.names])
    np.testing.assert_allclose(np.asarray(im.get_array()), np.log10(expected), rtol=1e-6)
    assert [t.get_text() for t in ax.get_yticklabels()] == list(grads.names)
    assert len(fig.axes) == 2  # the Axes and its colorbar


def test_gradient_flow_values_match_an_independent_computation(torch_fw):
    """Output-gradient norms plotted equal the chain rule written out: loss = sum(z**2) of Linear-ReLU-Linear."""
    import torch

    model = torch_fw.mlp((5, 7, 3))
    x = torch.randn(4, 5)
    with hookkit.GradientStats(model) as grads:
        (model(x) ** 2).sum().backward()
    with torch.no_grad():
        y = model[0](x)
        z = model[2](model[1](y))
        dz = 2 * z
        dy = (dz @ model[2].weight) * (y > 0)
    lines = gradient_flow(grads, layers=["0", "2"]).axes[0].get_lines()
    np.testing.assert_allclose(lines[0].get_ydata(), [dy.norm().item()], rtol=1e-5)
    np.testing.assert_allclose(lines[1].get_ydata(), [dz.norm().item()], rtol=1e-5)
    np.testing.assert_allclose(
        grads.param_stats("2")["norm"], [torch.cat([model[2].weight.grad.ravel(), model[2].bias.grad]).norm().item()], rtol=1e-5
    )


def test_gradient_flow_combines_repeated_calls_per_step(fw):
    """A layer called 3 times per forward: one column per step, norms combined as sqrt(sum of squares)."""
    model = fw.shared_block_model()
    with hookkit.GradientStats(model) as grads:
        for _ in range(2):
            (model(fw.randn(4, 4)) ** 2).sum().backward()
    block = grads.layer_stats("block")
    assert len(block["norm"]) == 6  # 3 calls x 2 steps
    expected = np.sqrt((np.asarray(block["norm"], dtype=np.float64).reshape(2, 3) ** 2).sum(axis=1))
    fig = gradient_flow(grads, style="heatmap", log=False)
    grid = np.asarray(fig.axes[0].get_images()[0].get_array())
    assert grid.shape == (3, 2)
    np.testing.assert_allclose(grid[grads.names.index("block")], expected, rtol=1e-6)
    np.testing.assert_allclose(grid, grads.gradient_flow()[2], rtol=1e-6)
    (line,) = [ln for ln in gradient_flow(grads).axes[0].get_lines() if ln.get_label() == "block"]
    np.testing.assert_allclose(line.get_ydata(), expected, rtol=1e-6)


# -- errors -------------------------------------------------------------------------------------
def test_unknown_layer_lists_the_recorded_names(recorded):
    acts, grads = recorded
    with pytest.raises(LayerNotFound, match=r"closest: .*"):
        plot_layer_stats(acts, acts.names[0] + "x")
    with pytest.raises(IndexError, match="out of range"):
        color_dim(acts, 99)
    with pytest.raises(LayerNotFound):
        gradient_flow(grads, layers=["nope"])


def test_histogram_plots_need_hist_true(fw):
    model = fw.mlp()
    with hookkit.ActivationStats(model) as acts:
        model(fw.randn(2, 5))
    for plot in (color_dim, hist):
        with pytest.raises(HookkitError, match="hist=True"):
            plot(acts, 0)


def test_bad_arguments(recorded):
    acts, grads = recorded
    cases = [
        (
            lambda: gradient_flow(grads, "variance"),
            r"gradient_flow\(\): kind must be one of 'norm', 'mean', 'std', 'max_abs'; got 'variance'",
        ),
        (lambda: gradient_flow(grads, source="inputs"), r"gradient_flow\(\): source must be one of 'output', 'params'; got 'inputs'"),
        (lambda: gradient_flow(grads, style="bars"), r"gradient_flow\(\): style must be one of 'lines', 'heatmap'; got 'bars'"),
        (lambda: hist(acts, 0, at="last"), r"hist\(\): at must be a recorded-step index or 'mean'; got 'last'"),
        (
            lambda: plot_layer_stats(acts, 0, ax=plt.subplots(1, 2)[1]),
            r"plot_layer_stats\(\): ax must be one Axes or 3 \(mean, std, near zero\)",
        ),
        (lambda: color_dim(acts, 0, extent=("a", 1)), r"color_dim\(\): extent must be a \(low, high\) pair of finite numbers"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message) as err:
            call()
        assert isinstance(err.value, HookkitError)
    assert color_dim(acts, 0, extent=np.array([-1.0, 3.0])).axes[0].get_ylim() == (-1.0, 3.0)  # an array of two is a pair


def test_plots_read_statistics_loaded_from_disk(recorded, tmp_path):
    acts, grads = recorded
    acts.save(tmp_path)
    grads.save(tmp_path)
    loaded = hookkit.load_stats(tmp_path)
    name = acts.names[0]
    image = np.asarray(color_dim(loaded["activation_stats"], name).axes[0].get_images()[0].get_array())
    np.testing.assert_allclose(image, np.log1p(np.asarray(acts.layer_stats(name)["hist"], dtype=np.float64).T))
    lines = gradient_flow(loaded["gradient_stats"]).axes[0].get_lines()
    np.testing.assert_allclose(lines[-1].get_ydata(), grads.layer_stats(grads.names[-1])["norm"])


# -- the histogram range: chosen from the data, symmetric for pre-activations, honest about clipping ----
def _record_outputs(fw, hist_range, bins, steps=30):
    """ActivationStats of a Linear-ReLU-Linear trained ``steps`` steps, and every recorded output of the
    Linear layers and the ReLU, captured beside it (to know where the values really were)."""
    model = fw.mlp((5, 16, 3))
    model.train()
    with hookkit.ActivationStats(model, ["0", "1", "2"], hist=True, bins=bins, range=hist_range) as acts:
        with hookkit.capture(model, ["0", "1", "2"], keep="all") as cap:
            _train(fw, model, steps=steps)
    values = {n: np.concatenate([fw.numpy(r.output).ravel() for r in cap.calls(n)]) for n in ("0", "1", "2")}
    return acts, values


def _round_ticks(ax) -> bool:
    """The y ticks inside the limits are evenly spaced by 1, 2, 2.5 or 5 x 10^k, and the limits are multiples of that spacing."""
    lo, hi = ax.get_ylim()
    ticks = [t for t in ax.get_yticks() if lo <= t <= hi]
    spacing = np.diff(ticks)
    if len(ticks) < 3 or not np.allclose(spacing, spacing[0]):
        return False
    step = spacing[0]
    mantissa = step / 10 ** np.floor(np.log10(step))
    multiples = np.array([lo, hi, *ticks]) / step
    return any(np.isclose(mantissa, m) for m in (1, 2, 2.5, 5)) and np.allclose(multiples, np.round(multiples))


def test_histogram_range_comes_from_the_data(fw):
    from hookkit.viz.stats_plots import data_extent

    acts, values = _record_outputs(fw, (-20, 20), 160)
    for name, signed in (("0", True), ("2", True), ("1", False)):  # Linear outputs have both signs; ReLU's are >= 0
        fig = color_dim(acts, name)
        ax = fig.axes[0]
        lo, hi = ax.get_ylim()
        assert (lo, hi) == data_extent(acts, name)
        v = values[name]
        assert lo <= v.min() + 0.25 and v.max() - 0.25 <= hi  # every value's bin is on the axis (bins are 0.25 wide)
        assert hi - lo < 40  # not the whole recorded range: these outputs stay within a few units
        if signed:
            assert v.min() < 0 < v.max() and lo == -hi  # pre-activations: symmetric around 0
        else:
            assert lo == 0
        assert _round_ticks(ax)
        assert [int(t.get_text()) for t in ax.get_xticklabels()] == [0, 5, 10, 15, 20, 25]  # round step numbers
        assert len(fig.axes) == 2 and fig.axes[1].get_ylabel() == "log(1 + count)"  # the colorbar
        plt.close(fig)
    # hist(): the same extent on its x axis; extent="recorded" shows the whole range
    assert hist(acts, "0").axes[0].get_xlim() == data_extent(acts, "0")
    assert color_dim(acts, "0", extent="recorded").axes[0].get_ylim() == (-20.0, 20.0)
    assert color_dim(acts, "0", extent=(-1, 3)).axes[0].get_ylim() == (-1.0, 3.0)
    with pytest.raises(ValueError, match="extent must be 'auto', 'recorded' or"):
        color_dim(acts, "0", extent="data")
    with pytest.raises(ValueError, match=r"low < high; got \(3, 1\)"):
        color_dim(acts, "0", extent=(3, 1))


def test_a_range_that_misses_the_values_says_so(fw):
    """fastai's default range (0, 10) on pre-activations: negative values are not counted, and the
    figure says so (from the recorded mean and std); a range that holds the data says nothing."""
    from hookkit.viz.stats_plots import range_note

    acts, values = _record_outputs(fw, (0, 10), 40, steps=3)
    assert values["0"].min() < 0
    note = range_note(acts, "0")
    assert note.startswith("values below 0 are outside the recorded range [0, 10] and not counted (step ")
    assert note in color_dim(acts, "0").axes[0].get_title().replace("\n", " ")
    assert note in hist(acts, "0").axes[0].get_title().replace("\n", " ")  # hist() says it as well
    above, _ = _record_outputs(fw, (-10, 0), 40, steps=3)
    assert range_note(above, "0").startswith("values above 0 are outside the recorded range [-10, 0]")
    assert range_note(acts, "1") == ""  # ReLU outputs: all inside [0, 10]
    wide, _ = _record_outputs(fw, (-50, 50), 40, steps=3)
    assert range_note(wide, "0") == "" and "\n" not in color_dim(wide, "0").axes[0].get_title()


def test_gradient_flow_smooths_long_runs_and_keeps_the_raw_values_faint(torch_fw):
    import torch

    model = torch_fw.mlp((5, 8, 3))
    with hookkit.GradientStats(model) as grads:
        for _ in range(60):
            (model(torch.randn(4, 5)) ** 2).sum().backward()
    ax = gradient_flow(grads).axes[0]
    raw = [ln for ln in ax.get_lines() if ln.get_label().startswith("_")]
    smooth = [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]
    assert [ln.get_label() for ln in smooth] == list(grads.names)
    for r, s_, name in zip(raw, smooth, grads.names):
        norms = grads.layer_stats(name)["norm"]
        np.testing.assert_allclose(r.get_ydata(), norms)
        assert r.get_alpha() < 0.5 and r.get_color() == s_.get_color()
        window = 60 // 25 | 1  # 3
        expected = 10 ** np.convolve(np.log10(norms), np.ones(window) / window, mode="same")[1:-1]
        np.testing.assert_allclose(s_.get_ydata()[1:-1], expected, rtol=1e-5)  # a centered geometric moving mean
    legend = ax.get_legend()
    assert legend.get_bbox_to_anchor().x0 >= ax.get_window_extent().x1  # outside the axes, right of them
    assert len(gradient_flow(grads, smooth=None).axes[0].get_lines()) == len(grads.names)
    with pytest.raises(ValueError, match="smooth must be 'auto', None or a window"):
        gradient_flow(grads, smooth=0)


def test_figures_stay_out_of_pyplot(recorded, fw):
    """Each figure is returned, never left registered in pyplot: Jupyter shows it once, loops free it."""
    from hookkit.viz import feature_maps, gradcam_overlay

    acts, grads = recorded
    plt.close("all")
    figs = [
        plot_layer_stats(acts, 0),
        color_dim(acts, 0),
        hist(acts, 0),
        gradient_flow(grads),
        feature_maps(np.random.default_rng(0).random((2, 4, 5, 5)), sample=1),
        gradcam_overlay(np.random.default_rng(0).random((2, 1, 6, 6)), np.random.default_rng(1).random((2, 6, 6))),
    ]
    assert plt.get_fignums() == []
    for fig in figs:
        assert fig.axes and fig.canvas.manager is None
        fig.savefig(__import__("io").BytesIO(), format="png")  # renders without pyplot
