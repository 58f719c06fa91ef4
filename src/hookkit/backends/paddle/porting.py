"""PaddlePaddle's ``porting`` family (see ``hookkit.backends.families.porting``): ``nn.Linear`` stores
its weight ``[in, out]`` (PyTorch: ``[out, in]``); BatchNorm keeps its running statistics as ``_mean``
and ``_variance`` (PyTorch: ``running_mean``, ``running_var``) and no batch counter."""

from __future__ import annotations

from typing import Any

import numpy as np
import paddle

from hookkit.backends.families.porting import Porting, StateEntry

_NAMES = {"_mean": "running_mean", "_variance": "running_var"}


def _is_batch_norm(layer: Any) -> bool:
    return isinstance(layer, (paddle.nn.layer.norm._BatchNormBase, paddle.nn.BatchNorm))


class PaddlePorting(Porting):
    def layer_state(self, layer: Any) -> list[StateEntry]:
        linear = isinstance(layer, paddle.nn.Linear)
        norm = _is_batch_norm(layer)
        seen: set[int] = set()
        out = []
        for n, t in [*layer.named_parameters(include_sublayers=False), *layer.named_buffers(include_sublayers=False)]:
            if t is None or id(t) in seen:
                continue
            seen.add(id(t))
            canonical = _NAMES.get(n, n) if norm else n
            out.append(StateEntry(canonical, n, t, linear and n == "weight"))
        return out

    def read(self, t: Any) -> Any:
        t = t.detach()
        if t.dtype == paddle.bfloat16:
            t = t.astype("float32")
        return np.array(t.numpy(), copy=True)

    def write(self, t: Any, array: Any) -> None:
        value = paddle.to_tensor(np.ascontiguousarray(array)).astype(t.dtype)
        with paddle.no_grad():
            paddle.assign(value, output=t)


OPS = PaddlePorting()
