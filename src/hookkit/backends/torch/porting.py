"""PyTorch's ``porting`` family (see ``hookkit.backends.families.porting``): PyTorch's names and
layouts are the canonical ones; ``transformers``' ``Conv1D`` (GPT-2) stores its weight ``[in, out]``."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from hookkit.backends.families.porting import Porting, StateEntry

_BOOKKEEPING = {"num_batches_tracked"}


def _transposed_weights(layer: Any) -> bool:
    """Layers whose 2-d ``weight`` is stored ``[in, out]``: transformers' Conv1D (GPT-2's projections)."""
    kind = type(layer)
    return kind.__name__ == "Conv1D" and kind.__module__.startswith("transformers")


class TorchPorting(Porting):
    def layer_state(self, layer: Any) -> list[StateEntry]:
        transposed = _transposed_weights(layer)
        out = [StateEntry(n, n, p, transposed and n == "weight" and p.ndim == 2) for n, p in layer.named_parameters(recurse=False)]
        out += [StateEntry(n, n, b, False, n in _BOOKKEEPING) for n, b in layer.named_buffers(recurse=False) if b is not None]
        return out

    def read(self, t: Any) -> Any:
        t = t.detach()
        if t.dtype == torch.bfloat16:
            t = t.float()
        return np.array(t.cpu().numpy(), copy=True)

    def write(self, t: Any, array: Any) -> None:
        with torch.no_grad():
            t.copy_(torch.from_numpy(np.ascontiguousarray(array)).to(dtype=t.dtype, device=t.device))


OPS = TorchPorting()
