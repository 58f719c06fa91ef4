"""``paddle.Model.fit`` callback (paddle.hapi): activation / gradient statistics during training.

>>> from hookkit.integrations.paddle_hapi import HookkitPaddleCallback   # doctest: +SKIP
>>> cb = HookkitPaddleCallback(hist=True)
>>> with cb:                                   # removes the hooks even if fit() raises
...     model = paddle.Model(net); model.prepare(opt, loss); model.fit(ds, epochs=2, callbacks=[cb])
>>> cb.activation_stats.layer_stats("0")["mean"]

paddle.hapi has no event for a failed fit, so ``with cb:`` (or ``cb.remove()`` in a ``finally``)
is how hooks are removed when training raises; a later ``fit()`` also removes them first.
"""

from hookkit.backends.paddle.hapi import HookkitPaddleCallback

__all__ = ["HookkitPaddleCallback"]
