"""Values ``run_with_cache`` derives when they are read, not in the forward: a norm's ``hook_scale`` and
``hook_normalized``, and the ``hook_attn_scores`` / ``hook_pattern`` of an attention call run by the
library's own kernel (SDPA). The forward keeps references to what they are computed from (the norm's
input, often the very tensor kept as a ``hook_resid_*`` name; the query, key, mask, scaling and
position bias the attention function received) with their in-place write counts; the first read of
a name computes it with the same operations as the forward-time reading does
(``sites.names.NormView``, ``sites.attention_values``), and the cache keeps the result. An eager call
whose scores hookkit computes anyway (``attention_values``: an eager float32 call) hands them over:
nothing is computed twice.

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
from hookkit.sites.attention_values import INPUTS, PATTERN, SCORES, AttnValue, attn_value
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

    @property
    def seen(self) -> bool:
        return self.tensor is not None

    def keep(self, be: Any, m: Any, site: Site, ev: Any) -> None:
        t = site.tensor(be, ev)
        if t is not None:
            self.tensor = be.detach(t)
            self.version = m.version(self.tensor)

    def written(self, m: Any) -> bool:
        return m.version(self.tensor) != self.version

    def value(self, be: Any, which: str, with_scale: bool) -> Any:
        m = be.family("tensor_math")
        if which == "scale" or with_scale:
            if self.scale is None:
                self.scale = m.norm_scale(self.tensor, self.kind, self.eps)
            if which == "scale":
                return self.scale
        return m.norm_normalized(self.tensor, self.kind, self.eps, self.scale if with_scale else None)


class AttnInputs:
    """One attention call's query and key (``[batch, head, pos, d_head]``, after rotary), mask, scaling,
    causal flag, position bias and softcap as its attention function received them (detached), their
    write counts then; its scores and pattern once computed (or as the call computed them)."""

    __slots__ = ("query", "key", "given", "versions", "scores", "pattern", "_be")

    def __init__(self) -> None:
        self.query: Any = None
        self.key: Any = None
        self.given: dict[str, Any] = {}
        self.versions: list[Any] = []
        self.scores: Any = None
        self.pattern: Any = None

    @property
    def seen(self) -> bool:
        return self.query is not None

    def _tensors(self, be: Any) -> list[Any]:
        return [self.query, self.key, *(self.given.get(k) for k in ("mask", "position_bias") if be.is_tensor(self.given.get(k)))]

    def keep(self, be: Any, m: Any, site: Site, ev: Any) -> None:
        query, key = ev.args
        given = dict(ev.kwargs)
        self.query, self.key = be.detach(query), be.detach(key)
        scores, pattern = given.pop("scores"), given.pop("pattern")
        for k in ("mask", "position_bias"):
            if be.is_tensor(given.get(k)):
                given[k] = be.detach(given[k])
        self.given = given
        self.scores = None if scores is None else be.detach(scores)
        self.pattern = None if pattern is None else be.detach(pattern)
        self.versions = [m.version(t) for t in self._tensors(be)]
        self._be = be

    def written(self, m: Any) -> bool:
        be = self._be
        return [m.version(t) for t in self._tensors(be)] != self.versions

    def value(self, be: Any, which: str, with_scale: bool) -> Any:
        fam = be.family("attention")
        if self.scores is None:
            g = self.given
            n_heads = be.shape(self.query)[1]
            scores = fam.scores(
                self.query,
                self.key,
                range(n_heads),
                g["scaling"],
                mask=g["mask"],
                causal=g["causal"],
                position_bias=g["position_bias"],
                softcap=g["softcap"],
            )
            self.scores = be.detach(scores)
        if which == SCORES:
            return self.scores
        if self.pattern is None:
            self.pattern = be.detach(fam.softmax(self.scores))
        return self.pattern


class Derived:
    """A cache entry computed on first read: ``which`` (``"scale"``, ``"normalized"``, ``"scores"``,
    ``"pattern"``) of ``source``; ``with_scale``: the norm's scale is among the kept names
    (``hook_normalized`` then divides by it, as the forward-time view does when both are read)."""

    __slots__ = ("which", "source", "with_scale")

    def __init__(self, which: str, source: Any, with_scale: bool = False):
        self.which, self.source, self.with_scale = which, source, with_scale

    def compute(self, be: Any, name: str) -> Any:
        """The value, from the kept tensors; refused where one was written in place since the forward."""
        if self.source.written(be.family("tensor_math")):
            raise UnsupportedModel(
                f"ActivationCache: {name!r} is derived when first read from tensors the forward handed (a norm's input; an attention "
                "call's query, key and mask), and one of them (a tensor this cache may also keep, such as a hook_resid_* name) was "
                "written in place after run_with_cache returned; read the derived names before writing into kept tensors "
                "(dict(cache.items()) reads every one), or pass a copy to your edit"
            )
        return self.source.value(be, self.which, self.with_scale)


def split_derived(sites: list[Site]) -> tuple[list[Site], list[tuple[Site, Any]], dict[str, Derived]]:
    """``sites`` as ``(kept as they are, one site per source with its source, name -> Derived)``: each
    norm view (not the flattened ones of OPT's MLP) is replaced by its norm's input, read once for both
    names; each attention's scores and pattern by its call's inputs."""
    kept: list[Site] = []
    inputs: dict[int, tuple[Site, Any]] = {}
    derived: dict[str, Derived] = {}
    wanted = {s.name for s in sites}
    for site in sites:
        point = site.module
        at = site.name.rsplit(".", 1)[0]  # "blocks.0.ln1", "blocks.0.attn"
        if isinstance(point, NamePoint) and isinstance(point.part, NormView) and point.event == "in":
            norm = point.module
            found = inputs.get(id(norm))
            if found is None:
                found = inputs[id(norm)] = (Site(at, at, norm, "forward_pre", point.index), NormInput(point.part.norm, point.part.eps))
            derived[site.name] = Derived(point.part.which, found[1], point.part.which != "scale" and f"{at}.hook_scale" in wanted)
        elif isinstance(point, NamePoint) and isinstance(point.module, AttnValue) and point.module.which in (SCORES, PATTERN):
            layer = point.module.layer
            found = inputs.get(id(layer))
            if found is None:
                found = inputs[id(layer)] = (Site(at, at, attn_value(layer, INPUTS), "forward", 0), AttnInputs())
            derived[site.name] = Derived(point.module.which, found[1])
        else:
            kept.append(site)
    return kept, list(inputs.values()), derived
