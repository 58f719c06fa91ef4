"""PaddlePaddle's ``attribution`` family (see ``hookkit.backends.families.attribution``)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from typing import Any

import paddle

from hookkit.backends.families.attribution import AttributionOps, SavedBytes, host_free_bytes


class PaddleAttributionOps(AttributionOps):
    def embedding_rows(self, layer: Any) -> int | None:
        return int(layer.weight.shape[0]) if isinstance(layer, paddle.nn.Embedding) else None

    def grads_or_none(self, output: Any, inputs: Sequence[Any]) -> tuple:
        return tuple(paddle.grad([output], list(inputs), allow_unused=True))

    @contextlib.contextmanager
    def saved_bytes(self, model: Any) -> Iterator[SavedBytes]:
        seen = {p.data_ptr() for p in model.parameters()}
        total = SavedBytes()

        def pack(t: Any) -> Any:
            key = t.data_ptr()
            if key not in seen:
                seen.add(key)
                size = math.prod(t.shape) * t.element_size()  # shape, not numel(): a tensor, read on the host
                total.bytes += size
                total.largest = max(total.largest, size)
            return t

        with paddle.autograd.saved_tensors_hooks(pack, lambda t: t):
            yield total

    def free_bytes(self, like: Any) -> int:
        place = like.place
        if place.is_gpu_place():
            device = place.gpu_device_id()
            total = paddle.device.cuda.get_device_properties(device).total_memory
            return int(total - paddle.device.cuda.memory_reserved(device))
        return host_free_bytes()

    def on_host(self, like: Any) -> bool:
        return bool(like.place.is_cpu_place())


OPS = PaddleAttributionOps()
