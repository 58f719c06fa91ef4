"""``layer_bias``: which layers add a bias to their output, and that bias as one vector per output
channel (a norm layer's running statistics folded in). FullGrad sums the gradient times this bias
over every such layer. ``data_format``: the layout a layer declares for its output (CAM reads an
ambiguous ``[N, a, b, c]`` output by it)."""

from __future__ import annotations

from typing import Any


class LayerBias:
    """The interface; each framework's ``layer_bias`` module subclasses it as ``OPS``."""

    def has_bias(self, layer: Any) -> bool:
        """True for a convolution (1-D, 2-D, 3-D) or batch norm layer that has a bias."""
        raise NotImplementedError("layer_bias.has_bias is not implemented for this framework")

    def bias(self, layer: Any) -> Any:
        """The bias added per output channel ``[C]`` (detached): a convolution's ``bias``; a batch norm's
        ``bias - running_mean * weight / sqrt(running_var + eps)``."""
        raise NotImplementedError("layer_bias.bias is not implemented for this framework")

    def data_format(self, layer: Any) -> str | None:
        """ "channels_first" or "channels_last" when the layer declares the layout of its output (Paddle's
        ``data_format="NCHW"`` / ``"NHWC"``, ``"NLC"``, ``"NDHWC"`` on convolutions, norms and pools); None when
        it does not (every PyTorch layer: the output's shape is the only evidence)."""
        return None
