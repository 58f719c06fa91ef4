"""Hugging Face ``Trainer`` callback: activation / gradient statistics (and non-finite checks) during ``train()``.

>>> from hookkit.integrations.huggingface import HookkitTrainerCallback   # doctest: +SKIP
>>> cb = HookkitTrainerCallback(layers="transformer.h.*.mlp")
>>> with cb:                                  # removes the hooks even if train() raises
...     Trainer(model, args, train_dataset=ds, callbacks=[cb]).train()
>>> cb.activation_stats.to_numpy()

``Trainer`` has no event for a failed run, so ``with cb:`` (or ``cb.remove()`` in a ``finally``)
is how hooks are removed when training raises; a later ``train()`` also removes them first.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from hookkit.core.validate import fail
from hookkit.integrations._common import MonitorCallback


class HookkitTrainerCallback(MonitorCallback, TrainerCallback):
    """Attach hookkit statistics to the trained model on train begin; remove them on train end.

    Arguments as ``hookkit.integrations.lightning.HookkitCallback``. At every Trainer log event
    (``logging_steps``), the mean of each statistic over the steps recorded since the previous log
    is added to the Trainer's logs (``trainer.state.log_history``, the progress printer) and written to
    ``writer`` when given (tags ``act/<layer>/mean``, ``grad/<layer>/norm``, ...); ``log_every=N``
    does this at one log event in N.
    """

    _log_events = 0  # per run, reset on train begin

    # -- Trainer events ---------------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if model is None:
            fail("HookkitTrainerCallback.on_train_begin", "model", "the model being trained (the Trainer passed none)", model)
        self._log_events = 0
        self.monitor.attach(model, kwargs.get("optimizer"))

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
        if not self.monitor.attached:
            return
        self._log_events += 1
        if (self._log_events - 1) % self.monitor.log_every:
            return
        values = self.monitor.log(state.global_step)
        if logs is not None:
            logs.update(values)  # seen by the callbacks after this one (the progress printer)
        history = getattr(state, "log_history", None)
        if values and history and history[-1].get("step") == state.global_step:
            history[-1].update(values)  # Trainer stored a copy of `logs` just before calling us

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.monitor.remove()
