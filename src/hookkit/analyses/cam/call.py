"""One call of ``cam``: its keyword arguments as one typed, frozen object (``CamOptions``, built at the
public entry and checked there once) and its inputs made ready for the model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypedDict

from hookkit.analyses.cam.layouts import NAMES
from hookkit.analyses.cam.methods import METHODS
from hookkit.analyses.targets import Target
from hookkit.core.entry import entry_name
from hookkit.core.keywords import Default, KeywordOptions, keyword_options
from hookkit.core.types import Layer
from hookkit.core.validate import ArgumentTypeError, check_bool, check_choice, check_int, check_tensor_like, fail


class CamKeywords(TypedDict, total=False):
    """``cam``'s keywords besides ``as_tensor`` and ``out`` (which choose what it returns, so its
    signature names them), declared once: name, type and default (their meaning: ``hookkit.cam``'s docstring)."""

    reshape: Annotated[Callable[[Any], Any] | str | None, Default(None)]
    prefix_tokens: Annotated[int | None, Default(None)]
    aug_smooth: Annotated[bool, Default(False)]
    eigen_smooth: Annotated[bool, Default(False)]
    batch_size: Annotated[int | None, Default(None)]
    eval: Annotated[bool, Default(True)]
    shard_size: Annotated[int | str, Default(16 * 2**20)]
    progress: Annotated[bool | None, Default(None)]


@keyword_options(CamKeywords)
class CamOptions(KeywordOptions):
    """The keywords of one call of ``cam``: ``CamKeywords``' fields and ``as_tensor`` / ``out``, as a frozen dataclass."""

    as_tensor: bool = False
    out: Any = None

    def check(self, method: Any) -> None:
        """Errors name the public function the user called and the argument."""
        fn = entry_name()
        check_choice(method, METHODS, arg="method")
        if self.reshape is not None and not callable(self.reshape) and self.reshape not in NAMES:
            fail(fn, "reshape", f"None, a callable f(output) -> [N, C, *spatial], or one of {', '.join(map(repr, NAMES))}", self.reshape)
        for arg in ("aug_smooth", "eigen_smooth", "eval", "as_tensor"):
            check_bool(getattr(self, arg), arg=arg)
        check_int(self.batch_size, arg="batch_size", low=1, optional=True)
        check_int(self.prefix_tokens, arg="prefix_tokens", low=0, optional=True)
        if self.out is not None and self.as_tensor:
            fail(fn, "as_tensor", "False with out= (the maps go to files)", self.as_tensor)


def prepare_inputs(be: Any, model: Layer, inputs: Any) -> Any:
    """Floating-point ``[N, C, *spatial]`` (1 to 3 spatial axes) on the model's device."""
    fn = entry_name()
    x = check_tensor_like(inputs, be, arg="inputs")
    shape = be.shape(x)
    if len(shape) not in (3, 4, 5):
        fail(fn, "inputs", "inputs [N, C, *spatial] with 1, 2 or 3 spatial axes (signals, images, volumes)", x)
    if be.dtype_kind(x) != "float":
        fail(fn, "inputs", "floating-point inputs (integer pixels cast to float32 and / 255)", x, kind=ArgumentTypeError)
    device = be.input_device(model)  # a dispatched model's first parameters may be offloaded (meta)
    if device is not None and be.device_of(x) != device:
        x = be.to(x, device)
    return x


def tensor_target(be: Any, target: Target) -> Target:
    """A tensor of class indices (a batch's labels as a loader gives them) as a list, a 0-d one as an int:
    one host read, before the model runs."""
    return be.to_numpy(target).tolist() if be.is_tensor(target) else target
