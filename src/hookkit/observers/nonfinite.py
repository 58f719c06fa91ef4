"""``watch_nonfinite``: name the first layer whose output or output gradient holds a NaN or Inf.

Each watched layer call does one reduction on the device (``aminmax``: min and max propagate NaN
and show +-Inf) and keeps the two 0-d results; they are checked together (``isfinite(...).all()``)
and read in one host sync, at points where the model's work is done anyway.

A layer's inputs are probed too, unless an input is the very tensor a watched layer returned (then
it was probed already): a NaN made by the parent's own code between two layers (``torch.sqrt(h)``
in a ``forward``) is reported as made *before* the layer that received it, naming the layer that
ran last before it, instead of blaming the receiver.
"""

from __future__ import annotations

import weakref
from types import TracebackType
from typing import Any

import numpy as np

from hookkit.core.entry import public_entry
from hookkit.core.errors import NonFiniteError
from hookkit.core.handles import HandleGroup
from hookkit.core.router import OBSERVER, Event, attach
from hookkit.core.select import LEAVES, LayerSpec, select
from hookkit.core.tree import first_tensor, leaves
from hookkit.core.types import Layer
from hookkit.core.user_frame import warn_user
from hookkit.core.validate import check_bool, check_model, check_number

__all__ = ["GradientWarning", "watch_nonfinite"]


class GradientWarning(UserWarning):
    """Gradients crossed a threshold given to ``watch_nonfinite(explode=..., vanish=...)``."""


class watch_nonfinite(HandleGroup):
    """Raise ``hookkit.NonFiniteError`` naming the first layer that produced a NaN or Inf: in the
    forward (its output) or the backward (the gradient w.r.t. its output, first in backward order).

    >>> with hookkit.watch_nonfinite(model, explode=1e3, vanish=1e-7):   # doctest: +SKIP
    ...     loss = loss_fn(model(x), y); loss.backward(); opt.step()

    When the error surfaces (one host sync per step at most, none per layer):

    - a forward that no backward will follow (grad disabled, or an output needing no gradient) is
      checked when the model's forward returns, and the error is raised from the model call;
    - in training, the forward's flags are checked together with the backward's, when the gradient
      of the earliest watched layer output arrives (normally the last of the backward), and the error
      is raised from ``backward()``. Its ``phase`` still says where the values first went bad.
      On Paddle, which turns exceptions raised inside backward into ``OSError``, the error found
      there is raised at the next forward of the model, by ``check()`` or on leaving the block:
      call ``watch.check()`` after ``backward()`` to stop before the optimizer step;
    - whatever is still unchecked (a backward that never reached that layer, a layer called outside
      the model's forward) is checked when the next forward of the model starts, by ``check()``,
      and on leaving the ``with`` block.

    ``eager=True`` also checks at the end of every forward (one more sync per step). ``explode``:
    warn (``hookkit.GradientWarning``) when a layer's output gradient has max |g| > explode;
    ``vanish``: warn when its L2 norm < vanish; both read in the same sync. ``grads=False``
    watches the forward only. ``layers``: any layer spec, default ``hookkit.LEAVES``.
    """

    @public_entry()
    def __init__(
        self,
        model: Layer,
        layers: LayerSpec = None,
        *,
        grads: bool = True,
        explode: float | None = None,
        vanish: float | None = None,
        eager: bool = False,
    ):
        super().__init__()
        explode = check_number(explode, arg="explode", low=0, optional=True)
        vanish = check_number(vanish, arg="vanish", low=0, optional=True)
        check_bool(grads, arg="grads")
        check_bool(eager, arg="eager")
        self._backend = be = check_model(model)
        self._model = weakref.ref(model)
        self.grads, self.explode, self.vanish, self.eager = bool(grads), explode, vanish, bool(eager)
        named = select(model, LEAVES if layers is None else layers)
        self.names = [n for n, _ in named]
        # Per watched call: (phase, name, call, step, start, stop): its probes (min and max, 0-d
        # device tensors) are forward_probes[start:stop] or grad_probes[start:stop]. Arrival order is
        # time order, so the first bad entry is the first producer.
        self._entries: list[tuple[str, str, int, int, int, int]] = []
        self._fprobes: list[Any] = []
        self._gprobes: list[Any] = []
        self._norms: list[Any] = []  # one per backward entry when vanish= is set
        self._earliest: tuple[str, int, int] | None = None  # first watched output needing a gradient
        self._error: NonFiniteError | None = None  # found inside a Paddle backward, raised after it
        self._seen: dict[int, Any] = {}  # id -> weakref of the outputs probed in this forward
        self.add(attach(model, named, "forward_pre", self._on_input, OBSERVER))
        self.add(attach(model, named, "forward", self._on_forward, OBSERVER))
        if grads:
            self.add(attach(model, named, "grad", self._on_grad, OBSERVER))
        root = [("", model)]
        self.add(attach(model, root, "forward_pre", self._on_root_start, OBSERVER))
        self.add(attach(model, root, "forward", self._on_root_end, OBSERVER))
        self._is_tensor, self._probe, self._requires_grad, self._detach = be.is_tensor, be.finite_probe, be.requires_grad, be.detach

    # -- hot path: one reduction per layer call, no sync ----------------------------------------
    def _on_input(self, ev: Event) -> None:
        args = ev.args
        if not args:
            return
        seen = self._seen
        probes, start = self._fprobes, len(self._fprobes)
        for t in args if len(args) == 1 and self._is_tensor(args[0]) else leaves(args, self._is_tensor):
            ref = seen.get(id(t))
            if ref is not None and ref() is t:
                continue  # a watched layer's output, probed when it was made
            probes.extend(self._probe(self._detach(t) if self._requires_grad(t) else t))
        if len(probes) > start:
            self._entries.append(("input", ev.name, ev.call, ev.step, start, len(probes)))

    def _on_forward(self, ev: Event) -> None:
        o = ev.output
        if not self._is_tensor(o):
            o = first_tensor(o, self._is_tensor)
            if o is None:
                return
        tracked = self._requires_grad(o)
        probes, start = self._fprobes, len(self._fprobes)
        probes.extend(self._probe(self._detach(o) if tracked else o))
        self._entries.append(("forward", ev.name, ev.call, ev.step, start, len(probes)))
        self._seen[id(o)] = weakref.ref(o)
        if tracked and self._earliest is None and self.grads:
            self._earliest = (ev.name, ev.call, ev.step)

    def _on_grad(self, ev: Event) -> None:
        g = ev.grad
        if g is None:
            return
        key = (ev.name, ev.call, ev.step)
        probes, start = self._gprobes, len(self._gprobes)
        probes.extend(self._probe(g))
        self._entries.append(("backward", *key, start, len(probes)))
        if self.vanish is not None:
            self._norms.append(self._backend.l2_norm(g))
        if key == self._earliest:
            self._earliest = None
            if self._backend.raises_through_backward:
                self.check()
            else:  # the framework would turn our exception into its own: keep it for later
                try:
                    self.check()
                except NonFiniteError as exc:
                    self._error = exc

    def _on_root_start(self, ev: Event) -> None:
        self._earliest = None
        self._seen = {}
        if self._entries or self._error is not None:  # left over from an earlier step
            self.check()

    def _on_root_end(self, ev: Event) -> None:
        if self.eager:
            self.check()
            return
        out = first_tensor(ev.output, self._is_tensor)
        backward_follows = self.grads and out is not None and self._requires_grad(out) and self._backend.grad_enabled()
        if not backward_follows:
            self._earliest = None
            self.check()

    # -- the one sync ---------------------------------------------------------------------------
    def check(self) -> None:
        """Read the pending flags (one host sync); raise ``NonFiniteError`` for the first bad one and
        warn (``GradientWarning``) for crossed gradient thresholds. Nothing pending: no sync."""
        if self._error is not None:
            exc, self._error = self._error, None
            self._reset()
            raise exc
        entries, fprobes, gprobes, norms = self._entries, self._fprobes, self._gprobes, self._norms
        if not entries:
            return
        self._reset()
        be = self._backend
        f = be.stack(fprobes) if fprobes else None
        g = be.stack(gprobes) if gprobes else None
        n = be.stack(norms) if norms else None
        if self._all_ok(f, g, n):  # the one host read
            return
        # something is wrong: find what (more reads are fine here)
        fv = np.asarray(be.to_numpy(f), dtype=np.float64) if f is not None else np.zeros(0)
        gv = np.asarray(be.to_numpy(g), dtype=np.float64) if g is not None else np.zeros(0)
        self._raise_first_nonfinite(entries, fv, gv)
        grads = [e for e in entries if e[0] == "backward"]
        if self.explode is not None:
            peaks = [float(np.abs(gv[e[4] : e[5]]).max()) if e[5] > e[4] else 0.0 for e in grads]
            self._warn_layers("exploding", f"max |grad| > {self.explode:g}", [(e, v) for e, v in zip(grads, peaks) if v > self.explode])
        if n is not None:
            nv = np.asarray(be.to_numpy(n), dtype=np.float64)
            self._warn_layers("vanishing", f"grad norm < {self.vanish:g}", [(e, v) for e, v in zip(grads, nv) if v < self.vanish])

    def _all_ok(self, f: Any, g: Any, n: Any) -> bool:
        """Whether every probe is finite and every gradient within the thresholds: one host read."""
        be, oks = self._backend, []
        if f is not None:
            oks.append(be.isfinite_all(f))
        if g is not None:
            oks.append(be.isfinite_all(g))
            if self.explode is not None:
                oks.append((g.abs() <= self.explode).all())
        if n is not None:
            oks.append((n >= self.vanish).all())
        return not oks or bool(be.stack(oks).all())

    def _raise_first_nonfinite(self, entries: list, fv: np.ndarray, gv: np.ndarray) -> None:
        """``NonFiniteError`` for the first entry with a non-finite value, naming the layer before it."""
        previous = None  # the last watched layer whose forward ended before the entry at hand
        for phase, name, call, step, start, stop in entries:
            values = (gv if phase == "backward" else fv)[start:stop]
            if not np.isfinite(values).all():
                rank, world = self._backend.world()  # data-parallel training: say which process saw it
                where = f"on rank {rank} of {world}" if world > 1 else ""
                raise NonFiniteError(name, phase, call, step, where, before=previous, rank=rank)
            if phase == "forward":
                previous = name

    def _warn_layers(self, adjective: str, what: str, hits: list) -> None:
        if hits:
            where = ", ".join(f"{e[1]!r} (call {e[2]}, step {e[3]}: {v:.3g})" for e, v in hits[:8])
            more = f" and {len(hits) - 8} more" if len(hits) > 8 else ""
            warn_user(f"{adjective} gradients ({what}) w.r.t. the output of {where}{more}", GradientWarning)

    def _reset(self) -> None:
        self._entries, self._fprobes, self._gprobes, self._norms = [], [], [], []
        self._seen = {}

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            if exc_type is None:
                self.check()
        finally:
            self._reset()
            self._error = None
            super().__exit__(exc_type, exc, tb)  # removes; a framework error gets the failing layer's note

    def __repr__(self) -> str:
        return f"<hookkit.watch_nonfinite {len(self.names)} layer{'' if len(self.names) == 1 else 's'}, {'removed' if self.removed else 'active'}>"
