"""A map from objects to values, keyed by identity and held weakly.

``weakref.WeakKeyDictionary`` makes a weak reference at every lookup and hashes through the key's
own ``__hash__``; the router looks layers and roots up at every set-up and removal, so this map keys
by ``id`` and keeps one weak reference per entry, whose callback drops the entry when the object
goes (CPython runs it as the object dies, before its ``id`` can be reused).
"""

from __future__ import annotations

import weakref
from typing import Any, Generic, TypeVar

V = TypeVar("V")


class IdentityWeakMap(Generic[V]):
    """``obj -> value`` while ``obj`` lives (objects that take weak references: layers, models).

    >>> kept = IdentityWeakMap(); kept[model] = "state"; kept.get(model)   # doctest: +SKIP
    'state'
    """

    __slots__ = ("_values", "_refs")

    def __init__(self) -> None:
        self._values: dict[int, V] = {}
        self._refs: dict[int, weakref.ref] = {}

    def get(self, obj: Any, default: Any = None) -> Any:
        return self._values.get(id(obj), default)

    @property
    def by_id(self) -> dict[int, V]:
        """The values keyed by ``id(obj)``, read only: ``by_id.get(id(obj))`` in a loop saves a call per lookup."""
        return self._values

    def __setitem__(self, obj: Any, value: V) -> None:
        key = id(obj)
        if key not in self._refs:
            values, refs = self._values, self._refs

            def gone(_: Any) -> None:
                values.pop(key, None)
                refs.pop(key, None)

            refs[key] = weakref.ref(obj, gone)
        self._values[key] = value

    def pop(self, obj: Any, default: Any = None) -> Any:
        key = id(obj)
        self._refs.pop(key, None)
        return self._values.pop(key, default)

    def setdefault(self, obj: Any, default: V) -> V:
        found = self._values.get(id(obj))
        if found is None:
            self[obj] = found = default
        return found

    def clear(self) -> None:
        self._values.clear()
        self._refs.clear()

    def __len__(self) -> int:
        return len(self._values)
