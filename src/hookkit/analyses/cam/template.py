"""``hookkit.cam``: class activation maps by any of the usual methods, on any layer layout, both frameworks.

One template does the shared work: run the model (eval mode, gradients on even under the caller's
``no_grad``), record the selected layers' outputs and take the target score's gradient with respect to
them, map each output to channels-first ``[N, C, *spatial]`` (``cam_layouts``), let the method weigh
the channels (``cam_methods``), sum (or project, ``eigen_smooth``), ``relu``, min-max scale, resize
to the input (half-pixel linear / bilinear / trilinear), and average the layers. Everything runs on the
model's device in its framework (``tensor_math`` ops); only ``as_tensor=False`` copies to the host.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

from hookkit.analyses.cam.call import CamKeywords, CamOptions, prepare_inputs, tensor_target
from hookkit.analyses.cam.forwards import LayerView, learned, replace_first
from hookkit.analyses.cam.layouts import Layout, check_mapped, plan_layout
from hookkit.analyses.cam.methods import METHODS, Method, project
from hookkit.analyses.cam.stream import stream
from hookkit.analyses.passes import analysis_pass
from hookkit.analyses.targets import Target, check_target, logits_of, predicted_classes, target_scores
from hookkit.core.entry import entry_name, public_entry
from hookkit.core.failures import explains_failures
from hookkit.core.router import INTERVENTION, attach
from hookkit.core.select import LayerSpec, select
from hookkit.core.tree import first_tensor
from hookkit.core.types import Layer
from hookkit.core.validate import InvalidArgument, check_model, check_runnable, fail

if TYPE_CHECKING:
    import os

    from typing_extensions import Unpack

    from hookkit.observers.features import Features

AUGMENTATIONS = [(flip, factor) for flip in (False, True) for factor in (0.9, 1.0, 1.1)]  # aug_smooth


def _modes(n_spatial: int) -> str:
    return ("linear", "bilinear", "trilinear")[n_spatial - 1]


def rows_of(obj: Any, lo: int, hi: int, total: int, is_tensor: Callable[[Any], bool]) -> Any:
    """Rows ``lo:hi`` of a batched output of ``total`` rows: tensors and per-sample lists (detections) sliced."""
    if is_tensor(obj):
        return obj[lo:hi] if len(obj.shape) and obj.shape[0] == total else obj
    if isinstance(obj, dict):
        items = {k: rows_of(v, lo, hi, total, is_tensor) for k, v in obj.items()}
        return items if type(obj) is dict else replace_items(obj, items)
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        if len(obj) == total and not any(is_tensor(o) and len(o.shape) and o.shape[0] == total for o in obj):
            return obj[lo:hi]
        return type(obj)(rows_of(o, lo, hi, total, is_tensor) for o in obj)
    return obj


def replace_items(obj: Any, items: dict) -> Any:
    try:
        return type(obj)(**items)
    except TypeError:
        new = type(obj)()
        new.update(items)
        return new


class _Recorder:
    """An intervention on the target layers: keeps each call's output (made a leaf that takes gradients when
    nothing before it does) and hands the model a copy, so a later in-place op cannot change what is kept."""

    def __init__(self, be: Any, named: list[tuple[str, Any]], grads: bool):
        self.be, self.named, self.grads = be, named, grads
        self.outputs: dict[str, list[Any]] = {n: [] for n, _ in named}

    @contextlib.contextmanager
    def attached(self, model: Any) -> Iterator[None]:
        handles = []
        try:
            for name, layer in self.named:
                handles.append(attach(model, [(name, layer)], "forward", self._consumer(name), INTERVENTION))
            yield
        finally:
            for h in handles:
                h.remove()

    def _consumer(self, name: str) -> Callable[[Any], Any]:
        be = self.be

        def on_forward(ev: Any) -> Any:
            t = first_tensor(ev.output, be.is_tensor)
            if t is None:
                return None
            if self.grads and not be.requires_grad(t):
                t = be.set_requires_grad(be.detach(t))
            self.outputs[name].append(t)
            return replace_first(ev.output, be.clone(t), be.is_tensor)

        return on_forward


class _Run:
    """One call of ``cam``: the settings, and the template applied to a batch."""

    def __init__(self, model: Any, be: Any, named: list[tuple[str, Any]], method: str, target: Target, opts: CamOptions):
        self.model, self.be, self.named, self.name = model, be, named, method
        self.method: Method = METHODS[method]
        self.m = be.family("tensor_math")
        self.target = target
        self.reshape, self.prefix = opts.reshape, opts.prefix_tokens
        self.eigen, self.aug, self.eval = opts.eigen_smooth, opts.aug_smooth, opts.eval
        self.rows = opts.batch_size or self.method.batch
        self.size: tuple[int, ...] = ()
        self.n = 0
        self.classes: list[int] | None = None
        self.class_index: Any = None  # split_scores' gather index for up to a forward's groups, on the device
        self.learned = learned(model)
        # ScoreCAM: does the model take its rows in ``conv_layout``? AblationCAM: does the rest of the model take
        # them so at the layer? None: to be tried (not where an earlier call saw the model refuse it)
        self.fast_layout: bool | None = False if self.learned.layout_refused else None
        self.fast_ablated: bool | None = False if self.learned.ablated_refused else None

    def forward_masked(self, rows: Any) -> Any:
        """The model on ScoreCAM's masked inputs, in the layout the framework's convolutions run fastest on
        (``conv_layout``: the same values); a model that refuses it gets them as they are from then on."""
        if self.fast_layout is not False:
            fast = self.m.conv_layout(rows)
            if fast is not rows:
                try:
                    output = self.model(fast)
                    self.fast_layout = True
                    return output
                except Exception:  # noqa: BLE001 - run again as given below, where a real error shows
                    if self.fast_layout:
                        raise
                    self.fast_layout = False
                    self.learned.layout_refused = True
        return self.model(rows)

    # -- the template ----------------------------------------------------------------------------
    def __call__(self, x: Any) -> Any:
        if not self.aug:
            return self.float32(self.one(x))
        m, axis = self.m, len(x.shape) - 1
        maps = []
        for flip, factor in AUGMENTATIONS:
            xa = (m.flip(x, [axis]) if flip else x) * factor
            c = self.one(xa)
            maps.append(m.flip(c, [len(c.shape) - 1]) if flip else c)
        return self.float32(m.mean(m.stack(maps, 0), [0]))

    def float32(self, maps: Any) -> Any:
        """Maps are float32 whatever the model's dtype (a float64 model's ScoreCAM, AblationCAM and FullGrad
        maps came out float64, its other methods' float32)."""
        return self.be.cast(maps, "float32")

    def one(self, x: Any) -> Any:
        be, m = self.be, self.m
        self.n, self.size = x.shape[0], tuple(x.shape[2:])
        if self.method.kind == "fullgrad":
            return self.fullgrad(x)
        method = self.method
        rec = _Recorder(be, self.named, grads=method.grads)
        with analysis_pass(self.model, be, eval=self.eval, grad=method.grads):
            with contextlib.nullcontext() if method.grads else be.no_grad():
                with rec.attached(self.model):
                    output = self.model(x)
                self._check_ran(rec)
                scores = self._scores(output) if method.grads or method.forwards else None
                grads = self._grads(scores, [rec.outputs[n][-1] for n, _ in self.named]) if method.grads else [None] * len(self.named)
                maps = []
                for (name, layer), g in zip(self.named, grads):
                    raw = rec.outputs[name][-1]
                    layout = plan_layout(
                        raw.shape, self.size, self.reshape, self.prefix, name, self.n, declared=partial(self.declared, layer)
                    )
                    acts = self._mapped(layout, be.detach(raw), name)
                    grad = self._mapped(layout, g, name) if g is not None else None
                    p = LayerView(self, name, layer, be.detach(raw), layout, acts, grad, x, scores)
                    p.calls = len(rec.outputs[name])
                    maps.append(self.layer_map(p))
        if len(maps) == 1:
            return self.minmax(m.relu(maps[0]))
        return self.minmax(m.mean(m.relu(m.stack(maps, 1)), [1]))

    def layer_map(self, p: LayerView) -> Any:
        """One layer's map at the input's size, min-max scaled (pytorch-grad-cam's per-layer step)."""
        m, kind = self.m, self.method.kind
        w = self.method.weigh(p)
        if kind == "map":
            cam = w
        else:
            if kind == "weights":
                w = m.reshape(w, [*w.shape, *[1] * len(self.size)]) * p.acts
            cam = project(self.be, m, w) if self.eigen else m.sum(w, [1])
        return self.scaled(m.relu(cam), self.size)

    # -- pieces ----------------------------------------------------------------------------------
    def _mapped(self, layout: Layout, t: Any, name: str) -> Any:
        out = layout.to_channels_first(self.m, t)
        if layout.kind == "custom":
            check_mapped(out, self.n, self.size, name)
        return self.float32(out)

    def _check_ran(self, rec: _Recorder) -> None:
        for name, _ in self.named:
            if not rec.outputs[name]:
                raise InvalidArgument(
                    f"{entry_name()}(): layer {name or '(root)'!r} did not run in the model's forward (or output no tensor)"
                )

    def _scores(self, output: Any) -> Any:
        """The targets' scores on the batch; fixes the class of each sample for the forwards to come."""
        target, n = self.target, self.n
        if self.method.forwards:
            if target is None:
                target = predicted_classes(self.be, output, n)
            if not callable(target) and all(not callable(c) for c in ([target] if isinstance(target, (int, np.integer)) else target)):
                self.classes = [int(target)] * n if isinstance(target, (int, np.integer)) else [int(c) for c in target]
                self.class_index = None
            self.resolved = target
        scores = target_scores(self.be, output, target, n)
        if self.method.forwards and tuple(scores.shape) != (n,):
            fail(entry_name(), "target", f"a callable returning one score per sample ([{n}]) for method={self.name!r}", target)
        return scores

    def _grads(self, scores: Any, tensors: list[Any]) -> list[Any]:
        total = self.m.sum(scores, [0]) if len(scores.shape) else scores
        try:
            return list(self.be.grads_of(total, tensors))
        except (RuntimeError, ValueError) as e:
            names = ", ".join(repr(n) for n, _ in self.named)
            raise InvalidArgument(
                f"{entry_name()}(): no gradient reached layer(s) {names}: the target's score does not depend on their output ({e})"
            ) from None

    def declared(self, layer: Any) -> str | None:
        """The output layout ``layer`` declares (Paddle's ``data_format``), else the one its sublayers agree on,
        else the one every declaring layer of the model agrees on (an activation after NHWC convolutions)."""
        lb = self.be.family("layer_bias")
        for scope in ([layer], [sub for _, sub in self.be.named_layers(layer)], [sub for _, sub in self.be.named_layers(self.model)]):
            formats = {f for f in map(lb.data_format, scope) if f is not None}
            if len(formats) == 1:
                return formats.pop()
            if formats:
                return None
        return None

    def split_scores(self, output: Any, k: int) -> Any:
        """Scores ``[k, N]`` of a forward on ``k`` channel-major groups of the ``N`` samples."""
        be, m, n = self.be, self.m, self.n
        if self.classes is not None:
            logits = logits_of(be, output)
            if self.class_index is None or self.class_index.shape[0] < k:  # once per batch: a copy from the host waits for the device
                idx = np.tile(np.asarray(self.classes, np.int64), (max(k, self.rows // n), 1))[..., None]
                self.class_index = be.from_numpy(idx, like=logits)
            return m.reshape(m.gather(m.reshape(logits, [k, n, -1]), 2, self.class_index[:k]), [k, n])
        parts = []
        for j in range(k):
            s = target_scores(be, rows_of(output, j * n, (j + 1) * n, k * n, be.is_tensor), self.resolved, n)
            parts.append(m.reshape(s, [n]))
        return m.stack(parts, 0)

    def minmax(self, cam: Any) -> Any:
        axes = list(range(1, len(cam.shape)))
        cam = cam - self.m.amin(cam, axes, keepdim=True)
        return cam / (1e-7 + self.m.amax(cam, axes, keepdim=True))

    def scaled(self, cam: Any, size: tuple[int, ...]) -> Any:
        """``[N, *S]`` -> min-max scaled per sample, resized to ``size``."""
        n, s = cam.shape[0], tuple(cam.shape[1:])
        cam = self.minmax(cam)
        if s == tuple(size):
            return cam
        up = self.m.interpolate(self.m.reshape(cam, [n, 1, *s]), size, _modes(len(size)))
        return self.m.reshape(up, [n, *size])

    def scaled_channels(self, t: Any, size: tuple[int, ...]) -> Any:
        """``[N, K, *S]`` -> each (sample, channel) min-max scaled, resized to ``size``."""
        n, k = t.shape[0], t.shape[1]
        flat = self.minmax(self.m.reshape(t, [n * k, *t.shape[2:]]))
        flat = self.m.reshape(flat, [n, k, *t.shape[2:]])
        return flat if tuple(t.shape[2:]) == tuple(size) else self.m.interpolate(flat, size, _modes(len(size)))

    # -- FullGrad: the input's gradient x input, plus |bias x gradient| of every bias layer ------------
    def fullgrad(self, x: Any) -> Any:
        be, m = self.be, self.m
        lb = be.family("layer_bias")
        named = [(n, layer) for n, layer in be.named_layers(self.model) if lb.has_bias(layer)]
        if not named:
            raise InvalidArgument(
                f"{entry_name()}(): method='fullgrad' needs convolution or batch norm layers with a bias; the model has none"
            )
        rec = _Recorder(be, named, grads=True)
        with analysis_pass(self.model, be, eval=self.eval, grad=True):
            x = be.set_requires_grad(be.detach(x))
            with rec.attached(self.model):
                output = self.model(x)
            scores = self._scores(output)
            calls = [(name, layer, t) for name, layer in named for t in rec.outputs[name]]
            grads = self._grads(scores, [x] + [t for _, _, t in calls])
            # float32 like the bias terms: Paddle's concat does not promote (a float64 model failed)
            terms = [self.scaled_channels(self.float32(abs(grads[0] * be.detach(x))), self.size)]
            for (name, layer, t), g in zip(calls, grads[1:]):
                layout = plan_layout(t.shape, self.size, None, None, name, declared=partial(self.declared, layer))
                g = self._mapped(layout, g, name)
                bias = be.cast(lb.bias(layer), "float32")
                bias = m.reshape(bias, [1, g.shape[1], *[1] * len(self.size)])
                terms.append(m.sum(self.scaled_channels(abs(bias * g), self.size), [1], keepdim=True))
        maps = m.cat(terms, 1)
        if self.eigen:  # projected at 1/8 of the input's size, as pytorch-grad-cam does (memory)
            small = tuple(max(1, s // 8) for s in self.size)
            proj = project(be, m, self.scaled_channels(maps, small))
            maps = self.scaled_channels(m.reshape(proj, [self.n, 1, *small]), self.size)
        return self.minmax(m.sum(maps, [1]))


# -- the entry point --------------------------------------------------------------------------------
@overload
def cam(
    model: Layer, layers: LayerSpec, inputs: Any, method: str = ..., target: Target = ..., *,
    as_tensor: Literal[False] = ..., out: None = ..., **options: Unpack[CamKeywords],
) -> np.ndarray: ...  # fmt: skip
@overload
def cam(
    model: Layer, layers: LayerSpec, inputs: Any, method: str = ..., target: Target = ..., *,
    as_tensor: Literal[True], out: None = ..., **options: Unpack[CamKeywords],
) -> Any: ...  # fmt: skip
@overload
def cam(
    model: Layer, layers: LayerSpec, inputs: Any, method: str = ..., target: Target = ..., *,
    as_tensor: bool = ..., out: str | os.PathLike[str], **options: Unpack[CamKeywords],
) -> Features: ...  # fmt: skip
@public_entry("cam")
@explains_failures("cam")
def cam(
    model: Layer,
    layers: LayerSpec,
    inputs: Any,
    method: str = "gradcam",
    target: Target = None,
    *,
    as_tensor: bool = False,
    out: Any = None,
    **options: Unpack[CamKeywords],
) -> Any:
    """Class activation maps ``[N, *input spatial size]`` in [0, 1]: numpy float32, or a tensor on the
    model's device with ``as_tensor=True``.

    >>> maps = hookkit.cam(model, "layer4", x)                                  # doctest: +SKIP
    >>> maps = hookkit.cam(model, "layer4", x, "scorecam", target=281)          # doctest: +SKIP
    >>> maps = hookkit.cam(vit, "blocks.11.norm1", x, "gradcam++")              # doctest: +SKIP
    >>> feats = hookkit.cam(model, "layer4", loader, out="cams")                 # doctest: +SKIP

    ``method``: "gradcam", "hirescam", "gradcam++", "xgradcam", "gradcam-elementwise", "layercam",
    "eigencam", "eigengradcam", "scorecam", "ablationcam", "fullgrad" (every convolution and batch
    norm layer with a bias, whatever ``layers`` says).
    ``layers``: a name, glob, layer or list; several layers give one map each, averaged.
    Layer outputs ``[N, C, h, w]``, ``[N, h, w, C]``, ViT tokens ``[N, prefix + h*w, C]`` (the grid
    inferred from the input, the leading class / register tokens dropped; ``prefix_tokens=`` sets their
    number), ``[N, C, L]`` and ``[N, C, D, H, W]`` need no help; ``reshape=f(output) -> [N, C, *spatial]``
    (or "channels_first" / "channels_last" / "tokens") for anything else.
    ``target``: None (each sample's predicted class), a class index, one per sample, or
    ``f(output) -> scores [N]`` on the model's whole output (regression, segmentation, detection).
    ``aug_smooth``: the mean over horizontal flips x intensity factors 0.9 / 1 / 1.1; ``eigen_smooth``:
    the first principal component of the weighted activations. ``batch_size``: rows per forward of
    ScoreCAM / AblationCAM (default 16 / 128), which run under no_grad. ``eval=False`` keeps the model's mode.
    ``out=FOLDER``: ``inputs`` is an iterable of batches, the maps are streamed to sharded safetensors
    files (key ``"cam"``, resumable) and ``load_features(FOLDER)`` is returned.
    The model's training flags, its parameters' ``.grad`` and its hooks are left as they were.
    Returns numpy float32 maps, a tensor (``as_tensor=True``) or ``Features`` (``out=``).
    ``options``: the other keywords, described above, with their defaults: ``reshape=None``,
    ``prefix_tokens=None``, ``aug_smooth=False``, ``eigen_smooth=False``, ``batch_size=None``, ``eval=True``,
    ``shard_size=16 * 2**20`` (``out=``'s shards, bytes or "64MB"), ``progress=None`` (a progress line on a terminal).
    """
    return run_cam(model, layers, inputs, method, target, CamOptions.of(as_tensor=as_tensor, out=out, **options))


def run_cam(model: Layer, layers: LayerSpec, inputs: Any, method: str, target: Target, opts: CamOptions) -> Any:
    """``cam`` with its options made (the shortcuts ``gradcam`` / ``gradcam_plus_plus`` call it too)."""
    be = check_model(model)
    check_runnable(be, model)
    opts.check(method)
    named = select(model, layers) if method != "fullgrad" else []
    target = tensor_target(be, target)
    if opts.out is not None:
        return stream(_Run(model, be, named, method, target, opts), inputs, opts.out, layers, opts.shard_size, opts.progress)
    x = prepare_inputs(be, model, inputs)
    check_target(target, be.shape(x)[0])
    maps = _Run(model, be, named, method, target, opts)(x)
    return maps if opts.as_tensor else be.to_numpy(maps)
