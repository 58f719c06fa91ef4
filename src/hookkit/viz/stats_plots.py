"""Figures of recorded statistics: fastai's ``plot_layer_stats``, ``color_dim`` and ``hist``, and a gradient-flow view.

Each function takes an ``ActivationStats`` / ``GradientStats`` (or anything with ``names`` and
``layer_stats(name)``), returns a matplotlib Figure and accepts ``ax=`` to draw into existing axes.
matplotlib is imported inside the functions, so ``import hookkit`` never needs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hookkit.core.errors import HookkitError, LayerNotFound
from hookkit.core.suggest import close_matches

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
    return name_or_index


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
    """Label the columns of an image (one per record) with their step numbers, at most 8 ticks."""
    if len(steps):
        ticks = np.unique(np.linspace(0, len(steps) - 1, min(len(steps), 8)).round().astype(int))
        ax.set_xticks(ticks, [str(steps[t]) for t in ticks])
    ax.set_xlabel("step")


def _axes(ax: Any, figsize: tuple[float, float]) -> tuple[Any, Any]:
    """(figure, axes): ``ax`` if given, else a new figure with one Axes."""
    if ax is not None:
        return ax.figure, ax
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    return fig, ax


def plot_layer_stats(stats: Any, name_or_index: str | int = 0, *, ax: Any = None, figsize: tuple[float, float] = (12, 3)) -> Any:
    """Mean, std and fraction of near-zero activations of one layer over the recorded steps (fastai's three panels).

    >>> fig = hookkit.viz.plot_layer_stats(stats, "fc1")   # doctest: +SKIP

    ``ax``: three Axes to draw the panels into, or one Axes for all three lines (with a legend).
    """
    name = _layer_name(stats, name_or_index)
    data = stats.layer_stats(name)
    steps = np.asarray(data["step"])
    panels = [("mean", "mean"), ("std", "std"), ("near_zero", "fraction near zero")]
    if ax is None:
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 3, figsize=figsize, layout="constrained")
    elif isinstance(ax, (Sequence, np.ndarray)):
        axes = list(np.ravel(np.asarray(ax, dtype=object)))
        if len(axes) != 3:
            raise ValueError(f"ax: expected 3 Axes (mean, std, near zero) or one Axes, got {len(axes)}")
        fig = axes[0].figure
    else:
        fig, axes = ax.figure, [ax] * 3
    for panel_ax, (key, title) in zip(axes, panels):
        panel_ax.plot(steps, np.asarray(data[key]), label=key)
        if len(set(map(id, axes))) == 3:
            panel_ax.set_title(title)
            panel_ax.set_xlabel("step")
    if len(set(map(id, axes))) == 1:
        axes[0].set_title(name)
        axes[0].set_xlabel("step")
        axes[0].legend()
    else:
        fig.suptitle(name)
    return fig


def color_dim(stats: Any, name_or_index: str | int = 0, *, ax: Any = None, figsize: tuple[float, float] = (10, 5)) -> Any:
    """fastai's "colorful dimension": one histogram per recorded step as a column, ``log1p`` counts, low values at the bottom.

    >>> stats = hookkit.ActivationStats(model, hist=True)   # doctest: +SKIP
    >>> fig = hookkit.viz.color_dim(stats, "fc1")           # doctest: +SKIP
    """
    name = _layer_name(stats, name_or_index)
    hist = _hist_array(stats, name)  # [steps, bins]
    edges = _hist_edges(stats, hist.shape[1])
    fig, ax = _axes(ax, figsize)
    image = np.log1p(hist.T)  # [bins, steps], as fastai's ActivationStats.hist
    ax.imshow(image, origin="lower", aspect="auto", extent=(-0.5, hist.shape[0] - 0.5, edges[0], edges[-1]))
    ax.set_title(f"{name}: activation histogram per step (log1p)")
    _step_ticks(ax, np.asarray(stats.layer_stats(name)["step"]))
    ax.set_ylabel("activation")
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
        raise ValueError(f"at: expected a recorded-step index or 'mean', got {at!r}")
    edges = _hist_edges(stats, hists.shape[1])
    fig, ax = _axes(ax, figsize)
    ax.bar(edges[:-1], counts, width=np.diff(edges), align="edge")
    ax.set_title(f"{name}: activation histogram ({label})")
    ax.set_xlabel("activation")
    ax.set_ylabel("count")
    return fig


def gradient_flow(
    grad_stats: Any,
    kind: str = "norm",
    *,
    source: str = "output",
    layers: Sequence[str] | None = None,
    style: str = "lines",
    log: bool | None = None,
    ax: Any = None,
    figsize: tuple[float, float] = (10, 4),
) -> Any:
    """Per-layer gradient statistics over the recorded steps: one line per layer, or a layers x steps heatmap (NaN blank).

    >>> fig = hookkit.viz.gradient_flow(grads, "norm", style="heatmap")   # doctest: +SKIP

    ``kind``: norm, mean, std or max_abs. ``source``: "output" (gradient w.r.t. each layer's
    output) or "params" (its parameters' gradients). ``log``: log scale (default: all but mean).
    A layer called several times in one forward is shown once per step (norms combined as the
    root of the sum of squares, as ``GradientStats.gradient_flow()``).
    """
    if kind not in GRAD_KINDS:
        raise ValueError(f"kind: expected one of {', '.join(GRAD_KINDS)}, got {kind!r}")
    if source not in ("output", "params"):
        raise ValueError(f"source: expected 'output' or 'params', got {source!r}")
    if style not in ("lines", "heatmap"):
        raise ValueError(f"style: expected 'lines' or 'heatmap', got {style!r}")
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
        for name, steps, values in series:
            ax.plot(steps, values, label=name)
        if log:
            ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_ylabel(label)
        ax.legend(fontsize="small", loc="best")
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
