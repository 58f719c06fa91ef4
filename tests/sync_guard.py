"""A host-sync detector for tests: hookkit's hot paths never read a tensor's value on the host.

On a GPU a host read (``.item()``, ``.cpu()``, ``.numpy()``, ``.tolist()``, ``bool()``/``float()``/
``int()``/``operator.index()`` of a tensor, ``np.asarray(t)``, ``t.to("cpu")`` of a device tensor)
waits for every queued kernel: one per hooked call turns an asynchronous training step into a
synchronous one. On the CPU nothing waits, so the reads are caught where they are made:

- torch: a ``TorchFunctionMode`` (each of the reads above reaches ``__torch_function__``), and the
  same ``torch.Tensor`` methods patched while the guard is open, because the mode is thread-local
  state the autograd engine does not carry into backward hooks (a read in a gradient hook passed the
  mode unseen); on CUDA also ``torch.cuda.set_sync_debug_mode("error")``, which catches the syncs no
  method shows (``nonzero``, ``masked_select``, a pageable copy), paused for the reads judged here;
- Paddle: the same ``paddle.Tensor`` methods wrapped (Paddle has no mode).

A read is hookkit's when the code that makes it (the innermost frame outside torch, Paddle and numpy)
is in ``hookkit``, or is test code (a hook, a target, a consumer, and the helpers they call) that
hookkit called; a model's forward, called by the framework, and the test's own reads are not judged.
A documented read is allowed by naming the function that makes it (a dotted prefix of
``module.qualname``; the innermost allowed function answers) and why::

    with no_host_sync(allow={"hookkit.observers.nonfinite.watch_nonfinite.check": "one read per step"}) as guard:
        train_step()
    assert guard.allowed == {"one read per step": 1}  # the documented read happened, and nothing else

Tests use the framework-ops route (``host_routes=False``): the CPU route reads host memory through
numpy on purpose, where there is no device to wait for, and a GPU never takes it.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

READS = ("item", "cpu", "numpy", "tolist", "__bool__", "__float__", "__int__", "__index__", "__array__")
FRAMEWORK_MODULES = ("torch", "paddle", "numpy")  # their tensor methods' own frames: the read is their caller's
_local = threading.local()


# Not reads at all, allowed in every guard.
ALWAYS = {
    "hookkit.backends.paddle.backend.PaddleBackend.from_numpy": "an upload: host data placed on the model's device "
    "(Paddle's .cpu() when that device is the CPU), nothing read back",
}


class HostSyncError(AssertionError):
    """A hot path read a tensor's value on the host."""


class SyncGuard:
    """What one ``no_host_sync`` block saw: ``violations`` (op, where) and ``allowed`` (reason -> count)."""

    def __init__(self, allow: dict[str, str]):
        self.allow = dict(allow)
        self.violations: list[tuple[str, str]] = []
        self.allowed: Counter[str] = Counter()
        self.sites: Counter[tuple[str, str]] = Counter()  # (op, the hookkit function) of each allowed read

    def check(self, op: str) -> bool:
        """Record a read; True when it is allowed (or not hookkit's), False when it is a violation."""
        frames = _caller_frames()
        names = [_name(f) for f in frames]
        for name in names:  # the innermost allowed function answers for the read
            for key, reason in self.allow.items():
                if name == key or name.startswith(key + "."):
                    if key not in ALWAYS:
                        self.allowed[reason] += 1
                        self.sites[(op, " < ".join([n for n in names if n.startswith("hookkit.")][:4]) or names[0])] += 1
                    return True
        # the read is hookkit's when its maker is, or when the maker is test code (a hook, a target, and
        # the helpers they call) that hookkit called; a model's forward is called by the framework
        for i, (frame, name) in enumerate(zip(frames, names)):
            if name.startswith("hookkit."):
                where = name if i == 0 else f"{names[0]} (called by {name})"
                self.violations.append((op, where))
                return False
            if not _is_test_code(frame):
                return True
        return True

    def raise_if_any(self) -> None:
        if self.violations:
            op, where = self.violations[0]
            more = f" (and {len(self.violations) - 1} more)" if len(self.violations) > 1 else ""
            raise HostSyncError(
                f"host read of a tensor in a hot path: {op} in {where}{more}; allow it by name with its reason if documented"
            )


TESTS = os.path.dirname(os.path.abspath(__file__))


def _is_test_code(frame: Any) -> bool:
    return os.path.abspath(frame.f_code.co_filename).startswith(TESTS + os.sep)


def _name(frame: Any) -> str:
    module = frame.f_globals.get("__name__", "?")
    return f"{module}.{getattr(frame.f_code, 'co_qualname', frame.f_code.co_name)}"


def _caller_frames() -> list[Any]:
    """Frames from the one that made the read outwards: this module's and the frameworks' own
    innermost frames (``paddle.Tensor.item`` calling ``numpy``) skipped."""
    frame = sys._getframe(1)
    while frame is not None and (
        frame.f_globals.get("__name__") == __name__ or frame.f_globals.get("__name__", "").startswith(FRAMEWORK_MODULES)
    ):
        frame = frame.f_back
    frames = []
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    return frames


def _handle(guard: SyncGuard, op: str) -> None:
    if getattr(_local, "depth", 0):  # a read inside a read (paddle's item() calls numpy()): counted once
        return
    if not guard.check(op):
        guard.raise_if_any()


@contextmanager
def _reading() -> Iterator[None]:
    _local.depth = getattr(_local, "depth", 0) + 1
    try:
        yield
    finally:
        _local.depth -= 1


def _judged_read(torch: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """Run a read the guard let through (allowed, or not hookkit's) with CUDA's sync check paused:
    ``set_sync_debug_mode("error")`` is for the syncs no method shows (``nonzero``, ``masked_select``)."""
    with _reading():
        if not (torch.cuda.is_available() and torch.cuda.get_sync_debug_mode() != 0):
            return func(*args, **kwargs)
        previous = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode(0)
        try:
            return func(*args, **kwargs)
        finally:
            torch.cuda.set_sync_debug_mode(previous)


def _torch_guard(guard: SyncGuard, stack: ExitStack) -> None:
    torch = sys.modules.get("torch")
    if torch is None:
        return
    from torch.overrides import TorchFunctionMode

    def to_host(args: tuple, kwargs: dict) -> bool:
        """``t.to("cpu")`` of a tensor on a device (on the CPU it is the model's own device: no read)."""
        if not args or not isinstance(args[0], torch.Tensor) or args[0].device.type == "cpu":
            return False
        targets = [*args[1:], kwargs.get("device")]
        return any((isinstance(a, str) and a.startswith("cpu")) or (isinstance(a, torch.device) and a.type == "cpu") for a in targets)

    class Guard(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            name = getattr(func, "__name__", "")
            if name in READS or (name == "to" and to_host(args, kwargs)):
                _handle(guard, f"torch Tensor.{name}")
                return _judged_read(torch, func, args, kwargs)
            return func(*args, **kwargs)

    stack.enter_context(Guard())
    # The mode is thread-local state the autograd engine does not carry into backward hooks (a read
    # in a tensor hook would pass unseen): the same reads are also caught on torch.Tensor's methods.
    for name in (*READS, "to"):
        own = name in torch.Tensor.__dict__
        original = getattr(torch.Tensor, name)

        def wrapped(self: Any, *args: Any, __original: Any = original, __name: str = name, **kwargs: Any) -> Any:
            if __name != "to" or to_host((self, *args), kwargs):
                _handle(guard, f"torch Tensor.{__name}")
            return _judged_read(torch, __original, (self, *args), kwargs)

        setattr(torch.Tensor, name, wrapped)
        stack.callback(setattr, torch.Tensor, name, original) if own else stack.callback(delattr, torch.Tensor, name)
    if torch.cuda.is_available():
        previous = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("error")
        stack.callback(torch.cuda.set_sync_debug_mode, previous)


def _paddle_guard(guard: SyncGuard, stack: ExitStack) -> None:
    paddle = sys.modules.get("paddle")
    if paddle is None:
        return
    cls = paddle.Tensor
    for name in READS:
        original = cls.__dict__.get(name)
        if original is None:
            continue

        def wrapped(self: Any, *args: Any, __original: Any = original, __name: str = name, **kwargs: Any) -> Any:
            _handle(guard, f"paddle Tensor.{__name}")
            with _reading():
                return __original(self, *args, **kwargs)

        setattr(cls, name, wrapped)
        stack.callback(setattr, cls, name, original)


@contextmanager
def no_host_sync(allow: dict[str, str] | None = None) -> Iterator[SyncGuard]:
    """Fail on any host read of a tensor made by hookkit (or a callback it runs) inside the block.

    ``allow``: ``{"dotted.prefix.of.the.function": "why this read is documented"}``. Raises
    ``HostSyncError`` at the read, and again on leaving if hookkit swallowed it.
    """
    guard = SyncGuard({**ALWAYS, **(allow or {})})
    with ExitStack() as stack:
        _torch_guard(guard, stack)
        _paddle_guard(guard, stack)
        try:
            yield guard
        except HostSyncError:
            raise
        except BaseException as exc:  # hookkit re-raised the read as its own error: say what it was
            if guard.violations:
                op, where = guard.violations[0]
                raise HostSyncError(f"host read of a tensor in a hot path: {op} in {where}") from exc
            raise
    guard.raise_if_any()
