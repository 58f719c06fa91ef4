"""Recording: ``ActivationStats`` and ``GradientStats`` attached to a model.

The hot path (one consumer call per hooked layer call) reduces the detached output to one row on
the model's device (``Backend.activation_sums``: ``[mean, m2, count <= near_zero]``;
``Backend.param_sums``: ``[sum, norm, max |x|]``) and appends it to a list with its step, call and
element count: no ``.item()``, no copy to the host. Every 1024 records a layer's rows are stacked
into one device tensor, so a long run keeps a few tensors per layer, not millions. Tensors in host
memory take the C kernel instead, which writes each record into a preallocated row
(``backends.host_stats.HostRows``).

Under data parallelism (a process group of more than one rank when ``GradientStats`` is created)
parameter rows are read from ``.grad`` once the backward is complete (``Backend.after_backward``:
after DDP's all-reduce, FSDP's reduce-scatter), not at the gradient hook, which sees the rank's own
gradient.

A read moves the rows recorded since the last read to the host (series.Rows: bounded memory,
O(new rows)), and, when the model trains in several processes, merges them with the other ranks'
(reduce.py): one collective per read, none per step.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from hookkit.backends.host_stats import HostRows
from hookkit.core.guards import real_values
from hookkit.core.handles import HandleGroup
from hookkit.core.router import OBSERVER, Event, attach
from hookkit.core.select import WITH_PARAMS, LayerSpec, select
from hookkit.core.tree import first_tensor
from hookkit.core.types import Layer
from hookkit.core.validate import check_bool, check_int, check_model, check_number, check_range_pair
from hookkit.observers.stats.backwards import BackwardCounter
from hookkit.observers.stats.loaded import ActivationData, GradientData, read_files
from hookkit.observers.stats.reduce import Block, gather_blocks, merge_block
from hookkit.observers.stats.series import ACTIVATION, BACKWARD, GRADIENT, Kind, Rows

__all__ = ["ActivationStats", "GradientStats"]

CHUNK = 1024  # records per layer before they are stacked into one device tensor


class Pending:
    """Rows recorded since the last read (one layer, one kind). The hot path appends to the lists
    directly; ``stack`` empties them in place (the consumers hold the same lists). Records of
    tensors in host memory are written by the C kernel into ``host`` instead (preallocated rows,
    no tensor per call: ``Backend.activation_sums_into``, ``tensor_sums_into``)."""

    __slots__ = ("backend", "rows", "hists", "steps", "calls", "numels", "chunks", "hist_chunks", "host", "width")

    def __init__(self, backend: Any, bins: int = 0, width: int = 3):
        self.backend = backend
        self.width = width  # values per device row (a 2-d row block holds several rows)
        self.host = HostRows(bins)
        self.rows: list[Any] = []
        self.hists: list[Any] = []
        self.steps: list[int] = []
        self.calls: list[int] = []
        self.numels: list[int] = []
        self.chunks: list[Any] = []
        self.hist_chunks: list[Any] = []

    def __len__(self) -> int:
        return len(self.steps) + len(self.host)

    def stack(self) -> None:
        if self.rows:
            self.chunks.append(self.backend.stack(self.rows))
            del self.rows[:]
        if self.hists:
            self.hist_chunks.append(self.backend.stack(self.hists))
            del self.hists[:]

    def drain(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """``(steps, calls, numels, rows [k, width] float64, hists [k, bins] or None)``; empties the lists."""
        self.stack()
        to_numpy, w = self.backend.to_numpy, self.width
        rows = (
            np.concatenate([np.asarray(to_numpy(c), np.float64).reshape(-1, w) for c in self.chunks]) if self.chunks else np.zeros((0, w))
        )
        hists = None
        if self.hist_chunks:
            parts = [np.asarray(to_numpy(c), np.float64) for c in self.hist_chunks]
            hists = np.concatenate([h.reshape(-1, h.shape[-1]) for h in parts])
        out = (np.array(self.steps, np.int64), np.array(self.calls, np.int64), np.array(self.numels, np.float64), rows, hists)
        self.chunks, self.hist_chunks = [], []
        del self.steps[:], self.calls[:], self.numels[:]
        if self.host.n:  # [step, call, n, the backend's row]: the order of records does not matter (merge_block sorts)
            host, host_hists = self.host.take()
            steps, calls, numels, rows, hists = out
            if host_hists is not None and hists is not None:
                host_hists = np.concatenate((hists, host_hists))
            out = (
                np.concatenate((steps, host[:, 0].astype(np.int64))),
                np.concatenate((calls, host[:, 1].astype(np.int64))),
                np.concatenate((numels, host[:, 2])),
                np.concatenate((rows, host[:, 3:])),
                hists if host_hists is None else host_hists,
            )
        return out


def _empty(kind: Kind, bins: int = 0) -> Block:
    z = np.zeros(0, np.int64)
    return z, z, z, np.zeros((0, kind.width)), np.zeros((0, bins)) if bins else None


def _extend(rows: Rows, block: Block) -> None:
    """Append a block sorted by (step, call) to ``rows``; rows of keys already there are merged in."""
    step, call, records, state, hist = block
    if not len(step):
        return
    if rows.n:
        last_step, last_call = rows.step[rows.n - 1], rows.call[rows.n - 1]
        if (step[0], call[0]) <= (last_step, last_call):  # overlaps what is stored: merge the tail again
            start = int(np.searchsorted(rows.step[: rows.n], step[0], side="left"))
            old = rows.block(start)
            step, call, records, state, hist = merge_block(rows.kind, _concat(old, block))
            rows._grow(len(rows.step))  # fresh buffers: arrays handed out earlier stay as they were
            rows.n, rows.done = start, min(rows.done, start)
    rows.append(step, call, state, hist, records)


class _Recorder(HandleGroup):
    """Attaches at construction (rolled back if that fails half-way); ``remove()`` / ``with`` detach.

    Holds no layer, parameter or model strongly: keeping the statistics keeps no weights alive.
    Subclasses set ``_local`` (one ``Rows`` per slot) and say how to drain their pending records."""

    _local: list[Rows]

    def _setup(self, model: Any, layers: LayerSpec, every: int, sync: bool) -> list[tuple[str, Any]]:
        HandleGroup.__init__(self)
        fn = type(self).__name__
        check_int(every, fn=fn, arg="every", low=1)
        check_bool(sync, fn=fn, arg="sync")
        self._backend = check_model(model, fn=fn)
        self._model = weakref.ref(model)
        self._sync = bool(sync)
        self._reduced: list[Rows] | None = None  # all ranks' rows, merged (distributed training)
        self._waiting: list[Block] | None = None  # this rank's rows not yet merged with the others'
        self._cache: dict[str, dict[str, np.ndarray]] | None = None
        self._local_cache: dict[str, dict[str, np.ndarray]] | None = None
        return select(model, WITH_PARAMS if layers is None else layers)

    def _attach_all(self, attach_fn: Callable[[], object]) -> None:
        try:
            attach_fn()
        except BaseException:
            self.remove()  # nothing half-attached
            raise

    def __repr__(self) -> str:  # the statistics' own display, not HandleGroup's
        from hookkit.observers.stats.display import text

        return text(self)

    def _recording(self, every: int, train_only: bool) -> Callable[[int], bool]:
        """``record(step) -> bool``, evaluated once per step (model.training read once, a Python attribute)."""
        model_ref, backend = self._model, self._backend
        state: list[Any] = [None, False]

        def record(step: int) -> bool:
            if step != state[0]:
                state[0] = step
                ok = step % every == 0
                if ok and train_only:
                    model = model_ref()
                    ok = model is not None and backend.is_training(model)
                state[1] = ok
            return state[1]

        return record

    # -- what subclasses provide ------------------------------------------------------------------
    def _has_pending(self) -> bool:
        raise NotImplementedError

    def _drain(self, world: int, rank: int) -> tuple[list[Block], list[Block]]:
        """``(local blocks, this rank's contributions to the cross-rank merge)``, one per slot."""
        raise NotImplementedError

    def _build(self, slots: list[Rows]) -> dict[str, dict[str, np.ndarray]]:
        raise NotImplementedError

    # -- reading ---------------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        """This process's rank in the framework's default process group (0 without one)."""
        return self._backend.world()[0]

    def _world(self) -> int:
        return self._backend.world()[1]

    def _update(self, collective: bool) -> None:
        rank, world = self._backend.world()
        syncing = self._sync and world > 1
        if self._has_pending():
            local, contributions = self._drain(world if syncing else 1, rank)
            for rows, block in zip(self._local, local):
                _extend(rows, block)
            self._local_cache = None
            if syncing:
                waiting = self._waiting
                self._waiting = contributions if waiting is None else [_concat(a, b) for a, b in zip(waiting, contributions)]
        if collective and syncing and self._waiting is not None:
            kinds = [r.kind for r in self._local]
            merged = gather_blocks(self._backend, kinds, self._waiting, max(r.bins for r in self._local))
            self._waiting = None
            if self._reduced is None:
                self._reduced = [Rows(r.kind, r.bins) for r in self._local]
            for rows, block in zip(self._reduced, merged):
                _extend(rows, block)
            self._cache = None

    def _tables(self) -> dict[str, dict[str, np.ndarray]]:
        """All ranks' tables: in distributed training a collective, when records are new."""
        self._update(collective=True)
        if self._reduced is None:
            return self._local_tables()
        if self._cache is None:
            self._cache = self._build(self._reduced)
        return self._cache

    def _local_tables(self) -> dict[str, dict[str, np.ndarray]]:
        self._update(collective=False)
        if self._local_cache is None:
            self._local_cache = self._build(self._local)
        return self._local_cache

    def clear(self) -> None:
        """Forget what was recorded (on this rank); keep recording."""
        self._drain(1, 0)
        for rows in (*self._local, *(self._reduced or ())):
            rows.clear()
        self._waiting = None
        self._cache = self._local_cache = None


def _concat(a: Block, b: Block) -> Block:
    """``a`` then ``b``, array by array (the histograms when both have them)."""
    hist = None if a[4] is None or b[4] is None else np.concatenate((a[4], b[4]))
    step, call, records, state = (np.concatenate((x, y)) for x, y in zip(a[:4], b[:4]))
    return step, call, records, state, hist


class ActivationStats(_Recorder, ActivationData):
    """fastai's ActivationStats, kept on the device: per layer and recorded forward, the mean, std and
    fraction of values ``<= near_zero`` of the layer's output (and its histogram with ``hist=True``).

    >>> with hookkit.ActivationStats(model, every=10, hist=True) as stats:   # doctest: +SKIP
    ...     for x, y in data: train_step(model, x, y)
    >>> stats.layer_stats("conv1")["std"]     # np.ndarray, one value per recorded forward
    >>> stats.save("runs/act"); hookkit.ActivationStats.load("runs/act")

    ``layers``: any layer spec, default ``hookkit.WITH_PARAMS`` (fastai's default). ``every=N``:
    record the forwards of ``model`` whose index (``step``) is a multiple of N (fastai's and wandb's
    ``log_freq``). ``train_only``: only forwards with the model in training mode. A layer called
    several times per forward gives one record per call (``"call"`` says which). Where a layer
    returns a tuple or dict, its first tensor is used. Formulas (fastai's): ``o.mean()``,
    ``o.std()`` (unbiased), ``(o <= near_zero)`` mean, ``histc(o.float(), bins, *range)``.

    Distributed training (DDP, FSDP, Lightning, Hugging Face, ``paddle.DataParallel``): reads
    return the statistics of all ranks' outputs together, reduced when read; every rank must read
    (a collective). ``sync=False``: each rank reads its own. Long runs: see ``hookkit.observers.stats.series``.
    """

    def __init__(
        self,
        model: Layer,
        layers: LayerSpec = None,
        *,
        every: int = 1,
        hist: bool = False,
        bins: int = 40,
        range: tuple[float, float] = (0, 10),  # noqa: A002 - fastai's name
        near_zero: float = 0.05,
        train_only: bool = True,
        sync: bool = True,
    ):
        fn = "ActivationStats"
        settings = {
            "bins": check_int(bins, fn=fn, arg="bins", low=1, high=1 << 20),
            "range": check_range_pair(range, fn=fn, arg="range"),
            "near_zero": check_number(near_zero, fn=fn, arg="near_zero"),
            "every": every,
            "hist": check_bool(hist, fn=fn, arg="hist"),
            "train_only": check_bool(train_only, fn=fn, arg="train_only"),
        }
        named = self._setup(model, layers, every, sync)
        ActivationData.__init__(self, [n for n, _ in named], self._backend.name, settings)
        self._local = [Rows(ACTIVATION, bins if self.hist else 0) for _ in named]
        self._pending = [Pending(self._backend, bins if self.hist else 0) for _ in named]
        record = self._recording(every, self.train_only)
        self._attach_all(
            lambda: [self.add(attach(model, [nl], "forward", self._consumer(i, record), OBSERVER)) for i, nl in enumerate(named)]
        )

    def _consumer(self, slot: int, record: Callable[[int], bool]) -> Callable[[Event], None]:
        be = self._backend
        is_tensor, sums, sums_hist, numel, detach = be.is_tensor, be.activation_sums, be.activation_sums_hist, be.numel, be.detach
        into = be.activation_sums_into
        pending = self._pending[slot]
        host = pending.host
        rows, hists, steps, calls, numels, stack = pending.rows, pending.hists, pending.steps, pending.calls, pending.numels, pending.stack
        want_hist = self.hist
        near_zero, bins, (lo, hi) = self.near_zero, self.bins, self.hist_range
        hist_range = (lo, hi) if want_hist else None
        real = real_values(be, "ActivationStats")  # complex outputs: skipped, one warning
        real_dtypes = real.real  # a set lookup per record, no call, once the dtype is known

        def on_forward(ev: Event) -> None:
            if not record(ev.step):
                return
            o = ev.output
            if not is_tensor(o):
                o = first_tensor(o, is_tensor)
                if o is None:
                    return
            if into(host, o, near_zero, ev.step, ev.call, hist_range):  # in host memory: the kernel wrote the record
                return
            o = detach(o)  # no autograd graph for the statistics
            if id(o.dtype) not in real_dtypes and not real(o, ev.name):
                return
            if want_hist:
                row, hist = sums_hist(o, near_zero, bins, lo, hi)
                rows.append(row)
                hists.append(hist)
            else:
                rows.append(sums(o, near_zero))
            steps.append(ev.step)
            calls.append(ev.call)
            numels.append(numel(o))
            if len(rows) >= CHUNK:
                stack()

        return on_forward

    def _has_pending(self) -> bool:
        return any(len(p) for p in self._pending)

    def _drain(self, world: int, rank: int) -> tuple[list[Block], list[Block]]:
        blocks = []
        for pending in self._pending:
            steps, calls, n, r, hists = pending.drain()
            state = np.column_stack((n, r[:, 0], r[:, 1], r[:, 2]))  # [n, mean, m2, count]
            blocks.append(merge_block(ACTIVATION, (steps, calls, np.ones(len(steps), np.int64), state, hists)))
        return blocks, blocks

    def _build(self, slots: list[Rows]) -> dict[str, dict[str, np.ndarray]]:
        return {name: dict(rows.columns()) for name, rows in zip(self.names, slots)}

    @staticmethod
    def load(directory: Any) -> ActivationData:
        """Read statistics written by ``ActivationStats.save(directory)``.

        >>> stats = hookkit.ActivationStats.load("runs/act"); stats.layer_stats("conv1")   # doctest: +SKIP
        """
        return read_files(directory, "activation_stats")  # type: ignore[return-value]


def _weak(t: Any) -> Any:
    """A weak reference to ``t``, or a dead one where the tensor type takes none."""
    try:
        return weakref.ref(t)
    except TypeError:
        return lambda: None


class GradientStats(_Recorder, GradientData):
    """Per layer and recorded step: mean, std, norm and max-abs of the gradient w.r.t. the layer's
    output (``layer_stats``), and of its direct parameters' gradients taken together (``param_stats``).

    >>> with hookkit.GradientStats(model) as gstats:   # doctest: +SKIP
    ...     for x, y in data: train_step(model, x, y)
    >>> gstats.layer_stats("fc")["norm"]; gstats.param_stats("fc")["max_abs"]
    >>> names, steps, norms = gstats.gradient_flow()   # [layers, steps] norms

    Output gradients come from the router's ``grad`` event (a tensor hook on the first output
    tensor); parameter gradients from its ``param_grad`` event: the gradient of one backward, after
    the interventions (``clip_grad``) changed it, before it is accumulated into ``.grad``. Each
    keeps ``[sum, norm, max |g|]`` on the device, merged per layer when read (float64:
    ``var = (sum of squares - n mean^2) / (n - 1)``, exact enough as gradients have |mean| << std).
    ``every=N`` records the backward of forwards whose step is a multiple of N.

    Distributed training: parameter rows are read from ``.grad`` at the end of the backward, the
    synchronized gradient the optimizer steps with (after DDP's all-reduce; FSDP: each rank's shard,
    merged across ranks when read); output-gradient rows of all ranks are merged when read, each
    rank's divided by the world size (the gradient of the loss averaged over ranks, as DDP averages
    parameter gradients). Every rank must read (a collective); ``sync=False``: each rank its own.
    """

    def __init__(self, model: Layer, layers: LayerSpec = None, *, every: int = 1, sync: bool = True):
        named = self._setup(model, layers, every, sync)
        GradientData.__init__(self, [n for n, _ in named], self._backend.name, {"every": every})
        be = self._backend
        n = len(named)
        self._local = [Rows(GRADIENT) for _ in range(2 * n)]  # slots: outputs 0..n-1, parameters n..2n-1
        self._pending = [Pending(be) for _ in range(n)]
        # per layer: one Pending for all its parameters ("calls" holds the parameter's index)
        self._param_pending = [Pending(be) for _ in range(n)]
        # a parameter shared by several layers (tied embeddings) is reduced once per backward:
        # (weak ref to the gradient, host row or None, device row or None) of the last one reduced
        self._last_param_row: list[Any] = [None, None, None]
        self._param_index: list[dict[str, int]] = []
        self._param_refs: list[list[Any]] = []  # weak: keeping the statistics keeps no weights alive
        self._param_sharded: list[np.ndarray] = []
        for _, layer in named:
            params = [(pn, p) for pn, p in be.named_parameters(layer, recurse=False) if be.requires_grad(p)]
            self._param_index.append({pn: i for i, (pn, _) in enumerate(params)})
            self._param_refs.append([weakref.ref(p) for _, p in params])
            self._param_sharded.append(np.array([be.is_sharded(p) for _, p in params], dtype=bool))
        # Under data parallelism the gradient is final only after the backward (DDP all-reduces
        # it then): read .grad at the end of each recorded backward instead of at the hook.
        self._after_backward = be.world()[1] > 1
        self._due: list[Any] = [None]  # (step, backward) whose parameter gradients are to be read
        self._backwards = BackwardCounter(be)  # several backwards of one forward: one row each
        self._warned_local = False
        record = self._recording(every, False)

        def attach_all() -> None:
            for i, nl in enumerate(named):
                self.add(attach(model, [nl], "grad", self._consumer(i, record), OBSERVER))
                if self._param_refs[i] and not self._after_backward:
                    self.add(attach(model, [nl], "param_grad", self._param_consumer(i, record), OBSERVER))

        self._attach_all(attach_all)

    def _consumer(self, slot: int, record: Callable[[int], bool]) -> Callable[[Event], None]:
        be = self._backend
        sums, numel, detach, into = be.grad_sums, be.numel, be.detach, be.tensor_sums_into
        real = real_values(be, "GradientStats")  # complex gradients: skipped, one warning
        real_dtypes = real.real
        pending = self._pending[slot]
        rows, steps, calls, numels, stack, host = pending.rows, pending.steps, pending.calls, pending.numels, pending.stack, pending.host
        due, after, backward = self._due, self._after_backward, self._backwards.index

        def on_grad(ev: Event) -> None:
            step = ev.step
            if ev.index != 0 or not record(step):
                return
            b = backward(step)
            key = b * BACKWARD + ev.call if b else ev.call  # rows keyed by (step, backward, call)
            if not into(host, ev.grad, step, key):  # not in host memory: the framework's ops
                g = detach(ev.grad)
                if id(g.dtype) not in real_dtypes and not real(g, ev.name):
                    return
                rows.append(sums(g))
                steps.append(step)
                calls.append(key)
                numels.append(numel(g))
                if len(rows) >= CHUNK:
                    stack()
            if after and due[0] is None:
                due[0] = (step, b)
                be.after_backward(self._read_param_grads)

        return on_grad

    def _param_consumer(self, slot: int, record: Callable[[int], bool]) -> Callable[[Event], None]:
        be = self._backend
        sums, numel, detach, into = be.param_sums, be.numel, be.detach, be.tensor_sums_into
        index = self._param_index[slot]
        pending = self._param_pending[slot]
        rows, steps, calls, numels, stack, host = pending.rows, pending.steps, pending.calls, pending.numels, pending.stack, pending.host

        last = self._last_param_row
        backward = self._backwards.index

        def on_param_grad(ev: Event) -> None:
            step, grad = ev.step, ev.grad
            if not record(step):
                return
            # the parameter's index, and which backward (param_grad events always carry param_name)
            i = index[ev.param_name] + BACKWARD * backward(step)  # type: ignore[index]
            seen = last[0] is not None and last[0]() is grad  # the same gradient, seen by another layer
            if seen and last[1] is not None:
                k = host.slot()
                host.rows[k] = last[1]
                host.rows[k, 1] = i  # the row's "call" holds the parameter's index in this layer
                host.n = k + 1
                return
            if not seen and into(host, grad, step, i):
                last[:] = _weak(grad), host.rows[host.n - 1].copy(), None
                return
            g = detach(grad)
            row = last[2] if seen else sums(g)
            if not seen:
                last[:] = _weak(grad), None, row
            rows.append(row)
            steps.append(step)
            calls.append(i)
            numels.append(numel(g))
            if len(rows) >= CHUNK:
                stack()

        return on_param_grad

    def _read_param_grads(self) -> None:
        """End of a recorded backward (data-parallel training): each parameter's synchronized ``.grad``."""
        (step, b), self._due[0] = self._due[0], None
        be = self._backend
        sums, numel, grad_of = be.param_sums, be.numel, be.grad_of
        for refs, pending in zip(self._param_refs, self._param_pending):
            for i, ref in enumerate(refs):
                p = ref()
                g = None if p is None else grad_of(p)
                if g is None or not numel(g):  # no gradient in this backward, or an empty shard
                    continue
                key = b * BACKWARD + i
                if be.tensor_sums_into(pending.host, g, step, key):
                    continue
                pending.rows.append(sums(be.detach(g)))
                pending.steps.append(step)
                pending.calls.append(key)
                pending.numels.append(numel(g))
                if len(pending.rows) >= CHUNK:
                    pending.stack()

    def _has_pending(self) -> bool:
        return any(len(p) for p in self._pending) or any(len(p) for p in self._param_pending)

    def _drain(self, world: int, rank: int) -> tuple[list[Block], list[Block]]:
        if world > 1 and not self._after_backward and not self._warned_local:
            self._warned_local = True
            warnings.warn(
                "GradientStats was created before the process group was initialized: its parameter rows are each "
                "rank's local gradient (before the all-reduce); create it after init_process_group / init_parallel_env",
                RuntimeWarning,
                stacklevel=4,
            )
        local: list[Block] = []
        contributions: list[Block] = []
        for pending in self._pending:
            steps, calls, n, r, _ = pending.drain()
            state = np.column_stack((n, r[:, 0], r[:, 1] ** 2, r[:, 2]))  # [n, sum, sum of squares, max]
            block = merge_block(GRADIENT, (steps, calls, np.ones(len(steps), np.int64), state, None))
            local.append(block)
            if world > 1:  # the gradient of the loss averaged over ranks (DDP's convention)
                s = block[3].copy()
                s[:, 1] /= world
                s[:, 2] /= world * world
                s[:, 3] /= world
                block = (*block[:3], s, None)
            contributions.append(block)
        for pending, sharded in zip(self._param_pending, self._param_sharded):
            steps, index, n, r, _ = pending.drain()
            state = np.column_stack((n, r[:, 0], r[:, 1] ** 2, r[:, 2]))
            backwards, index = index // BACKWARD, index % BACKWARD
            local.append(_per_step(steps, backwards, state))
            if world > 1 and rank != 0:
                # equal copies on every rank (DDP) count once, from rank 0; shards (FSDP) from every rank
                keep = sharded[index]
                steps, backwards, state = steps[keep], backwards[keep], state[keep]
            contributions.append(_per_step(steps, backwards, state))
        return local, contributions

    def _build(self, slots: list[Rows]) -> dict[str, dict[str, np.ndarray]]:
        n = len(self.names)
        out = {}
        for i, name in enumerate(self.names):
            table = dict(slots[i].columns())
            params = slots[n + i].columns()
            for key in ("mean", "std", "norm", "max_abs", "step", "backward", "records"):
                table[f"param_{key}"] = params[key]
            out[name] = table
        return out

    @staticmethod
    def load(directory: Any) -> GradientData:
        """Read statistics written by ``GradientStats.save(directory)``."""
        return read_files(directory, "gradient_stats")  # type: ignore[return-value]


def _per_step(steps: np.ndarray, backwards: np.ndarray, state: np.ndarray) -> Block:
    """A layer's parameter rows of each (step, backward) merged into one row (its key's call is the
    backward). A backward delivers a step's parameters together: rows of one backward are
    contiguous, merged without sorting."""
    if not len(steps):
        return _empty(GRADIENT)
    key = backwards * BACKWARD
    ds, db = np.diff(steps), np.diff(backwards)
    if bool(((ds > 0) | ((ds == 0) & (db >= 0))).all()):
        new = np.empty(len(steps), dtype=bool)
        new[0] = True
        np.logical_or(ds != 0, db != 0, out=new[1:])
        starts = np.flatnonzero(new)
        merged = GRADIENT.merge(state, starts)
        step, key = steps[starts], key[starts]
    else:
        ones = np.ones(len(steps), np.int64)
        step, key, _, merged, _ = merge_block(GRADIENT, (steps, key, ones, state, None))
    return step, key, np.ones(len(step), np.int64), merged, None
