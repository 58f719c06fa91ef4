"""PyTorch's ``attribution`` family (see ``hookkit.backends.families.attribution``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from hookkit.backends.families.attribution import AttributionOps, SavedBytes, host_free_bytes
from hookkit.backends.torch.quantized import storage_keys


class TorchAttributionOps(AttributionOps):
    def embedding_rows(self, layer: Any) -> int | None:
        return int(layer.num_embeddings) if isinstance(layer, torch.nn.Embedding) else None

    def grads_or_none(self, output: Any, inputs: Sequence[Any]) -> tuple:
        return torch.autograd.grad(output, list(inputs), allow_unused=True)

    @contextlib.contextmanager
    def saved_bytes(self, model: Any) -> Iterator[SavedBytes]:
        seen = {k for p in model.parameters() for k in storage_keys(p)}  # quantized parameters: their inner tensors
        total = SavedBytes()

        def pack(t: torch.Tensor) -> torch.Tensor:
            try:
                storage = t.untyped_storage()
                key = storage.data_ptr()
                if key not in seen:
                    seen.add(key)
                    total.bytes += storage.nbytes()
                    total.largest = max(total.largest, storage.nbytes())
            except (RuntimeError, NotImplementedError):  # a tensor without storage (a fake or nested one)
                total.bytes += t.numel() * t.element_size()
                total.largest = max(total.largest, t.numel() * t.element_size())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield total

    def free_bytes(self, like: Any) -> int:
        if like.device.type == "cuda":
            return int(torch.cuda.mem_get_info(like.device)[0])
        return host_free_bytes()

    def on_host(self, like: Any) -> bool:
        return like.device.type == "cpu"


OPS = TorchAttributionOps()
