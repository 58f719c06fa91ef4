"""What ``hookkit.attribute`` attributes to when the inputs are more than one tensor, and the feature
masks of the perturbation methods (one per sample or one for the batch).

Several input tensors (captum's ``inputs=(x1, x2)``): ``Packing`` lays them side by side as one
``[N, D]`` tensor (each sample's elements, input after input) that every method runs on unchanged; the
model is called on them unpacked (``model(x1, x2)``), and the attributions come back as a tuple shaped
like the inputs. ``baselines`` / ``feature_mask`` / ``sliding_window_shapes`` / ``strides`` are then
tuples of the same length, packed the same way. Feature ids are shared across the tensors (the same id in
two tensors is one feature, captum's grouping); the default mask numbers every element of every tensor.

Feature masks: ints shaped like one sample (``[*shape]``), or ``[1, *shape]`` (the same grouping for
every sample), or ``[N, *shape]`` (each sample its own grouping; captum's per-sample masks), any axis
of size 1 broadcast.

>>> hookkit.attribute(model, None, (image, table), "feature_ablation", target=0,
...                   feature_mask=(image_groups, table_groups))   # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from hookkit.core.entry import entry_name
from hookkit.core.validate import ArgumentTypeError, check_tensor_like, fail

if TYPE_CHECKING:
    from hookkit.analyses.attribution.job import AttributeOptions, Job
    from hookkit.analyses.attribution.perturbation import Features

#: the methods that need one input tensor (their rules read the inputs' layout)
ONE_TENSOR_METHODS = ("guided_gradcam", "lrp")


def is_several(be: Any, inputs: Any) -> bool:
    """Several input tensors: a tuple or list of the framework's tensors (``model(*inputs)``)."""
    return isinstance(inputs, (tuple, list)) and len(inputs) > 0 and all(be.is_tensor(t) for t in inputs)


# -- several input tensors -----------------------------------------------------------------------------------
@dataclass
class Packing:
    """``k`` input tensors of ``n`` samples side by side: input ``i`` holds columns ``[offsets[i],
    offsets[i] + sizes[i])`` of the packed ``[n, D]`` tensor, one sample ``shapes[i]`` of dtype ``dtypes[i]``."""

    be: Any
    n: int
    shapes: list[tuple[int, ...]]
    dtypes: list[str]
    kinds: list[str]
    dtype: str  # the packed tensor's: the inputs' common dtype, float64 when they differ

    @property
    def sizes(self) -> list[int]:
        return [int(np.prod(s)) for s in self.shapes]

    @property
    def offsets(self) -> list[int]:
        return [0, *np.cumsum(self.sizes).tolist()][:-1]

    def pack(self, tensors: Sequence[Any]) -> Any:
        """``[r, *shapes[i]]`` tensors (the same ``r``) -> ``[r, D]`` of the packed dtype."""
        be, m = self.be, self.be.family("tensor_math")
        flat = []
        for t in tensors:
            t = m.reshape(t, [be.shape(t)[0], -1])
            flat.append(t if be.dtype_name(t) == self.dtype else be.cast(t, self.dtype))
        return flat[0] if len(flat) == 1 else m.cat(flat, 1)

    def unpack(self, packed: Any, cast: bool = True) -> tuple[Any, ...]:
        """``[r, D]`` -> the ``k`` tensors ``[r, *shapes[i]]`` (of their own dtypes with ``cast``)."""
        be, m = self.be, self.be.family("tensor_math")
        r, out = be.shape(packed)[0], []
        for o, s, shape, dtype in zip(self.offsets, self.sizes, self.shapes, self.dtypes):
            t = m.reshape(packed[:, o : o + s], [r, *shape])
            out.append(be.cast(t, dtype) if cast and be.dtype_name(t) != dtype else t)
        return tuple(out)

    def caller(self, model: Any) -> Callable[..., Any]:
        """``packed -> model(*unpacked, **kwargs)``."""
        return lambda packed, **kwargs: model(*self.unpack(packed), **kwargs)

    def float_inputs(self) -> bool:
        return all(k == "float" for k in self.kinds)


def packing(be: Any, inputs: Sequence[Any]) -> Packing:
    """The ``Packing`` of several input tensors, checked: each a batch of the same ``N`` samples."""
    fn = entry_name()
    shapes = [tuple(be.shape(t)) for t in inputs]
    if any(len(s) < 1 for s in shapes) or len({s[0] for s in shapes}) != 1 or shapes[0][0] < 1:
        fail(fn, "inputs", "tensors [N, ...] with the same number of samples N >= 1", f"shapes {[list(s) for s in shapes]}")
    devices = {str(be.device_of(t)) for t in inputs}
    if len(devices) != 1:
        fail(fn, "inputs", "tensors on one device", f"devices {sorted(devices)}")
    dtypes = [be.dtype_name(t) for t in inputs]
    common = dtypes[0] if len(set(dtypes)) == 1 else "float64"
    return Packing(be, shapes[0][0], [s[1:] for s in shapes], dtypes, [be.dtype_kind(t) for t in inputs], common)


def check_several(opts: AttributeOptions, method: str, p: Packing, to_inputs: bool) -> None:
    """The per-input options of a call on several inputs: tuples of the inputs' length."""
    fn, k = entry_name(), len(p.shapes)
    if method in ONE_TENSOR_METHODS:
        fail(fn, "inputs", f"one tensor for method={method!r} (its rules read one input's layout)", f"a tuple of {k} tensors")
    if isinstance(opts.baselines, (tuple, list)) and len(opts.baselines) != k:
        fail(fn, "baselines", f"a tuple of {k} (one per input tensor)", f"a tuple of {len(opts.baselines)}")
    if not to_inputs:
        return
    mask = opts.feature_mask
    if mask is not None and not (isinstance(mask, (tuple, list)) and len(mask) == k):
        got = f"a tuple of {len(mask)}" if isinstance(mask, (tuple, list)) else "one mask"
        fail(fn, "feature_mask", f"a tuple of {k} masks (one per input tensor, None: each element its own feature)", got)
    win = opts.sliding_window_shapes
    if method == "occlusion" and not (isinstance(win, (tuple, list)) and len(win) == k and _per_input(win)):
        fail(fn, "sliding_window_shapes", f"a tuple of {k} windows (one per input tensor, each a tuple of ints)", win)
    strides = opts.strides
    if isinstance(strides, (tuple, list)) and not (len(strides) == k and _per_input(strides)):
        fail(fn, "strides", f"None, an int, or a tuple of {k} (one per input tensor, each an int or a tuple of ints)", strides)


def _per_input(value: Sequence[Any]) -> bool:
    return all((isinstance(v, int) and not isinstance(v, bool)) or isinstance(v, (tuple, list)) for v in value)


def packed_baselines(be: Any, given: Any, x: Any, p: Packing, distribution: bool) -> Any:
    """``baselines`` for several inputs (a tuple: each None, a number, or a tensor ``[r, *shape]`` or one
    sample) as one packed tensor ``[R, D]`` (R: 1, N, or the B samples of a distribution); None or a
    number is left as it is (it means the same for the packed inputs)."""
    if given is None or (isinstance(given, (int, float, np.integer, np.floating)) and not isinstance(given, bool)):
        return given
    fn, k = entry_name(), len(p.shapes)
    if not isinstance(given, (tuple, list)):
        fail(fn, "baselines", f"None, a number, or a tuple of {k} (one per input tensor)", "one tensor", kind=ArgumentTypeError)
    m, parts = be.family("tensor_math"), []
    for i, (b, shape) in enumerate(zip(given, p.shapes)):
        like = x[:1, p.offsets[i] : p.offsets[i] + p.sizes[i]]
        if b is None:
            parts.append(m.full((1, *shape), 0.0, like))
            continue
        if isinstance(b, (int, float, np.integer, np.floating)) and not isinstance(b, bool):
            parts.append(m.full((1, *shape), float(b), like))
            continue
        t = check_tensor_like(b, be, fn=fn, arg=f"baselines[{i}]")
        got = tuple(be.shape(t))
        if got == shape:
            t, got = m.reshape(t, [1, *shape]), (1, *shape)
        rows_ok = distribution or got[:1] in ((1,), (p.n,))
        if got[1:] != shape or not rows_ok:
            what = f"[B, {', '.join(map(str, shape))}] baseline samples" if distribution else f"[{p.n} or 1, {', '.join(map(str, shape))}]"
            fail(fn, f"baselines[{i}]", f"None, a number, or a tensor {what} or one sample {list(shape)} (input {i})", f"shape {list(got)}")
        if be.device_of(t) != be.device_of(x):
            t = be.to(t, be.device_of(x))
        parts.append(t)
    rows = {be.shape(t)[0] for t in parts} - {1}
    if len(rows) > 1:
        fail(fn, "baselines", "tensors with the same number of rows (or 1)", f"rows {sorted(rows)}")
    r = rows.pop() if rows else 1
    return p.pack([t if be.shape(t)[0] == r else m.tile_rows(t, r) for t in parts])


def packed_mask(be: Any, masks: Sequence[Any], p: Packing, method: str) -> np.ndarray:
    """``feature_mask`` for several inputs (a tuple of masks, each like a one-input mask, None: every element
    its own feature, numbered after the largest id given) as one ``[R, D]`` array of ids (R: 1 or N)."""
    arrays: list[np.ndarray | None] = []
    for i, (mask, shape) in enumerate(zip(masks, p.shapes)):
        arrays.append(None if mask is None else broadcast_mask(be, mask, shape, p.n, f"feature_mask[{i}]", f"input {i}", method))
    top = max([int(a.max()) + 1 for a in arrays if a is not None and a.size] or [0])
    rows = max(len(a) for a in arrays if a is not None) if any(a is not None for a in arrays) else 1
    flat = []
    for a, shape in zip(arrays, p.shapes):
        if a is None:
            size = int(np.prod(shape))
            a, top = (top + np.arange(size)).reshape(1, size), top + size
        flat.append(np.broadcast_to(a.reshape(len(a), -1), (rows, a[0].size)))
    return np.concatenate(flat, 1)


# -- feature masks ------------------------------------------------------------------------------------------
def broadcast_mask(be: Any, mask: Any, shape: tuple[int, ...], n: int, arg: str, where: str, method: str) -> np.ndarray:
    """A feature mask as ints ``[R, *shape]`` (R: 1, or ``n`` for one grouping per sample), checked:
    ``[*shape]``, ``[1 or n, *shape]``, any axis of size 1 broadcast."""
    fn = entry_name()
    arr = np.asarray(be.to_numpy(mask) if be.is_tensor(mask) else mask)
    if arr.dtype.kind not in "iu":
        fail(fn, arg, "integer feature ids (a tensor or array of ints)", f"dtype {arr.dtype}", kind=ArgumentTypeError)
    if arr.ndim == len(shape):
        arr = arr[None]
    fits = arr.ndim == len(shape) + 1 and arr.shape[0] in (1, n) and all(a in (1, s) for a, s in zip(arr.shape[1:], shape))
    if not fits:
        one = ", ".join(map(str, shape))
        per_sample = f" or [{n}, {one}] (one grouping per sample)" if method != "feature_permutation" else ""
        fail(
            fn,
            arg,
            f"ints shaped like one sample of {where} [{one}], [1, {one}]{per_sample}; an axis of size 1 is broadcast",
            f"shape {list(np.shape(mask))}",
        )
    arr = np.broadcast_to(arr, (arr.shape[0], *shape))
    if len(arr) > 1 and (arr == arr[:1]).all():
        arr = arr[:1]  # one mask per sample, all the same: the shared mask
    if len(arr) > 1 and method == "feature_permutation":
        fail(
            fn,
            arg,
            f"the same grouping for every sample ([1, ...]) for feature_permutation (a feature's values move across the batch), shaped like one sample of {where} {list(shape)}",
            f"{len(arr)} different masks",
        )
    return np.ascontiguousarray(arr)


def mask_features(features_cls: type[Features], arr: np.ndarray, shape: tuple[int, ...]) -> Features:
    """``Features`` of checked ids ``[R, *shape]``: the ids present anywhere, numbered from 0 in order;
    ``ids`` one row (``[E]``, shared) or one per sample (``[N, E]``)."""
    uniq, ids = np.unique(arr.reshape(-1), return_inverse=True)
    ids = ids.reshape(len(arr), -1)
    return features_cls(shape, len(uniq), ids=ids[0] if len(arr) == 1 else ids)


def packed_windows(
    features_cls: type[Features],
    job: Job,
    p: Packing,
    windows_of: Callable[[AttributeOptions, tuple[int, ...], str], Features],
) -> Features:
    """Occlusion over several inputs: each input's windows (its ``sliding_window_shapes[i]`` and
    ``strides[i]``), input after input, as sets of positions in the packed sample."""
    opts, positions = job.opts, []
    win: Any = opts.sliding_window_shapes or ()
    strides = opts.strides
    for i, shape in enumerate(p.shapes):
        st = strides[i] if isinstance(strides, (tuple, list)) else strides
        one = windows_of(replace(opts, sliding_window_shapes=win[i], strides=st), shape, f"input {i}")
        grid = np.arange(p.sizes[i]).reshape(shape) + p.offsets[i]
        positions += [(grid[w].reshape(-1),) for w in one.windows or []]
    return features_cls((sum(p.sizes),), len(positions), windows=positions)  # type: ignore[arg-type]


def unpacked(job: Job, attr: Any) -> Any:
    """The attributions as the inputs were given: a tuple shaped like them for several inputs."""
    p = job.packing
    if p is None or not attributes_inputs(job):
        return attr
    parts = p.unpack(attr, cast=False)  # float attributions of token ids stay float
    be = job.be
    return tuple(be.cast(t, d) if k == "float" and be.dtype_name(t) != d else t for t, d, k in zip(parts, p.dtypes, p.kinds))


def attributes_inputs(job: Job) -> bool:
    return job.layer is None or job.neuron is not None
