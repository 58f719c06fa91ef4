"""``hookkit.train_sae``: train a sparse autoencoder on activations streamed in bounded memory.

The source is an ``extract`` folder (read chunk by chunk, memory-mapped), an array, or a model, a
site and a data iterable (activations captured batch by batch). Rows pass through a shuffled buffer
of ``buffer_size`` rows: memory stays flat however large the data set. The losses and schedules are
SAELens's (MSE summed over the activation and averaged over tokens; L1 weighted by decoder norms for
"standard"; top-k with the auxiliary-k loss on dead features for "topk" and "batchtopk", the batch
threshold an exponential average of the smallest kept activation, activations rescaled by the decoder
norms (SAELens's ``rescale_acts_by_decoder_norm``, folded into the saved weights: unit-norm decoder rows); Adam, gradient norm clipped to 1,
linear lr warm-up and decay). Checkpoints are SAELens folders (``cfg.json`` +
``sae_weights.safetensors``) plus the trainer's state (safetensors + JSON): a run killed at any point
resumes from its latest checkpoint and gives the weights an uninterrupted run gives.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hookkit.backends import Backend, backend_for
from hookkit.core.entry import public_entry
from hookkit.core.files import read_json_file
from hookkit.core.validate import ArgumentTypeError, check_choice, fail
from hookkit.interventions.output_edits import ablate
from hookkit.observers.capture import capture
from hookkit.observers.features import load_features
from hookkit.sae.files import inside, read_safetensors, write_json, write_safetensors
from hookkit.sae.model import SAE, _placement
from hookkit.sae.splice import splice

TRAIN_ARCHITECTURES = ("topk", "batchtopk", "jumprelu", "standard")
STATE_FILE = "trainer_state.safetensors"
STATE_JSON = "trainer_state.json"
METRICS_FILE = "metrics.jsonl"


@dataclass
class Trained:
    """What ``train_sae`` returns: the ``sae`` (inference form, a ``hookkit.SAE``), ``metrics`` (one
    dict per logged step: step, mse, explained_variance, l0, dead_fraction, lr, samples_per_s),
    ``path`` (the output folder or None), ``steps`` and ``samples`` trained."""

    sae: SAE
    metrics: list[dict[str, float]] = field(default_factory=list)
    path: str | None = None
    steps: int = 0
    samples: int = 0


def read_metrics(path: str) -> list[dict[str, float]]:
    """The per-step metrics a ``train_sae(..., out=path)`` run wrote (``metrics.jsonl``).

    >>> hookkit.read_sae_metrics("runs/sae")[-1]["explained_variance"]   # doctest: +SKIP
    """
    file = inside(path, METRICS_FILE)
    out = []
    with open(file) as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                if isinstance(row, dict):
                    out.append(row)
    return out


# -- the data ---------------------------------------------------------------------------------------
def _chunks(source: Any, site: str | None, chunk_rows: int) -> tuple[Iterable[np.ndarray], int]:
    """A re-startable stream of ``[rows, d_in]`` float32 chunks, and d_in."""
    if isinstance(source, (str, os.PathLike)):
        feats = load_features(os.fspath(source))
        keys = [k for k in feats if not k.startswith(":")]
        if site is None:
            if len(keys) != 1:
                fail(None, "site", f"the layer of the extract folder to train on (it holds {', '.join(keys)})", site)
            site = keys[0]
        if site not in feats:
            fail(None, "site", f"a layer the extract folder holds ({', '.join(keys)})", site)
        arr = feats[site]
        d_in = int(arr.shape[-1])
        per = max(1, chunk_rows // max(1, int(np.prod(arr.shape[1:-1], dtype=np.int64))))

        class Folder:
            def __iter__(self) -> Iterator[np.ndarray]:
                for start in range(0, len(arr), per):
                    yield np.asarray(arr[start : start + per], dtype=np.float32).reshape(-1, d_in)

        return Folder(), d_in
    if isinstance(source, np.ndarray):
        if source.ndim < 2:
            fail(None, "source", "an array [..., d_in]", f"shape {list(source.shape)}")
        flat = source.reshape(-1, source.shape[-1])

        class Rows:
            def __iter__(self) -> Iterator[np.ndarray]:
                for start in range(0, len(flat), chunk_rows):
                    yield np.asarray(flat[start : start + chunk_rows], dtype=np.float32)

        return Rows(), int(source.shape[-1])
    if isinstance(source, tuple) and len(source) == 3:
        return _model_chunks(*source)
    fail(
        None,
        "source",
        "an extract folder, an array [..., d_in], or (model, site, data iterable)",
        type(source).__name__,
        kind=ArgumentTypeError,
    )


def _model_chunks(model: Any, site: Any, data: Iterable[Any]) -> tuple[Iterable[np.ndarray], int]:
    if iter(data) is data:  # a generator: the stream reads it once per epoch
        fail(
            None,
            "source",
            "(model, site, data) with a re-iterable data set (a list, a DataLoader), not a one-shot iterator",
            type(data).__name__,
            kind=ArgumentTypeError,
        )

    be = backend_for(model)

    def run(batch: Any) -> np.ndarray:
        with be.no_grad(), capture(model, site) as cap:
            model(*batch) if isinstance(batch, tuple) else model(batch)
        name = cap.names[0]
        return np.asarray(be.to_numpy(be.cast(cap[name], "float32")))

    class FromModel:
        def __iter__(self) -> Iterator[np.ndarray]:
            for batch in data:
                a = run(batch)
                yield a.reshape(-1, a.shape[-1])

    first = next(iter(FromModel()), None)
    if first is None:
        fail(None, "source", "(model, site, data) with a non-empty data iterable", "empty data")
    return FromModel(), int(first.shape[-1])


def _batches(chunks: Iterable[np.ndarray], batch: int, buffer: int, seed: int) -> Iterator[np.ndarray]:
    """Batches of ``batch`` rows from a shuffled buffer of at most ``buffer`` rows, epoch after epoch
    (deterministic for a seed: a resumed run skips what it trained on and sees the same batches)."""
    rng = np.random.default_rng(seed)
    epoch = 0
    while True:
        pool: list[np.ndarray] = []
        held = total = 0
        for chunk in chunks:
            total += len(chunk)
            pool.append(chunk)
            held += len(chunk)
            if held >= buffer:
                rows = np.concatenate(pool)
                rows = rows[rng.permutation(len(rows))]
                keep = len(rows) // 2  # half stays to mix with what comes next
                out, rest = rows[: len(rows) - keep], rows[len(rows) - keep :]
                for s in range(0, len(out) - batch + 1, batch):
                    yield out[s : s + batch]
                left = len(out) % batch
                pool, held = [out[len(out) - left :], rest] if left else [rest], left + len(rest)
        if total < batch:
            fail("train_sae", "batch_size", f"at most the number of rows of the source ({total})", batch)
        rows = np.concatenate(pool) if pool else np.empty((0, 0), np.float32)
        rows = rows[rng.permutation(len(rows))]
        for s in range(0, len(rows) - batch + 1, batch):
            yield rows[s : s + batch]
        epoch += 1


# -- the trainer -----------------------------------------------------------------------------------
class _Trainer:
    def __init__(
        self,
        be: Backend,
        device: str | None,
        d_in: int,
        d_sae: int,
        arch: str,
        k: float,
        l1: float,
        l1_warm_up: int,
        aux_k_coefficient: float,
        dead_window: int,
        threshold_lr: float,
        seed: int,
        bandwidth: float = 0.05,
        init_threshold: float = 0.01,
    ):
        self.be, self.ops = be, be.family("sae")
        self.d_in, self.d_sae, self.arch, self.k = d_in, d_sae, arch, k
        self.l1, self.l1_warm_up, self.aux_coef, self.dead_window, self.threshold_lr = (
            l1,
            l1_warm_up,
            aux_k_coefficient,
            dead_window,
            threshold_lr,
        )
        rng = np.random.default_rng(seed)
        bound = math.sqrt(6.0 / d_in)  # kaiming uniform on [d_sae, d_in], rows scaled to norm 0.1 (SAELens's decoder_init_norm)
        W_dec = rng.uniform(-bound, bound, size=(d_sae, d_in)).astype(np.float32)
        W_dec *= 0.1 / np.linalg.norm(W_dec, axis=1, keepdims=True)
        init = {
            "W_enc": np.ascontiguousarray(W_dec.T),
            "b_enc": np.zeros(d_sae, np.float32),
            "W_dec": W_dec,
            "b_dec": np.zeros(d_in, np.float32),
        }
        if arch == "jumprelu":
            init["threshold"] = np.full(d_sae, init_threshold, np.float32)
        self.bandwidth = bandwidth
        self.rank, self.world = be.world()
        self.device = device
        self.names = list(init)
        self.params = [self.ops.parameter(self.ops.tensor(init[n], device, "float32")) for n in self.names]
        self.since_fired = np.zeros(d_sae, np.int64)
        self.topk_threshold = 0.0
        self.scale = 1.0  # activation normalisation factor (expected_average_only_in)
        self.step_n = 0
        self.samples = 0

    @property
    def p(self) -> dict[str, Any]:
        return dict(zip(self.names, self.params))

    def step(self, x_np: np.ndarray, lr: float, opt: Any, want_metrics: bool) -> dict[str, float] | None:
        ops, p = self.ops, self.p
        x = self.ops.tensor(x_np * self.scale if self.scale != 1.0 else x_np, self.device, "float32")
        h = (x - p["b_dec"]) @ p["W_enc"] + p["b_enc"]
        norms = None
        if self.arch == "standard":
            f = ops.relu(h)
            out = f @ p["W_dec"] + p["b_dec"]
        elif self.arch == "jumprelu":  # SAELens's JumpReLU: a threshold kept >= 0, learned through the STE
            ops.assign(p["threshold"], ops.relu(self.be.detach(p["threshold"])))
            f = ops.jumprelu(h, p["threshold"], self.bandwidth)
            out = f @ p["W_dec"] + p["b_dec"]
        else:  # SAELens's rescale_acts_by_decoder_norm: the decoder acts as if its rows had unit norm
            norms = ops.row_norm(p["W_dec"])
            h = h * norms
            f = ops.topk_dense(h, int(self.k)) if self.arch == "topk" else ops.batch_topk_dense(h, self.k)
            out = (f * (1 / norms)) @ p["W_dec"] + p["b_dec"]
        err = out - x
        mse = ops.sum_last(err * err).mean()
        loss = mse
        fired = np.asarray(self.be.to_numpy(ops.sum_first(ops.greater(self.be.detach(f), 0.0))))
        if self.world > 1:  # a feature is alive when it fired on any rank
            fired = ops.all_reduce(fired, "sum")
        fired = fired > 0
        self.since_fired += 1
        self.since_fired[fired] = 0
        dead = self.since_fired > self.dead_window
        coef = self.l1 * min(1.0, (self.step_n + 1) / self.l1_warm_up) if self.l1_warm_up else self.l1
        if self.arch == "standard":
            loss = loss + coef * ops.sum_last(f * ops.row_norm(p["W_dec"])).mean()
        elif self.arch == "jumprelu":  # the L0 penalty (SAELens's "step" sparsity loss)
            loss = loss + coef * ops.sum_last(ops.step_l0(h, p["threshold"], self.bandwidth)).mean()
        elif dead.any() and self.aux_coef and norms is not None:
            k_aux = min(self.d_in // 2, int(dead.sum()))
            scale = min(int(dead.sum()) / (self.d_in // 2), 1.0)
            mask = self.ops.tensor(dead, self.device, "bool")
            aux = (ops.masked_topk_dense(h, mask, k_aux) * (1 / norms)) @ p["W_dec"]
            resid = self.be.detach(x - out)
            loss = loss + self.aux_coef * scale * ops.sum_last((aux - resid) * (aux - resid)).mean()
        metrics = None
        if want_metrics:
            xd = np.asarray(x_np, np.float64) * self.scale
            var = float(((xd - xd.mean(0)) ** 2).sum(-1).mean())
            mse_v = float(self.be.to_numpy(self.be.detach(mse)))
            l0 = float(np.asarray(self.be.to_numpy(ops.sum_last(ops.greater(self.be.detach(f), 0.0)))).mean())
            metrics = {
                "step": self.step_n,
                "mse": mse_v,
                "explained_variance": 1.0 - mse_v / var if var > 0 else 0.0,
                "l0": l0,
                "dead_fraction": float(dead.mean()),
                "lr": lr,
            }
        ops.set_lr(opt, lr)
        ops.step(opt, loss, self.params, 1.0, self.world)
        if self.arch == "batchtopk":
            fd = np.asarray(self.be.to_numpy(self.be.detach(f)))
            pos = fd[fd > 0]
            low = float(pos.min()) if pos.size else np.inf
            if self.world > 1:  # the smallest kept activation of the whole (all ranks') batch
                low = float(ops.all_reduce(np.asarray([low]), "min")[0])
            if np.isfinite(low):
                self.topk_threshold = (1 - self.threshold_lr) * self.topk_threshold + self.threshold_lr * low
        self.step_n += 1
        self.samples += len(x_np) * self.world
        return metrics

    def arrays(self) -> dict[str, np.ndarray]:
        return {n: np.asarray(self.be.to_numpy(self.be.detach(t)), np.float32) for n, t in zip(self.names, self.params)}

    def inference(self, hook_name: str | None) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """(cfg, weights) of the inference SAE, SAELens's form, with the normalisation folded in."""
        w = self.arrays()
        if self.arch in ("topk", "batchtopk"):  # fold the decoder norms in (SAELens's inference form of a top-k SAE)
            n = np.linalg.norm(w["W_dec"], axis=1).astype(np.float32)
            w["b_enc"], w["W_enc"], w["W_dec"] = w["b_enc"] * n, w["W_enc"] * n[None, :], w["W_dec"] / n[:, None]
        if self.scale != 1.0:  # fold the scaling factor as SAELens's fold_activation_norm_scaling_factor
            w["W_enc"] = w["W_enc"] * np.float32(self.scale)
            w["W_dec"] = w["W_dec"] / np.float32(self.scale)
            w["b_dec"] = w["b_dec"] / np.float32(self.scale)
        arch = {"batchtopk": "jumprelu"}.get(self.arch, self.arch)
        cfg: dict[str, Any] = {
            "architecture": arch,
            "d_in": self.d_in,
            "d_sae": self.d_sae,
            "dtype": "float32",
            "device": "cpu",
            "apply_b_dec_to_input": True,
            "normalize_activations": "none",
            "reshape_activations": "none",
            "metadata": {
                "sae_lens_version": "6.0.0",
                "sae_lens_training_version": "6.0.0",
                "hook_name": hook_name,
                "trained_by": "hookkit.train_sae",
                "training_architecture": self.arch,
            },
        }
        if arch == "topk":
            cfg["k"] = int(self.k)
            cfg["rescale_acts_by_decoder_norm"] = False
        if arch == "jumprelu":
            # folded as above, the encoder's pre-activations are the training's (scaled input,
            # rescaled by the decoder norms): the threshold stays as learned
            w["threshold"] = np.full(self.d_sae, self.topk_threshold, np.float32)
        return cfg, w


def _lr_at(step: int, total: int, lr: float, warm_up: int, decay: int) -> float:
    """SAELens's schedule: linear warm-up from lr/warm_up, constant, linear decay to 0 over the last ``decay`` steps."""
    if warm_up and step < warm_up:
        return lr * (step + 1) / warm_up
    if decay and step >= total - decay:
        return lr * (1 - (step - (total - decay)) / decay)
    return lr


def _latest_checkpoint(out: str) -> str | None:
    root = os.path.join(out, "checkpoints")
    if not os.path.isdir(root):
        return None
    done = sorted(
        (int(n.split("_")[1]), n)
        for n in os.listdir(root)
        if n.startswith("step_") and n.split("_")[1].isdigit() and os.path.exists(os.path.join(root, n, STATE_JSON))
    )
    return os.path.join(root, done[-1][1]) if done else None


@public_entry("train_sae")
def train_sae(
    source: Any, d_sae: int, architecture: str = "topk", *, k: float = 32, steps: int = 1000, batch_size: int = 4096,
    lr: float = 3e-4, lr_warm_up_steps: int = 0, lr_decay_steps: int = 0,
    l1_coefficient: float = 5.0, l1_warm_up_steps: int = 0, l0_coefficient: float = 1.0, l0_warm_up_steps: int = 0,
    jumprelu_bandwidth: float = 0.05, jumprelu_init_threshold: float = 0.01,
    aux_k_coefficient: float = 1 / 32, dead_feature_window: int = 1000, topk_threshold_lr: float = 0.01,
    normalize_activations: str = "none", buffer_size: int = 65536, site: str | None = None,
    out: str | os.PathLike | None = None, checkpoint_every: int = 0, resume: bool = True, writer: Any = None,
    log_every: int = 1, seed: int = 0, framework: str | None = None, like: Any = None, hook_name: str | None = None,
    ce_loss: Callable[[Any, Any], Any] | None = None, ce_every: int = 100,
) -> Trained:  # fmt: skip
    """Train an SAE of ``d_sae`` features on ``source`` with SAELens's losses and schedules, streamed in
    bounded memory; returns a ``Trained`` (``sae``, ``metrics``, ``path``).

    >>> run = hookkit.train_sae("feats", d_sae=4096, architecture="topk", k=32, steps=20_000, out="runs/sae")   # doctest: +SKIP
    >>> run.sae, run.metrics[-1]["explained_variance"]

    ``source``: an ``extract`` folder (``site=`` picks its layer), an array ``[..., d_in]``, or
    ``(model, site, data)`` whose activations at ``site`` are captured batch by batch over ``data``, a
    re-iterable of batches (a list, a DataLoader).
    ``d_sae``: the number of features, an int >= 1.
    ``architecture``: "topk" (the default), "batchtopk", "jumprelu" or "standard", SAELens's names (a
    "batchtopk" SAE is returned and saved in its inference form, a JumpReLU at the learned threshold).
    ``k``: the features kept per row, an int in ``1..d_sae`` for "topk" or their mean over the batch's
    rows for "batchtopk" (a number with ``0 < k <= d_sae``), unused by the other architectures.
    ``steps``: the number of training steps, one batch and one Adam update each.
    ``batch_size``: rows per step (default 4096), at most the number of rows the source holds.
    ``lr``: Adam's learning rate (betas 0.9 and 0.999, the gradients' norm clipped to 1).
    ``lr_warm_up_steps``: the learning rate rises linearly from ``lr / lr_warm_up_steps`` to ``lr`` over
    this many first steps (0, the default: no warm-up).
    ``lr_decay_steps``: the learning rate falls linearly to 0 over this many last steps (0, the default:
    no decay).
    ``l1_coefficient``: the weight of "standard"'s L1 penalty (each activation times its decoder row's norm).
    ``l1_warm_up_steps``: the L1 weight rises linearly to ``l1_coefficient`` over this many first steps
    (0, the default: full weight from the start).
    ``l0_coefficient``: the weight of "jumprelu"'s L0 penalty (the number of active features, through a
    straight-through estimator).
    ``l0_warm_up_steps``: the L0 weight rises linearly to ``l0_coefficient`` over this many first steps
    (0, the default: full weight from the start).
    ``jumprelu_bandwidth``: the width of the straight-through estimator's window around JumpReLU's
    threshold (SAELens's ``bandwidth``).
    ``jumprelu_init_threshold``: the threshold every feature of a "jumprelu" SAE starts from.
    ``aux_k_coefficient``: the weight of the auxiliary-k loss of "topk" and "batchtopk", which trains
    the dead features to predict the reconstruction's error (0: off).
    ``dead_feature_window``: a feature that has not fired for more than this many steps counts as dead
    (for the auxiliary-k loss and the ``dead_fraction`` metric).
    ``topk_threshold_lr``: for "batchtopk", the rate of the running average of the smallest kept
    activation, which becomes the saved JumpReLU's threshold.
    ``normalize_activations``: "none" (the default) or "expected_average_only_in", which scales the inputs
    to a mean norm of sqrt(d_in), measured on one batch, and folds the factor into the saved weights.
    ``buffer_size``: the rows of the shuffle buffer (at least ``2 * batch_size``), which bound the memory used.
    ``site``: with an ``extract`` folder, the layer to train on (required when the folder holds several).
    ``out``: a folder for the final SAE (``out/final``, SAELens's format), ``metrics.jsonl`` and the
    checkpoints (default None: nothing is written).
    ``checkpoint_every``: write a resumable checkpoint under ``out/checkpoints`` every this many steps
    (0, the default: none).
    ``resume``: True (the default) continues from the latest checkpoint in ``out``, where a killed run
    stopped, and False starts over (the old checkpoints deleted).
    ``writer``: where the metrics go as well: TensorBoard's ``SummaryWriter`` or anything with
    ``add_scalar(tag, value, step)`` (``hookkit.integrations.writers.as_writer`` adapts W&B and VisualDL).
    ``log_every``: record the metrics every this many steps, and at the last one.
    ``seed``: the seed of the initial weights and of the shuffling (the same seed, the same weights).
    ``framework``: "torch" or "paddle", to train on when ``source`` is a folder or an array (default: torch
    when installed).
    ``like``: a model or tensor whose framework and device the training runs on (default: the model of
    ``(model, site, data)``).
    ``hook_name``: the site written in the SAE's config, which ``splice`` uses when given none (default:
    ``site`` of ``(model, site, data)`` when it is a name).
    ``ce_loss``: with ``(model, site, data)``, a function ``ce_loss(model, batch) -> loss``: every ``ce_every``
    steps the metrics get ``ce_loss_recovered``, ``(zero - spliced) / (zero - clean)`` on the first batch
    (the model's loss clean, with the SAE's reconstruction spliced in, and with the site zero-ablated).
    ``ce_every``: the steps between two measures of ``ce_loss_recovered`` (the last step is measured too).

    Under a process group (``torch.distributed``, Paddle's launcher) it trains data parallel: rank r
    takes every world-th batch of the one stream, gradients and dead-feature counts are reduced over the
    ranks, rank 0 writes; the ranks end with equal weights.
    """
    _check_args(
        architecture,
        normalize_activations,
        d_sae,
        k,
        writer,
        steps=steps,
        batch_size=batch_size,
        buffer_size=buffer_size,
        log_every=log_every,
        checkpoint_every=checkpoint_every,
    )
    from_model = isinstance(source, tuple) and len(source) == 3
    be, device, _ = _placement(framework, source[0] if from_model and like is None else like, None, None)
    chunks, d_in = _chunks(source, site, max(batch_size, 4096))
    if hook_name is None and from_model:
        hook_name = source[1] if isinstance(source[1], str) else None
    jump = architecture == "jumprelu"
    tr = _Trainer(
        be, device, d_in, d_sae, architecture, k,
        l0_coefficient if jump else l1_coefficient, l0_warm_up_steps if jump else l1_warm_up_steps,
        aux_k_coefficient, dead_feature_window, topk_threshold_lr, seed, jumprelu_bandwidth, jumprelu_init_threshold,
    )  # fmt: skip
    opt = tr.ops.adam(tr.params, lr, (0.9, 0.999))
    buffer = max(buffer_size, 2 * batch_size)
    batches: Iterator[np.ndarray] = _batches(chunks, batch_size, buffer, seed)
    if tr.world > 1:  # data parallel: rank r trains on batches r, r + world, ... of the one stream
        batches = itertools.islice(batches, tr.rank, None, tr.world)
    run = _Run(
        steps,
        lr,
        lr_warm_up_steps,
        lr_decay_steps,
        log_every,
        checkpoint_every,
        writer,
        os.fspath(out) if out is not None else None,
        tr.rank == 0,
        hook_name,
    )
    metrics = _resume(tr, opt, batches, run, resume)
    if normalize_activations == "expected_average_only_in" and tr.scale == 1.0:
        first = next(_batches(chunks, batch_size, buffer, seed + 1))
        tr.scale = float(math.sqrt(d_in) / np.linalg.norm(first, axis=-1).mean())
    if ce_loss is not None:
        run.ce, run.ce_every = _ce_probe(source if from_model else None, ce_loss, be), ce_every
    _loop(tr, opt, batches, run, metrics)
    return _finish(tr, run, metrics)


def _ce_probe(source: Any, ce_loss: Any, be: Backend) -> _CeProbe:
    if source is None:
        fail(None, "ce_loss", "None unless source is (model, site, data): the loss needs the model", ce_loss)
    if not callable(ce_loss):
        fail(None, "ce_loss", "a function (model, batch) -> loss", ce_loss, kind=ArgumentTypeError)
    return _CeProbe(source[0], source[1], next(iter(source[2])), ce_loss, be)


def _finish(tr: _Trainer, run: _Run, metrics: list[dict[str, float]]) -> Trained:
    """The trained SAE in its inference form, written to ``out/final`` (by the lead rank)."""
    cfg, w = tr.inference(run.hook_name)
    if run.out is not None and run.lead:
        final = os.path.join(run.out, "final")
        os.makedirs(final, exist_ok=True)
        write_safetensors(os.path.join(final, "sae_weights.safetensors"), w)
        write_json(os.path.join(final, "cfg.json"), cfg)
    sae = SAE(cfg, w, backend=tr.be, device=tr.device, dtype="float32", where="train_sae()")
    return Trained(sae, metrics, run.out, tr.step_n, tr.samples)


def _check_args(architecture: str, normalize: str, d_sae: Any, k: Any, writer: Any, **ints: Any) -> None:
    check_choice(architecture, TRAIN_ARCHITECTURES, arg="architecture")
    check_choice(normalize, ("none", "expected_average_only_in"), arg="normalize_activations")
    for name, value in {"d_sae": d_sae, **ints}.items():
        low = 0 if name == "checkpoint_every" else 1
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            fail(None, name, f"an int >= {low}", value)
    if writer is not None and not callable(getattr(writer, "add_scalar", None)):
        valid = "an object with add_scalar(tag, value, step) (SummaryWriter, or hookkit.integrations.writers.as_writer(run))"
        fail(None, "writer", valid, writer, kind=ArgumentTypeError)
    if architecture == "topk" and not (isinstance(k, int) and 0 < k <= d_sae):
        fail(None, "k", f"an int in 1..d_sae={d_sae} for architecture='topk'", k)
    if architecture == "batchtopk" and not 0 < k <= d_sae:
        fail(None, "k", f"a number in (0, d_sae={d_sae}] for architecture='batchtopk'", k)


@dataclass
class _Run:
    """The settings of the training loop, and where it writes (``lead``: this rank writes)."""

    steps: int
    lr: float
    warm_up: int
    decay: int
    log_every: int
    checkpoint_every: int
    writer: Any
    out: str | None
    lead: bool
    hook_name: str | None
    ce: Any = None
    ce_every: int = 100


def _resume(tr: _Trainer, opt: Any, batches: Iterator[np.ndarray], run: _Run, resume: bool) -> list[dict[str, float]]:
    """The metrics of the run so far: from the latest checkpoint of ``run.out`` (weights, optimizer,
    counters restored; the batches already trained on skipped), or none."""
    if run.out is None:
        return []
    if run.lead:
        os.makedirs(run.out, exist_ok=True)
    ckpt = _latest_checkpoint(run.out) if resume else None
    if ckpt is None:
        if run.lead and not resume and os.path.isdir(os.path.join(run.out, "checkpoints")):
            shutil.rmtree(os.path.join(run.out, "checkpoints"))
        return []
    _restore(tr, opt, ckpt)
    for _ in range(tr.step_n):  # the same stream: skip the batches already trained on
        next(batches)
    if not os.path.exists(os.path.join(run.out, METRICS_FILE)):
        return []
    return [m for m in read_metrics(run.out) if m.get("step", 0) < tr.step_n]


def _loop(tr: _Trainer, opt: Any, batches: Iterator[np.ndarray], run: _Run, metrics: list[dict[str, float]]) -> None:
    t0, seen0 = time.perf_counter(), tr.samples
    while tr.step_n < run.steps:
        at = tr.step_n
        log = at % run.log_every == 0 or at == run.steps - 1
        m = tr.step(next(batches), _lr_at(at, run.steps, run.lr, run.warm_up, run.decay), opt, log)
        if run.ce is not None and (at % run.ce_every == 0 or tr.step_n == run.steps):
            m = m if m is not None else {"step": at}
            cfg_now, w_now = tr.inference(run.hook_name)
            m["ce_loss_recovered"] = run.ce.recovered(
                SAE(cfg_now, w_now, backend=tr.be, device=tr.device, dtype="float32", where="train_sae()")
            )
        if m is not None:
            m["samples_per_s"] = (tr.samples - seen0) / max(time.perf_counter() - t0, 1e-9)
            metrics.append(m)
            if run.lead:
                _write_metrics(run, m)
        if run.out is not None and run.lead and run.checkpoint_every and tr.step_n % run.checkpoint_every == 0 and tr.step_n < run.steps:
            _checkpoint(tr, opt, run.out, run.hook_name)


def _write_metrics(run: _Run, m: dict[str, float]) -> None:
    if run.writer is not None:
        for key, v in m.items():
            if key != "step":
                run.writer.add_scalar(f"sae/{key}", v, int(m["step"]))
    if run.out is not None:
        with open(os.path.join(run.out, METRICS_FILE), "a") as f:
            f.write(json.dumps(m) + "\n")


class _CeProbe:
    """The model's loss on one batch clean, with an SAE's reconstruction spliced in at the site, and
    with the site zero-ablated (clean and zero computed once)."""

    def __init__(self, model: Any, site: Any, batch: Any, loss: Callable[[Any, Any], Any], be: Backend):

        self.model, self.site, self.batch, self.loss, self.be = model, site, batch, loss, be
        self.clean = self._value()
        with ablate(model, site):
            self.zero = self._value()

    def _value(self) -> float:
        with self.be.no_grad():
            return float(np.asarray(self.be.to_numpy(self.be.detach(self.loss(self.model, self.batch)))))

    def recovered(self, sae: SAE) -> float:

        with splice(self.model, self.site, sae, error_term=False):
            spliced = self._value()
        gap = self.zero - self.clean
        return (self.zero - spliced) / gap if gap else float("nan")


def _checkpoint(tr: _Trainer, opt: Any, out: str, hook_name: str | None) -> None:
    """``out/checkpoints/step_<n>``: the SAE (SAELens's format) and the trainer's state, written to a
    temporary folder and renamed: a kill leaves the previous checkpoint whole."""
    root = os.path.join(out, "checkpoints")
    os.makedirs(root, exist_ok=True)
    final = os.path.join(root, f"step_{tr.step_n}")
    tmp = final + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    cfg, w = tr.inference(hook_name)
    write_safetensors(os.path.join(tmp, "sae_weights.safetensors"), w)
    write_json(os.path.join(tmp, "cfg.json"), cfg)
    state = {f"param.{n}": a for n, a in tr.arrays().items()}
    state.update({f"opt.{k}": np.asarray(v) for k, v in tr.ops.optimizer_state(opt, tr.params).items()})
    state["since_fired"] = tr.since_fired
    write_safetensors(os.path.join(tmp, STATE_FILE), state)
    write_json(
        os.path.join(tmp, STATE_JSON),
        {
            "step": tr.step_n,
            "samples": tr.samples,
            "topk_threshold": tr.topk_threshold,
            "scale": tr.scale,
            "architecture": tr.arch,
            "d_in": tr.d_in,
            "d_sae": tr.d_sae,
        },
    )
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)


def _restore(tr: _Trainer, opt: Any, ckpt: str) -> None:
    meta = read_json_file(inside(ckpt, STATE_JSON), "a train_sae checkpoint")
    if not isinstance(meta, dict) or (meta.get("architecture"), meta.get("d_in"), meta.get("d_sae")) != (tr.arch, tr.d_in, tr.d_sae):
        fail(
            "train_sae",
            "out",
            f"a folder whose checkpoints match this run ({tr.arch}, d_in={tr.d_in}, d_sae={tr.d_sae}); resume=False starts over",
            ckpt,
        )
    state = read_safetensors(inside(ckpt, STATE_FILE))
    for n, p in tr.p.items():
        tr.ops.assign(p, tr.ops.tensor(state[f"param.{n}"], tr.device, "float32"))
    tr.ops.load_optimizer_state(opt, tr.params, {k[4:]: v for k, v in state.items() if k.startswith("opt.")})
    tr.since_fired = state["since_fired"].astype(np.int64)
    tr.step_n, tr.samples = int(meta["step"]), int(meta["samples"])
    tr.topk_threshold, tr.scale = float(meta["topk_threshold"]), float(meta["scale"])
