"""PyTorch's ``training`` family (see ``hookkit.backends.families.training``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from hookkit.backends.families.training import Training


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
            return s.data_ptr(), s.nbytes()
        except (RuntimeError, NotImplementedError, TypeError):  # sparse, nested, fake tensors
            return None

    def on_step(self, optimizer: Any, fn: Callable[[], None]) -> Any:
        opt = _inner(optimizer)
        if not isinstance(opt, torch.optim.Optimizer):
            raise TypeError(f"expected a torch.optim.Optimizer; got {type(optimizer).__name__}")
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

        with profiler.profile(profile_memory=True, use_kineto=True) as prof:
            fn()
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
        return t if to_local is None else to_local()

    def copy_all(self, dsts: Sequence[Any], srcs: Sequence[Any]) -> None:
        with torch.no_grad():
            torch._foreach_copy_(list(dsts), [s.detach() for s in srcs])


OPS = TorchTraining()
