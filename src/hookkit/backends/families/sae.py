"""``sae``: the ops of sparse autoencoders (``hookkit.SAE``, ``hookkit.splice``, ``hookkit.train_sae``)
that the frameworks spell differently: activation functions, top-k, norms along the last axis, and
the training pieces (leaf parameters, Adam, backward, gradient clipping). Plain arithmetic (``@``,
``+``, ``*``, comparisons) is written once in ``hookkit.sae`` with the tensors' operators."""

from __future__ import annotations

from typing import Any


class SaeOps:
    """The interface; each framework's ``sae`` module subclasses it as ``OPS``."""

    # -- inference ---------------------------------------------------------------------------------
    def tensor(self, array: Any, device: str | None, dtype: str) -> Any:
        """A new tensor holding numpy ``array``'s values, with dtype ``dtype`` (a plain name,
        "bfloat16" included: ``array`` then holds float32 values), on ``device`` (None: the default)."""
        raise NotImplementedError

    def relu(self, t: Any) -> Any:
        """max(t, 0), elementwise."""
        raise NotImplementedError

    def exp(self, t: Any) -> Any:
        """e**t, elementwise."""
        raise NotImplementedError

    def greater(self, t: Any, threshold: Any) -> Any:
        """``(t > threshold)`` as ``t``'s dtype (1.0 / 0.0)."""
        raise NotImplementedError

    def row_norm(self, t: Any, keepdim: bool = False) -> Any:
        """The L2 norm along the last axis."""
        raise NotImplementedError

    def mean_std(self, t: Any) -> tuple[Any, Any]:
        """The mean and the unbiased standard deviation along the last axis, kept as size-1 axes."""
        raise NotImplementedError

    def topk_dense(self, t: Any, k: int) -> Any:
        """``t`` with all but the ``k`` largest entries along the last axis set to 0, and ReLU on those kept."""
        raise NotImplementedError

    def batch_topk_dense(self, t: Any, k: float) -> Any:
        """ReLU of ``t`` keeping the ``round(k * rows)`` largest entries of the whole ``[rows, d]`` batch, zeros elsewhere."""
        raise NotImplementedError

    def topk(self, t: Any, k: int) -> tuple[Any, Any]:
        """The ``k`` largest values along the last axis and their indices (int64), largest first."""
        raise NotImplementedError

    def no_grad(self) -> Any:
        """A context manager in which no autograd graph is recorded."""
        raise NotImplementedError

    # -- training ----------------------------------------------------------------------------------
    def parameter(self, t: Any) -> Any:
        """A leaf tensor holding ``t``'s values that requires a gradient."""
        raise NotImplementedError

    def adam(self, params: list[Any], lr: float, betas: tuple[float, float]) -> Any:
        """An Adam optimizer over ``params``."""
        raise NotImplementedError

    def set_lr(self, opt: Any, lr: float) -> None:
        """Set the optimizer's learning rate."""
        raise NotImplementedError

    def step(self, opt: Any, loss: Any, params: list[Any], max_grad_norm: float | None, world: int = 1) -> None:
        """Back-propagate ``loss``, average the gradients over the ``world`` ranks of the default
        process group (data parallel; 1: alone), clip their global norm to ``max_grad_norm`` (None: no
        clipping), take one optimizer step and clear the gradients."""
        raise NotImplementedError

    def assign(self, param: Any, value: Any) -> None:
        """Overwrite ``param``'s values in place with ``value`` (no gradient recorded)."""
        raise NotImplementedError

    def optimizer_state(self, opt: Any, params: list[Any]) -> dict[str, Any]:
        """The optimizer's state as numpy arrays (``m<i>``, ``v<i>`` per parameter) and a ``step`` count."""
        raise NotImplementedError

    def load_optimizer_state(self, opt: Any, params: list[Any], state: dict[str, Any]) -> None:
        """Restore what ``optimizer_state`` returned."""
        raise NotImplementedError

    def masked_topk_dense(self, t: Any, mask: Any, k: int) -> Any:
        """The ``k`` largest entries of ``t`` along the last axis among the columns where ``mask``
        (bool ``[d]``) is true, zeros elsewhere (no ReLU: the top-k auxiliary loss's activations)."""
        raise NotImplementedError

    def all_reduce(self, array: Any, op: str) -> Any:
        """A numpy array reduced over the ranks of the default process group (``op``: "sum" or "min")."""
        raise NotImplementedError

    def sum_last(self, t: Any) -> Any:
        """The sum along the last axis."""
        raise NotImplementedError

    def sum_first(self, t: Any) -> Any:
        """The sum along the first axis."""
        raise NotImplementedError

    def identity_layer(self) -> Any:
        """A new parameter-free layer returning its input (the features' pseudo-layer of a splice,
        called so that the router's hooks on it run)."""
        raise NotImplementedError

    def jumprelu(self, t: Any, threshold: Any, bandwidth: float) -> Any:
        """``t * (t > threshold)`` whose gradient reaches ``threshold`` through a straight-through
        estimator (a rectangle kernel of width ``bandwidth``, as SAELens's ``JumpReLU``); ``t`` gets
        the gradient of the kept entries."""
        raise NotImplementedError

    def step_l0(self, t: Any, threshold: Any, bandwidth: float) -> Any:
        """``(t > threshold)`` as ``t``'s dtype, whose gradient reaches ``threshold`` only, through
        the same estimator (SAELens's ``Step``: the L0 penalty of a JumpReLU SAE)."""
        raise NotImplementedError
