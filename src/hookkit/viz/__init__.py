"""Figures (matplotlib, imported lazily inside each function): every function returns a Figure and accepts ``ax``."""

# -- statistics plots (issue 5) --
# -- feature maps, Grad-CAM figures (issue 7) --
