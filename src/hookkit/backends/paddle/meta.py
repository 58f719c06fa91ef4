"""Paddle's ``meta`` family (see ``hookkit.backends.families.meta``): Paddle has no meta device
and no fake tensors. ``paddle.LazyGuard`` builds layers whose parameters are not initialized yet
(shape and dtype, no values): ``dataless`` names them, so the summary counts them without an
input and refuses a forward with a message saying so (there is no dry run on Paddle)."""

from __future__ import annotations

from typing import Any

from hookkit.backends.families.meta import Meta


def _uninitialized(t: Any) -> bool:
    ready = getattr(t, "_is_initialized", None)
    return ready is not None and not ready()


class PaddleMeta(Meta):
    def has_data(self, t: Any) -> bool:
        return not _uninitialized(t)

    def dataless(self, model: Any) -> list[str]:
        return [n for n, p in model.named_parameters() if _uninitialized(p)]

    dry_runs = False
    why_not = (
        "Paddle has no meta device or fake tensors: parameters built under paddle.LazyGuard have no values, and no "
        "forward can run on them; summarize without an input (parameters only), or build the model outside "
        "LazyGuard (or initialize its parameters: param.initialize()) to run the forward"
    )


OPS = PaddleMeta()
