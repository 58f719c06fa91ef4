"""Recording: ``ActivationStats`` and ``GradientStats`` attached to a model.

The hot path (one consumer call per hooked layer call) reduces the detached output to one row on
the model's device (``Backend.activation_sums``: ``[mean, m2, count <= near_zero]``;
``Backend.param_sums``: ``[sum, norm, max |x|]``) and adds it to the series' ``slots.Pending`` with
its step, call and element count: no ``.item()``, no copy to the host. Every 1024 records a series'
rows are stacked into one device tensor, so a long run keeps a few tensors per layer, not millions.
Tensors in host memory take the C kernel instead, which writes each record into a preallocated row
(``backends.host_stats.HostRows``). Each series is one ``slots.Slot``, found by its layer's name.

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

from hookkit.core.entry import public_entry
from hookkit.core.guards import real_values
from hookkit.core.handles import HandleGroup
from hookkit.core.router import OBSERVER, Event, attach
from hookkit.core.select import WITH_PARAMS, LayerSpec, select
from hookkit.core.tree import first_tensor
from hookkit.core.types import Layer
from hookkit.core.user_frame import user_stacklevel
from hookkit.core.validate import check_bool, check_int, check_model, check_number, check_range_pair
from hookkit.observers.stats.backwards import BackwardCounter
from hookkit.observers.stats.loaded import ActivationData, GradientData, read_files
from hookkit.observers.stats.reduce import gather_blocks, merge_block
from hookkit.observers.stats.series import ACTIVATION, BACKWARD, GRADIENT, Block, Rows
from hookkit.observers.stats.slots import Pending, Slot, extend

__all__ = ["ActivationStats", "GradientStats"]

Tables = dict[str, dict[str, np.ndarray]]


class _Recorder(HandleGroup):
    """Attaches at construction (rolled back if that fails half-way); ``remove()`` / ``with`` detach.

    Holds no layer, parameter or model strongly: keeping the statistics keeps no weights alive.
    Subclasses set ``_slots`` (every series they record, in one order on every rank), say how to
    drain their pending records and how to build the tables from their slots."""

    _slots: list[Slot]

    def _setup(self, model: Any, layers: LayerSpec, every: int, sync: bool) -> list[tuple[str, Any]]:
        HandleGroup.__init__(self)
        check_int(every, arg="every", low=1)
        check_bool(sync, arg="sync")
        self._backend = check_model(model)
        self._model = weakref.ref(model)
        self._sync = bool(sync)
        self._merged = False  # distributed training: read all ranks' rows (each slot's ``merged``)
        self._cache: Tables | None = None
        self._local_cache: Tables | None = None
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
        last_step: int | None = None
        ok = False

        def record(step: int) -> bool:
            nonlocal last_step, ok
            if step != last_step:
                last_step = step
                ok = step % every == 0
                if ok and train_only:
                    model = model_ref()
                    ok = model is not None and backend.is_training(model)
            return ok

        return record

    # -- what subclasses provide ------------------------------------------------------------------
    def _has_pending(self) -> bool:
        raise NotImplementedError

    def _drain(self, world: int, rank: int) -> tuple[list[Block], list[Block]]:
        """``(local blocks, this rank's contributions to the cross-rank merge)``, one per slot."""
        raise NotImplementedError

    def _build(self, merged: bool) -> Tables:
        """The tables of every series from the slots' rows (all ranks' with ``merged``)."""
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
        slots = self._slots
        if self._has_pending():
            local, contributions = self._drain(world if syncing else 1, rank)
            for slot, block, mine in zip(slots, local, contributions):
                extend(slot.local, block)
                if syncing:
                    slot.waiting = mine if slot.waiting is None else slot.waiting.concat(mine)
            self._local_cache = None
        if collective and syncing and any(slot.waiting is not None for slot in slots):
            kinds = [slot.local.kind for slot in slots]
            sent = [slot.take_waiting() for slot in slots]
            gathered = gather_blocks(self._backend, kinds, sent, max(slot.local.bins for slot in slots))
            for slot, block in zip(slots, gathered):
                if slot.merged is None:
                    slot.merged = Rows(slot.local.kind, slot.local.bins)
                extend(slot.merged, block)
            self._merged = True
            self._cache = None

    def _tables(self) -> Tables:
        """All ranks' tables: in distributed training a collective, when records are new."""
        self._update(collective=True)
        if not self._merged:
            return self._local_tables()
        if self._cache is None:
            self._cache = self._build(merged=True)
        return self._cache

    def _local_tables(self) -> Tables:
        self._update(collective=False)
        if self._local_cache is None:
            self._local_cache = self._build(merged=False)
        return self._local_cache

    def clear(self) -> None:
        """Forget what was recorded (on this rank); keep recording."""
        self._drain(1, 0)
        for slot in self._slots:
            slot.clear()
        self._cache = self._local_cache = None


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

    @public_entry()
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
        settings = {
            "bins": check_int(bins, arg="bins", low=1, high=1 << 20),
            "range": check_range_pair(range, arg="range"),
            "near_zero": check_number(near_zero, arg="near_zero"),
            "every": every,
            "hist": check_bool(hist, arg="hist"),
            "train_only": check_bool(train_only, arg="train_only"),
        }
        named = self._setup(model, layers, every, sync)
        ActivationData.__init__(self, [n for n, _ in named], self._backend.name, settings)
        bins = self.bins if self.hist else 0
        self._layers = {name: Slot(ACTIVATION, bins, Pending(self._backend, bins)) for name, _ in named}
        self._slots = list(self._layers.values())
        record = self._recording(every, self.train_only)
        self._attach_all(lambda: [self.add(attach(model, [nl], "forward", self._consumer(nl[0], record), OBSERVER)) for nl in named])

    def _consumer(self, name: str, record: Callable[[int], bool]) -> Callable[[Event], None]:
        be = self._backend
        is_tensor, sums, sums_hist, numel, detach = be.is_tensor, be.activation_sums, be.activation_sums_hist, be.numel, be.detach
        into = be.activation_sums_into
        pending = self._layers[name].pending
        host, add = pending.host, pending.add
        want_hist = self.hist
        near_zero, bins, (lo, hi) = self.near_zero, self.bins, self.hist_range
        hist_range = (lo, hi) if want_hist else None
        real = real_values(be)  # complex outputs: skipped, one warning
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
                add(row, ev.step, ev.call, numel(o), hist)
            else:
                add(sums(o, near_zero), ev.step, ev.call, numel(o))

        return on_forward

    def _has_pending(self) -> bool:
        return any(len(slot.pending) for slot in self._slots)

    def _drain(self, world: int, rank: int) -> tuple[list[Block], list[Block]]:
        # a pending record's state [numel, mean, m2, count] is ACTIVATION's [n, mean, m2, count]
        blocks = [merge_block(ACTIVATION, slot.pending.drain()) for slot in self._slots]
        return blocks, blocks

    def _build(self, merged: bool) -> Tables:
        return {name: dict(slot.rows(merged).columns()) for name, slot in self._layers.items()}

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

    @public_entry()
    def __init__(self, model: Layer, layers: LayerSpec = None, *, every: int = 1, sync: bool = True):
        named = self._setup(model, layers, every, sync)
        GradientData.__init__(self, [n for n, _ in named], self._backend.name, {"every": every})
        be = self._backend
        self._layers = {name: _GradientLayer(be, layer) for name, layer in named}
        outputs, params = [g.output for g in self._layers.values()], [g.params for g in self._layers.values()]
        self._slots = outputs + params  # the order of the cross-rank merge: outputs, then parameters
        # a parameter shared by several layers (tied embeddings) is reduced once per backward
        self._last_param = _LastParamGrad()
        # Under data parallelism the gradient is final only after the backward (DDP all-reduces
        # it then): read .grad at the end of each recorded backward instead of at the hook.
        self._after_backward = be.world()[1] > 1
        self._due: tuple[int, int] | None = None  # (step, backward) whose parameter gradients are to be read
        self._backwards = BackwardCounter(be)  # several backwards of one forward: one row each
        self._warned_local = False
        record = self._recording(every, False)

        def attach_all() -> None:
            for name, layer in named:
                self.add(attach(model, [(name, layer)], "grad", self._consumer(name, record), OBSERVER))
                if self._layers[name].param_refs and not self._after_backward:
                    self.add(attach(model, [(name, layer)], "param_grad", self._param_consumer(name, record), OBSERVER))

        self._attach_all(attach_all)

    def _consumer(self, name: str, record: Callable[[int], bool]) -> Callable[[Event], None]:
        be = self._backend
        sums, numel, detach, into = be.grad_sums, be.numel, be.detach, be.tensor_sums_into
        real = real_values(be)  # complex gradients: skipped, one warning
        real_dtypes = real.real
        pending = self._layers[name].output.pending
        host, add = pending.host, pending.add
        after, backward = self._after_backward, self._backwards.index

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
                add(sums(g), step, key, numel(g))
            if after and self._due is None:
                self._due = (step, b)
                be.after_backward(self._read_param_grads)

        return on_grad

    def _param_consumer(self, name: str, record: Callable[[int], bool]) -> Callable[[Event], None]:
        be = self._backend
        sums, numel, detach, into = be.param_sums, be.numel, be.detach, be.tensor_sums_into
        index = self._layers[name].param_index
        pending = self._layers[name].params.pending
        host, add = pending.host, pending.add
        last = self._last_param
        backward = self._backwards.index

        def on_param_grad(ev: Event) -> None:
            step, grad = ev.step, ev.grad
            if not record(step):
                return
            # the parameter's index, and which backward (param_grad events always carry param_name)
            i = index[ev.param_name] + BACKWARD * backward(step)
            seen = last.grad is not None and last.grad() is grad  # the same gradient, seen by another layer
            if seen and last.host_row is not None:
                k = host.slot()
                host.rows[k] = last.host_row
                host.rows[k, 1] = i  # the row's "call" holds the parameter's index in this layer
                host.n = k + 1
                return
            if not seen and into(host, grad, step, i):
                last.grad, last.host_row, last.device_row = _weak(grad), host.rows[host.n - 1].copy(), None
                return
            g = detach(grad)
            if seen:
                row = last.device_row
            else:
                row = sums(g)
                last.grad, last.host_row, last.device_row = _weak(grad), None, row
            add(row, step, i, numel(g))

        return on_param_grad

    def _read_param_grads(self) -> None:
        """End of a recorded backward (data-parallel training): each parameter's synchronized ``.grad``."""
        (step, b), self._due = self._due, None  # type: ignore[misc]
        be = self._backend
        sums, numel, grad_of = be.param_sums, be.numel, be.grad_of
        for layer in self._layers.values():
            pending = layer.params.pending
            for i, ref in enumerate(layer.param_refs):
                p = ref()
                g = None if p is None else grad_of(p)
                if g is None or not numel(g):  # no gradient in this backward, or an empty shard
                    continue
                key = b * BACKWARD + i
                if not be.tensor_sums_into(pending.host, g, step, key):
                    pending.add(sums(be.detach(g)), step, key, numel(g))

    def _has_pending(self) -> bool:
        return any(len(slot.pending) for slot in self._slots)

    def _drain(self, world: int, rank: int) -> tuple[list[Block], list[Block]]:
        if world > 1 and not self._after_backward and not self._warned_local:
            self._warned_local = True
            warnings.warn(
                "GradientStats was created before the process group was initialized: its parameter rows are each "
                "rank's local gradient (before the all-reduce); create it after init_process_group / init_parallel_env",
                RuntimeWarning,
                stacklevel=user_stacklevel(),
            )
        local: list[Block] = []
        contributions: list[Block] = []
        for layer in self._layers.values():
            block = merge_block(GRADIENT, _gradient_state(layer.output.pending.drain()))
            local.append(block)
            if world > 1:  # the gradient of the loss averaged over ranks (DDP's convention)
                s = block.state.copy()
                s[:, 1] /= world
                s[:, 2] /= world * world
                s[:, 3] /= world
                block = block._replace(state=s)
            contributions.append(block)
        for layer in self._layers.values():
            block = _gradient_state(layer.params.pending.drain())
            backwards, index = block.call // BACKWARD, block.call % BACKWARD
            local.append(_per_step(block.step, backwards, block.state))
            if world > 1 and rank != 0:
                # equal copies on every rank (DDP) count once, from rank 0; shards (FSDP) from every rank
                keep = layer.param_sharded[index]
                block, backwards = block.subset(keep), backwards[keep]
            contributions.append(_per_step(block.step, backwards, block.state))
        return local, contributions

    def _build(self, merged: bool) -> Tables:
        out = {}
        for name, layer in self._layers.items():
            table = dict(layer.output.rows(merged).columns())
            params = layer.params.rows(merged).columns()
            for key in ("mean", "std", "norm", "max_abs", "step", "backward", "records"):
                table[f"param_{key}"] = params[key]
            out[name] = table
        return out

    @staticmethod
    def load(directory: Any) -> GradientData:
        """Read statistics written by ``GradientStats.save(directory)``."""
        return read_files(directory, "gradient_stats")  # type: ignore[return-value]


class _GradientLayer:
    """One layer watched by ``GradientStats``: the slot of its output gradients, the slot of its
    direct parameters' gradients taken together (a record's call is the parameter's index), and
    those parameters: their index by name, weak references, which of them are shards (FSDP)."""

    __slots__ = ("output", "params", "param_index", "param_refs", "param_sharded")

    def __init__(self, backend: Any, layer: Any):
        self.output = Slot(GRADIENT, 0, Pending(backend))
        self.params = Slot(GRADIENT, 0, Pending(backend))
        params = [(pn, p) for pn, p in backend.named_parameters(layer, recurse=False) if backend.requires_grad(p)]
        self.param_index = {pn: i for i, (pn, _) in enumerate(params)}
        self.param_refs = [weakref.ref(p) for _, p in params]  # weak: the statistics keep no weights alive
        self.param_sharded = np.array([backend.is_sharded(p) for _, p in params], dtype=bool)


class _LastParamGrad:
    """The parameter gradient reduced last (a weak reference) and its row, on the host or the
    device: a parameter shared by several layers (tied embeddings) is reduced once per backward."""

    __slots__ = ("grad", "host_row", "device_row")

    def __init__(self) -> None:
        self.grad: Callable[[], Any] | None = None
        self.host_row: np.ndarray | None = None
        self.device_row: Any = None


def _gradient_state(block: Block) -> Block:
    """A drained gradient block, its state ``[n, sum, norm, max]`` turned into GRADIENT's ``[n, sum,
    sum of squares, max]`` (in place: a drained block's arrays are its own)."""
    block.state[:, 2] **= 2
    return block


def _per_step(steps: np.ndarray, backwards: np.ndarray, state: np.ndarray) -> Block:
    """A layer's parameter rows of each (step, backward) merged into one row (its key's call is the
    backward). A backward delivers a step's parameters together: rows of one backward are
    contiguous, merged without sorting."""
    if not len(steps):
        return Block.empty(GRADIENT.width)
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
        step, key, _, merged, _ = merge_block(GRADIENT, Block(steps, key, ones, state, None))
    return Block(step, key, np.ones(len(step), np.int64), merged, None)
