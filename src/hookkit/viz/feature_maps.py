"""Feature-map grids and Grad-CAM overlays (matplotlib, imported inside each function)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np


def _as_array(capture_or_tensor: Any, layer: str | None) -> tuple[np.ndarray, str]:
    """The [N, C, H, W] (or [C, H, W]) array of one layer, and a title for it."""
    obj = capture_or_tensor
    if hasattr(obj, "calls") and hasattr(obj, "names"):  # a hookkit.capture
        names = [n for n in obj.names if n in obj]
        if layer is None:
            if len(names) != 1:
                raise ValueError(f"feature_maps: the capture holds {len(names)} layers; pass layer= one of {', '.join(names[:8])}")
            layer = names[0]
        obj = obj[layer]
    if not isinstance(obj, np.ndarray):
        from hookkit.backends import backend_for
        from hookkit.core.tree import first_tensor

        be = backend_for(obj) if not isinstance(obj, (tuple, list, dict)) else None
        if be is None:
            for item in obj.values() if isinstance(obj, dict) else obj:
                try:
                    be = backend_for(item)
                    break
                except Exception:
                    continue
        if be is None:
            raise TypeError(f"feature_maps: expected a capture, a tensor or an array; got {type(capture_or_tensor).__name__}")
        obj = be.to_numpy(first_tensor(obj, be.is_tensor))
    return np.asarray(obj, dtype=np.float32), layer or "feature maps"


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
    own range; ``scale="shared"`` puts all channels on one color scale (with one colorbar).

    >>> with hookkit.capture(model, "conv1") as cap:   # doctest: +SKIP
    ...     model(x)
    >>> hookkit.viz.feature_maps(cap, "conv1", sample=0).savefig("conv1.png")
    """
    import matplotlib.pyplot as plt

    if scale not in ("channel", "shared"):
        raise ValueError(f"feature_maps: scale must be 'channel' or 'shared'; got {scale!r}")
    arr, name = _as_array(capture_or_tensor, layer)
    if arr.ndim == 4:
        if not 0 <= sample < arr.shape[0]:
            raise IndexError(f"feature_maps: sample {sample} out of range for a batch of {arr.shape[0]}")
        arr = arr[sample]
    if arr.ndim != 3:
        raise ValueError(f"feature_maps: layer {name!r} gave shape {arr.shape}; expected [N, C, H, W] or [C, H, W]")
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
        fig = plt.figure(figsize=(1.1 * ncols + (1.0 if colorbar else 0.2), 1.05 * nrows + 0.5))
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


def gradcam_overlay(
    images: Any,
    cams: np.ndarray,
    *,
    predicted: Sequence[int] | None = None,
    labels: Sequence[int] | None = None,
    alpha: float = 0.5,
    ncols: int = 8,
    cmap: str = "jet",
    title: str | None = None,
    fig: Any = None,
) -> Any:
    """Grad-CAM heatmaps over their images, titled with predicted and true labels; returns a Figure.

    ``images``: ``[N, H, W]``, ``[N, 1, H, W]`` or ``[N, 3, H, W]`` (array or tensor); ``cams``: from
    ``hookkit.gradcam``.

    >>> cams = hookkit.gradcam(model, "conv3", x)                             # doctest: +SKIP
    >>> hookkit.viz.gradcam_overlay(x, cams, predicted=pred, labels=y).savefig("cam.png")
    """
    import matplotlib.pyplot as plt

    imgs, _ = _as_array(images, None) if not isinstance(images, np.ndarray) else (np.asarray(images, np.float32), "")
    if imgs.ndim == 4:
        imgs = imgs[:, 0] if imgs.shape[1] == 1 else imgs.transpose(0, 2, 3, 1)
    cams = np.asarray(cams)
    if len(imgs) != len(cams):
        raise ValueError(f"gradcam_overlay: {len(imgs)} images but {len(cams)} heatmaps")
    n = len(cams)
    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    if fig is None:
        fig = plt.figure(figsize=(1.6 * ncols + 0.8, 1.8 * nrows + 0.4))
    axes = fig.subplots(nrows, ncols, squeeze=False)
    heat = None
    for i, ax in enumerate(axes.flat):
        ax.axis("off")
        if i >= n:
            continue
        img = imgs[i]
        img = (img - img.min()) / (img.max() - img.min() + 1e-7)
        ax.imshow(img, cmap="gray" if img.ndim == 2 else None)
        heat = ax.imshow(cams[i], cmap=cmap, alpha=alpha, vmin=0, vmax=1)
        parts = []
        if predicted is not None:
            parts.append(f"pred {int(predicted[i])}")
        if labels is not None:
            parts.append(f"true {int(labels[i])}")
        if parts:
            wrong = predicted is not None and labels is not None and int(predicted[i]) != int(labels[i])
            ax.set_title(" / ".join(parts), fontsize=8, color="crimson" if wrong else "black")
    if title:
        fig.suptitle(title, fontsize=10)
    if heat is not None:
        fig.colorbar(heat, ax=axes.ravel().tolist(), shrink=0.8).set_label("Grad-CAM", fontsize=8)
    return fig
