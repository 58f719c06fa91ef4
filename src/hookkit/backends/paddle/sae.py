"""Paddle's ``sae`` family (see ``hookkit.backends.families.sae``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import paddle

from hookkit.backends.families.sae import SaeOps


def _rectangle(x: Any) -> Any:
    return ((x > -0.5) & (x < 0.5)).astype(x.dtype)


class _JumpReLU(paddle.autograd.PyLayer):
    @staticmethod
    def forward(ctx: Any, x: Any, threshold: Any, bandwidth: float) -> Any:
        ctx.save_for_backward(x, threshold)
        ctx.bandwidth = bandwidth
        return x * (x > threshold).astype(x.dtype)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        x, threshold = ctx.saved_tensor()
        bw = ctx.bandwidth
        ste = (threshold / bw) * _rectangle((x - threshold) / bw) * grad
        return (x > threshold).astype(x.dtype) * grad, -ste.reshape([-1, x.shape[-1]]).sum(0)


class _Step(paddle.autograd.PyLayer):
    @staticmethod
    def forward(ctx: Any, x: Any, threshold: Any, bandwidth: float) -> Any:
        ctx.save_for_backward(x, threshold)
        ctx.bandwidth = bandwidth
        return (x > threshold).astype(x.dtype)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        x, threshold = ctx.saved_tensor()
        bw = ctx.bandwidth
        ste = (1.0 / bw) * _rectangle((x - threshold) / bw) * grad
        return paddle.zeros_like(x), -ste.reshape([-1, x.shape[-1]]).sum(0)


class PaddleSaeOps(SaeOps):
    def tensor(self, array: Any, device: str | None, dtype: str) -> Any:
        array = np.asarray(array)
        t = paddle.to_tensor(array if array.flags.c_contiguous else array.copy(order="C"), place=paddle.CPUPlace())
        t = t.astype(dtype) if str(t.dtype).rpartition(".")[2] != dtype else t
        return t if device in (None, "cpu") else t.to(device)

    def relu(self, t: Any) -> Any:
        return paddle.nn.functional.relu(t)

    def exp(self, t: Any) -> Any:
        return paddle.exp(t)

    def greater(self, t: Any, threshold: Any) -> Any:
        return (t > threshold).astype(t.dtype)

    def row_norm(self, t: Any, keepdim: bool = False) -> Any:
        return paddle.linalg.norm(t, p=2, axis=-1, keepdim=keepdim)

    def mean_std(self, t: Any) -> tuple[Any, Any]:
        mu = t.mean(axis=-1, keepdim=True)
        return mu, paddle.std(t - mu, axis=-1, keepdim=True, unbiased=True)

    def topk_dense(self, t: Any, k: int) -> Any:
        values, indices = paddle.topk(t, k=k, axis=-1, sorted=False)
        return paddle.put_along_axis(paddle.zeros_like(t), indices, paddle.nn.functional.relu(values), axis=-1)

    def batch_topk_dense(self, t: Any, k: float) -> Any:
        acts = paddle.nn.functional.relu(t)
        flat = acts.flatten()
        n = min(int(k * t.shape[0]), int(flat.shape[0]))
        values, indices = paddle.topk(flat, n, axis=-1, sorted=False)
        return paddle.put_along_axis(paddle.zeros_like(flat), indices, values, axis=-1).reshape(acts.shape)

    def topk(self, t: Any, k: int) -> tuple[Any, Any]:
        values, indices = paddle.topk(t, k=k, axis=-1, sorted=True)
        return values, indices

    def no_grad(self) -> Any:
        return paddle.no_grad()

    def parameter(self, t: Any) -> Any:
        p = paddle.create_parameter(t.shape, dtype=t.dtype, default_initializer=paddle.nn.initializer.Assign(t.detach()))
        p.stop_gradient = False
        return p

    def adam(self, params: list[Any], lr: float, betas: tuple[float, float]) -> Any:
        return paddle.optimizer.Adam(learning_rate=lr, beta1=betas[0], beta2=betas[1], parameters=params)

    def set_lr(self, opt: Any, lr: float) -> None:
        opt.set_lr(lr)

    def step(self, opt: Any, loss: Any, params: list[Any], max_grad_norm: float | None, world: int = 1) -> None:
        loss.backward()
        if world > 1:
            import paddle.distributed as dist

            for p in params:
                if p.grad is not None:
                    g = p.grad
                    dist.all_reduce(g)
                    g.set_value(g / world)
        if max_grad_norm is not None:
            grads = [p.grad for p in params if p.grad is not None]
            total = paddle.sqrt(paddle.add_n([(g * g).sum() for g in grads]))
            scale = paddle.clip(max_grad_norm / (total + 1e-6), max=1.0)
            for g in grads:
                g.set_value(g * scale)
        opt.step()
        opt.clear_grad()

    def assign(self, param: Any, value: Any) -> None:
        with paddle.no_grad():
            param.set_value(value)

    def optimizer_state(self, opt: Any, params: list[Any]) -> dict[str, Any]:
        # Paddle keys its accumulators by parameter name ("<name>_moment1_0"): saved by position
        state = opt.state_dict()
        out: dict[str, Any] = {}
        for i, p in enumerate(params):
            prefix = p.name + "_"
            for key, value in state.items():
                if key.startswith(prefix) and hasattr(value, "numpy"):
                    out[f"{key[len(prefix) :]}.{i}"] = np.asarray(value.numpy())
        return out

    def load_optimizer_state(self, opt: Any, params: list[Any], state: dict[str, Any]) -> None:
        restored = {}
        for key, value in state.items():
            suffix, _, i = key.rpartition(".")
            if suffix and i.isdigit() and int(i) < len(params):
                restored[f"{params[int(i)].name}_{suffix}"] = paddle.to_tensor(np.asarray(value))
        opt.set_state_dict(restored)

    def masked_topk_dense(self, t: Any, mask: Any, k: int) -> Any:
        latents = paddle.where(mask.unsqueeze(0), t, paddle.full_like(t, -float("inf")))
        values, indices = paddle.topk(latents, k, axis=-1, sorted=False)
        return paddle.put_along_axis(paddle.zeros_like(t), indices, values, axis=-1)

    def all_reduce(self, array: Any, op: str) -> Any:
        import paddle.distributed as dist

        t = paddle.to_tensor(np.array(array, dtype=np.float64))
        dist.all_reduce(t, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MIN)
        return t.numpy()

    def sum_last(self, t: Any) -> Any:
        return t.sum(axis=-1)

    def sum_first(self, t: Any) -> Any:
        return t.sum(axis=0)

    def jumprelu(self, t: Any, threshold: Any, bandwidth: float) -> Any:
        return _JumpReLU.apply(t, threshold, bandwidth)

    def step_l0(self, t: Any, threshold: Any, bandwidth: float) -> Any:
        return _Step.apply(t, threshold, bandwidth)

    def identity_layer(self) -> Any:
        return paddle.nn.Identity()


OPS = PaddleSaeOps()
