"""The PyTorch backend: ``backend.py`` (hooks, tensors), ``stats.py`` (monitoring reductions)."""

from hookkit.backends.torch.backend import TorchBackend

__all__ = ["TorchBackend"]
