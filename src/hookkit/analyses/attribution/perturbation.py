"""The perturbation methods of ``hookkit.attribute``: occlusion, feature ablation, feature
permutation, exact Shapley values, Shapley value sampling, KernelSHAP and LIME, at the inputs or at a
layer's value (captum's ``LayerFeatureAblation`` and its kin). Forwards only, no gradients.

Every method is one set of *coalitions* over ``F`` features (``Z[k, f] = 1``: feature ``f`` is
replaced by its baseline in perturbation ``k``) and a host-side combination of the scores the model
gives them. The perturbed copies of all samples run many per forward, as many as fit the memory
budget (``budget.py``, the chunk plan the gradient methods use): that is what makes them faster than
captum's ``perturbations_per_eval=1``. A perturbed row is ``x * (1 - m) + baseline * m`` (exact for
a 0/1 mask ``m``), coalition-major (rows ``c * b + j``: coalition ``c`` of sample ``j``).

>>> hookkit.attribute(model, None, x, "occlusion", target=3, sliding_window_shapes=(3, 4, 4), strides=2)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from math import factorial
from typing import TYPE_CHECKING, Any

import numpy as np

from hookkit.analyses.attribution import inputs
from hookkit.analyses.attribution import steps as st
from hookkit.analyses.attribution.baselines import baselines_like
from hookkit.analyses.attribution.budget import DEFAULT_FRACTION, Plan, plan_chunks, row_cost, spans
from hookkit.analyses.targets import expand_target, target_scores
from hookkit.core.entry import entry_name
from hookkit.core.errors import HookkitError
from hookkit.core.events import OBSERVER
from hookkit.core.router import attach
from hookkit.core.tree import leaves
from hookkit.core.validate import InvalidArgument, fail
from hookkit.core.weakmap import IdentityWeakMap

if TYPE_CHECKING:
    from hookkit.analyses.attribution.job import AttributeOptions, Job

MAX_EXACT_FEATURES = 12  # exact Shapley values enumerate 2**F coalitions
DEFAULT_SAMPLES = {"shapley_sampling": 25, "kernel_shap": 25, "lime": 50}  # captum's defaults
#: The default chunk of perturbed rows on a CPU (max_memory=None). A no-grad forward holds a few activations
#: at once (a layer's input and output, a residual beside them; measured: 2.5x its largest one per row on
#: the CNN of the benchmark, 3.1x on its GPT-2-style LM), far less than autograd would save; and its CPU
#: time per row stops falling once a chunk holds a few MB of them (``bench_attribution_perturbation.py
#: curve``, one thread, us per row at 16 / 32 / 64 / 128 rows: the CNN channels-last 99 / 84 / 81 / 81,
#: the LM 371 / 319 / 280 / 267): a bigger chunk only costs memory (and cache). So a row costs
#: ``HOST_LIVE`` times its largest activation plus the perturbation's own tensors, within ``HOST_BUDGET``
#: (32 rows of that CNN, 40 of that LM).
HOST_BUDGET = 10 << 20
HOST_LIVE = 4
LASSO_ALPHA, KERNEL_WIDTH = 0.01, 1.0  # captum's Lime: SkLearnLasso(alpha=0.01), exp kernel on cosine distance, width 1


# -- features: which elements of one sample each feature holds ----------------------------------------
@dataclass
class Features:
    """``F`` features over a sample of ``shape``: a partition (``ids[e]``: element ``e``'s feature; ``ids[j, e]``
    with one grouping per sample, inputs.py) or, for occlusion, windows (``windows[f]``: a tuple of slices, or
    of position arrays over several inputs), which may overlap."""

    shape: tuple[int, ...]
    count: int
    ids: np.ndarray | None = None
    windows: list[tuple[slice, ...]] | None = None

    def masks(self, z: np.ndarray, j0: int = 0, j1: int = 1) -> np.ndarray:
        """Element masks ``[k, *shape]`` (1: replaced) of coalitions ``z [k, F]``; ``[k, j1 - j0, *shape]``
        for samples ``j0:j1`` with one grouping per sample."""
        if self.ids is not None and self.ids.ndim == 2:
            return z[:, self.ids[j0:j1]].reshape((len(z), j1 - j0, *self.shape))
        if self.ids is not None:
            return z[:, self.ids].reshape((len(z), *self.shape))
        out = np.zeros((len(z), *self.shape), dtype=np.uint8)
        assert self.windows is not None
        for k, row in enumerate(z):
            for f in np.flatnonzero(row):
                out[(k,) + self.windows[f]] = 1.0
        return out

    def spread(self, phi: np.ndarray) -> np.ndarray:
        """Per-feature attributions ``[N, F]`` onto the elements ``[N, *shape]``: each element gets its
        feature's value (overlapping windows: the mean over the windows holding it, as captum's occlusion)."""
        n = len(phi)
        if self.ids is not None and self.ids.ndim == 2:
            return np.take_along_axis(phi, self.ids, 1).reshape((n, *self.shape))
        if self.ids is not None:
            return phi[:, self.ids].reshape((n, *self.shape))
        total, times = np.zeros((n, *self.shape)), np.zeros(self.shape)
        assert self.windows is not None
        for f, w in enumerate(self.windows):
            total[(slice(None),) + w] += phi[:, f].reshape((n,) + (1,) * len(self.shape))
            times[w] += 1
        return total / np.maximum(times, 1)

    def row(self, j: int) -> np.ndarray:
        """Sample ``j``'s element ids ``[E]``."""
        assert self.ids is not None
        return self.ids[j] if self.ids.ndim == 2 else self.ids


def _features(job: Job, shape: tuple[int, ...]) -> Features:
    opts = job.opts
    where = "the inputs" if job.layer is None or job.neuron is not None else f"layer {job.name!r}'s value"
    several = job.packing is not None and where == "the inputs"  # several input tensors, packed (inputs.py)
    if job.method == "occlusion":
        return inputs.packed_windows(Features, job, job.packing, _windows) if several else _windows(opts, shape, where)
    mask = opts.feature_mask
    if several and mask is not None:
        return inputs.mask_features(Features, inputs.packed_mask(job.be, mask, job.packing, job.method), shape)
    if mask is None:  # captum's default: every element its own feature
        size = int(np.prod(shape))
        return Features(shape, size, ids=np.arange(size))
    arr = inputs.broadcast_mask(job.be, mask, shape, job.n, "feature_mask", where, job.method)
    return inputs.mask_features(Features, arr, shape)


def _windows(opts: AttributeOptions, shape: tuple[int, ...], where: str) -> Features:
    fn = entry_name()
    win = opts.sliding_window_shapes
    if win is None:
        fail(
            fn,
            "sliding_window_shapes",
            f"a tuple of {len(shape)} ints for occlusion (a window over one sample of {where}, {list(shape)})",
            win,
        )
    win = (win,) if isinstance(win, int) else tuple(win)
    if len(win) != len(shape) or not all(isinstance(w, int) and w >= 1 for w in win):
        fail(fn, "sliding_window_shapes", f"{len(shape)} ints >= 1 (one sample of {where} is {list(shape)})", opts.sliding_window_shapes)
    if any(w > s for w, s in zip(win, shape)):
        fail(fn, "sliding_window_shapes", f"a window no larger than one sample of {where} {list(shape)}", opts.sliding_window_shapes)
    steps = _strides(opts.strides, win, shape)
    # captum's windows: ceil((size - w) / stride) + 1 per axis, the last one cut at the edge
    starts = [range(0, -(-(n - w) // s) * s + 1, s) for n, w, s in zip(shape, win, steps)]
    windows = [tuple(slice(p, p + w) for p, w in zip(pos, win)) for pos in _product_last_fastest(starts)]
    return Features(shape, len(windows), windows=windows)


def _strides(strides: Any, win: tuple[int, ...], shape: tuple[int, ...]) -> tuple[int, ...]:
    steps = (strides,) * len(shape) if isinstance(strides, int) else tuple(strides) if strides is not None else (1,) * len(shape)
    if len(steps) != len(shape) or not all(isinstance(s, int) and s >= 1 for s in steps):
        fail(entry_name(), "strides", f"an int >= 1 or {len(shape)} of them", strides)
    if any(s > w and w < n for s, w, n in zip(steps, win, shape)):
        fail(entry_name(), "strides", f"no larger than the window {list(win)} where it does not span the sample", strides)
    return steps


def _product_last_fastest(axes: list[range]) -> list[tuple[int, ...]]:
    """Window positions in captum's order: the first axis varies fastest."""
    grids = np.meshgrid(*[np.asarray(a) for a in axes], indexing="ij")
    return [tuple(int(g) for g in p) for p in np.stack([g.reshape(-1, order="F") for g in grids], 1)]


# -- running the perturbed copies -----------------------------------------------------------------------
@dataclass
class Coalitions:
    """``count`` coalitions made a chunk at a time (``make(c0, c1)`` -> uint8 ``[c1 - c0, F]``): with
    every element a feature (captum's default mask) the whole table would not fit in memory."""

    count: int
    make: Callable[[int, int], np.ndarray]

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, span: slice) -> np.ndarray:
        return self.make(span.start, span.stop)


def _one_each(f: int) -> Coalitions:
    """Coalition ``c`` replaces feature ``c`` alone."""

    def make(c0: int, c1: int) -> np.ndarray:
        z = np.zeros((c1 - c0, f), dtype=np.uint8)
        z[np.arange(c1 - c0), np.arange(c0, c1)] = 1
        return z

    return Coalitions(f, make)


def _scores(job: Job, value: Any, base: Any, feats: Features, z: Any, saved: int | None, bases: Callable | None = None) -> np.ndarray:
    """The target's score for every coalition of ``z`` and every sample: float64 ``[K, N]``. ``bases(c, j0, j1)``:
    the replacement rows of coalition ``c`` (feature permutation), else ``base``. A coalition that replaces
    only elements already equal to their baseline (for every sample of a chunk) leaves the inputs as they
    are: it runs no forward, its score is the unperturbed one."""
    be, m, n, k_all = job.be, job.m, job.n, len(z)
    plan = _plan(job, value, k_all, saved)
    layout = _Layout(job)
    changed = None if bases else _changed(job, value, base, feats)
    fuse = "input" not in job.scores  # no probe ran (_fused): the first forward runs the N unperturbed rows first
    out = []
    for j0, j1 in spans(n, plan.samples):
        b = j1 - j0
        for idx, zc in _live(z, k_all, plan.points, None if changed is None else changed[:, j0:j1]):
            k = len(idx)
            # [k, 1, *shape] masks (or [k, b, ...], one grouping per sample) against [1, b, *shape] samples:
            # broadcast, never tiled; rows c * b + j
            mask = be.from_numpy(np.ascontiguousarray(feats.masks(zc, j0, j1).reshape((k, -1, *feats.shape)) != 0), like=value)
            if bases:
                rep = m.reshape(m.cat([bases(int(c), j0, j1) for c in idx], 0), [k, b, *feats.shape])
            else:
                rep = m.reshape(base[j0:j1], [1, b, *feats.shape])
            perturb = _perturber(job, rep, mask, [k, b, *feats.shape])
            samples = st.rows(j0, j1, k)
            with be.no_grad():
                if job.neuron is not None:  # the neuron's value for perturbed inputs: the forward stops at the layer
                    job.tap.replace, job.tap.stop = None, True
                    layout.forward(partial(perturb, value[j0:j1]), samples)
                    s = st.neuron_of(job, job.tap.value)
                else:
                    if fuse:
                        o = layout.forward(partial(_with_inputs, m, value, perturb, value[j0:j1]), [*range(n), *samples])
                    elif job.layer is None:
                        o = layout.forward(partial(perturb, value[j0:j1]), samples)
                    else:
                        job.tap.replace = perturb
                        o = st.forward(job, m.tile_rows(job.x[j0:j1], k), samples)
                    # its own storage, the outputs dropped: a view would keep the chunk's logits (and an LM's
                    # cache) through the next forward
                    if fuse:
                        s = be.detach(target_scores(be, o, expand_target(job.target, [*range(n), *samples]), n + len(samples)))
                        job.scores["input"], s, fuse = be.clone(s[:n]), be.clone(s[n:]), False
                    else:
                        s = be.clone(be.detach(target_scores(be, o, expand_target(job.target, samples), len(samples))))
                    del o
            if len(be.shape(s)) != 1:
                raise InvalidArgument(
                    f"{entry_name()}(): {job.method} needs one score per sample; the target gave shape {list(be.shape(s))}"
                )
            out.append((j0, idx, b, be.detach(s)))
    if fuse:  # every coalition left the inputs as they are: f(x) alone
        with be.no_grad():
            st.probe(job, job.x, "input")
    # the coalitions that ran no forward: the unperturbed scores
    full = np.tile(be.to_numpy(job.scores["input"]).astype(np.float64).reshape(1, n), (k_all, 1))
    for j0, idx, b, s in out:  # one host read per chunk, after all forwards ran
        full[idx, j0 : j0 + b] = be.to_numpy(s).astype(np.float64).reshape(len(idx), b)
    return full


def _with_inputs(m: Any, value: Any, perturb: Callable[[Any], Any], rows: Any) -> Any:
    """The ``N`` unperturbed samples, then the perturbed rows (``_scores``'s first forward where no probe ran)."""
    return m.cat([value, perturb(rows)], 0)


def _changed(job: Job, value: Any, base: Any, feats: Features) -> np.ndarray:
    """``[F, N]`` bool: feature ``f`` of sample ``j`` holds an element that differs from its baseline (one
    host read of ``value != base``; NaN counts as different)."""
    diff = np.asarray(job.be.to_numpy(value != base)).reshape(job.n, -1)
    if feats.ids is not None:  # one grouping for all samples, or one per sample
        return np.stack([np.bincount(feats.row(j), d, feats.count) > 0 for j, d in enumerate(diff)], 1)
    assert feats.windows is not None
    d = diff.reshape((job.n, *feats.shape))
    return np.stack([d[(slice(None),) + w].reshape(job.n, -1).any(1) for w in feats.windows])


def _live(z: Any, k_all: int, size: int, changed: np.ndarray | None) -> Any:
    """Chunks ``(coalition indices, their rows of z)`` of up to ``size`` coalitions each; with ``changed``
    (``[F, b]``), only the coalitions that change some sample, gathered into full chunks."""
    if changed is None or changed.all():
        for c0, c1 in spans(k_all, size):
            yield np.arange(c0, c1), z[c0:c1]
        return
    got_i: list[np.ndarray] = []
    got_z: list[np.ndarray] = []
    held = 0
    for c0, c1 in spans(k_all, size):
        zc = np.asarray(z[c0:c1])
        keep = np.flatnonzero(((zc != 0).astype(np.float32) @ changed.astype(np.float32)).max(1) > 0)
        got_i.append(keep + c0)
        got_z.append(zc[keep])
        held += len(keep)
        while held >= size or (c1 == k_all and held):
            idx, zs = np.concatenate(got_i), np.concatenate(got_z)
            yield idx[:size], zs[:size]
            got_i, got_z, held = [idx[size:]], [zs[size:]], len(idx) - min(size, len(idx))


def _plan(job: Job, value: Any, k_all: int, saved: int | None) -> Plan:
    """The chunks of the perturbed rows: a row costs its share of what a forward keeps (``saved``, an
    upper bound: these forwards record no graph) and the perturbation's own tensors (the perturbed rows,
    their ``conv_layout`` copy, feature permutation's replacement rows; at a layer, the tiled inputs
    too). On a CPU by default (``saved`` None, the probe ran without autograd): ``HOST_BUDGET``, a row
    costing ``HOST_LIVE`` times the largest tensor the probe forward's layers returned, per sample."""
    be, opts = job.be, job.opts
    budget = 0
    per_row = 3 * be.numel(value) // job.n * be.itemsize(value)
    if value is not job.x:
        per_row += be.numel(job.x) // job.n * be.itemsize(job.x)
    row_bytes = row_cost(saved or 0, job.n, per_row)
    if opts.internal_batch_size == "auto":
        free = int(DEFAULT_FRACTION * job.ops.free_bytes(value))
        budget = int(opts.max_memory) if opts.max_memory is not None else free
        if saved is None:  # no autograd bytes measured: the no-grad forward's own
            row_bytes = max(1, HOST_LIVE * job.scores["largest_bytes"] // job.n + per_row)
            if job.ops.on_host(value):
                budget = min(HOST_BUDGET, free)
                if "input" not in job.scores:  # no probe ran (_fused): the N unperturbed rows ride in the first chunk
                    budget = max(row_bytes, budget - job.n * row_bytes)
    return plan_chunks(job.n, k_all, opts.internal_batch_size, budget=budget, row_bytes=row_bytes)


def _perturber(job: Job, rep: Any, mask: Any, shape: list[int]) -> Callable[[Any], Any]:
    """``value -> where(mask, rep, value)`` as ``[k * b, ...]`` rows (bool ``mask [k, 1, ...]`` broadcast over
    the samples: one tensor written, the rows themselves): ``value`` holds the ``b`` samples once (the
    inputs) or the ``k * b`` rows (a layer's value in the perturbed forward)."""
    m, k, b = job.m, shape[0], shape[1]

    def perturb(value: Any) -> Any:
        got = list(job.be.shape(value))
        if got[1:] != shape[2:] or got[0] not in (b, k * b):
            raise InvalidArgument(
                f"{entry_name()}(): layer {job.name!r} gave a value of shape {got} for the perturbed copies; expected {[k * b, *shape[2:]]}"
            )
        v = m.reshape(value, [1 if got[0] == b and k > 1 else k, b, *shape[2:]])
        return m.reshape(job.be.where(mask, rep, v), [k * b, *shape[2:]])

    return perturb


class _Layout:
    """The forwards of perturbed inputs in the layout the framework's convolutions run fastest on
    (``tensor_math.conv_layout``, the same values: torch on the CPU feeds a CNN channels-last, 2.5-3x
    faster one thread, benchmarks/bench_attribution_perturbation.py ``curve``). A model that refuses
    them (a ``view`` that needs contiguous rows) gets its rows as they are from then on; it is
    remembered while the model lives."""

    def __init__(self, job: Job):
        self.job = job
        self.fast: bool | None = False if _layout_refused.get(job.model) else None

    def forward(self, make: Callable[[], Any], samples: list[int]) -> Any:
        """The model on the rows ``make()`` builds (built again as they are if the model refuses the fast
        layout: the first rows are not kept beside their copy)."""
        job = self.job
        if self.fast is not False:
            rows = make()
            fast = job.m.conv_layout(rows)
            if fast is not rows:
                del rows
                try:
                    out = st.forward(job, fast, samples)
                    self.fast = True
                    return out
                except Exception:  # noqa: BLE001 - run again as built below, where a real error shows
                    if self.fast:
                        raise
                    self.fast = False
                    _layout_refused[job.model] = True
            else:
                return st.forward(job, rows, samples)
        return st.forward(job, make(), samples)


_layout_refused: IdentityWeakMap[bool] = IdentityWeakMap()


@contextlib.contextmanager
def _largest_output(job: Job, sizes: dict[str, int]) -> Iterator[None]:
    """``sizes["layers"]``: the bytes of the largest tensor a layer without sublayers returned in the
    block (what a forward without autograd holds at once is a few of those), through router observers
    placed for the block. It depends on the model's layers and the input's shape only: remembered per
    model and call shape, later calls place nothing."""
    be = job.be
    key = _shape_of_call(job)
    known = _largest_known.get(job.model)
    if known is not None and key in known:
        sizes["layers"] = known[key]
        yield
        return
    sizes["layers"] = 0

    def record(layer: Any, args: tuple, output: Any) -> None:
        for t in leaves(output, be.is_tensor):
            sizes["layers"] = max(sizes["layers"], be.numel(t) * be.itemsize(t))

    named = [(n, layer) for n, layer in be.named_layers(job.model) if not be.children(layer)]
    try:
        group = attach(job.model, named, "forward", None, OBSERVER, plain=record)
    except HookkitError:  # a layer that takes no hooks (a scripted one): the outputs' sizes alone
        yield
        return
    try:
        yield
    finally:
        group.remove()
    if known is None or len(known) >= 64:  # a few call shapes per model (generation: one per prefix length)
        _largest_known[job.model] = known = {}
    known[key] = max(sizes["layers"], sizes["largest"])  # the probe's outputs too: what _setup's chunks are sized by


_largest_known: IdentityWeakMap[dict[tuple, int]] = IdentityWeakMap()


def _shape_of_call(job: Job) -> tuple:
    """What the sizes of a forward depend on: the inputs' shape and dtype, the layer, the keyword arguments' shapes."""
    be = job.be
    kwargs = tuple((k, _shape_key(be, v)) for k, v in (job.kwargs or {}).items())
    return (tuple(be.shape(job.x)), be.dtype_name(job.x), job.name, job.opts.attribute_to, kwargs)


def _shape_key(be: Any, v: Any) -> Any:
    """What of a keyword argument may change the sizes of a forward: a tensor's shape, a plain value."""
    if be.is_tensor(v):
        return tuple(be.shape(v))
    return v if isinstance(v, (bool, int, float, str, type(None))) else type(v).__name__


def _setup(job: Job) -> tuple[Any, Any, Features, int | None]:
    """The probe forward: ``(value, baselines, features, saved bytes, f(x) [N] float64)``: ``value`` the
    inputs or the layer's value, ``baselines`` shaped like it. ``saved``: what autograd keeps for a backward
    of the ``N`` samples, measured where the chunks are sized by it (``max_memory=``, a device's free
    memory); None where they are not (a CPU's default chunk, an int or no ``internal_batch_size``): the
    probe then runs without autograd, as the perturbed forwards do, sized by the largest layer output."""
    be, opts, sizes = job.be, job.opts, {"largest": 0}
    saved: int | None = None
    largest = _fused(job)
    if largest is not None:  # no probe: the unperturbed rows ride in the first perturbed forward (_scores)
        job.scores["largest_bytes"] = largest
        return job.x, baselines_like(be, opts.baselines, job.x, what="inputs"), _features(job, tuple(be.shape(job.x))[1:]), None
    if opts.internal_batch_size != "auto" or (opts.max_memory is None and job.ops.on_host(job.x)):
        with _largest_output(job, sizes), be.no_grad():
            y, _ = st.probe(job, job.x, "input", sizes=sizes)
    elif (job.layer is not None and job.neuron is None) or be.dtype_kind(job.x) == "float":
        y, saved = st.probe(job, job.x, "input", measure=True, sizes=sizes)
    else:  # token ids take no gradient: what the forward keeps for the parameters' backward
        with job.ops.saved_bytes(job.model) as counter:
            y, _ = st.probe(job, job.x, "input", sizes=sizes)
        saved = counter.bytes
        sizes["largest"] = max(sizes["largest"], counter.largest)
    job.scores["largest_bytes"] = max(sizes["largest"], sizes.get("layers", 0))  # for _plan's default on a CPU
    to_inputs = job.layer is None or job.neuron is not None
    if job.neuron is not None:  # the neuron variants explain the neuron's value (NeuronFeatureAblation and kin)
        job.scores["input"] = st.neuron_of(job, y)
    # its own storage: a view of the probe's outputs would keep them (an LM's logits) through the chunks
    job.scores["input"] = be.clone(job.scores["input"])
    value = job.x if to_inputs else y
    what = "inputs" if to_inputs else f"layer {job.name!r}'s value"
    base = baselines_like(be, job.opts.baselines, value, what=what)
    feats = _features(job, tuple(be.shape(value))[1:])
    _f0(job)  # one score per sample, checked before any perturbed forward
    return value, base, feats, saved


def _f0(job: Job) -> np.ndarray:
    """f(x): the unperturbed score of each sample, float64 ``[N]`` (from the probe, or the first perturbed forward)."""
    f0 = job.be.to_numpy(job.scores["input"]).astype(np.float64).reshape(-1)
    if len(f0) != job.n:
        raise InvalidArgument(f"{entry_name()}(): {job.method} needs one score per sample; the target gave {len(f0)} for {job.n} samples")
    return f0


def _fused(job: Job) -> int | None:
    """The largest layer output's bytes where the probe forward can be left out (else None): the inputs
    themselves are perturbed, the target needs no prediction, and on the no-autograd path the chunk size
    is known for this model and call shape (a call before measured it) or not needed. The first forward
    of the perturbed rows then also runs the ``N`` unperturbed ones: one forward less per call."""
    opts = job.opts
    if job.layer is not None or job.neuron is not None or job.target is None:
        return None
    if opts.internal_batch_size != "auto":
        return 0
    if opts.max_memory is not None or not job.ops.on_host(job.x):
        return None
    return _largest_known.get(job.model, {}).get(_shape_of_call(job))


def _finish(job: Job, feats: Features, phi: np.ndarray) -> Any:
    """Per-feature ``[N, F]`` -> the elements, as a tensor of the scores' dtype on their device."""
    return _like(job, feats.spread(phi), job.scores["input"])


def _like(job: Job, array: np.ndarray, like: Any) -> Any:
    """``array`` as a tensor of ``like``'s dtype on its device."""
    return job.be.cast(job.be.from_numpy(np.ascontiguousarray(array), like=like), job.be.dtype_name(like))


def _rng(job: Job) -> np.random.Generator:
    return np.random.default_rng(job.opts.seed)


# -- the methods -------------------------------------------------------------------------------------------
def ablation(job: Job) -> Any:
    """occlusion and feature_ablation: ``f(x) - f(x with one feature (window) at its baseline)``;
    feature_permutation: the same with the feature's values taken from other samples of the batch."""
    value, base, feats, saved = _setup(job)
    z, bases = _one_each(feats.count), None
    if job.method == "feature_permutation":
        perms = _permutations(job, feats.count)

        def bases(c: int, j0: int, j1: int) -> Any:
            return job.m.index_select(value, 0, perms[c])[j0:j1]

    s = _scores(job, value, base, feats, z, saved, bases)
    return _finish(job, feats, (_f0(job)[None, :] - s).T)


def _permutations(job: Job, count: int) -> list[list[int]]:
    n = job.n
    if n < 2:
        fail(
            entry_name(),
            "inputs",
            "at least 2 samples for feature_permutation (a feature's values are permuted across the batch)",
            f"{n} sample",
        )
    if job.opts.permutation is not None:
        perm = np.asarray(job.opts.permutation)
        if perm.shape != (n,) or sorted(perm.tolist()) != list(range(n)):
            fail(entry_name(), "permutation", f"a permutation of range({n}) (one index per sample)", job.opts.permutation)
        return [perm.tolist()] * count
    rng, out = _rng(job), []
    for _ in range(count):  # captum: a fresh permutation per feature, never the identity
        p = rng.permutation(n)
        while (p == np.arange(n)).all():
            p = rng.permutation(n)
        out.append(p.tolist())
    return out


def shapley(job: Job) -> Any:
    """Exact Shapley values: every coalition of the ``F <= 12`` features evaluated, then
    ``phi_i = sum_S |S|! (F-|S|-1)! / F! (v(S + i) - v(S))``."""
    value, base, feats, saved = _setup(job)
    f = feats.count
    if f > MAX_EXACT_FEATURES:
        fail(
            entry_name(),
            "feature_mask",
            f"at most {MAX_EXACT_FEATURES} features for exact Shapley values (2**F forwards); group them with feature_mask or use method='shapley_sampling'",
            f"{f} features",
        )
    codes = np.arange(2**f)
    kept = (codes[:, None] >> np.arange(f)) & 1  # bit i: feature i kept from the input
    v = _scores(job, value, base, feats, 1.0 - kept, saved)
    size = kept.sum(1)
    phi = np.zeros((f, job.n))
    for i in range(f):
        without = codes[kept[:, i] == 0]
        w = np.array([factorial(s) * factorial(f - s - 1) / factorial(f) for s in size[without]])
        phi[i] = w @ (v[without | (1 << i)] - v[without])
    return _finish(job, feats, phi.T)


def shapley_sampling(job: Job) -> Any:
    """Shapley value sampling (captum's ``ShapleyValueSampling``): ``n_samples`` random orders; along each,
    from the baseline, a feature's attribution is the change in the score when it is put back."""
    value, base, feats, saved = _setup(job)
    f, n_perm, rng = feats.count, _samples(job), _rng(job)
    orders = [rng.permutation(f) for _ in range(n_perm)]

    def make(c0: int, c1: int) -> np.ndarray:  # row 0: the baseline; then f - 1 states per order
        z = np.ones((c1 - c0, f), dtype=np.uint8)
        for r in range(max(c0, 1), c1):
            p, t = divmod(r - 1, f - 1)
            z[r - c0, orders[p][: t + 1]] = 0
        return z

    v = _scores(job, value, base, feats, Coalitions(1 + n_perm * (f - 1), make), saved)
    f0, phi, row = _f0(job), np.zeros((f, job.n)), 1
    for order in orders:
        prev = v[0]
        for t, i in enumerate(order):
            cur = f0 if t == f - 1 else v[row]
            row += t < f - 1
            phi[i] += cur - prev
            prev = cur
    return _finish(job, feats, (phi / n_perm).T)


def kernel_shap(job: Job) -> Any:
    """KernelSHAP: ``n_samples`` coalitions drawn from the Shapley kernel (size ``s`` with probability
    proportional to ``(F-1) / (s (F-s))``, then a uniform subset), and the least-squares fit of
    ``v(S) - v(empty)`` by ``sum_{i in S} phi_i`` under ``sum phi = f(x) - f(baseline)`` (shap's form)."""
    value, base, feats, saved = _setup(job)
    f, rng = feats.count, _rng(job)
    sizes = np.arange(1, f)
    kept = np.zeros((0, f))
    if f > 1:
        p = (f - 1) / (sizes * (f - sizes))
        drawn = rng.choice(sizes, size=_samples(job), p=p / p.sum())
        kept = np.zeros((len(drawn), f))
        for r, s in enumerate(drawn):
            kept[r, rng.choice(f, size=s, replace=False)] = 1.0
    v = _scores(job, value, base, feats, np.vstack([np.ones(f), 1.0 - kept]), saved)
    total = _f0(job) - v[0]
    if f == 1:
        return _finish(job, feats, total[:, None])
    y = v[1:] - v[0] - kept[:, -1:] * total[None, :]  # phi_F eliminated: = total - sum of the others
    a = kept[:, :-1] - kept[:, -1:]
    rest = np.linalg.lstsq(a, y, rcond=None)[0]  # [F-1, N]
    return _finish(job, feats, np.vstack([rest, total[None, :] - rest.sum(0, keepdims=True)]).T)


def lime(job: Job) -> Any:
    """LIME with captum's defaults: ``n_samples`` coalitions keeping each feature with probability 1/2,
    weighted by ``exp(-d**2 / (2 * 1.0**2))`` with ``d`` the cosine distance between the input and the
    perturbed input, fitted by a Lasso (alpha 0.01, with intercept: sklearn's objective); the
    coefficients are the attributions."""
    value, base, feats, saved = _setup(job)
    if feats.ids is None:  # pragma: no cover - occlusion has its own runner
        raise AssertionError
    f, rng = feats.count, _rng(job)
    kept = (rng.random((_samples(job), f)) < 0.5).astype(np.float64)
    v = _scores(job, value, base, feats, 1.0 - kept, saved)
    x = job.be.to_numpy(value).astype(np.float64).reshape(job.n, -1)
    b = job.be.to_numpy(base).astype(np.float64).reshape(job.n, -1)
    phi = np.zeros((job.n, f))
    for j in range(job.n):  # the perturbed row is x where kept, b elsewhere: its dot products per feature
        ids = feats.row(j)
        xx = np.bincount(ids, x[j] * x[j], f)
        xb = np.bincount(ids, x[j] * b[j], f)
        bb = np.bincount(ids, b[j] * b[j], f)
        dot = kept @ xx + (1 - kept) @ xb
        norms = np.sqrt(xx.sum()) * np.sqrt(kept @ xx + (1 - kept) @ bb)
        d = 1.0 - dot / np.maximum(norms, 1e-8)  # torch's CosineSimilarity clamps the norms at eps=1e-8
        w = np.exp(-(d**2) / (2 * KERNEL_WIDTH**2))
        phi[j] = lasso(kept, v[:, j], w, LASSO_ALPHA)
    return _finish(job, feats, phi)


def lasso(x: np.ndarray, y: np.ndarray, w: np.ndarray, alpha: float, iters: int = 10000, tol: float = 1e-12) -> np.ndarray:
    """Weighted Lasso with an intercept, sklearn's objective: ``sum w r**2 / (2 sum w) + alpha |beta|_1``
    (coordinate descent on the weight-centred data)."""
    w = w / w.sum()
    xc = x - w @ x
    yc = y - w @ y
    norm = w @ (xc * xc)
    beta = np.zeros(x.shape[1])
    r = yc.copy()
    for _ in range(iters):
        biggest = 0.0
        for i in range(x.shape[1]):
            if norm[i] == 0:
                continue
            old = beta[i]
            rho = w @ (xc[:, i] * r) + norm[i] * old
            beta[i] = np.sign(rho) * max(abs(rho) - alpha, 0.0) / norm[i]
            if beta[i] != old:
                r -= xc[:, i] * (beta[i] - old)
                biggest = max(biggest, abs(beta[i] - old))
        if biggest < tol:
            break
    return beta


def _samples(job: Job) -> int:
    n = job.opts.n_samples
    return DEFAULT_SAMPLES[job.method] if n is None else n


def check_options(opts: AttributeOptions, method: str) -> None:
    """The perturbation options that can be checked before the forward."""
    fn = entry_name()
    if method not in PERTURBATION_METHODS:
        for arg in ("feature_mask", "sliding_window_shapes", "strides", "permutation"):
            if getattr(opts, arg) is not None:
                fail(fn, arg, f"None for method={method!r} (it is an option of {', '.join(PERTURBATION_METHODS)})", getattr(opts, arg))
    if method == "occlusion" and opts.feature_mask is not None:
        fail(fn, "feature_mask", "None for occlusion (its features are the sliding windows)", "a mask")
    if method != "occlusion":
        for arg in ("sliding_window_shapes", "strides"):
            if getattr(opts, arg) is not None:
                fail(fn, arg, f"None for method={method!r} (an option of occlusion)", getattr(opts, arg))
    if opts.permutation is not None and method != "feature_permutation":
        fail(fn, "permutation", f"None for method={method!r} (an option of feature_permutation)", opts.permutation)


#: the methods of this module (``methods.RUNNERS`` holds their runners)
PERTURBATION_METHODS = ("occlusion", "feature_ablation", "feature_permutation", "shapley", "shapley_sampling", "kernel_shap", "lime")
