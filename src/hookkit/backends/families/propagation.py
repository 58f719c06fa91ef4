"""``propagation``: the ops of the propagation attribution methods (DeepLift's Rescale rule, LRP's
rules) that differ between frameworks: an element-wise choice, a stabilized denominator, clamps, and
a layer's own function evaluated with other parameters (LRP's modified weights), called without its
hooks and without replacing anything on the layer.

>>> ops = backend_for(model).family("propagation")                          # doctest: +SKIP
>>> ops.rescale(grad_in, grad_out, d_in, d_out, 1e-10)                     # doctest: +SKIP
>>> z = ops.call_with(model.fc, x, w_plus, None)                             # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any


class PropagationOps:
    """The interface; each framework's ``propagation`` module subclasses it as ``OPS``."""

    #: whether a gradient may be taken inside a backward hook (LRP's rules evaluate their layer again there)
    grad_in_backward = True

    def rescale(self, grad_in: Any, grad_out: Any, d_in: Any, d_out: Any, eps: float) -> Any:
        """DeepLift's Rescale multiplier: ``grad_out * d_out / d_in`` where ``|d_in| >= eps``, else ``grad_in``."""
        raise NotImplementedError("propagation.rescale is not implemented for this framework")

    def maxpool_rescale(self, layer: Any, v_in: Any, v_out: Any, grad_in: Any, grad_out: Any, eps: float) -> Any:
        """DeepLift's rule for a max-pooling layer (captum's ``maxpool``): ``v_in`` / ``v_out`` hold the
        inputs' rows then the baselines'; None for a layer type this framework's ops do not know."""
        return None

    def stabilize(self, z: Any, eps: float) -> Any:
        """``z + eps * sign(z)``, a zero counted positive (zennit's stabilizer)."""
        raise NotImplementedError("propagation.stabilize is not implemented for this framework")

    def clamp(self, t: Any, low: float | None = None, high: float | None = None) -> Any:
        raise NotImplementedError("propagation.clamp is not implemented for this framework")

    def sign(self, t: Any) -> Any:
        raise NotImplementedError("propagation.sign is not implemented for this framework")

    def can_call_with(self, layer: Any) -> bool:
        """Whether ``call_with`` knows the layer's type."""
        return False

    def params(self, layer: Any) -> tuple[Any, Any]:
        """``(weight, bias)`` of a linear or convolution layer as it stores them (bias may be None)."""
        return layer.weight, getattr(layer, "bias", None)

    def call_with(self, layer: Any, x: Any, weight: Any, bias: Any) -> Any:
        """The layer's function of ``x`` with ``weight`` and ``bias`` in place of its own (its hooks not run);
        None for a layer type this framework's ops do not know."""
        raise NotImplementedError("propagation.call_with is not implemented for this framework")
