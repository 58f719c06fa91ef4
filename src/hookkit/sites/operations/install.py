"""Operation sites at run time: the pseudo-layer the router hooks, the dispatcher, the installed forward.

An ``OpSite`` stands for one operation of one layer instance (held weakly). The router treats it as
a layer: its "native hooks" are slots of the layer's dispatcher (``OpBackend`` places them), and the
dispatcher calls them around the operation exactly as a framework calls forward hooks around a
layer, so steps, calls, positions, recomputes, threads and gradients work as on layers. The first
hook placed in a layer installs the rewritten forward on the instance; the last one removed puts
back what was there (the class is never touched).
"""

from __future__ import annotations

import fnmatch
import inspect
import weakref
from collections.abc import Callable
from types import MethodType
from typing import Any

from hookkit.core.user_frame import warn_user
from hookkit.core.weakmap import IdentityWeakMap
from hookkit.sites.operations.rewrite import Compiled, SourceUnavailable, build, compiled_for, unwrap
from hookkit.sites.seen_backend import SeenBackend

_NONE = object()  # the layer had no forward of its own in its __dict__


class OpSite:
    """One operation of one layer instance, the object ``select`` returns for ``"layer::op"``."""

    __slots__ = ("_layer", "_state", "index", "name", "layer_name", "exact", "__weakref__")

    def __init__(self, layer: Any, state: LayerOps, index: int, name: str):
        self._layer, self._state, self.index, self.name, self.layer_name = weakref.ref(layer), state, index, name, ""
        self.exact = True  # last selected by its own name, not a glob: warned about when it never runs

    @property
    def layer(self) -> Any:
        """The layer whose forward performs this operation (None once it is gone)."""
        return self._layer()

    @staticmethod
    def site_backend(site: OpSite, backend: Any) -> Any:
        """The backend the router places this site's hooks with (see ``router._hooks_for``)."""
        return OpBackend.of(backend)

    def place(self, slot: int, fn: Callable) -> _Slot:
        return self._state.place(self, slot, fn)

    def children(self) -> list:
        """An operation has no sublayers (what ``backend.children`` reads)."""
        return []

    def __repr__(self) -> str:
        return f"<operation {self.name} of {type(self._layer()).__name__}>"


class _Slot:
    """The handle of one native hook of an operation (what ``backend.hook_forward`` returns)."""

    __slots__ = ("state", "index", "slot")

    def __init__(self, state: LayerOps, index: int, slot: int):
        self.state, self.index, self.slot = state, index, slot

    def remove(self) -> None:
        state, self.state = self.state, None  # type: ignore[assignment]
        if state is not None:
            state.unplace(self.index, self.slot)


class OpBackend(SeenBackend):
    """The layer's backend, but hooks go into operation slots (one per backend, attributes cached)."""

    def hook_forward_pre(self, site: OpSite, fn: Callable) -> _Slot:
        return site.place(0, fn)

    def hook_forward(self, site: OpSite, fn: Callable) -> _Slot:
        return site.place(1, fn)

    def drop_forward_hooks(self, site: Any, match: Callable) -> int:
        return 0


class _Installed:
    """What the layer's ``forward`` is while some of its operations are hooked: the rewritten
    forward, bound. A deep copy or pickle of the model gets what was there before instead (the
    class's forward, or the instance's own): a copy carries no operation site."""

    __slots__ = ("fn", "before", "state", "__weakref__")

    def __init__(self, fn: MethodType, before: Any, state: LayerOps):
        self.fn, self.before, self.state = fn, before, state

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.state.calls += 1
        return self.fn(*args, **kwargs)

    def __reduce__(self) -> tuple:
        if self.before is _NONE:  # getattr(copy, "forward") while the copy's __dict__ is still empty: the class's
            return (getattr, (self.fn.__self__, "forward"))
        return (_same, (self.before,))

    @property
    def __signature__(self) -> Any:  # generate() and friends inspect the forward's signature
        return inspect.signature(self.fn)


def _same(x: Any) -> Any:
    return x


class LayerOps:
    """A layer's operations: the rewritten code, one ``OpSite`` each (made on demand), the slots
    their hooks fill, and the forward installed while any slot is filled."""

    __slots__ = (
        "_layer",
        "compiled",
        "sites",
        "slots",
        "hooked",
        "before",
        "installed",
        "calls",
        "_inner",
        "_chain",
        "_fns",
        "_built",
        "_matches",
        "origin",
        "__weakref__",
    )

    def __init__(self, layer: Any, compiled: Compiled, inner: Any, chain: list):
        self._layer = weakref.ref(layer)
        self.compiled, self._inner, self._chain = compiled, inner, chain
        n = len(compiled.sites)
        self.sites: list[OpSite | None] = [None] * n
        self.slots: list[Any] = [None] * n  # None, or [pre, post, site, times run, layer calls when placed]
        self.calls = 0  # calls of the installed forward
        self._fns = tuple(s.fn for s in compiled.sites)
        self.hooked = 0
        self.before: Any = _NONE
        self.installed: _Installed | None = None
        self._built: Any = None  # the rewritten forward, built at the first install, kept (it reads the slots)
        self._matches: dict[str, tuple[int, ...]] = {}
        self.origin: Any = None  # the forward this was rewritten from

    def site(self, index: int) -> OpSite:
        site = self.sites[index]
        if site is None:
            layer = self._layer()
            site = self.sites[index] = OpSite(layer, self, index, self.compiled.sites[index].name)
        return site

    def matching(self, pattern: str) -> tuple[int, ...]:
        """The indices of the operations whose name matches ``pattern`` (a name or glob), kept."""
        found = self._matches.get(pattern)
        if found is None:
            if len(self._matches) > 64:
                self._matches.clear()
            names = [s.name for s in self.compiled.sites]
            found = self._matches[pattern] = tuple(i for i, n in enumerate(names) if n == pattern or fnmatch.fnmatchcase(n, pattern))
        return found

    def place(self, site: OpSite, slot: int, fn: Callable) -> _Slot:
        entry = self.slots[site.index]
        if entry is None:
            entry = self.slots[site.index] = [None, None, site, 0, self.calls]
        if entry[slot] is None:
            self.hooked += 1
        entry[slot] = fn
        if self.installed is None:
            self._install()
        return _Slot(self, site.index, slot)

    def unplace(self, index: int, slot: int) -> None:
        entry = self.slots[index]
        if entry is None or entry[slot] is None:
            return
        entry[slot] = None
        self.hooked -= 1
        if entry[0] is None and entry[1] is None:
            self.slots[index] = None
            if entry[3] == 0 and self.calls > entry[4] and entry[2].exact:
                _never_ran(entry[2], self.calls - entry[4])
        if self.hooked == 0:
            self._restore()

    def _dispatch(self) -> Callable:
        slots, fns = self.slots, self._fns

        def __hk_op__(i: int, fn: Any, *args: Any, **kwargs: Any) -> Any:
            entry = slots[i]
            if fn is None:
                fn = fns[i]
            if entry is None:
                return fn(*args, **kwargs)
            entry[3] += 1
            pre, post, site = entry[0], entry[1], entry[2]
            if pre is not None:
                changed = pre(site, args, kwargs)
                if changed is not None:
                    args, kwargs = changed
            out = fn(*args, **kwargs)
            if post is not None:
                changed = post(site, args, kwargs, out)
                if changed is not None:
                    out = changed
            return out

        return __hk_op__

    def _install(self) -> None:
        layer = self._layer()
        if layer is None:
            return
        fn = self._built
        if fn is None:
            fn = self._built = build(self._inner, self._chain, self.compiled, self._dispatch())
        d = layer.__dict__
        self.before = d.get("forward", _NONE)
        self.installed = d["forward"] = _Installed(MethodType(fn, layer), self.before, self)

    def _restore(self) -> None:
        layer, installed = self._layer(), self.installed
        self.installed = None
        if layer is None or installed is None:
            return
        d = layer.__dict__
        if d.get("forward") is not installed:  # replaced since by someone else: theirs stays
            return
        if self.before is _NONE:
            del d["forward"]
        else:
            d["forward"] = self.before
        self.before = _NONE


def _never_ran(site: OpSite, calls: int) -> None:
    warn_user(
        f"hookkit: operation {site.layer_name + '::' + site.name!r} never ran in the {calls} call(s) of its layer's forward while it was hooked "
        "(a branch not taken?): nothing was read or changed there. hookkit.ops(model, layer) shows where it is.",
        RuntimeWarning,
    )


_states: IdentityWeakMap[LayerOps] = IdentityWeakMap()


def layer_ops(layer: Any, name: str) -> LayerOps:
    """The operations of ``layer`` (named ``name`` in errors), rewritten on first use; an error
    naming the layer and why when its forward has no readable Python source."""
    state = _states.get(layer)
    if state is not None and (state.hooked or state.origin is _forward_of(layer)[1]):
        return state  # hooked, or its forward unchanged since it was rewritten (a class patched since: again)
    own, forward = _forward_of(layer)
    try:
        if forward is None:
            raise SourceUnavailable("it has no forward")
        inner, chain = unwrap(forward)
        if own is not None and getattr(own, "__self__", None) is not layer:
            raise SourceUnavailable("its forward was replaced on the instance by a callable that is not one of its methods")
        compiled = compiled_for(inner.__code__)
    except SourceUnavailable as exc:
        raise SourceUnavailable(f"cannot list the operations of layer {name!r} ({type(layer).__name__}): {exc}") from None
    state = _states[layer] = LayerOps(layer, compiled, inner, chain)
    state.origin = forward
    return state


def _forward_of(layer: Any) -> tuple[Any, Any]:
    """``(the instance's own forward or None, the forward that runs when nothing is installed)``."""
    own = getattr(layer, "__dict__", {}).get("forward")
    if isinstance(own, _Installed):  # installed, or a copy made by hand of an installed one: what was there
        own = None if own.before is _NONE else own.before
    return own, own if own is not None else getattr(type(layer), "forward", None)


def sites_of(layer: Any) -> list[OpSite]:
    """The operation sites made for ``layer`` so far (``remove_all`` clears them)."""
    state = _states.get(layer)
    return [] if state is None else [s for s in state.sites if s is not None]
