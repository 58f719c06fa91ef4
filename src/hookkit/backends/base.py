"""What each framework backend provides; the core calls only these."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any


class Backend:
    """One framework's primitives. Subclasses: ``TorchBackend``, ``PaddleBackend``."""

    name: str = ""
    #: whether mult-adds can be counted per operator (else per layer type)
    counts_operators: bool = False

    # -- identity -------------------------------------------------------------------------------
    def owns(self, obj: Any) -> bool:
        return self.is_layer(obj) or self.is_tensor(obj)

    def is_layer(self, obj: Any) -> bool:
        raise NotImplementedError

    def is_tensor(self, obj: Any) -> bool:
        raise NotImplementedError

    # -- layer tree -----------------------------------------------------------------------------
    def named_layers(self, model: Any) -> Iterator[tuple[str, Any]]:
        """(dotted name, layer) for the model and every sublayer, the model itself first as ''."""
        raise NotImplementedError

    def children(self, layer: Any) -> list[Any]:
        raise NotImplementedError

    def parameters(self, layer: Any, recurse: bool = True) -> list[Any]:
        raise NotImplementedError

    def named_parameters(self, layer: Any, recurse: bool = True) -> list[tuple[str, Any]]:
        raise NotImplementedError

    def is_training(self, layer: Any) -> bool:
        return bool(layer.training)

    def set_training(self, layer: Any, training: bool) -> None:
        layer.train() if training else layer.eval()

    def state_dict(self, layer: Any) -> dict:
        return layer.state_dict()

    # -- native hooks ---------------------------------------------------------------------------
    def hook_forward_pre(self, layer: Any, fn: Callable) -> Any:
        """Native pre-hook ``fn(layer, args, kwargs) -> None | (args, kwargs)``; returns its handle."""
        raise NotImplementedError

    def hook_forward(self, layer: Any, fn: Callable) -> Any:
        """Native post-hook ``fn(layer, args, kwargs, output) -> None | output``; returns its handle."""
        raise NotImplementedError

    def check_hookable(self, model: Any, named: Sequence[tuple[str, Any]]) -> None:
        """Raise if hooks on these layers could not run on every call (compiled graphs)."""

    def hook_tensor(self, tensor: Any, fn: Callable) -> Any:
        """Native gradient hook ``fn(grad) -> None | grad``; returns its handle."""
        return tensor.register_hook(fn)

    def identity_with_backward(self, tensors: Sequence[Any], on_grads: Callable) -> tuple:
        """Copies of ``tensors`` joined in one autograd node whose backward calls
        ``on_grads(grads) -> None | grads`` with all their gradients at once."""
        raise NotImplementedError

    def when_all_grads(self, tensors: Sequence[Any], fn: Callable[[tuple], None]) -> None:
        """Call ``fn(grads)`` once, after every tensor's gradient is computed (None if unused)."""
        raise NotImplementedError

    # -- tensors --------------------------------------------------------------------------------
    def requires_grad(self, t: Any) -> bool:
        raise NotImplementedError

    def grad_enabled(self) -> bool:
        raise NotImplementedError

    def no_grad(self) -> Any:
        raise NotImplementedError

    def detach(self, t: Any) -> Any:
        return t.detach()

    def clone(self, t: Any) -> Any:
        return t.clone()

    def to(self, t: Any, device: Any) -> Any:
        raise NotImplementedError

    def device_of(self, t: Any) -> str:
        raise NotImplementedError

    def shape(self, t: Any) -> tuple[int, ...]:
        return tuple(int(s) for s in t.shape)

    def numel(self, t: Any) -> int:
        n = 1
        for s in t.shape:
            n *= int(s)
        return n

    def dtype_name(self, t: Any) -> str:
        return str(t.dtype).replace("torch.", "").replace("paddle.", "")

    def itemsize(self, t: Any) -> int:
        raise NotImplementedError

    def to_numpy(self, t: Any) -> Any:
        raise NotImplementedError

    def from_numpy(self, array: Any, like: Any = None) -> Any:
        raise NotImplementedError

    def tensor_name(self, t: Any) -> str:
        return getattr(t, "name", "") or ""

    # -- maths the statistics need, computed on the tensor's device -----------------------------
    def stack(self, ts: Sequence[Any]) -> Any:
        raise NotImplementedError

    def zeros(self, shape: Sequence[int], like: Any) -> Any:
        raise NotImplementedError

    def histc(self, t: Any, bins: int, lo: float, hi: float) -> Any:
        raise NotImplementedError

    def isfinite_all(self, t: Any) -> Any:
        """A 0-d boolean tensor on the device: True when every value of ``t`` is finite."""
        raise NotImplementedError

    def to_float(self, t: Any) -> Any:
        raise NotImplementedError

    # -- monitoring (issue 5): a few fused reductions per call; the result stays on the device ----
    # Each returns one row, a 1-d tensor (stacked later, in bulk); the reader finishes the formulas
    # on the host, knowing the element count n: std = sqrt(m2 / (n - 1)), fraction = count / n...
    def l2_norm(self, t: Any) -> Any:
        """``||t||`` as a 0-d float32 tensor on ``t``'s device (no host read)."""
        raise NotImplementedError

    def activation_sums(self, t: Any, near_zero: float) -> Any:
        """One row ``[mean, sum of squared deviations from the mean, count of values <= near_zero]``
        of ``t`` as floats: the reader finishes fastai's formulas (std = sqrt(m2 / (n - 1)))."""
        raise NotImplementedError

    def activation_sums_hist(self, t: Any, near_zero: float, bins: int, lo: float, hi: float) -> tuple:
        """``(activation_sums(t, near_zero), histc(t, bins, lo, hi))``, in one pass where it can."""
        return self.activation_sums(t, near_zero), self.histc(t, bins, lo, hi)

    def grad_sums(self, t: Any) -> Any:
        """One row ``[sum, ||t||, max |t|]`` of a gradient: ``param_sums`` (gradients have
        |mean| << std, so mean and std follow from the sum and the norm when read)."""
        return self.param_sums(t)

    def param_sums(self, t: Any) -> Any:
        """One row ``[sum, ||t||, max |t|]`` of ``t`` (NaN when any value is): mergeable across tensors."""
        raise NotImplementedError

    def finite_probe(self, t: Any) -> tuple:
        """0-d tensors that are all finite exactly when every value of ``t`` is (min and max)."""
        raise NotImplementedError
