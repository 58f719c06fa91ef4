"""Consumers that read what flows and never change it: capture, statistics, non-finite checks,
summary, Grad-CAM, fastai's names and the user-hook functions (``on_forward`` ...)."""
