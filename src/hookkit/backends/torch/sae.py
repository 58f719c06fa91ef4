"""PyTorch's ``sae`` family (see ``hookkit.backends.families.sae``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from hookkit.backends.families.sae import SaeOps


def _rectangle(x: Any) -> Any:
    return ((x > -0.5) & (x < 0.5)).to(x)


class _JumpReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Any, threshold: Any, bandwidth: float) -> Any:
        ctx.save_for_backward(x, threshold)
        ctx.bandwidth = bandwidth
        return x * (x > threshold).to(x)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        x, threshold = ctx.saved_tensors
        bw = ctx.bandwidth
        ste = (threshold / bw) * _rectangle((x - threshold) / bw) * grad
        return (x > threshold).to(x) * grad, -ste.reshape(-1, x.shape[-1]).sum(0), None


class _Step(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Any, threshold: Any, bandwidth: float) -> Any:
        ctx.save_for_backward(x, threshold)
        ctx.bandwidth = bandwidth
        return (x > threshold).to(x)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        x, threshold = ctx.saved_tensors
        bw = ctx.bandwidth
        ste = (1.0 / bw) * _rectangle((x - threshold) / bw) * grad
        return None, -ste.reshape(-1, x.shape[-1]).sum(0), None


class TorchSaeOps(SaeOps):
    def tensor(self, array: Any, device: str | None, dtype: str) -> Any:
        array = np.asarray(array)
        t = torch.from_numpy(array if array.flags.c_contiguous else array.copy(order="C"))
        return t.to(device=device or "cpu", dtype=getattr(torch, dtype))

    def relu(self, t: Any) -> Any:
        return torch.relu(t)

    def exp(self, t: Any) -> Any:
        return torch.exp(t)

    def greater(self, t: Any, threshold: Any) -> Any:
        return (t > threshold).to(t.dtype)

    def row_norm(self, t: Any, keepdim: bool = False) -> Any:
        return t.norm(dim=-1, keepdim=keepdim)

    def mean_std(self, t: Any) -> tuple[Any, Any]:
        mu = t.mean(dim=-1, keepdim=True)
        return mu, (t - mu).std(dim=-1, keepdim=True)

    def topk_dense(self, t: Any, k: int) -> Any:
        values, indices = torch.topk(t, k=k, dim=-1, sorted=False)
        return torch.zeros_like(t).scatter_(-1, indices, values.relu())

    def batch_topk_dense(self, t: Any, k: float) -> Any:
        acts = t.relu()
        flat = acts.flatten()
        n = min(int(k * t.shape[0]), flat.numel())
        values, indices = torch.topk(flat, n, dim=-1, sorted=False)
        return torch.zeros_like(flat).scatter_(-1, indices, values).reshape(acts.shape)

    def topk(self, t: Any, k: int) -> tuple[Any, Any]:
        values, indices = torch.topk(t, k=k, dim=-1, sorted=True)
        return values, indices

    def no_grad(self) -> Any:
        return torch.no_grad()

    def parameter(self, t: Any) -> Any:
        return t.detach().clone().requires_grad_(True)

    def adam(self, params: list[Any], lr: float, betas: tuple[float, float]) -> Any:
        return torch.optim.Adam(params, lr=lr, betas=betas)

    def set_lr(self, opt: Any, lr: float) -> None:
        for group in opt.param_groups:
            group["lr"] = lr

    def step(self, opt: Any, loss: Any, params: list[Any], max_grad_norm: float | None, world: int = 1) -> None:
        loss.backward()
        if world > 1:
            import torch.distributed as dist

            for p in params:
                if p.grad is not None:
                    dist.all_reduce(p.grad)
                    p.grad.div_(world)
        if max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        opt.step()
        opt.zero_grad(set_to_none=True)

    def assign(self, param: Any, value: Any) -> None:
        with torch.no_grad():
            param.copy_(value)

    def optimizer_state(self, opt: Any, params: list[Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"step": np.asarray(0, dtype=np.int64)}
        for i, p in enumerate(params):
            st = opt.state.get(p)
            if not st:
                continue
            out[f"m{i}"] = st["exp_avg"].detach().cpu().numpy()
            out[f"v{i}"] = st["exp_avg_sq"].detach().cpu().numpy()
            out["step"] = np.asarray(int(st["step"]), dtype=np.int64)
        return out

    def load_optimizer_state(self, opt: Any, params: list[Any], state: dict[str, Any]) -> None:
        step = int(state["step"])
        for i, p in enumerate(params):
            if f"m{i}" not in state:
                continue
            opt.state[p] = {
                "step": torch.tensor(float(step)),
                "exp_avg": torch.from_numpy(np.array(state[f"m{i}"])).to(p.device, p.dtype),
                "exp_avg_sq": torch.from_numpy(np.array(state[f"v{i}"])).to(p.device, p.dtype),
            }

    def masked_topk_dense(self, t: Any, mask: Any, k: int) -> Any:
        latents = torch.where(mask[None], t, -torch.inf)
        top = latents.topk(k, dim=-1, sorted=False)
        return torch.zeros_like(t).scatter_(-1, top.indices, top.values)

    def all_reduce(self, array: Any, op: str) -> Any:
        import torch.distributed as dist

        t = torch.from_numpy(np.array(array, dtype=np.float64))
        dist.all_reduce(t, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MIN)
        return t.numpy()

    def sum_last(self, t: Any) -> Any:
        return t.sum(dim=-1)

    def sum_first(self, t: Any) -> Any:
        return t.sum(dim=0)

    def jumprelu(self, t: Any, threshold: Any, bandwidth: float) -> Any:
        return _JumpReLU.apply(t, threshold, bandwidth)

    def step_l0(self, t: Any, threshold: Any, bandwidth: float) -> Any:
        return _Step.apply(t, threshold, bandwidth)

    def identity_layer(self) -> Any:
        return torch.nn.Identity()


OPS = TorchSaeOps()
