"""PyTorch Lightning callback: activation / gradient statistics (and non-finite checks) for the whole fit.

>>> from hookkit.integrations.lightning import HookkitCallback   # doctest: +SKIP
>>> cb = HookkitCallback(hist=True, writer=SummaryWriter("runs/x"))
>>> pl.Trainer(callbacks=[cb]).fit(module, loader)
>>> cb.activation_stats.layer_stats("net.0")["mean"]

Imports ``pytorch_lightning`` and/or ``lightning`` (whichever are installed); the callback is an
instance of both packages' ``Callback``, so either ``Trainer`` accepts it.
"""

from __future__ import annotations

import importlib
from typing import Any

from hookkit.core import router
from hookkit.integrations._common import MonitorCallback


def _lightning_modules() -> list[Any]:
    found = []
    for module in ("pytorch_lightning", "lightning.pytorch"):
        try:
            found.append(importlib.import_module(module))
        except ImportError:
            continue
    if not found:
        raise ImportError("hookkit.integrations.lightning needs PyTorch Lightning: pip install pytorch-lightning (or lightning)")
    return found


_LIGHTNING = _lightning_modules()


def _forward_overridden(pl_module: Any) -> bool:
    return type(pl_module).forward not in {lib.LightningModule.forward for lib in _LIGHTNING}


class HookkitCallback(MonitorCallback, *dict.fromkeys(lib.Callback for lib in _LIGHTNING)):  # type: ignore[misc]
    """Attach hookkit statistics on fit start; remove them on fit end, on teardown and when training raises.

    ``activation_stats`` / ``gradient_stats``: what to record (``ActivationStats`` / ``GradientStats``
    of the LightningModule; ``layers``, ``every``, ``hist`` as there). ``nonfinite``: raise
    ``hookkit.NonFiniteError`` at the first NaN/Inf. ``writer``: a ``SummaryWriter`` (or anything
    with ``add_scalar``), a VisualDL ``LogWriter`` or a wandb run (``hookkit.integrations.writers``)
    that gets, every ``log_every`` epochs, the mean of each statistic over the steps recorded
    since the last write (tags ``act/<layer>/mean``, ``grad/<layer>/norm``, ...) and histograms
    (``act_hist/<layer>`` with ``hist=True``, ``grad_hist/<layer>/norm``) from the same read.
    After fit, ``.activation_stats`` and ``.gradient_stats`` hold the results. ``weight_stats=True``:
    ``hookkit.WeightStats`` on the same layers, recorded at each step of the trainer's (first)
    optimizer: scalars ``weight/<parameter>/norm``, ``.../mean``, ``.../std``, ``.../max_abs``,
    ``.../update_ratio`` and, with ``hist=True``, ``weight_hist/<parameter>`` (the values at the
    last recorded step): what ``wandb.watch(log="all")`` logs for the weights, scoped by ``layers``.

    A recorded ``step`` counts the LightningModule's forwards, as outside Lightning. Where
    ``training_step`` does not call the module itself (``self.net(x)`` rather than ``self(x)``),
    the callback counts training batches instead, so ``every=N`` and the step numbers still work.
    """

    _count_batches = False  # per fit, set on fit start
    _batch_start_step: int | None = -1
    _root: Any = None  # what the statistics count forwards of: the module, or the strategy's DDP wrapper

    # -- Lightning events -------------------------------------------------------------------------
    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        from hookkit.backends import backend_for

        # DDP/FSDP strategies call the module twice per step (training_step redirected through
        # forward, then self(x)): count the calls of their wrapper, one per step, instead
        root = getattr(getattr(trainer, "strategy", None), "model", None)
        if root is None or root is pl_module or backend_for(pl_module).unwrap(root) is not pl_module:
            root = pl_module
        self._root = root
        optimizers = list(getattr(trainer, "optimizers", None) or [])
        self.monitor.attach(root, optimizers[0] if optimizers else None)
        # without its own forward the module is never called: count training batches as steps
        self._count_batches = root is pl_module and not _forward_overridden(pl_module)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self.monitor.attached:
            if self._count_batches:
                router.advance(self._root)
            self._batch_start_step = router.forward_count(self._root)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.monitor.attached and not self._count_batches and router.forward_count(self._root) == self._batch_start_step:
            self._count_batches = True  # forward is defined but training_step did not call it

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self.monitor.attached and (trainer.current_epoch + 1) % self.monitor.log_every == 0:
            self.monitor.log(trainer.global_step)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        try:
            if self.monitor.attached:
                self.monitor.log(trainer.global_step)  # what the last epochs recorded since the last write
        finally:
            self.monitor.remove()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.monitor.remove(exception)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self.monitor.remove()
