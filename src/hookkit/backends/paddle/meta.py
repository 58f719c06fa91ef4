"""Paddle's ``meta`` family (see ``hookkit.backends.families.meta``): Paddle has no meta device.

``paddle.LazyGuard`` builds layers whose parameters are not initialized yet: the summary counts
them without an input (the parameters-only table); a forward needs them initialized
(``layer.initialize()`` hmm not public: build the model outside the guard)."""

from __future__ import annotations

from hookkit.backends.families.meta import Meta


class PaddleMeta(Meta):
    pass


OPS = PaddleMeta()
