"""The PaddlePaddle backend: ``backend.py`` (hooks, tensors, statistics through the CPU kernel)."""

from hookkit.backends.paddle.backend import PaddleBackend

__all__ = ["PaddleBackend"]
