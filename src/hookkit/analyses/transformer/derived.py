"""Values ``run_with_cache`` derives when they are read, not in the forward: a norm's ``hook_scale`` and
``hook_normalized``. The forward keeps a reference to the norm's input (often the very tensor kept
as a ``hook_resid_*`` name) with its in-place write count; the first read of either name computes it
from that input, with the norm's kind and eps, exactly as the forward-time view does
(``sites.names.NormView``), and the cache keeps the result.

A write into the input in place is seen by its version counter: by the model after the norm read it
(``run_with_cache`` keeps those names again, eagerly, in a second forward), or by the user after the
forward and before the first read (the read is refused: the forward's value can no longer be derived).

>>> _, cache = hookkit.run_with_cache(gpt2, ids)      # doctest: +SKIP
>>> cache["blocks.0.ln1.hook_scale"]                  # computed here, once
"""

from __future__ import annotations

from typing import Any

from hookkit.core.errors import UnsupportedModel
from hookkit.sites import Site
from hookkit.sites.names import NamePoint, NormView


class NormInput:
    """One norm's input as the forward handed it (detached, the model's own tensor), its write count
    then, its kind and eps, and its scale once computed (shared by the norm's two names)."""

    __slots__ = ("tensor", "version", "kind", "eps", "scale")

    def __init__(self, kind: str, eps: float):
        self.kind, self.eps = kind, eps
        self.tensor: Any = None
        self.version: Any = None
        self.scale: Any = None


class Derived:
    """A cache entry computed on first read: ``which`` (``"scale"`` or ``"normalized"``) of ``source``;
    ``with_scale``: the norm's scale is among the kept names (``hook_normalized`` then divides by it,
    as the forward-time view does when both are read)."""

    __slots__ = ("which", "source", "with_scale")

    def __init__(self, which: str, source: NormInput, with_scale: bool):
        self.which, self.source, self.with_scale = which, source, with_scale

    def compute(self, be: Any, name: str) -> Any:
        """The value, from the kept input; refused where the input was written in place since the forward."""
        src, m = self.source, be.family("tensor_math")
        if m.version(src.tensor) != src.version:
            raise UnsupportedModel(
                f"ActivationCache: {name!r} is derived from its norm's input when first read, and that input (a tensor this cache "
                "also keeps, such as a hook_resid_* name) was written in place after run_with_cache returned; read the norms' names "
                "before writing into kept tensors (dict(cache.items()) reads every one), or pass a copy to your edit"
            )
        if self.which == "scale" or self.with_scale:
            if src.scale is None:
                src.scale = m.norm_scale(src.tensor, src.kind, src.eps)
            if self.which == "scale":
                return src.scale
        return m.norm_normalized(src.tensor, src.kind, src.eps, src.scale if self.with_scale else None)


def split_derived(sites: list[Site]) -> tuple[list[Site], list[tuple[Site, NormInput]], dict[str, Derived]]:
    """``sites`` as ``(kept as they are, one input site per norm, name -> Derived)``: each norm view
    (not the flattened ones of OPT's MLP) is replaced by its norm's input, read once for both names."""
    kept: list[Site] = []
    inputs: dict[int, tuple[Site, NormInput]] = {}
    derived: dict[str, Derived] = {}
    wanted = {s.name for s in sites}
    for site in sites:
        point = site.module
        if not isinstance(point, NamePoint) or not isinstance(point.part, NormView) or point.event != "in":
            kept.append(site)
            continue
        norm = point.module
        found = inputs.get(id(norm))
        if found is None:
            src = NormInput(point.part.norm, point.part.eps)
            at = site.name.rsplit(".", 1)[0]  # "blocks.0.ln1"
            found = inputs[id(norm)] = (Site(at, at, norm, "forward_pre", point.index), src)
        sibling = site.name.rsplit(".", 1)[0] + ".hook_scale"
        derived[site.name] = Derived(point.part.which, found[1], point.part.which != "scale" and sibling in wanted)
    return kept, list(inputs.values()), derived
