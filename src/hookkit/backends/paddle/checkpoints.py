"""PaddlePaddle weights files: ``.safetensors``, and ``paddle.save`` files (``.pdparams``: a pickle,
so only files you trust)."""

from __future__ import annotations

import os
from typing import Any

import paddle

from hookkit.backends.families.checkpoints import Checkpoints, InvalidFile, check_keys


class PaddleCheckpoints(Checkpoints):
    suffixes = (".safetensors", ".pdparams")

    def load(self, model: Any, path: str) -> None:
        if os.path.splitext(path)[1].lower() == ".safetensors":
            from safetensors.numpy import load_file

            state = {k: paddle.to_tensor(v) for k, v in load_file(path).items()}
        else:
            state = paddle.load(path)
            if not isinstance(state, dict):
                raise InvalidFile(f"{path}: not a state dict (a dict of tensors); got {type(state).__name__}")
        own = model.state_dict()
        check_keys({k: tuple(v.shape) for k, v in own.items()}, {k: tuple(v.shape) for k, v in state.items()}, path)
        model.set_state_dict(state)


OPS = PaddleCheckpoints()
