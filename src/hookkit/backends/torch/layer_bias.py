"""PyTorch's ``layer_bias`` family (see ``hookkit.backends.families.layer_bias``)."""

from __future__ import annotations

from typing import Any

import torch

from hookkit.backends.families.layer_bias import LayerBias

_CONV = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)
_NORM = (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d)


class TorchLayerBias(LayerBias):
    def has_bias(self, layer: Any) -> bool:
        return type(layer) in _CONV + _NORM and getattr(layer, "bias", None) is not None

    def bias(self, layer: Any) -> Any:
        with torch.no_grad():
            if type(layer) in _NORM:
                if layer.running_mean is None:  # track_running_stats=False: the batch is normalized, no folded bias
                    return layer.bias.detach().clone()
                return layer.bias - layer.running_mean * layer.weight / torch.sqrt(layer.running_var + layer.eps)
            return layer.bias.detach().clone()


OPS = TorchLayerBias()
