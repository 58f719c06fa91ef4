"""Paddle's ``Callback`` base class (paddle.hapi), for ``hookkit.integrations.paddle_hapi``, which
builds its callback on it: the framework import stays in the backend."""

from __future__ import annotations

from paddle.callbacks import Callback

__all__ = ["Callback"]
