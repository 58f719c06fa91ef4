"""\"Did you mean\" for a misspelt keyword argument of a public function or class.

``hookkit.capture(model, "fc", grad=True)`` raises Python's own ``TypeError: ... got an unexpected
keyword argument 'grad'``; wrapped by ``suggest_keywords``, the same exception gets a note naming the
close matches among the parameters (``did you mean grads=?``). Nothing is paid while the call binds:
the wrapper is one ``try``; a ``TypeError`` naming an unexpected keyword is looked at only when the
call's arguments do not bind to the signature (not one raised inside).

>>> @suggest_keywords
... def f(model, *, grads=False):
...     return grads
>>> try:
...     f(None, grad=True)
... except TypeError as e:
...     print(e.__notes__[0])
hookkit: did you mean grads=? f() takes: model, grads
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
import sys
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from hookkit.core.entry import entry_name
from hookkit.core.errors import add_note
from hookkit.core.suggest import close_matches

F = TypeVar("F", bound=Callable[..., Any])
Opts = TypeVar("Opts", bound="KeywordOptions")
_UNEXPECTED = re.compile(r"unexpected keyword argument '(\w+)'")


def _accepted(func: Callable[..., Any], sig: inspect.Signature) -> list[str] | None:
    """The keyword names ``func`` takes: its parameters, and the keys of ``**options:
    Unpack[SomeTypedDict]``; None when it takes ``**kwargs`` of any name."""
    params = sig.parameters.values()
    names = [p.name for p in params if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    var_kw = next((p for p in params if p.kind is p.VAR_KEYWORD), None)
    if var_kw is None:
        return names
    inner = inspect.unwrap(func)
    hint = getattr(inner, "__annotations__", {}).get(var_kw.name)
    if isinstance(hint, str):  # postponed annotations: resolve this one alone (others may name type-checking imports)
        try:
            hint = eval(hint, {**vars(typing), **getattr(inner, "__globals__", {})})  # noqa: S307 (hookkit's own annotation text)
        except Exception:  # an annotation that does not resolve: say nothing rather than guess
            return None
    typed = typing.get_args(hint)
    keys = getattr(typed[0], "__annotations__", None) if typed else None
    return None if keys is None else names + list(keys)


def _note(func: Callable[..., Any], shown: str, exc: TypeError, args: tuple, kwargs: dict) -> None:
    m = _UNEXPECTED.search(str(exc))
    if m is None or m.group(1) not in kwargs:
        return
    try:
        sig = inspect.signature(func)  # through decorators (``__wrapped__``): the real parameters
    except ValueError:
        return
    names = _accepted(func, sig)
    if names is None or m.group(1) in names:
        return  # a keyword the function takes: the TypeError came from inside
    close = close_matches(m.group(1), names, n=3, cutoff=0.6)
    guess = f"did you mean {' or '.join(c + '=' for c in close)}? " if close else ""
    add_note(exc, f"hookkit: {guess}{shown}() takes: {', '.join(names)}")


def suggest_keywords(func: F) -> F:
    """Wrap a function (or a class's ``__init__``) so that an unknown keyword argument gets a note
    with the closest parameter names; the exception and its type are kept."""
    shown = func.__qualname__.split(".")[0] if func.__name__ == "__init__" else func.__name__

    @functools.wraps(func)
    def inner(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except TypeError as exc:
            if not any(str(n).startswith("hookkit: did you mean") or "() takes:" in str(n) for n in getattr(exc, "__notes__", ())):
                _note(func, shown, exc, args, kwargs)
            raise

    return inner  # type: ignore[return-value]


def suggest_keywords_of(objects: dict[str, Any]) -> dict[str, Any]:
    """``suggest_keywords`` on every public function and class of ``objects`` (a module's names):
    classes get their own ``__init__`` wrapped in place (the class stays the same object); functions
    are returned wrapped, to be put back under their names (and put back in their own module, where
    pickle looks them up). Exceptions and warnings are left alone."""
    out = {}
    for name, obj in objects.items():
        if name.startswith("_") or not getattr(obj, "__module__", "").startswith("hookkit"):
            continue
        if inspect.isclass(obj):
            init = obj.__dict__.get("__init__")
            if issubclass(obj, BaseException) or init is None or getattr(init, "_suggests", False):
                continue
            wrapped_init = suggest_keywords(init)
            wrapped_init._suggests = True
            obj.__init__ = wrapped_init  # type: ignore[method-assign]  # wrapped in place: the class stays the same object
        elif inspect.isfunction(obj) and not getattr(obj, "_suggests", False):
            wrapped = suggest_keywords(obj)
            wrapped._suggests = True  # type: ignore[attr-defined]
            out[name] = wrapped
            home, own = sys.modules.get(getattr(obj, "__module__", "")), getattr(obj, "__name__", name)
            if home is not None and getattr(home, own, None) is obj:
                setattr(home, own, wrapped)  # pickle finds functions by module and name
    return out


# -- keywords declared once -----------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Default:
    """The default of a keyword declared in a ``TypedDict``: ``n_steps: Annotated[int, Default(50)]``."""

    value: Any


class KeywordOptions:
    """The keyword arguments of one call of a public function, as one frozen object with attributes.

    The keywords are declared once, in a ``TypedDict`` whose fields carry their defaults
    (``Annotated[int, Default(50)]``): the public function takes ``**options: Unpack[ThatDict]`` (type
    checkers check the call; ``suggest_keywords`` suggests among the keys), and
    ``@keyword_options(ThatDict)`` makes a subclass of this a frozen dataclass of the same fields.

    >>> from typing import Annotated, TypedDict
    >>> class K(TypedDict, total=False):
    ...     n_steps: Annotated[int, Default(50)]
    >>> @keyword_options(K)
    ... class MyOptions(KeywordOptions): ...
    >>> MyOptions.of(n_steps=8).n_steps, MyOptions.of().n_steps
    (8, 50)
    """

    if TYPE_CHECKING:  # the fields come from the TypedDict at class creation (a dataclass: replace() works)
        __dataclass_fields__: typing.ClassVar[dict[str, dataclasses.Field[Any]]]

        def __getattr__(self, name: str) -> Any: ...

    @classmethod
    def of(cls: type[Opts], **options: Any) -> Opts:
        """The options of one call; an unknown keyword is refused as Python refuses it for the entry's
        function (``attribute() got an unexpected keyword argument 'x'``)."""
        fields = cls.__dataclass_fields__
        for k in options:
            if k not in fields:
                raise TypeError(f"{entry_name()}() got an unexpected keyword argument {k!r}")
        return cls(**options)


def keyword_options(keywords: type) -> Callable[[type[Opts]], type[Opts]]:
    """Class decorator: the class (a ``KeywordOptions``) becomes a frozen dataclass with one field per
    key of the ``TypedDict`` ``keywords``, typed as declared there, defaulting to its ``Default``; then
    the fields the class declares itself (keywords the function names in its signature)."""

    def make(cls: type[Opts]) -> type[Opts]:
        hints = typing.get_type_hints(keywords, include_extras=True)
        own = dict(cls.__dict__.get("__annotations__", {}))
        annotations: dict[str, Any] = {}
        for name, hint in hints.items():
            defaults = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Default)]
            if len(defaults) != 1:
                raise TypeError(f"{keywords.__name__}.{name}: declare its default once, as Annotated[type, Default(value)]")
            annotations[name] = typing.get_args(hint)[0]
            setattr(cls, name, defaults[0].value)
        cls.__annotations__ = {**annotations, **own}
        return dataclasses.dataclass(frozen=True)(cls)

    return make
