"""Values ``run_with_cache`` derives when they are read, not in the forward: a norm's ``hook_scale`` and
``hook_normalized``, the ``hook_attn_scores`` / ``hook_pattern`` of an attention call (the library's
own function runs it, SDPA or eager), and an MLP's ``hook_post`` where it is its activation of kept
names (``Replay``). The forward keeps references to what they are computed from (the norm's input,
often the very tensor kept as a ``hook_resid_*`` name; the query, key, mask, scaling and position bias
the attention function received; ``hook_pre``) with their in-place write counts; the first read of a
name computes it with the same operations as the forward does (``sites.names.NormView``,
``sites.attention_values``, the activation's ``forward``), and the cache keeps the result. The names
at one module boundary share one read (``Shared``): one native hook, not one per name.

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
from hookkit.sites.names_flat import FlatView


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


class Replay:
    """An MLP's ``hook_post`` as its activation's forward of the kept ``hook_pre`` (times the kept
    ``hook_pre_linear`` where gated: ``sites.names.Replayed``): the same operations on the same tensors
    as in the forward, so the same value, bit for bit, without keeping a second ``[batch, pos, d_mlp]``
    tensor. ``bind`` takes the kept tensors and their write counts when they were kept."""

    __slots__ = ("act", "names", "tensors", "versions")

    def __init__(self, replayed: Any):
        self.act, self.names = replayed.act, replayed.names  # the activation held: a read may outlive the model
        self.tensors: list[Any] | None = None
        self.versions: list[Any] = []

    @property
    def seen(self) -> bool:
        return self.tensors is not None

    def bind(self, values: dict[Any, Any]) -> None:
        names = self.names
        if all(n in values for n in names):
            self.tensors = [values[n] for n in names]
            self.versions = [values.get((n, "version")) for n in names]

    def written(self, m: Any) -> bool:
        return self.tensors is not None and [m.version(t) for t in self.tensors] != self.versions

    def value(self, be: Any, which: str, with_scale: bool) -> Any:
        assert self.tensors is not None  # a Replay never bound is not in the cache
        out = getattr(self.act, "forward", self.act)(self.tensors[0])  # its forward: no hook of anyone's runs again
        for t in self.tensors[1:]:
            out = out * t
        return be.detach(out)


class Shared:
    """The tensor at one module boundary (an output or an input), read once for every name kept there
    (GPT-2's ``hook_q|k|v`` are views of one output; ``hook_resid_mid``, ``hook_mlp_in`` and ``ln2``'s
    input are one input): one native hook instead of one per name. ``members``: ``(name, part)`` pairs
    whose value is the part's view, and the ``NormInput`` of a norm there."""

    __slots__ = ("members", "values")

    def __init__(self, values: dict[Any, Any]):
        self.members: list[Any] = []
        self.values = values

    def keep(self, be: Any, m: Any, site: Site, ev: Any) -> None:
        t = site.tensor(be, ev)
        if t is None:
            return
        t = be.detach(t)
        version = m.version(t)
        for member in self.members:
            if isinstance(member, NormInput):
                member.tensor, member.version = t, version
            else:
                name, part = member
                self.values[name] = part.get(be, t)[0]
                self.values[name, "version"] = version


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


def split_derived(be: Any, sites: list[Site], values: dict[Any, Any]) -> tuple[list[Site], list[tuple[Site, Any]], dict[str, Derived]]:
    """``sites`` as ``(kept as they are, one site per source with its source, name -> Derived)``: each
    norm view (not the flattened ones of OPT's MLP) is replaced by its norm's input, read once for both
    names; each attention's scores and pattern by its call's inputs; an MLP's ``hook_post`` by a
    replay of its activation where ``hook_pre`` is kept too (and nothing else acts on the activation's
    call). The names at one module boundary share one ``Shared`` read that writes into ``values``."""
    kept: list[Site] = []
    inputs: dict[int, tuple[Site, Any]] = {}
    derived: dict[str, Derived] = {}
    wanted = {s.name for s in sites}
    shared = _Boundaries(values)
    for site in sites:
        point = site.module
        at = site.name.rsplit(".", 1)[0]  # "blocks.0.ln1", "blocks.0.attn"
        if not isinstance(point, NamePoint):
            kept.append(site)
        elif isinstance(point.part, NormView) and point.event == "in":
            source = shared.norm(point, point.part, at)
            derived[site.name] = Derived(point.part.which, source, point.part.which != "scale" and f"{at}.hook_scale" in wanted)
        elif isinstance(point.module, AttnValue) and point.module.which in (SCORES, PATTERN):
            layer = point.module.layer
            found = inputs.get(id(layer))
            if found is None:
                found = inputs[id(layer)] = (Site(at, at, attn_value(layer, INPUTS), "forward", 0), AttnInputs())
            derived[site.name] = Derived(point.module.which, found[1])
        elif _replayable(be, point, wanted):
            derived[site.name] = Derived("post", Replay(point.replay))
        elif not shared.add(be, site, point):
            kept.append(site)
    return kept, [*inputs.values(), *shared.sites()], derived


def _replayable(be: Any, point: NamePoint, wanted: set[str]) -> bool:
    """Whether ``point``'s value can be replayed from kept names: they are all kept, and no hook or
    route of anyone's acts on the activation, its caller, or the module the value goes into."""
    replayed = point.replay
    if replayed is None or not all(n in wanted for n in replayed.names):
        return False
    act, parent = replayed.act, replayed.parent
    layers = [x for x in (act, parent, point.module) if x is not None and be.is_layer(x)]
    return act is not None and parent is not None and not any(be.forward_touched(x) for x in layers)


class _Boundaries:
    """The ``Shared`` read of each module boundary (module, event, tensor index) the kept names use."""

    __slots__ = ("values", "found")

    def __init__(self, values: dict[Any, Any]):
        self.values = values
        self.found: dict[tuple, tuple[Site, Shared]] = {}

    def _at(self, module: Any, event: str, index: Any, label: str) -> Shared:
        key = (id(module), event, index)
        found = self.found.get(key)
        if found is None:
            site = Site(label, label, module, "forward_pre" if event == "in" else "forward", index)
            found = self.found[key] = (site, Shared(self.values))
        return found[1]

    def add(self, be: Any, site: Site, point: NamePoint) -> bool:
        """Take ``site`` into its boundary's read; False for a name that is not a plain view of a layer's
        tensor (an operation site, OPT's flattened MLP): it keeps its own hook."""
        module = point.module
        if not be.is_layer(module) or isinstance(point.part, FlatView):
            return False
        self._at(module, point.event, point.index, site.name).members.append((site.name, point.part))
        return True

    def norm(self, point: NamePoint, view: NormView, at: str) -> NormInput:
        """The ``NormInput`` of ``point``'s norm (``view``: its part; one per norm, read at its input's boundary)."""
        shared = self._at(point.module, point.event, point.index, at)
        found = next((x for x in shared.members if isinstance(x, NormInput)), None)
        if found is None:
            found = NormInput(view.norm, view.eps)
            shared.members.append(found)
        return found

    def sites(self) -> list[tuple[Site, Shared]]:
        return list(self.found.values())
