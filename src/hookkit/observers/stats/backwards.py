"""Numbering the backwards of one forward, for gradient statistics.

One forward may be differentiated several times: ``loss_a.backward(retain_graph=True);
loss_b.backward()`` (multi-task losses, GAN steps), ``torch.autograd.grad(..., create_graph=True)``
then a penalty's backward (gradient penalties). Each such backward is its own record: its rows get
``backward = 0, 1, ...`` in the order the backwards ran, per forward (``step``). A backward that
covers several forwards (gradient accumulation over one summed loss) is backward 0 of each.

The count moves at the end of a backward (``Backend.after_backward``, queued by the first gradient
seen in it): no host sync, one callback per backward. A backward that raises never reaches its end
callback; its forwards then keep numbering their later backwards as that one (rows merged, as if
they were one backward).
"""

from __future__ import annotations

from typing import Any

__all__ = ["BackwardCounter"]

_KEEP = 256  # forwards whose counts are kept; older ones are forgotten (their backwards are long done)


class BackwardCounter:
    """``index(step)``: which backward of forward ``step`` is running (0 for the first). Called from
    gradient hooks only.

    >>> counter = BackwardCounter(backend); counter.index(ev.step)   # doctest: +SKIP
    0
    """

    __slots__ = ("_after", "done", "touched", "queued")

    def __init__(self, backend: Any):
        self._after = backend.after_backward
        self.done: dict[int, int] = {}  # step -> backwards of it finished
        self.touched: set[int] = set()  # steps the running backward reached
        self.queued = False

    def index(self, step: int) -> int:
        if not self.queued and self._after is not None:
            try:
                self._after(self._end)
                self.queued = True
            except NotImplementedError:  # a backend without end-of-backward callbacks: one backward per forward
                self._after = None
            except RuntimeError:  # not inside a backward (a hook called directly): nothing to count
                pass
        self.touched.add(step)
        return self.done.get(step, 0)

    def _end(self) -> None:
        done = self.done
        for step in self.touched:
            done[step] = done.get(step, 0) + 1
        self.touched.clear()
        self.queued = False
        if len(done) > _KEEP:
            for step in sorted(done)[: len(done) - _KEEP // 2]:
                del done[step]
