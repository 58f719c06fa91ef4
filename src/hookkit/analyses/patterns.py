"""Moved to ``hookkit.analyses.transformer.patterns``; importable from here as before."""

from hookkit.analyses.transformer.patterns import attention_layers, attention_patterns

__all__ = ["attention_layers", "attention_patterns"]
