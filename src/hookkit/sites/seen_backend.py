"""A backend seen through a site kind whose targets are not layers (operation sites, standard names).

The router places a target's native hooks through ``backend.hook_forward_pre`` / ``hook_forward``.
A site kind whose target stands for something inside a layer subclasses ``SeenBackend`` and says
where those hooks really go; every other method is the real backend's (looked up once, then kept).
One instance per real backend and subclass (``of``).
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

S = TypeVar("S", bound="SeenBackend")


class SeenBackend:
    """The real backend, but with ``hook_forward_pre`` / ``hook_forward`` of the subclass."""

    _made: ClassVar[dict[int, Any]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._made = {}  # one per subclass

    def __init__(self, real: Any):
        self._real = real

    @classmethod
    def of(cls: type[S], real: Any) -> S:
        """The one view of ``real`` through this subclass."""
        made = cls._made.get(id(real))
        if made is None or made._real is not real:
            made = cls._made[id(real)] = cls(real)
        return made

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._real, name)
        setattr(self, name, value)
        return value
