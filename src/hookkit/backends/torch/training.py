"""PyTorch's ``training`` family (see ``hookkit.backends.families.training``)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor

from hookkit.backends.families.training import Training
from hookkit.backends.torch import quantized
from hookkit.core.validate import ArgumentTypeError, fail


def _inner(optimizer: Any) -> Any:
    """The torch optimizer inside wrappers (accelerate's AcceleratedOptimizer, Lightning's LightningOptimizer)."""
    for _ in range(4):
        if isinstance(optimizer, torch.optim.Optimizer) and type(optimizer).step is not None and not hasattr(optimizer, "optimizer"):
            return optimizer
        inner = getattr(optimizer, "optimizer", None) or getattr(optimizer, "_optimizer", None)
        if inner is None:
            break
        optimizer = inner
    return optimizer


_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


def _copies(d: int) -> int:
    """How many reordered copies of a weight matrix with ``d`` inputs oneDNN's LSTM backward makes
    (measured on torch 2.13): a second, padded one where ``d`` is a multiple of 256 or not of 16."""
    return 2 if d % 256 == 0 or d % 16 else 1


def _onednn_lstm(layer: Any, dtype: torch.dtype, packed: bool) -> bool:
    """Whether torch runs this LSTM call through oneDNN's fused kernel (CPU, float32 or bfloat16,
    oneDNN on, no ``proj_size``, no packed sequence), as ``torch.lstm`` decides."""
    if layer.mode != "LSTM" or layer.proj_size or packed or not torch.backends.mkldnn.is_available():
        return False
    if not torch._C._get_mkldnn_enabled():
        return False
    if dtype == torch.bfloat16:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return dtype == torch.float32


def rnn_transient(layer: Any, input_shapes: Sequence[Sequence[int]], output_bytes: int) -> tuple[int, int] | None:
    """The transient of one call of ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` on the CPU (see
    ``TorchTraining.layer_transient``); None for other layers and devices."""
    gates = _GATES.get(str(getattr(layer, "mode", ""))) if isinstance(layer, torch.nn.RNNBase) else None
    weight = next(layer.parameters(), None) if gates else None
    if gates is None or weight is None or weight.device.type != "cpu" or not input_shapes or len(input_shapes[0]) not in (2, 3):
        return None
    x = list(input_shapes[0])
    packed = len(input_shapes) > 1 and len(input_shapes[1]) == 1  # PackedSequence: data [S, I], batch_sizes [T]
    if len(x) == 3:
        steps, batch = (x[1], x[0]) if layer.batch_first else (x[0], x[1])
    else:  # unbatched [T, I], or a packed sequence's data [sum of lengths, I]
        steps, batch = x[0], 1
    h, s, dirs = layer.hidden_size, weight.element_size(), 2 if layer.bidirectional else 1
    if not _onednn_lstm(layer, weight.dtype, packed):
        # the recurrence runs step by step: the input projections of all steps of one layer and
        # direction are computed at once and held until the steps end; bidirectional: the two
        # directions' outputs are stacked apart before they are concatenated
        forward = s * steps * batch * h * (gates + (2 if dirs == 2 else 0))
        # the backward: the output gradients and one step's recurrent-weight gradient before it is summed
        return forward, output_bytes + s * gates * h * h
    most = 0
    for lay in range(layer.num_layers):
        d_in = layer.input_size if lay == 0 else dirs * h
        kernel = (
            steps * batch * d_in  # the gradient of the layer's input
            + gates * steps * batch * h  # the gates' scratch
            + 4 * batch * h  # the gradients of the initial and final states
            + gates * h * (_copies(d_in) * d_in + _copies(h) * h)  # the weights, reordered for the kernel
            + (steps * batch * h if lay == layer.num_layers - 1 or dirs == 2 else 0)  # the output gradient, copied
        )
        most = max(most, s * kernel)
    return 0, output_bytes + most


class TorchTraining(Training):
    @contextlib.contextmanager
    def saving(self, on_save: Callable[[Any], None]) -> Iterator[None]:
        def pack(t: torch.Tensor) -> torch.Tensor:
            on_save(t)
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield

    def storage(self, t: Any) -> tuple[int, int] | None:
        try:
            s = t.untyped_storage()
            if t.is_meta or isinstance(t, FakeTensor):  # no data pointer: the storage object itself
                return s._cdata, s.nbytes()
            return s.data_ptr(), s.nbytes()
        except (RuntimeError, NotImplementedError, TypeError):  # sparse, nested tensors
            return None

    def on_step(self, optimizer: Any, fn: Callable[[], None]) -> Any:
        opt = _inner(optimizer)
        if not isinstance(opt, torch.optim.Optimizer):
            fail(
                "WeightStats",
                "optimizer",
                "a torch.optim.Optimizer (or a wrapper holding one as .optimizer)",
                optimizer,
                kind=ArgumentTypeError,
            )
        return opt.register_step_post_hook(lambda *_: fn())

    def optimizer_parameters(self, optimizer: Any) -> list[Any]:
        opt = _inner(optimizer)
        return self.group_parameters([p for g in opt.param_groups for p in g["params"]])

    def optimizer_state(self, optimizer: Any) -> dict[str, Any]:
        return vars(_inner(optimizer))

    def take_grad(self, p: Any) -> Any:
        g, p.grad = p.grad, None
        return g

    def put_grad(self, p: Any, grad: Any) -> None:
        p.grad = grad

    def backward(self, loss: Any) -> None:
        loss.backward()

    def peak_bytes(self, fn: Callable[[], None], device: str) -> tuple[int, str]:
        dev = torch.device(device)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
            torch.cuda.reset_peak_memory_stats(dev)
            start = torch.cuda.memory_allocated(dev)
            fn()
            torch.cuda.synchronize(dev)
            return torch.cuda.max_memory_allocated(dev) - start, "torch.cuda.max_memory_allocated"
        # CPU: the allocator reports every allocation and free to the profiler while it records
        # memory; the running sum of those events peaks where the step held the most
        from torch.autograd import profiler

        prof: Any = profiler.profile(profile_memory=True, use_kineto=True)
        with _quiet_fd2():  # Kineto writes "USDT: ... profiler_start" / "profiler_stop" to fd 2
            prof.__enter__()
        try:
            fn()
        finally:
            with _quiet_fd2():
                prof.__exit__(None, None, None)
        events = [e for e in prof.kineto_results.events() if e.name() == "[memory]"]
        events.sort(key=lambda e: e.start_ns())
        live = peak = 0
        for e in events:
            if str(e.device_type()).endswith("CPU"):
                live += e.nbytes()
                peak = max(peak, live)
        return peak, "the CPU allocator's allocations and frees, recorded by torch.profiler (profile_memory=True)"

    def weight_rows(self, ws: Sequence[Any], prevs: Sequence[Any]) -> Any:
        rows = []
        for w, prev in zip(ws, prevs):
            wf = w.detach()
            wf = wf if wf.dtype == torch.float32 else wf.float()
            if not wf.numel():  # an empty shard: neutral for the merge (the max of |w| >= 0, sums)
                gone = float("nan") if prev is None else 0.0
                rows.append(torch.tensor([float("nan"), 0.0, 0.0, gone, gone], device=w.device))
                continue
            var, mean = torch.var_mean(wf, correction=0)
            peak = torch.linalg.vector_norm(wf, float("inf"))
            if prev is None:
                nan = torch.full((), float("nan"), device=w.device)
                rows.append(torch.stack([mean, var * wf.numel(), peak, nan, nan]))
            else:
                pf = prev if prev.dtype == torch.float32 else prev.float()
                step = torch.linalg.vector_norm(wf - pf)
                rows.append(torch.stack([mean, var * wf.numel(), peak, step * step, torch.linalg.vector_norm(pf).square()]))
        return torch.stack(rows)

    def update_norms(self, ws: Sequence[Any], prevs: Sequence[Any]) -> Any:
        ws = [w.detach() if w.dtype == torch.float32 else w.detach().float() for w in ws]
        prevs = [p if p.dtype == torch.float32 else p.float() for p in prevs]
        steps = torch.stack(torch._foreach_norm(torch._foreach_sub(ws, prevs)))
        return torch.stack((steps * steps, torch.stack(torch._foreach_norm(prevs)).square()), dim=1)

    def local(self, t: Any) -> Any:
        to_local = getattr(t, "to_local", None)  # a DTensor (FSDP2): this rank's shard
        t = t if to_local is None else to_local()
        return quantized.OPS.dequantize(t)  # a quantized parameter (torchao, optimum-quanto): its values

    def copy_all(self, dsts: Sequence[Any], srcs: Sequence[Any]) -> None:
        with torch.no_grad():
            torch._foreach_copy_(list(dsts), [s.detach() for s in srcs])

    def layer_transient(self, layer: Any, input_shapes: Sequence[Sequence[int]], output_bytes: int) -> tuple[int, int] | None:
        """Recurrent layers on the CPU (``nn.LSTM``, ``nn.GRU``, ``nn.RNN``; T steps, batch N, hidden H,
        G gates: LSTM 4, GRU 3, RNN 1; item size s), measured under ``torch.profiler(profile_memory=True)``:

        - an LSTM through oneDNN (float32/bfloat16, no ``proj_size``, no packed sequence): its backward
          runs one kernel per layer and direction, which allocates, beyond the weights' gradients,
          s x [T.N.I (the layer input's gradient; I = the input size, D.H above the first layer)
          + G.T.N.H (the gates' scratch) + 4.N.H (the states' gradients) + c(I).I.G.H + c(H).H.G.H
          (the weights reordered for the kernel; c(d) = 2 where d is a multiple of 256 or not of 16,
          else 1) + T.N.H (the output gradient, copied by the top layer and by bidirectional ones)];
          the backward's transient is the call's output gradients plus the largest of these (the
          forward's: 0, its workspace is saved);
        - otherwise (GRU, RNN, LSTM off oneDNN) the recurrence runs step by step: the forward
          computes the input projections of all steps of one layer and direction at once,
          s x G.T.N.H, and holds them until the steps end, + s x 2.T.N.H when bidirectional (the
          two directions' outputs, stacked apart before they are concatenated); the backward
          holds the output gradients and one step's recurrent-weight gradient, s x G.H.H, before
          it is summed (it gathers the projections' gradients while it frees the steps' saved
          tensors, no more);
        - None elsewhere (other layers; CUDA, where cuDNN's workspace is not modelled)."""
        return rnn_transient(layer, input_shapes, output_bytes)

    def is_optimizer(self, obj: Any) -> bool:
        return isinstance(_inner(obj), torch.optim.Optimizer)


OPS = TorchTraining()


@contextlib.contextmanager
def _quiet_fd2() -> Iterator[None]:
    """Send the process's C-level standard error to the null device for the block: the profiler's
    start and stop lines are written there by C++, below ``sys.stderr``. Only around the profiler's
    own start and stop, never around the user's code."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no fd 2 (an embedded interpreter): nothing to quiet
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
