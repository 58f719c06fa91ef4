"""``paddle.Model.fit`` callback (paddle.hapi): activation / gradient statistics during training.

>>> from hookkit.integrations.paddle_hapi import HookkitPaddleCallback   # doctest: +SKIP
>>> cb = HookkitPaddleCallback(hist=True)
>>> with cb:                                   # removes the hooks even if fit() raises
...     model = paddle.Model(net); model.prepare(opt, loss); model.fit(ds, epochs=2, callbacks=[cb])
>>> cb.activation_stats.layer_stats("0")["mean"]

paddle.hapi has no event for a failed fit, so ``with cb:`` (or ``cb.remove()`` in a ``finally``)
is how hooks are removed when training raises; a later ``fit()`` also removes them first.
"""

from __future__ import annotations

from hookkit.backends.paddle.hapi import Callback
from hookkit.integrations._common import MonitorCallback

__all__ = ["HookkitPaddleCallback"]


class HookkitPaddleCallback(MonitorCallback, Callback):
    """Attach hookkit statistics to ``self.model.network`` on train begin; remove them on train end.

    Arguments as ``hookkit.integrations.lightning.HookkitCallback``; ``writer`` is anything with
    ``add_scalar(tag, value, step)`` (VisualDL's ``LogWriter``, a ``SummaryWriter``), written every
    ``log_every`` epochs with the mean of each statistic over the steps recorded since the last write.
    """

    _batches = 0  # per fit, reset on train begin

    # -- paddle.hapi events -----------------------------------------------------------------------
    def on_train_begin(self, logs: dict | None = None) -> None:
        self._batches = 0
        self.monitor.attach(self.model.network, getattr(self.model, "_optimizer", None))

    def on_train_batch_end(self, step: int, logs: dict | None = None) -> None:
        self._batches += 1  # hapi's `step` restarts every epoch; the writer wants a global one

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if self.monitor.attached and (epoch + 1) % self.monitor.log_every == 0:
            self.monitor.log(self._batches)

    def on_train_end(self, logs: dict | None = None) -> None:
        try:
            if self.monitor.attached:
                self.monitor.log(self._batches)
        finally:
            self.monitor.remove()
