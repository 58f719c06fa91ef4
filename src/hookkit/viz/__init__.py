"""Figures (matplotlib, imported lazily inside each function): every function returns a Figure and accepts ``ax``."""

# -- statistics plots (issue 5) --
from hookkit.viz.stats_plots import color_dim, gradient_flow, hist, plot_layer_stats  # noqa: F401
# -- feature maps, Grad-CAM figures (issue 7) --
from hookkit.viz.feature_maps import feature_maps, gradcam_overlay  # noqa: F401
