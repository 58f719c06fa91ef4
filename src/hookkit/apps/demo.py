"""``hookkit demo``: train a small CNN on scikit-learn's bundled digits with hookkit attached, write a report.

hookkit is attached the way a user would: ``ActivationStats`` (with histograms), ``GradientStats``,
``watch_nonfinite`` and plug-in dropout on two layers. The model and the loop are the same for
every framework: the few framework calls (layer classes, optimizer, training step) are backend methods.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import tempfile
import time
from typing import Any

import numpy as np

from hookkit.backends import Backend, backend_named, registered_backends

DEFAULT_EPOCHS = 8
CONV_LAYERS = ("conv1", "conv2", "conv3")
#: plug-in dropout: (layer, kind, p). Channel dropout after the second conv block, dropout on fc1.
DROPOUT = (("act2", "channel_dropout", 0.1), ("act4", "dropout", 0.3))
GRADCAM_LAYER = "conv3"
#: histograms of the recorded layers (conv and linear: pre-activations, negative and positive), so a
#: range symmetric around 0, wide enough for this model's outputs (fc2 reaches mean -2.5, std 6, tails
#: beyond 16) in bins of 0.25; the report shows the part that holds data (hookkit.viz.color_dim(extent="auto")).
HIST_RANGE, HIST_BINS = (-32.0, 32.0), 256
FEATURE_MAP_SAMPLES = 3  # held-out digits of different classes, one per row
GRADCAM_SAMPLES = 12
#: the method comparison grid: (hookkit.cam method, column title), over the first CAM_GRID_SAMPLES digits
CAM_GRID_METHODS = (("gradcam", "Grad-CAM"), ("gradcam++", "Grad-CAM++"), ("layercam", "LayerCAM"), ("eigencam", "EigenCAM"),
                    ("scorecam", "ScoreCAM"), ("ablationcam", "AblationCAM"), ("fullgrad", "FullGrad"))  # fmt: skip
CAM_GRID_SAMPLES = 5


class DemoError(Exception):
    """A user-facing problem: printed as one line, exit code 2."""


# -- the model: one definition, on the layer classes of the chosen framework ----------------------
def _digits_cnn(backend: Backend) -> Any:
    """The demo's CNN, built from the backend's layer classes (the same model on every framework)."""
    nn = backend.family("demo_kit").layer_types()

    base: Any = backend.layer_class()  # the framework's layer class, known at run time only

    class DigitsCNN(base):
        def __init__(self) -> None:
            super().__init__()
            self.conv1, self.act1 = nn["Conv2d"](1, 16, 3, padding=1), nn["ReLU"]()
            self.conv2, self.act2, self.pool1 = nn["Conv2d"](16, 32, 3, padding=1), nn["ReLU"](), nn["MaxPool2d"](2)
            self.conv3, self.act3, self.pool2 = nn["Conv2d"](32, 32, 3, padding=1), nn["ReLU"](), nn["MaxPool2d"](2)
            self.flatten = nn["Flatten"]()
            self.fc1, self.act4, self.fc2 = nn["Linear"](32 * 2 * 2, 64), nn["ReLU"](), nn["Linear"](64, 10)

        def forward(self, x: Any) -> Any:
            x = self.act1(self.conv1(x))
            x = self.pool1(self.act2(self.conv2(x)))
            x = self.pool2(self.act3(self.conv3(x)))
            return self.fc2(self.act4(self.fc1(self.flatten(x))))

    return DigitsCNN()


def _tensor(backend: Backend, a: np.ndarray) -> Any:
    return backend.from_numpy(np.ascontiguousarray(a))


# -- measuring what the dropout hooks did ---------------------------------------------------------
class _DropMeter:
    """Non-zero counts of a layer's output before and after its dropout hook, kept on the device.

    ``before`` is placed ahead of the dropout (same priority, placed earlier, so it runs first);
    ``after`` is an observer, which runs after every intervention."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self.counts: dict[bool, list[Any]] = {True: [0, 0, 0], False: [0, 0, 0]}  # training -> [before, after, calls] (tensors, calls)
        self._pending: Any = None

    def _nonzero(self, t: Any) -> Any:
        return self.backend.cast(t != 0, "int64").sum()  # a 0-d tensor: no host read per step

    def before(self, layer: Any, inputs: Any, output: Any) -> None:
        self._pending = self._nonzero(output)

    def after(self, layer: Any, inputs: Any, output: Any) -> None:
        c = self.counts[self.backend.is_training(layer)]
        c[0] = c[0] + self._pending
        c[1] = c[1] + self._nonzero(output)
        c[2] += 1

    def fraction(self, training: bool) -> float | None:
        before, after, calls = self.counts[training]
        if not calls:
            return None
        before, after = float(self.backend.to_numpy(before)), float(self.backend.to_numpy(after))
        return 1.0 - after / before if before else 0.0


# -- the run ----------------------------------------------------------------------------------------
def _backend(framework: str) -> Backend:
    """The backend of ``--framework``, importing the framework; a DemoError when it cannot."""
    if framework not in registered_backends():
        raise DemoError(f"unknown --framework {framework!r}; valid: {', '.join(registered_backends())}")
    try:
        return backend_named(framework)
    except ImportError as exc:
        raise DemoError(f"--framework {framework}: {exc}") from None


def _check_out(out: pathlib.Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".hookkit-write-test"):
            pass
    except OSError as exc:
        raise DemoError(f"--out {str(out)!r} is not writable: {exc.strerror or exc}") from None


def _digits(seed: int, limit: int | None) -> tuple[np.ndarray, ...]:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]  # [N, 1, 8, 8] in [0, 1]
    y = d.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    if limit is not None:
        order = order[:limit]
    n_test = max(10, len(order) // 5)
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def run_demo(
    framework: str = "torch",
    epochs: int | None = None,
    out: str | os.PathLike = "hookkit-report",
    seed: int = 0,
    *,
    limit: int | None = None,
    batch_size: int = 32,
    lr: float = 2e-3,
    quiet: bool = False,
) -> dict[str, Any]:
    """Train the digits CNN with hookkit attached and write ``out/report.html``; returns the run's facts
    (``accuracy``, ``report``, ``out``, ``seconds``, ``dropout``, ``model``, ``steps``).

    ``limit`` uses only that many digits (for quick checks).

    >>> hookkit.apps.demo.run_demo("torch", epochs=2, out="demo-out")   # doctest: +SKIP
    """
    epochs = DEFAULT_EPOCHS if epochs is None else epochs
    if epochs < 1:
        raise DemoError(f"--epochs must be at least 1; got {epochs}")
    backend = _backend(framework)
    out = pathlib.Path(out)
    _check_out(out)
    with backend.family("demo_kit").cpu_session():
        return _run(backend, epochs, out, seed, limit, batch_size, lr, quiet)


def _run(
    backend: Backend, epochs: int, out: pathlib.Path, seed: int, limit: int | None, batch_size: int, lr: float, quiet: bool
) -> dict[str, Any]:
    from rich.console import Console

    import hookkit

    console = Console(stderr=False, quiet=quiet)
    t0 = time.perf_counter()

    framework = backend.name
    kit = backend.family("demo_kit")
    kit.seed(seed)
    x_train, y_train, x_test, y_test = _digits(seed, limit)
    model = _digits_cnn(backend)
    opt = kit.adam(backend.parameters(model), lr)

    # hookkit, attached the way a user would
    acts = hookkit.ActivationStats(model, hist=True, bins=HIST_BINS, range=HIST_RANGE)  # layers with parameters, as fastai
    grads = hookkit.GradientStats(model)
    watch = hookkit.watch_nonfinite(model)
    meters, handles = {}, []
    for layer, kind, p in DROPOUT:
        meter = meters[layer] = _DropMeter(backend)
        handles.append(hookkit.on_forward(model, layer, meter.before, priority=hookkit.INTERVENTION))
        handles.append(getattr(hookkit, kind)(model, layer, p=p))
        handles.append(hookkit.on_forward(model, layer, meter.after, priority=hookkit.OBSERVER))

    rng = np.random.default_rng(seed)
    n_batches = -(-len(x_train) // batch_size)
    try:
        curves, logits = _train(backend, model, opt, (x_train, y_train, x_test, y_test), epochs, batch_size, rng, console)
    finally:
        for h in handles:
            h.remove()
        acts.remove()
        grads.remove()
        watch.remove()
    predicted = logits.argmax(axis=1)
    accuracy = float((predicted == y_test).mean())

    # the data, then the figures that need the model, then the page
    acts.save(out)
    grads.save(out)
    summary = hookkit.summary(model, input_size=(1, 1, 8, 8))
    dropout = _dropout_facts(meters)
    meta = {
        "framework": framework,
        "data": f"sklearn digits, {len(x_train)} train / {len(x_test)} held out",
        "epochs": epochs,
        "seed": seed,
        "held-out accuracy": f"{accuracy:.3f}",
        "NaN/Inf watch": "none found",  # watch_nonfinite would have raised, naming the layer
    }
    figures = _figures(model, backend, x_test, y_test, predicted, out)
    files = {"summary.json": summary.to_dict(), "dropout.json": dropout, "meta.json": meta, "figures.json": figures, "scalars.json": curves}
    for name, data in files.items():
        (out / name).write_text(json.dumps(data, indent=2), encoding="utf-8")
    path = hookkit.report(out, title="hookkit demo: a small CNN on handwritten digits")
    seconds = time.perf_counter() - t0

    summary.print(console.file)  # rich in a terminal, plain text when piped
    console.print(f"held-out accuracy: [bold]{accuracy:.3f}[/bold] ({len(x_test)} digits)   time: {seconds:.1f} s")
    for layer, d in dropout.items():
        console.print(
            f"plug-in {d['kind']} on {layer} (p={d['p']}): {d['fraction']:.1%} of its non-zero outputs dropped in training, {d['eval_fraction']:.0%} in eval"
        )
    console.print(f"report: [bold]{path}[/bold]  (statistics saved next to it)")
    return {
        "accuracy": accuracy,
        "report": path,
        "out": out,
        "seconds": seconds,
        "dropout": dropout,
        "model": model,
        "steps": epochs * n_batches,
    }


def _train(
    backend: Backend, model: Any, opt: Any, data: tuple[np.ndarray, ...], epochs: int, batch_size: int, rng: Any, console: Any
) -> tuple[dict[str, dict[str, list[float]]], np.ndarray]:
    """The training loop under a progress bar: the loss and held-out accuracy curves, and the final
    held-out logits."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # lazy: rich for the demo

    kit = backend.family("demo_kit")
    x_train, y_train, x_test, y_test = data
    n_batches = -(-len(x_train) // batch_size)
    curves: dict[str, dict[str, list[float]]] = {"training loss": {"step": [], "value": []}, "held-out accuracy": {"step": [], "value": []}}
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(f"training ({backend.name})", total=epochs * n_batches, info="")
        for epoch in range(epochs):
            backend.set_training(model, True)
            order = rng.permutation(len(x_train))
            losses = []
            for b in range(n_batches):
                idx = order[b * batch_size : (b + 1) * batch_size]
                loss = kit.cross_entropy(model(_tensor(backend, x_train[idx])), _tensor(backend, y_train[idx]))
                loss.backward()
                opt.step()
                kit.clear_grads(opt)
                losses.append(backend.detach(loss))
                progress.advance(task)
            # one host sync per epoch, not per step
            step_losses = [float(backend.to_numpy(v)) for v in losses]
            mean_loss = float(np.mean(step_losses))
            curves["training loss"]["step"] += list(range(epoch * n_batches, (epoch + 1) * n_batches))
            curves["training loss"]["value"] += step_losses
            backend.set_training(model, False)
            with backend.no_grad():
                held_out = float((backend.to_numpy(model(_tensor(backend, x_test))).argmax(axis=1) == y_test).mean())
            curves["held-out accuracy"]["step"].append((epoch + 1) * n_batches - 1)
            curves["held-out accuracy"]["value"].append(held_out)
            progress.update(task, info=f"epoch {epoch + 1}/{epochs} loss {mean_loss:.3f} held-out accuracy {held_out:.3f}")
    backend.set_training(model, False)
    with backend.no_grad():
        logits = backend.to_numpy(model(_tensor(backend, x_test)))
    return curves, logits


def _dropout_facts(meters: dict[str, _DropMeter]) -> dict[str, dict[str, Any]]:
    """Per plug-in dropout layer: its kind, p, the fraction of non-zero outputs it dropped (training, eval)."""
    return {
        layer: {
            "kind": kind,
            "p": p,
            "fraction": meters[layer].fraction(True) or 0.0,
            "calls": meters[layer].counts[True][2],
            "eval_fraction": round(meters[layer].fraction(False) or 0.0, 6),
        }
        for layer, kind, p in DROPOUT
    }


def _distinct_classes(labels: np.ndarray, n: int) -> list[int]:
    """Indices of the first ``n`` samples whose labels differ from each other's."""
    seen: dict[int, int] = {}
    for i, y in enumerate(labels.tolist()):
        if y not in seen:
            seen[y] = i
        if len(seen) == n:
            break
    return sorted(seen.values())


def _figures(model: Any, backend: Backend, x_test: np.ndarray, y_test: np.ndarray, predicted: np.ndarray, out: pathlib.Path) -> list[dict]:
    """Feature maps and Grad-CAM as PNG files under ``out/figures``, listed (with their captions) for the report."""
    import hookkit
    from hookkit import viz
    from hookkit.apps.report.render import png_bytes

    folder = out / "figures"
    folder.mkdir(exist_ok=True)
    listed: list[dict] = []

    def keep(fig: Any, file: str, section: str, caption: str, **more: str) -> None:
        (folder / file).write_bytes(png_bytes(fig))
        listed.append({"section": section, "caption": caption, "file": f"figures/{file}", **more})

    samples = _distinct_classes(y_test, FEATURE_MAP_SAMPLES)
    with hookkit.capture(model, list(CONV_LAYERS)) as cap, backend.no_grad():
        model(_tensor(backend, x_test[samples]))
    intro = (
        f"One held-out digit per row ({len(samples)} digits of different classes): the 8x8 input, then every channel of "
        f"{', '.join(CONV_LAYERS)} (hookkit.capture, drawn by hookkit.viz.feature_maps_by_layer; each channel on its own color scale)."
    )
    for row, s in enumerate(samples):
        label = f"held-out digit #{s}: label {y_test[s]}, predicted {predicted[s]}"
        fig = viz.feature_maps_by_layer(
            cap, CONV_LAYERS, sample=row, image=x_test[s, 0], ncols=(4, 8, 8), image_title=f"input (label {y_test[s]})"
        )
        keep(fig, f"feature_maps_{row}.png", "feature-maps", label, section_intro=intro)

    n = min(GRADCAM_SAMPLES, len(x_test))
    x = _tensor(backend, x_test[:n])
    intro = (
        f"Where the network looked: heatmaps over the first {n} held-out digits at {GRADCAM_LAYER} for the predicted class "
        "(hookkit.gradcam and hookkit.gradcam_plus_plus), with the digit's outline in white; titles give the predicted and true labels (red: wrong)."
    )
    for fn, name, file in (
        (hookkit.gradcam, "Grad-CAM", "gradcam.png"),
        (hookkit.gradcam_plus_plus, "Grad-CAM++", "gradcam_plus_plus.png"),
    ):
        cams = fn(model, GRADCAM_LAYER, x)
        fig = viz.gradcam_overlay(x_test[:n], cams, predicted=predicted[:n], labels=y_test[:n], ncols=6, title=f"{name} at {GRADCAM_LAYER}")
        keep(fig, file, "gradcam", f"{name} at {GRADCAM_LAYER}, target: the predicted class", section_intro=intro)
    k = min(CAM_GRID_SAMPLES, n)
    maps = {title: hookkit.cam(model, GRADCAM_LAYER, x_test[:k], method) for method, title in CAM_GRID_METHODS}
    fig = viz.cam_grid(x_test[:k], maps, predicted=predicted[:k], labels=y_test[:k], title=f"hookkit.cam methods at {GRADCAM_LAYER}")
    keep(
        fig, "cam_methods.png", "gradcam", f"hookkit.cam: {len(maps)} methods side by side at {GRADCAM_LAYER} (FullGrad: every bias layer)"
    )
    return listed


def run_cli(args: Any) -> int:
    """``hookkit demo --framework torch|paddle --epochs N --out DIR --seed S``."""
    try:
        run_demo(args.framework, args.epochs, args.out, args.seed)
    except DemoError as exc:
        print(f"hookkit demo: error: {exc}", file=sys.stderr)
        return 2
    return 0
