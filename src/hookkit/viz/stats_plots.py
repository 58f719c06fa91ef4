"""Figures of recorded statistics: fastai's ``plot_layer_stats``, ``color_dim`` and ``hist``, and a gradient-flow view.

Each function takes an ``ActivationStats`` / ``GradientStats`` (or anything with ``names`` and
``layer_stats(name)``), returns a matplotlib Figure and accepts ``ax=`` to draw into existing axes.
matplotlib is imported inside the functions, so ``import hookkit`` never needs it.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

import numpy as np

from hookkit.core.entry import public_entry
from hookkit.core.errors import HookkitError, LayerNotFound
from hookkit.core.suggest import close_matches
from hookkit.core.validate import check_choice, check_range_pair, fail
from hookkit.viz.figures import subplots

GRAD_KINDS = ("norm", "mean", "std", "max_abs")


def _layer_name(stats: Any, name_or_index: str | int) -> str:
    """Resolve a layer name or an index into ``stats.names``; unknown names list the recorded ones."""
    names = list(stats.names)
    if isinstance(name_or_index, (int, np.integer)) and not isinstance(name_or_index, bool):
        if not -len(names) <= name_or_index < len(names):
            raise IndexError(f"layer index {name_or_index} out of range: {len(names)} layers recorded ({', '.join(names)})")
        return names[name_or_index]
    if name_or_index not in names:
        close = close_matches(str(name_or_index), names, n=3) or names[:8]
        raise LayerNotFound(name_or_index, close, detail=f"not among the {len(names)} recorded layers")
    return str(name_or_index)


def _hist_array(stats: Any, name: str) -> np.ndarray:
    data = stats.layer_stats(name)
    if "hist" not in data:
        raise HookkitError(f"no histograms were recorded for layer {name!r}: create the statistics with ActivationStats(model, hist=True)")
    return np.asarray(data["hist"], dtype=np.float64)


def _hist_edges(stats: Any, n_bins: int) -> np.ndarray:
    lo, hi = getattr(stats, "hist_range", (0.0, float(n_bins)))
    return np.linspace(float(lo), float(hi), n_bins + 1)


def _per_step(steps: np.ndarray, values: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """One value per step where a layer was called several times in one forward: norms combine as
    the root of the sum of squares, max_abs as the max, mean and std as their mean."""
    uniq, inverse = np.unique(steps, return_inverse=True)
    if len(uniq) == len(steps):
        return steps, values
    if kind == "norm":
        out = np.zeros(len(uniq))
        np.add.at(out, inverse, values**2)
        return uniq, np.sqrt(out)
    if kind == "max_abs":
        out = np.full(len(uniq), -np.inf)
        np.maximum.at(out, inverse, values)
        return uniq, out
    return uniq, np.bincount(inverse, weights=values) / np.bincount(inverse)


def _step_ticks(ax: Any, steps: np.ndarray) -> None:
    """Label the columns of an image (one per record) with round step numbers (0, 50, 100, ...)."""
    from matplotlib.ticker import MaxNLocator

    steps = np.asarray(steps)
    if len(steps):
        columns = np.arange(len(steps), dtype=np.float64)
        values = [v for v in MaxNLocator(nbins=7, integer=True).tick_values(steps[0], steps[-1]) if steps[0] <= v <= steps[-1]]
        # a column per record: a step value sits at the (first) column that recorded it, between columns otherwise
        positions = np.interp(values, steps, columns)
        ax.set_xticks(positions, [str(int(v)) for v in values])
    ax.set_xlabel("step")


def data_extent(stats: Any, name: str, *, tail: float = 1e-4) -> tuple[float, float]:
    """The value range a layer's histograms show: from the lowest to the highest bin holding data
    (bins at either end holding less than ``tail`` of all counts together are left out), widened
    to be symmetric around 0 when the data lie on both sides of it (pre-activations: 0 in the
    middle), then to round numbers; never wider than the recorded range."""
    from matplotlib.ticker import MaxNLocator

    hist = _hist_array(stats, name)
    edges = _hist_edges(stats, hist.shape[1])
    lo_rec, hi_rec = float(edges[0]), float(edges[-1])
    totals = hist.sum(axis=0)
    if not totals.sum():
        return lo_rec, hi_rec
    cum = np.cumsum(totals) / totals.sum()
    first = int(np.searchsorted(cum, tail / 2, side="right"))
    last = int(np.searchsorted(cum, 1 - tail / 2, side="left"))
    lo, hi = float(edges[first]), float(edges[min(last, len(totals) - 1) + 1])
    if lo < 0 < hi:
        lo, hi = -max(-lo, hi), max(-lo, hi)
    ticks = MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi)
    lo = max(lo_rec, max([t for t in ticks if t <= lo], default=lo))
    hi = min(hi_rec, min([t for t in ticks if t >= hi], default=hi))
    return lo, hi


def trimmed_note(stats: Any, name: str, lo: float, hi: float) -> str:
    """What an axis limited to ``[lo, hi]`` leaves out of a layer's counted values ('' when nothing):
    the automatic extent trims the thin tails, and a reader should know that it did."""
    hist = _hist_array(stats, name)
    edges = _hist_edges(stats, hist.shape[1])
    totals = hist.sum(axis=0)
    total = float(totals.sum())
    if not total:
        return ""
    outside = float(totals[(edges[1:] <= lo) | (edges[:-1] >= hi)].sum())
    if not outside:
        return ""
    return f"{100 * outside / total:.2g}% of the counted values lie outside the {lo:g} to {hi:g} shown (thin tails trimmed)"


def range_note(stats: Any, name: str) -> str:
    """A warning when the recorded histogram range misses part of a layer's values ('' when nothing
    shows that it does). Values outside ``ActivationStats(range=...)`` are not counted in the
    histograms, but the recorded mean and std are over all values: where the histograms' own mean
    (bin centers) drifts from the recorded mean by more than a bin and a tenth of a std, or their std
    falls short of the recorded one, values were left out, on the side the means say."""
    data = stats.layer_stats(name)
    if "hist" not in data or not len(data["hist"]):
        return ""
    hist = np.asarray(data["hist"], np.float64)
    edges = _hist_edges(stats, hist.shape[1])
    centers, width = (edges[:-1] + edges[1:]) / 2, float(edges[1] - edges[0])
    mean, std = np.asarray(data["mean"], np.float64), np.asarray(data["std"], np.float64)
    counts = hist.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        h_mean = hist @ centers / counts
        h_std = np.sqrt(np.maximum(hist @ centers**2 / counts - h_mean**2, 0.0))
    ok = np.isfinite(mean) & np.isfinite(std)
    empty = ok & (counts == 0)  # every value of that record outside the range
    tol = width + 0.1 * np.where(ok, std, 0.0)
    low = (ok & (h_mean - mean > tol)) | (empty & (mean < edges[0]))
    high = (ok & (mean - h_mean > tol)) | (empty & (mean > edges[-1]))
    narrow = ok & ~empty & ~low & ~high & (h_std < 0.8 * std - width)
    sides = [side for side, flags in (("below", low), ("above", high)) if flags.any()]
    if not sides and not narrow.any():
        return ""
    lo, hi = float(edges[0]), float(edges[-1])
    where = " and ".join(f"{side} {lo if side == 'below' else hi:g}" for side in sides) if sides else "on both sides"
    worst = int(np.nanargmax(np.where(low | high | narrow, np.abs(np.nan_to_num(h_mean - mean, nan=np.inf)), -1.0)))
    return (
        f"values {where} are outside the recorded range [{lo:g}, {hi:g}] and not counted "
        f"(step {int(np.asarray(data['step'])[worst])}: mean of all values {mean[worst]:.3g}, of those counted {h_mean[worst]:.3g})"
    )


def _axes(ax: Any, figsize: tuple[float, float]) -> tuple[Any, Any]:
    """(figure, axes): ``ax`` if given, else a new figure with one Axes."""
    if ax is not None:
        return ax.figure, ax
    return subplots(figsize=figsize)


def plot_layer_stats(
    stats: Any, name_or_index: str | int = 0, *, ax: Any = None, figsize: tuple[float, float] = (12, 3), label: str | None = None
) -> Any:
    """Mean, std and fraction of near-zero activations of one layer over the recorded steps (fastai's three panels).

    >>> fig = hookkit.viz.plot_layer_stats(stats, "fc1")   # doctest: +SKIP

    ``ax``: three Axes to draw the panels into, or one Axes for all three lines (with a legend).
    ``label``: the title (default: the layer's name), e.g. ``"fc1 (Linear)"``.
    """
    name = _layer_name(stats, name_or_index)
    data = stats.layer_stats(name)
    steps = np.asarray(data["step"])
    threshold = getattr(stats, "near_zero", None)  # fastai's near-zero count is (o <= threshold): negative values count too
    panels = [
        ("mean", "mean"),
        ("std", "std"),
        ("near_zero", f"fraction <= {threshold:g}" if threshold is not None else "fraction near zero"),
    ]
    if ax is None:
        fig, axes = subplots(1, 3, figsize=figsize)
    elif isinstance(ax, (Sequence, np.ndarray)):
        axes = list(np.ravel(np.asarray(ax, dtype=object)))
        if len(axes) != 3:
            fail("plot_layer_stats", "ax", "one Axes or 3 (mean, std, near zero)", ax)
        fig = axes[0].figure
    else:
        fig, axes = ax.figure, [ax] * 3
    for panel_ax, (key, title) in zip(axes, panels):
        panel_ax.plot(steps, np.asarray(data[key]), label=key)
        if len(set(map(id, axes))) == 3:
            panel_ax.set_title(title)
            panel_ax.set_xlabel("step")
            if key == "near_zero":  # a share of the values: read against 0 and 1, not a zoomed range
                panel_ax.set_ylim(0, 1)
    if len(set(map(id, axes))) == 1:
        axes[0].set_title(label or name)
        axes[0].set_xlabel("step")
        axes[0].legend()
    else:
        fig.suptitle(label or name)
    return fig


def stats_overlay(
    stats: Any,
    key: str = "mean",
    *,
    layers: Sequence[str] | None = None,
    labels: dict[str, str] | None = None,
    log: bool = False,
    ax: Any = None,
    figsize: tuple[float, float] = (12, 3.4),
) -> Any:
    """One statistic of every layer over the recorded steps in one plot (what TensorBoard's overlaid
    scalars show): a line per layer, colored by depth, so a layer that drifts stands out.

    >>> fig = hookkit.viz.stats_overlay(stats, "std")                     # doctest: +SKIP
    >>> fig = hookkit.viz.stats_overlay(grads, "norm", log=True)           # doctest: +SKIP

    ``key``: any statistic ``layer_stats`` returns ("mean", "std", "near_zero"; gradients: "norm",
    "max_abs"...). ``labels``: a legend label per layer name (e.g. ``"conv1 (Conv2d)"``).
    Several calls of a layer in one step are averaged.
    """
    from matplotlib import colormaps

    names = list(stats.names) if layers is None else [_layer_name(stats, n) for n in layers]
    fig, ax = _axes(ax, figsize)
    colors = colormaps["viridis"](np.linspace(0, 0.9, max(len(names), 1)))
    drawn = 0
    for color, name in zip(colors, names):
        data = stats.layer_stats(name)
        if key not in data:
            raise HookkitError(
                f"stats_overlay: no statistic {key!r}; this object records {', '.join(k for k in data if k not in ('step', 'call', 'records', 'hist'))}"
            )
        if not len(data["step"]):
            continue
        steps, values = _per_step(np.asarray(data["step"]), np.asarray(data[key], np.float64), key)
        ax.plot(steps, values, color=color, lw=1.3, label=(labels or {}).get(name, name or "(root)"))
        drawn += 1
    if log:
        ax.set_yscale("log")
    elif key == "near_zero":  # a share of the values: read against 0 and 1
        ax.set_ylim(0, 1)
    ax.set_xlabel("step")
    ax.set_ylabel(key)
    ax.set_title(f"{key} of each layer's {'output gradient' if hasattr(stats, 'param_stats') else 'output'} over training")
    if drawn:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False, ncol=1 + drawn // 16)
    return fig


@public_entry()
def color_dim(
    stats: Any,
    name_or_index: str | int = 0,
    *,
    extent: str | tuple[float, float] = "auto",
    colorbar: bool = True,
    ax: Any = None,
    figsize: tuple[float, float] = (10, 5),
    label: str | None = None,
) -> Any:
    """fastai's "colorful dimension": one histogram per recorded step as a column, ``log1p`` counts, low values at the bottom.

    >>> stats = hookkit.ActivationStats(model, hist=True, range=(-8, 8))   # doctest: +SKIP
    >>> fig = hookkit.viz.color_dim(stats, "fc1")           # doctest: +SKIP

    ``extent``: the values shown on the y axis: ``"auto"`` (the bins that hold data, symmetric
    around 0 when the data lie on both sides of it, round limits; see ``data_extent``),
    ``"recorded"`` (the whole ``range=`` the histograms were recorded with) or ``(low, high)``.
    When the recorded mean and std show values outside the recorded range, the title says so.
    ``colorbar``: draw the colour scale of the counts; ``label``: the y axis' label (default: the
    statistic's name).
    """
    name = _layer_name(stats, name_or_index)
    hist = _hist_array(stats, name)  # [steps, bins]
    edges = _hist_edges(stats, hist.shape[1])
    auto = isinstance(extent, str) and extent == "auto"
    if isinstance(extent, str):
        if extent not in ("auto", "recorded"):
            fail("color_dim", "extent", "'auto', 'recorded' or (low, high)", extent)
        lo, hi = data_extent(stats, name) if auto else (float(edges[0]), float(edges[-1]))
    else:
        lo, hi = check_range_pair(extent, arg="extent")
    fig, ax = _axes(ax, figsize)
    image = np.log1p(hist.T)  # [bins, steps], as fastai's ActivationStats.hist
    im = ax.imshow(image, origin="lower", aspect="auto", interpolation="nearest", extent=(-0.5, hist.shape[0] - 0.5, edges[0], edges[-1]))
    ax.set_ylim(lo, hi)
    if lo < 0 < hi:
        ax.axhline(0, color="white", lw=0.6, ls=(0, (4, 4)), alpha=0.6)
    title = f"{label or name}: activation histogram per step"
    notes = [n for n in (range_note(stats, name), trimmed_note(stats, name, lo, hi) if auto else "") if n]
    ax.set_title(title + "".join("\n" + textwrap.fill(n, 84) for n in notes), fontsize=9 if notes else None)
    _step_ticks(ax, np.asarray(stats.layer_stats(name)["step"]))
    ax.set_ylabel("activation")
    if colorbar:
        fig.colorbar(im, ax=ax, pad=0.02).set_label("log(1 + count)")
    return fig


def hist(stats: Any, name_or_index: str | int = 0, *, at: int | str = -1, ax: Any = None, figsize: tuple[float, float] = (6, 3)) -> Any:
    """The activation histogram of one layer: at one recorded step (``at=-1``: the latest) or averaged (``at="mean"``).

    >>> fig = hookkit.viz.hist(stats, "fc1", at="mean")   # doctest: +SKIP
    """
    name = _layer_name(stats, name_or_index)
    hists = _hist_array(stats, name)
    if len(hists) == 0:
        raise HookkitError(f"no steps were recorded for layer {name!r} (statistics are taken in training mode unless train_only=False)")
    if at == "mean":
        counts, label = hists.mean(axis=0), "mean over steps"
    elif isinstance(at, (int, np.integer)) and not isinstance(at, bool):
        if not -len(hists) <= at < len(hists):
            raise IndexError(f"at={at}: only {len(hists)} steps recorded for layer {name!r}")
        counts, label = hists[at], f"step {int(np.asarray(stats.layer_stats(name)['step'])[at])}"
    else:
        fail("hist", "at", "a recorded-step index or 'mean'", at)
    edges = _hist_edges(stats, hists.shape[1])
    fig, ax = _axes(ax, figsize)
    ax.bar(edges[:-1], counts, width=np.diff(edges), align="edge")
    lo, hi = data_extent(stats, name)
    ax.set_xlim(lo, hi)  # the bars are all drawn; the axis shows where the data are
    notes = [n for n in (range_note(stats, name), trimmed_note(stats, name, lo, hi)) if n]
    title = f"{name}: activation histogram ({label})"
    ax.set_title(title + "".join("\n" + textwrap.fill(n, 84) for n in notes), fontsize=9 if notes else None)
    ax.set_xlabel("activation")
    ax.set_ylabel("count")
    return fig


@public_entry()
def gradient_flow(
    grad_stats: Any,
    kind: str = "norm",
    *,
    source: str = "output",
    layers: Sequence[str] | None = None,
    style: str = "lines",
    log: bool | None = None,
    smooth: int | str | None = "auto",
    ax: Any = None,
    figsize: tuple[float, float] = (10, 4),
) -> Any:
    """Per-layer gradient statistics over the recorded steps: one line per layer, or a layers x steps heatmap (NaN blank).

    >>> fig = hookkit.viz.gradient_flow(grads, "norm", style="heatmap")   # doctest: +SKIP

    ``grad_stats``: a ``GradientStats`` (or its data loaded back); ``style``: "lines" or "heatmap".
    ``kind``: norm, mean, std or max_abs. ``source``: "output" (gradient w.r.t. each layer's
    output) or "params" (its parameters' gradients). ``log``: log scale (default: all but mean).
    ``smooth``: lines are a centered moving average over this many steps (on the log scale when
    ``log``), drawn over the faint per-step values; ``"auto"``: about 1/25 of the steps from 50
    steps on, none below; ``None`` or 1: the per-step values only. The legend sits right of the axes.
    A layer called several times in one forward is shown once per step (norms combined as the
    root of the sum of squares, as ``GradientStats.gradient_flow()``).
    """
    check_choice(kind, GRAD_KINDS, arg="kind")
    check_choice(source, ("output", "params"), arg="source")
    check_choice(style, ("lines", "heatmap"), arg="style")
    log = kind != "mean" if log is None else log
    read = grad_stats.layer_stats if source == "output" else grad_stats.param_stats
    names = [_layer_name(grad_stats, n) for n in (layers if layers is not None else grad_stats.names)]
    series = []
    for name in names:
        data = read(name)
        if data and len(np.asarray(data.get(kind, ()))):
            series.append((name, *_per_step(np.asarray(data["step"]), np.asarray(data[kind], dtype=np.float64), kind)))
    if not series:
        raise HookkitError(
            f"no {source} gradients were recorded for layers {names}: run a backward pass while the GradientStats is attached"
        )
    fig, ax = _axes(ax, figsize)
    label = f"{source} gradient {kind}"
    if style == "lines":
        window = _window(smooth, max(len(s) for _, s, _ in series))
        for name, steps, values in series:
            if window > 1:
                (raw,) = ax.plot(steps, values, lw=0.7, alpha=0.25, label=f"_{name} (per step)")
                ax.plot(steps, _moving_average(values, window, log), lw=1.8, color=raw.get_color(), label=name)
            else:
                ax.plot(steps, values, label=name)
        if log:
            ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_ylabel(label)
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False)
        if window > 1:
            label += f"; lines: mean over {window} steps, faint: each step"
    else:
        steps = np.unique(np.concatenate([s for _, s, _ in series]))
        grid = np.full((len(series), len(steps)), np.nan)  # NaN (blank) where a layer has no record
        for row, (_, s, v) in enumerate(series):
            grid[row, np.searchsorted(steps, s)] = v
        if log:
            with np.errstate(divide="ignore", invalid="ignore"):
                grid = np.log10(np.abs(grid))
        im = ax.imshow(grid, aspect="auto", interpolation="nearest", extent=(-0.5, len(steps) - 0.5, len(series) - 0.5, -0.5))
        ax.set_yticks(range(len(series)), [name for name, _, _ in series], fontsize="small")
        _step_ticks(ax, steps)
        fig.colorbar(im, ax=ax, label=f"log10 {label}" if log else label)
    ax.set_title(f"gradient flow ({label})")
    return fig


def _window(smooth: int | str | None, n: int) -> int:
    if smooth is None:
        return 1
    if smooth == "auto":
        return n // 25 | 1 if n >= 50 else 1  # odd: centered
    if isinstance(smooth, (int, np.integer)) and not isinstance(smooth, bool) and smooth >= 1:
        return int(smooth)
    fail("gradient_flow", "smooth", "'auto', None or a window of steps >= 1", smooth)


def _moving_average(values: np.ndarray, window: int, log: bool) -> np.ndarray:
    """Centered moving average over ``window`` points (shorter at the ends), NaN and, on a log scale,
    values <= 0 left out; averaged in log space when ``log`` (a geometric mean, as the eye reads a log axis)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.log10(values) if log else np.asarray(values, np.float64)
    ok = np.isfinite(v)
    kernel = np.ones(window)
    total = np.convolve(np.where(ok, v, 0.0), kernel, mode="same")
    count = np.convolve(ok.astype(np.float64), kernel, mode="same")
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(count > 0, total / count, np.nan)
    return 10.0**mean if log else mean
