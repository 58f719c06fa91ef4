"""What part of the tensor at a site is read or written: the whole tensor (``WHOLE``), or a view of
it with its own layout (``heads.Heads``: ``[B, H_selected, T, d_head]`` out of ``[B, T, H * d_head]``;
an SAE's latents would be another: encode on ``get``, decode on ``put``).

A part turns the tensor into the record users read and write (``get``), puts an edited record back
(``put``), and words its layout for messages (``shaped_like``, ``mean_shape``, ``vector_shape``) and
says how a steering vector broadcasts into a record (``vector``).
"""

from __future__ import annotations

from typing import Any

from hookkit.backends import Backend
from hookkit.sites.values import broadcasts_into, shape_str


class Part:
    """The whole tensor: the record is the tensor itself."""

    __slots__ = ()
    kind = "whole"

    def get(self, be: Backend, t: Any) -> tuple[Any, Any]:
        """``(record, state)``: what users read at the site, and what ``put`` needs to put it back."""
        return t, None

    def put(self, be: Backend, t: Any, state: Any, new: Any, where: str) -> Any:
        """The tensor with ``new`` (an edited record) in place of the record ``get`` gave."""
        return new

    def missing(self, site: Any, ev: Any) -> None:
        """An input site's call has no such input: nothing is written (a view may refuse)."""

    # -- words for messages, and broadcasting ------------------------------------------------------
    def shaped_like(self, be: Backend, rec: Any, layer: str, call: int) -> str:
        """What a stored value for this site must be shaped like (``patch``)."""
        return f"shaped like the outputs: layer {layer!r} (call {call}) outputs {shape_str(be.shape(rec))}"

    def mean_shape(self, be: Backend, rec: Any, layer: str) -> str:
        """What a per-sample mean must be shaped like (``ablate(mode="mean", mean=)``)."""
        want = be.shape(rec)[1:]
        return f"shaped like the output without the batch dim: {shape_str(want)} for layer {layer!r} (output {shape_str(be.shape(rec))})"

    def vector(self, be: Backend, v: Any, rec: Any) -> Any | None:
        """``v`` (a steering vector) laid out to broadcast into ``rec``; None when it cannot."""
        return v if broadcasts_into(tuple(be.shape(v)), tuple(be.shape(rec))) else None

    def vector_shape(self, be: Backend, rec: Any, layer: str) -> str:
        shape = be.shape(rec)
        return f"of shape [{shape[-1]}] for layer {layer!r} (the last dim of its output, {shape_str(shape)})"


WHOLE = Part()
