"""PyTorch weights files: ``.safetensors``, and ``torch.save`` files read with ``weights_only=True``
(tensors only, no code)."""

from __future__ import annotations

import os
from typing import Any

import torch

from hookkit.backends.families.checkpoints import Checkpoints, InvalidFile, check_keys


class TorchCheckpoints(Checkpoints):
    suffixes = (".safetensors", ".pt", ".pth", ".bin", ".ckpt")

    def load(self, model: Any, path: str) -> None:
        if os.path.splitext(path)[1].lower() == ".safetensors":
            from safetensors.torch import load_file

            state: Any = load_file(path)  # torch.load below gives Any too
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
            if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):  # a Lightning checkpoint
                state = state["state_dict"]
            if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
                raise InvalidFile(f"{path}: not a state_dict (a dict of tensors); got {type(state).__name__}")
        own = model.state_dict()
        check_keys({k: tuple(v.shape) for k, v in own.items()}, {k: tuple(v.shape) for k, v in state.items()}, path)
        model.load_state_dict(state, strict=True)


OPS = TorchCheckpoints()
