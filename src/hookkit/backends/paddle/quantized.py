"""Paddle's ``quantized`` family (see ``hookkit.backends.families.quantized``): Paddle's parameters
are plain tensors (its quantization rewrites layers instead): nothing to report."""

from __future__ import annotations

from hookkit.backends.families.quantized import Quantized

OPS = Quantized()
