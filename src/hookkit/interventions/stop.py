"""Early stop: end the forward right after a layer ran (baukit's ``stop``, TorchLens's ``halt``), so
feature extraction does not pay for the rest of the model.

The stop is a forward consumer that raises ``StopForward`` once the layer's output is known; the
runner catches it at the call site. It runs after every other consumer of that layer (priority
above ``OBSERVER``), so interventions and captures on the stopped layer still see its call.
"""

from __future__ import annotations

import weakref
from types import TracebackType
from typing import TYPE_CHECKING, Any

from hookkit.core.entry import entry_name, public_entry
from hookkit.core.errors import HookkitError
from hookkit.core.handles import HandleGroup
from hookkit.core.router import OBSERVER, Event, Halt, attach
from hookkit.core.select import LayerSpec, select, shown_name
from hookkit.core.types import Layer
from hookkit.core.validate import ArgumentTypeError, InvalidArgument, check_int, check_model, fail

if TYPE_CHECKING:
    from hookkit.observers.capture import capture as Capture

STOP = OBSERVER + 1000  # after observers: a capture of the stopped layer records its call


class StopForward(Halt):
    """Ends a forward early. A ``BaseException`` (like ``KeyboardInterrupt``), so that model code's
    ``except Exception`` and hookkit's annotation of errors in user hooks let it through untouched."""

    def __init__(self, owner: Any, name: str, call: int):
        super().__init__(f"forward stopped after layer {name!r} (call {call})")
        self.owner, self.name, self.call = owner, name, call


class Stop(HandleGroup):
    """Runs a model up to a layer. Call it like the model: ``out = run(x)`` returns the stopped
    layer's output; ``run.capture`` holds the capture asked for (this run's records only).

    Also the baukit style: ``with hookkit.stop_after(model, "layer3") as run: model(x)`` -- the
    ``with`` block swallows the stop (code after ``model(x)`` inside the block does not run) and
    ``run.output`` holds the output.
    """

    @public_entry("Stop")
    def __init__(self, model: Layer, layer: LayerSpec, *, call: int = 0, capture: LayerSpec | None = None, **capture_kwargs: Any):
        super().__init__()
        _fn = entry_name()
        check_model(model)
        check_int(call, arg="call", low=0)
        named = select(model, layer)
        if len(named) != 1:
            raise InvalidArgument(
                f"{_fn}(): layer must match exactly one layer; {layer!r} matches {len(named)}: "
                f"{', '.join(shown_name(n) for n, _ in named[:8])}"
            )
        self.name = named[0][0]
        self.call = call
        self.output: Any = None
        self.stopped = False
        self._model = weakref.ref(model)
        self.capture: Capture | None = None
        try:
            if capture is not None:
                from hookkit.observers.capture import capture as Capture  # lazy: a run composes a capture only when asked (capture=)

                self.capture = self.add(Capture(model, capture, **capture_kwargs))
            elif capture_kwargs:
                fail(
                    _fn,
                    "capture",
                    f"a layer spec when capture options are given ({', '.join(capture_kwargs)})",
                    capture,
                    kind=ArgumentTypeError,
                )
            self.add(attach(model, named, "forward", self._on_forward, STOP))
        except BaseException:
            self.remove()
            raise

    def _on_forward(self, ev: Event) -> None:
        if ev.call == self.call:
            self.output, self.stopped = ev.output, True
            raise StopForward(self, ev.name, ev.call)  # a router.Halt: the layer's gradient hooks still get placed

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the model on ``args``/``kwargs`` up to the layer; returns the layer's output."""
        model = self._model()
        if model is None or self.removed:
            raise HookkitError(f"stop: this runner (stop after {self.name!r}) has been removed; make a new one")
        self.output, self.stopped = None, False
        if self.capture is not None:
            self.capture.clear()
        try:
            model(*args, **kwargs)
        except StopForward as stop:
            if stop.owner is not self:  # an outer runner's stop
                raise
            return self.output
        raise HookkitError(
            f"stop: layer {self.name!r} did not run {'' if self.call == 0 else f'a call {self.call} '}during this forward; "
            "the forward ran to the end"
        )

    # returns True for its own StopForward (swallowed), where other handles never swallow
    def __exit__(  # type: ignore[override]
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if isinstance(exc, StopForward) and exc.owner is self:
            self.remove()
            return True
        super().__exit__(exc_type, exc, tb)  # removes; a framework error gets the failing layer's note
        return False

    def __repr__(self) -> str:
        return f"<hookkit.Stop after {self.name!r} call {self.call}, {'removed' if self.removed else 'active'}>"


@public_entry()
def stop_after(model: Layer, layer: LayerSpec, *, call: int = 0) -> Stop:
    """Stop every forward of ``model`` right after ``layer`` ran (its ``call``-th call); remove to undo.

    >>> with hookkit.stop_after(model, "layer3") as run:   # doctest: +SKIP
    ...     model(x)
    >>> run.output
    """
    return Stop(model, layer, call=call)


@public_entry()
def run_until(model: Layer, layer: LayerSpec, *, call: int = 0, capture: LayerSpec | None = None, **capture_kwargs: Any) -> Stop:
    """A runner that stops the forward after ``layer`` and returns its output; ``capture=[layers]``
    also records those layers; ``capture_kwargs``: more keyword arguments of ``hookkit.capture`` for
    them (``grads=True``, ``keep="last"``...).

    >>> with hookkit.run_until(model, "layer3", capture=["conv1", "layer1"]) as run:   # doctest: +SKIP
    ...     feats = run(x)
    >>> run.capture["conv1"]
    """
    return Stop(model, layer, call=call, capture=capture, **capture_kwargs)
