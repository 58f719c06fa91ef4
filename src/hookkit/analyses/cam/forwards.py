"""One layer of a ``cam`` call (``LayerView``) and the many forwards of ScoreCAM and AblationCAM on it: rows
of masked inputs, ablated layer outputs multiplied as late as the model allows, and the memory layout the
framework runs them fastest in. Every shortcut keeps the arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from hookkit.analyses.cam.layouts import Layout
from hookkit.analyses.targets import logits_of
from hookkit.core.router import attach
from hookkit.core.tree import first_tensor, map_tensors
from hookkit.core.weakmap import IdentityWeakMap

#: AblationCAM tries where its rows may multiply on this many channels (the fewest that multiply the rows)
PROBE = 2


class Learned:
    """What earlier calls learned of one model: where each layer's ablated rows multiplied (the name of the
    layer whose output took them or whose inputs were repeated, None on copies of the inputs) and whether
    the model refused ``conv_layout`` rows. Only hints: a call starts from them and still checks (a level
    that fails moves up to the next; a layout is skipped only once refused), so a model changed in between
    costs time, never a wrong map."""

    __slots__ = ("levels", "layout_refused", "ablated_refused")

    def __init__(self) -> None:
        self.levels: dict[str, str | None] = {}
        self.layout_refused = False
        self.ablated_refused = False


_learned: IdentityWeakMap[Learned] = IdentityWeakMap()


def learned(model: Any) -> Learned:
    """The hints kept for ``model`` while it lives (made empty on first use)."""
    return _learned.setdefault(model, Learned())


def replace_first(obj: Any, new: Any, is_tensor: Callable[[Any], bool]) -> Any:
    """``obj`` with its first tensor replaced by ``new`` (the layer's output when it is a tuple, a dict...)."""
    if is_tensor(obj):
        return new
    done = [False]

    def swap(t: Any) -> Any:
        if done[0]:
            return t
        done[0] = True
        return new

    return map_tensors(obj, swap, is_tensor)


class RowMismatch(Exception):
    """The model's output does not have one row per row fed at the layer."""


class LayerView:
    """One layer in one batch of a ``cam`` call: what a method's weight function sees (``acts``, ``grads``:
    channels-first, float32; the layer's own output ``raw`` and ``layout``; for methods that run the model
    again ``x``, ``size``, ``scores`` (the targets' scores on ``x``), ``chunk``) and those forwards: rows of
    masked inputs or ablated outputs, and where AblationCAM's rows multiply (``level`` into ``candidates``,
    ``settled`` once found, ``hinted`` while that is only what an earlier batch or call found); ``calls``: the
    layer's calls per forward (the last is explained). ``run`` is the call's ``_Run``."""

    def __init__(self, run: Any, name: str, layer: Any, raw: Any, layout: Layout, acts: Any, grads: Any, x: Any, scores: Any):
        self.run, self.name, self.layer, self.raw, self.layout = run, name, layer, raw, layout
        self.be, self.m = run.be, run.m
        self.acts, self.grads, self.x, self.scores = acts, grads, x, scores
        self.size: tuple[int, ...] = run.size
        self.chunk = max(1, run.rows // max(1, acts.shape[0]))
        self.calls = 1  # the layer's calls per forward: the last one is explained
        self.level: int | None = None  # AblationCAM: where the rows multiply, an index into ``levels()``
        self.candidates: list[tuple[str, Any] | None] = []
        self.settled = self.hinted = False
        self.eye: Any = None  # AblationCAM's one-hot channel groups: rows of one identity on the device

    def row_scores(self, rows: Any, k: int, replace: Any = None, check: bool = False, tile: tuple[str, Any] | None = None) -> Any:
        """Run the model on ``rows`` (``replace``: this layer's output instead of its own; ``tile``: a
        ``(name, layer)`` whose inputs of N rows are repeated k times) and return the targets' scores
        ``[k, N]`` of the ``k * N`` channel-major rows that come out."""
        run, be = self.run, self.be
        handles = []
        fired: list[bool] = []
        try:
            if tile is not None:
                handles.append(attach(run.model, [tile], "forward_pre", self._tiler(k, fired)))
            if replace is not None:
                handles.append(attach(run.model, [(self.name, self.layer)], "forward", self._replacer(replace)))
            output = run.model(rows) if handles else run.forward_masked(rows)
        finally:
            for h in handles:
                h.remove()
        if check:
            first = first_tensor(output, be.is_tensor)
            if (tile is not None and not fired) or first is None or not first.shape or first.shape[0] != k * self.acts.shape[0]:
                raise RowMismatch
        return run.split_scores(output, k)

    def _replacer(self, new: Any) -> Callable[[Any], Any]:
        """A forward consumer: the output of the call the map explains (the last of ``calls`` per forward)
        replaced by ``new``. A module called several times (one ReLU in a whole ResNet bottleneck) keeps its
        other calls: replacing them all fed the last call's rows to the first (of other channels: an error)."""
        be, last = self.be, self.calls - 1

        def on_forward(ev: Any) -> Any:
            return replace_first(ev.output, new, be.is_tensor) if ev.call == last else None

        return on_forward

    def _tiler(self, k: int, fired: list[bool]) -> Callable[[Any], Any]:
        """A forward_pre consumer: every input tensor of N rows repeated k times (``[x; x; ...]``)."""
        m, be, n = self.m, self.be, self.acts.shape[0]

        def tile(t: Any) -> Any:
            return m.tile_rows(t, k) if len(t.shape) and t.shape[0] == n else t

        def on_pre(ev: Any) -> Any:
            fired.append(True)
            return map_tensors(tuple(ev.args), tile, be.is_tensor), map_tensors(dict(ev.kwargs), tile, be.is_tensor)

        return on_pre

    def levels(self) -> list[tuple[str, Any] | None]:
        """Where AblationCAM's rows may multiply, latest first: this layer's output, the inputs of each
        enclosing layer (parent first), and None: k copies of the model's inputs."""
        layers = dict(self.be.named_layers(self.run.model))
        out: list[tuple[str, Any] | None] = [(self.name, self.layer)]
        name = self.name
        while name:
            name = name.rpartition(".")[0]
            if name and name in layers:
                out.append((name, layers[name]))
        return [*out, None]

    def ablated_scores(self, ablated: Any, k: int) -> Any:
        """Scores ``[k, N]`` with this layer's output replaced by ``ablated`` (``k * N`` rows), the rows
        multiplying as late as the model allows: at this layer (the layers before run once on the N
        inputs), else at the inputs of the smallest enclosing layer that passes the k x N rows on (a block
        whose skip connection starts before the layer), else on k copies of the inputs. A level that
        raises, or does not give k x N rows out, is not used; the first that works is kept for the rest."""
        if self.level is None:  # from where it worked on an earlier batch or call: the levels below failed there
            self.candidates = self.levels()
            self.level, self.hinted = self.start_level()
        n = self.acts.shape[0]
        if not self.settled and not self.hinted and k > PROBE:  # untried levels get PROBE channels: a failure costs little
            probe = self.ablated_scores(ablated[: PROBE * n], PROBE)
            return self.m.cat([probe, self.ablated_scores(ablated[PROBE * n :], k - PROBE)], 0)
        while True:
            where = self.candidates[self.level]
            if where is None:
                self.settled = True
                self.learn(k)
                return self.replaced_scores(self.m.tile_rows(self.x, k), ablated, k)
            try:
                scores = self.replaced_scores(self.x, ablated, k, check=True, tile=where if self.level else None)
                self.settled = True
                self.learn(k)
                return scores
            except Exception:  # noqa: BLE001 - the next level is tried; on copies of the inputs a real error shows
                if self.settled:
                    raise
                self.level += 1
                if self.hinted:  # the model changed since the hint: the levels above are tried as untried ones
                    self.hinted = False
                    return self.ablated_scores(ablated, k)

    def learn(self, k: int) -> None:
        """Keep the level that worked, by name, for the next batches and calls; k = 1 rows multiply nowhere."""
        if k > 1 and self.level is not None:
            where = self.candidates[self.level]
            self.run.learned.levels[self.name] = None if where is None else where[0]

    def start_level(self) -> tuple[int, bool]:
        """The level to try first, and whether it worked before: where this layer's rows multiplied on an
        earlier batch or call (by name: the model may have changed since, and a level that fails now moves
        up as usual), else the layer itself, untried."""
        levels = self.run.learned.levels
        names = [None if c is None else c[0] for c in self.candidates]
        if self.name in levels and levels[self.name] in names:
            return names.index(levels[self.name]), True
        return 0, False

    def replaced_scores(self, rows: Any, ablated: Any, k: int, check: bool = False, tile: tuple[str, Any] | None = None) -> Any:
        """``row_scores`` with this layer's output replaced by ``ablated``. Once the level is known, a
        channels-first output is handed on in the layout the framework's convolutions and pools run fastest
        on (``conv_layout``: the same values), unless the rest of the model refuses it (then as it is)."""
        run = self.run
        fast = ablated
        if self.settled and run.fast_ablated is not False and self.layout.kind == "channels_first":
            fast = self.m.conv_layout(ablated)
        if fast is not ablated:
            try:
                scores = self.row_scores(rows, k, replace=fast, check=check, tile=tile)
                run.fast_ablated = True
                return scores
            except Exception:  # noqa: BLE001 - run again as it is below, where a real error (or a wrong level) shows
                if run.fast_ablated:
                    raise
            scores = self.row_scores(rows, k, replace=ablated, check=check, tile=tile)
            run.fast_ablated = False
            run.learned.ablated_refused = True
            return scores
        return self.row_scores(rows, k, replace=ablated, check=check, tile=tile)

    def masked_scores(self, masks: Any) -> Any:
        """ScoreCAM's scores ``[N, C]`` with class targets: the model on each input times each of its masks
        ``[N, C, *S]``, ``batch_size`` rows per forward. The rows whose mask is all zero are all the zero
        input: the first of them runs, and every sample's class is read from its output. One host read
        (which masks are all zero) and two copies to the device per layer, none per forward: a copy from
        the host waits for the device, and would stop it between forwards."""
        be, m, run, x = self.be, self.m, self.run, self.x
        n, c = masks.shape[0], masks.shape[1]
        flat = m.reshape(masks, [n * c, 1, *self.size])
        live = be.to_numpy(m.amax(m.reshape(masks, [n * c, -1]), [1])) > 0
        todo = np.flatnonzero(live)
        dead = np.flatnonzero(~live)
        if dead.size:
            todo = np.append(todo, dead[0])
        plan, at = self._pick_plan(todo, live, dead, n, c)
        rows_and_samples = be.from_numpy(np.stack([todo, todo // c]), like=x)
        picks: Any = None
        picked, bounds = [], np.cumsum([0] + [len(pos) for _, _, pos, _ in plan])
        for i, (lo, hi, _, _) in enumerate(plan):
            sel = rows_and_samples[:, lo:hi]
            inputs = m.index_select(x, 0, sel[1]) * m.index_select(flat, 0, sel[0])
            logits = m.reshape(logits_of(be, run.forward_masked(inputs)), [hi - lo, -1])
            if picks is None:  # the logits' width is known now: every forward's picks, and ``at``, go over at once
                width = logits.shape[1]
                flat_picks = np.concatenate([pos * width + cls for _, _, pos, cls in plan])
                picks = be.from_numpy(np.concatenate([flat_picks, at]), like=x)
            picked.append(m.index_select(m.reshape(logits, [-1]), 0, picks[int(bounds[i]) : int(bounds[i + 1])]))
        return m.reshape(m.index_select(m.cat(picked, 0), 0, picks[int(bounds[-1]) :]), [n, c])

    def _pick_plan(self, todo: Any, live: Any, dead: Any, n: int, c: int) -> tuple[list[tuple[int, int, Any, Any]], Any]:
        """ScoreCAM's forwards ``(lo, hi, positions, classes)``: rows ``todo[lo:hi]``, and in their output the
        rows and classes whose logits are picked; and ``at``: where each of the ``n * c`` scores lands among
        all the picked logits (the all-zero rows share the zero input's, the last row run)."""
        classes = np.asarray(self.run.classes, np.int64)
        at = np.empty(n * c, np.int64)
        plan, offset = [], 0
        for lo in range(0, len(todo), self.run.rows):
            rows = todo[lo : lo + self.run.rows]
            here = live[rows]
            at[rows[here]] = offset + np.arange(here.sum())
            pos, cls = [np.flatnonzero(here)], [classes[rows[here] // c]]
            if not here.all():  # the zero input, the last row: every sample's class
                at[dead] = offset + here.sum() + dead // c
                pos.append(np.full(n, len(rows) - 1))
                cls.append(classes)
            plan.append((lo, lo + len(rows), np.concatenate(pos), np.concatenate(cls)))
            offset += len(plan[-1][2])
        return plan, at

    def onehot(self, start: int, k: int, axis: int) -> Any:
        """Booleans ``[k, 1, ...]`` shaped like this layer's output with a group axis in front: group ``j``
        true at channel ``start + j`` of the channel ``axis`` (rows of one identity copied to the device once
        per layer: no copy from the host per forward)."""
        if self.eye is None:
            r, c = len(self.raw.shape), self.acts.shape[1]
            shape = [c, 1] + [1] * (r - 1)
            shape[1 + axis] = c
            self.eye = self.be.from_numpy(np.eye(c, dtype=bool).reshape(shape), like=self.raw)
        return self.eye[start : start + k]
