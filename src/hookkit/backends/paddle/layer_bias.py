"""PaddlePaddle's ``layer_bias`` family (see ``hookkit.backends.families.layer_bias``)."""

from __future__ import annotations

from typing import Any

import paddle

from hookkit.backends.families.layer_bias import LayerBias

_CONV = (paddle.nn.Conv1D, paddle.nn.Conv2D, paddle.nn.Conv3D)
_NORM = (paddle.nn.BatchNorm1D, paddle.nn.BatchNorm2D, paddle.nn.BatchNorm3D, paddle.nn.BatchNorm)


class PaddleLayerBias(LayerBias):
    def has_bias(self, layer: Any) -> bool:
        return type(layer) in _CONV + _NORM and getattr(layer, "bias", None) is not None

    def bias(self, layer: Any) -> Any:
        with paddle.no_grad():
            if type(layer) in _NORM:
                if getattr(layer, "_use_global_stats", None) is False:  # batch statistics even in eval: no folded bias
                    return layer.bias.detach().clone()
                eps = getattr(layer, "_epsilon", 1e-5)
                weight = 1.0 if layer.weight is None else layer.weight  # weight_attr=False: a fixed scale of 1
                return layer.bias - layer._mean * weight / paddle.sqrt(layer._variance + eps)
            return layer.bias.detach().clone()

    def data_format(self, layer: Any) -> str | None:
        # convolutions and norms keep it as ``_data_format``, pools as ``data_format``
        fmt = getattr(layer, "_data_format", None) or getattr(layer, "data_format", None)
        if not isinstance(fmt, str) or not fmt.upper().startswith("N"):
            return None
        return "channels_first" if fmt.upper().startswith("NC") else "channels_last" if fmt.upper().endswith("C") else None


OPS = PaddleLayerBias()
