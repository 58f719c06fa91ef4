"""Figures (matplotlib, imported lazily inside each function): every function returns a Figure and accepts ``ax``."""

from hookkit.viz.feature_maps import cam_grid, feature_maps, feature_maps_by_layer, gradcam_overlay
from hookkit.viz.stats_plots import color_dim, gradient_flow, hist, plot_layer_stats, stats_overlay

__all__ = [
    "cam_grid",
    "color_dim",
    "feature_maps",
    "feature_maps_by_layer",
    "gradcam_overlay",
    "gradient_flow",
    "hist",
    "plot_layer_stats",
    "stats_overlay",
]
