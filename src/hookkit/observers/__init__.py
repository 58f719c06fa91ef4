"""Consumers that read what flows and never change it: capture, statistics, non-finite checks,
summary, feature extraction, fastai's names and the user-hook functions (``on_forward`` ...).
(Grad-CAM's shortcuts live with CAM in ``hookkit.analyses.cam``; ``hookkit.observers.gradcam`` still imports.)"""
