"""Feature-map grids and Grad-CAM overlays (matplotlib, imported inside each function)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from hookkit.core.entry import entry_name, public_entry
from hookkit.core.validate import ArgumentTypeError, check_choice, check_length, fail
from hookkit.viz.figures import new_figure


def _as_array(capture_or_tensor: Any, layer: str | None, arg: str = "capture_or_tensor") -> tuple[np.ndarray, str]:
    """The [N, C, H, W] (or [C, H, W]) array of one layer, and a title for it."""
    obj = capture_or_tensor
    if hasattr(obj, "calls") and hasattr(obj, "names"):  # a hookkit.capture
        names = [n for n in obj.names if n in obj]
        if layer is None:
            if len(names) != 1:
                fail(None, "layer", f"one of the captured layers {', '.join(names[:8])} (the capture holds {len(names)})", layer)
            layer = names[0]
        obj = obj[layer]
    if not isinstance(obj, np.ndarray):
        from hookkit.backends import backend_for
        from hookkit.core.tree import first_tensor

        be = None
        for item in obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (tuple, list)) else [obj]:
            try:
                be = backend_for(item)
                break
            except Exception:
                continue
        if be is None:
            fail(None, arg, "a capture, a tensor or an array", capture_or_tensor, kind=ArgumentTypeError)
        obj = be.to_numpy(first_tensor(obj, be.is_tensor))
    return np.asarray(obj, dtype=np.float32), layer or "feature maps"


@public_entry()
def feature_maps(
    capture_or_tensor: Any,
    layer: str | None = None,
    *,
    sample: int = 0,
    max_channels: int = 32,
    ncols: int = 8,
    scale: str = "channel",
    cmap: str = "viridis",
    title: str | None = None,
    fig: Any = None,
    colorbar: bool = True,
) -> Any:
    """A grid of one layer's channels for one sample; returns the matplotlib Figure.

    ``capture_or_tensor``: a ``hookkit.capture`` (then ``layer`` names the layer), a tensor or a
    numpy array ``[N, C, H, W]`` or ``[C, H, W]``. ``scale="channel"`` stretches each channel to its
    own range; ``scale="shared"`` puts all channels on one color scale (with one colorbar;
    ``colorbar=False`` leaves it out).

    >>> with hookkit.capture(model, "conv1") as cap:   # doctest: +SKIP
    ...     model(x)
    >>> hookkit.viz.feature_maps(cap, "conv1", sample=0).savefig("conv1.png")
    """
    check_choice(scale, ("channel", "shared"), arg="scale")
    arr, name = _as_array(capture_or_tensor, layer)
    if arr.ndim == 4:
        if not 0 <= sample < arr.shape[0]:
            raise IndexError(f"feature_maps: sample {sample} out of range for a batch of {arr.shape[0]}")
        arr = arr[sample]
    if arr.ndim != 3:
        fail("feature_maps", "capture_or_tensor", f"feature maps [N, C, H, W] or [C, H, W] (of {name!r})", arr)
    total = arr.shape[0]
    shown = arr[:max_channels].astype(np.float32)
    n, h, w = shown.shape
    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    lo, hi = float(shown.min()), float(shown.max())
    if scale == "channel":  # each channel stretched to [0, 1], so one colorbar still reads true
        flat = shown.reshape(n, -1)
        mn, mx = flat.min(axis=1)[:, None, None], flat.max(axis=1)[:, None, None]
        shown, lo, hi = (shown - mn) / (mx - mn + 1e-12), 0.0, 1.0
    # one image of tiles separated by a gap (NaN: drawn as background): far cheaper than n Axes
    gap = max(1, h // 6)
    th = h + gap + max(2, h // 3)  # room above each tile for its label
    tiles = np.full((nrows * th, ncols * (w + gap)), np.nan, np.float32)
    for i in range(n):
        r, c = divmod(i, ncols)
        y0 = r * th + (th - h)
        tiles[y0 : y0 + h, c * (w + gap) : c * (w + gap) + w] = shown[i]
    if fig is None:
        fig = new_figure(figsize=(1.1 * ncols + (1.0 if colorbar else 0.2), 1.05 * nrows + 0.5), layout=None)
    ax = fig.add_subplot(1, 1, 1)
    ax.axis("off")
    image = ax.imshow(tiles, cmap=cmap, vmin=lo, vmax=hi, interpolation="nearest")
    for i in range(n):
        r, c = divmod(i, ncols)
        ax.text(c * (w + gap) + (w - 1) / 2, r * th + (th - h) - 0.6, f"ch {i}", ha="center", va="bottom", fontsize=7)
    more = f", first {n} shown" if n < total else ""
    fig.suptitle(title or f"{name}: {total} channels{more} (sample {sample}, {scale} scale)", fontsize=10)
    if colorbar:
        cb = fig.colorbar(image, ax=ax, shrink=0.8)
        cb.set_label("activation" if scale == "shared" else "per channel: min 0, max 1", fontsize=8)
    return fig


@public_entry()
def feature_maps_by_layer(
    capture: Any,
    layers: Sequence[str],
    *,
    sample: int = 0,
    image: Any = None,
    ncols: Sequence[int] | int = 8,
    max_channels: int = 32,
    title: str | None = None,
    image_title: str = "input",
    tile: float = 0.55,
) -> Any:
    """One sample through several layers, side by side in one Figure: its input (``image``, optional)
    then each layer's channel grid (``feature_maps``, each channel on its own scale). ``capture``: the
    ``hookkit.capture`` that recorded the layers; ``image_title``: the title over the input.

    >>> with hookkit.capture(model, ["conv1", "conv2"]) as cap:   # doctest: +SKIP
    ...     model(x)
    >>> hookkit.viz.feature_maps_by_layer(cap, ["conv1", "conv2"], sample=3, image=x[3]).savefig("row.png")

    ``ncols``: tiles per row, one for all layers or one per layer; ``tile``: inches per tile.
    """
    layers = list(layers)
    if not layers:
        fail("feature_maps_by_layer", "layers", "the names of one or more captured layers", layers)
    cols = [ncols] * len(layers) if isinstance(ncols, int) else list(ncols)
    check_length(cols, len(layers), arg="ncols", what="an int, or one per layer")
    shapes = []
    for layer, c in zip(layers, cols):
        arr, _ = _as_array(capture, layer, "capture")
        n = min(max_channels, arr.shape[1] if arr.ndim == 4 else arr.shape[0])
        shapes.append((max(1, min(c, n)), math.ceil(n / max(1, min(c, n)))))
    widths = [c * tile * 1.2 + 0.3 for c, _ in shapes]  # inches: tiles, gaps, a margin
    height = max(r for _, r in shapes) * tile * 1.45 + 0.8
    if image is not None:
        widths = [max(1.4, 0.45 * height)] + widths
    widths[-1] += 0.8  # the colorbar
    fig = new_figure(figsize=(sum(widths), height))
    subs = list(np.ravel(fig.subfigures(1, len(widths), width_ratios=widths, wspace=0.02)))
    if image is not None:
        img, _ = _as_array(image, None, "image") if not isinstance(image, np.ndarray) else (np.asarray(image, np.float32), "")
        img = np.squeeze(img)
        if img.ndim == 3:  # [C, H, W] -> [H, W, C]
            img = img.transpose(1, 2, 0)
        ax = subs[0].add_subplot(1, 1, 1)
        ax.imshow(img, cmap="gray" if img.ndim == 2 else None, interpolation="nearest")
        ax.set_title(image_title, fontsize=10)
        ax.axis("off")
        subs = subs[1:]
    for i, (layer, sub, (c, _)) in enumerate(zip(layers, subs, shapes)):
        arr, _ = _as_array(capture, layer, "capture")
        total = arr.shape[1] if arr.ndim == 4 else arr.shape[0]
        feature_maps(
            capture,
            layer,
            sample=sample,
            ncols=c,
            max_channels=max_channels,
            fig=sub,
            colorbar=i == len(layers) - 1,
            title=f"{layer}: {total} channels" + (f" (first {max_channels})" if total > max_channels else ""),
        )
    if title:
        fig.suptitle(title, fontsize=11)
    return fig


def _images(images: Any) -> np.ndarray:
    """``[N, H, W]`` grayscale or ``[N, H, W, 3]`` images from ``[N, H, W]``, channels-first
    ``[N, 1 or 3, H, W]`` or channels-last ``[N, H, W, 1 or 3]`` arrays or tensors."""
    imgs, _ = _as_array(images, None, "images") if not isinstance(images, np.ndarray) else (np.asarray(images, np.float32), "")
    if imgs.ndim == 4:
        if imgs.shape[1] in (1, 3):  # channels first (the frameworks' layout)
            imgs = imgs[:, 0] if imgs.shape[1] == 1 else imgs.transpose(0, 2, 3, 1)
        elif imgs.shape[3] in (1, 3):  # channels last (numpy, PIL, matplotlib)
            imgs = imgs[..., 0] if imgs.shape[3] == 1 else imgs
        else:
            fail(
                entry_name(),
                "images",
                "[N, H, W], [N, 1 or 3, H, W] (channels first) or [N, H, W, 1 or 3] (channels last) images",
                f"shape {tuple(imgs.shape)}",
            )
    elif imgs.ndim != 3:
        fail(
            entry_name(),
            "images",
            "[N, H, W], [N, 1 or 3, H, W] (channels first) or [N, H, W, 1 or 3] (channels last) images",
            f"shape {tuple(imgs.shape)}",
        )
    return imgs


def _overlay(ax: Any, img: np.ndarray, cam: Any, colors: Any, alpha: float, outline: bool) -> None:
    """One image with its heatmap over it: opacity grows with the map's value, the strokes outlined in white."""
    img = (img - img.min()) / (img.max() - img.min() + 1e-7)
    ax.imshow(img, cmap="gray" if img.ndim == 2 else None, interpolation="nearest")
    cam = np.clip(np.asarray(cam, np.float64), 0.0, 1.0)
    rgba = colors(cam)
    rgba[..., 3] = alpha * (0.15 + 0.85 * cam)  # low values nearly clear: the image shows through
    ax.imshow(rgba, interpolation="bilinear")
    if outline and img.ndim == 2 and img.shape == cam.shape:
        ax.contour(img, levels=[0.5], colors="white", linewidths=1.0, alpha=0.9)


@public_entry()
def gradcam_overlay(
    images: Any,
    cams: np.ndarray,
    *,
    predicted: Sequence[int] | np.ndarray | None = None,
    labels: Sequence[int] | np.ndarray | None = None,
    alpha: float = 0.6,
    ncols: int = 8,
    cmap: str = "jet",
    outline: bool = True,
    tile: float = 1.9,
    title: str | None = None,
    fig: Any = None,
) -> Any:
    """Grad-CAM heatmaps over their images, titled with predicted and true labels; returns a Figure.

    ``images``: ``[N, H, W]``, ``[N, 1, H, W]`` or ``[N, 3, H, W]`` (array or tensor); ``cams``: from
    ``hookkit.gradcam``. The heatmap's opacity grows with its value (up to ``alpha``), so the image
    shows through where the map is low; ``outline`` draws the contour of a grayscale image's strokes
    over the heatmap. ``tile``: inches per image.

    >>> cams = hookkit.gradcam(model, "conv3", x)                             # doctest: +SKIP
    >>> hookkit.viz.gradcam_overlay(x, cams, predicted=pred, labels=y).savefig("cam.png")
    """
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    imgs = _images(images)
    cams = np.asarray(cams)
    check_length(cams, len(imgs), arg="cams", what="one heatmap per image")
    n = len(cams)
    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    if fig is None:
        fig = new_figure(figsize=(tile * ncols + 1.0, (tile + 0.35) * nrows + (0.5 if title else 0.1)))
    axes = fig.subplots(nrows, ncols, squeeze=False)
    colors = colormaps[cmap]
    for i, ax in enumerate(axes.flat):
        ax.axis("off")
        if i >= n:
            continue
        _overlay(ax, imgs[i], cams[i], colors, alpha, outline)
        parts = []
        if predicted is not None:
            parts.append(f"pred {int(predicted[i])}")
        if labels is not None:
            parts.append(f"true {int(labels[i])}")
        if parts:
            wrong = predicted is not None and labels is not None and int(predicted[i]) != int(labels[i])
            ax.set_title(" / ".join(parts), fontsize=11, color="crimson" if wrong else "black", fontweight="bold" if wrong else None)
    if title:
        fig.suptitle(title, fontsize=12)
    if n:
        mappable = ScalarMappable(cmap=colors, norm=Normalize(0, 1))
        fig.colorbar(mappable, ax=axes.ravel().tolist(), shrink=0.8, pad=0.02).set_label("Grad-CAM (0: none, 1: most)", fontsize=9)
    return fig


@public_entry()
def cam_grid(
    images: Any,
    maps: dict[str, Any],
    *,
    predicted: Sequence[int] | np.ndarray | None = None,
    labels: Sequence[int] | np.ndarray | None = None,
    alpha: float = 0.6,
    cmap: str = "jet",
    outline: bool = True,
    tile: float = 1.5,
    title: str | None = None,
    fig: Any = None,
) -> Any:
    """Several CAM methods side by side: one row per image (the image, then each method's map over it),
    one column per entry of ``maps`` (``{"Grad-CAM": maps [N, H, W], ...}``); returns a Figure.

    >>> maps = {m: hookkit.cam(model, "conv3", x, m) for m in ("gradcam", "scorecam", "eigencam")}   # doctest: +SKIP
    >>> hookkit.viz.cam_grid(x, maps, predicted=pred, labels=y).savefig("methods.png")
    """
    from matplotlib import colormaps

    imgs = _images(images)
    names = list(maps)
    for name in names:
        check_length(maps[name], len(imgs), arg=f"maps[{name!r}]", what="one heatmap per image")
    n, ncols = len(imgs), len(names) + 1
    height = tile * n + 0.35 + (0.35 if title else 0)
    if fig is None:  # a fixed layout: constrained layout costs seconds on a grid of this many axes
        fig = new_figure(figsize=(tile * ncols + 0.3, height), layout=None)
        fig.subplots_adjust(left=0.3 / (tile * ncols + 0.3), right=0.995, bottom=0.01, top=1 - (0.3 + (0.35 if title else 0)) / height,
                            wspace=0.04, hspace=0.04)  # fmt: skip
    axes = fig.subplots(max(n, 1), ncols, squeeze=False)
    colors = colormaps[cmap]
    for i in range(n):
        ax = axes[i, 0]
        img = imgs[i]
        ax.imshow((img - img.min()) / (img.max() - img.min() + 1e-7), cmap="gray" if img.ndim == 2 else None, interpolation="nearest")
        parts = ([f"pred {int(predicted[i])}"] if predicted is not None else []) + (
            [f"true {int(labels[i])}"] if labels is not None else []
        )
        wrong = predicted is not None and labels is not None and int(predicted[i]) != int(labels[i])
        ax.set_ylabel(" / ".join(parts), fontsize=9, color="crimson" if wrong else "black")
        for j, name in enumerate(names, start=1):
            _overlay(axes[i, j], img, np.asarray(maps[name])[i], colors, alpha, outline)
        for ax in axes[i]:
            ax.set_xticks([])
            ax.set_yticks([])
    for j, name in enumerate(["input", *names]):
        axes[0, j].set_title(name, fontsize=10)
    if title:
        fig.suptitle(title, fontsize=12)
    return fig
