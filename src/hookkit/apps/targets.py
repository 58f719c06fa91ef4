"""``package.module:callable`` on the command line -> a model, with ``--kw key=value`` checked.

Used by ``hookkit summary`` (and any subcommand that loads a model the same way).

>>> load_model("transformers:GPT2LMHeadModel", parse_kw(["n_layer=2"]))   # doctest: +SKIP
"""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Callable, Sequence
from typing import Any

from hookkit.backends import backend_for
from hookkit.core.errors import UnsupportedModel
from hookkit.core.suggest import close_matches


class TargetError(Exception):
    """A command-line argument that names no usable model; the message says what is valid."""


def parse_value(text: str) -> Any:
    """``"2"`` -> 2, ``"0.1"`` -> 0.1, ``"true"`` -> True, ``"none"`` -> None, else the text."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_kw(items: Sequence[str]) -> dict[str, Any]:
    """``["n_layer=2", "act=gelu"]`` -> ``{"n_layer": 2, "act": "gelu"}``; a key given twice is an error."""
    kw: dict[str, Any] = {}
    for item in items:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key.isidentifier():
            raise TargetError(f"--kw expects key=value with a Python name as key, like n_layer=2; got {item!r}")
        if key in kw:
            raise TargetError(f"--kw {key} is given twice")
        kw[key] = parse_value(value.strip())
    return kw


def _check_keys(kw: dict[str, Any], valid: Sequence[str], owner: str) -> None:
    unknown = [k for k in kw if k not in valid]
    if not unknown:
        return
    key = unknown[0]
    close = close_matches(key, valid, n=3)
    hint = f"; did you mean {' or '.join(close)}?" if close else f"; valid: {', '.join(sorted(valid))}"
    raise TargetError(f"--kw {key}={kw[key]!r}: {owner} takes no {key!r}{hint}")


def _config_keys(config_class: type) -> list[str]:
    """Settings a transformers config accepts: its defaults, its aliases (hidden_size -> n_embd)."""
    config = config_class()
    keys = [k for k in vars(config) if not k.startswith("_")]
    keys += list(getattr(config_class, "attribute_map", {}) or {})
    init = config_class.__init__  # type: ignore[misc]  # the class's own __init__, read for its parameters
    keys += [p for p in inspect.signature(init).parameters if p not in ("self", "kwargs")]
    return sorted(set(keys))


def _signature_keys(fn: Any) -> list[str] | None:
    """Keyword names ``fn`` takes, or None when it takes ``**kwargs`` (then anything goes)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]


def is_model(obj: Any) -> bool:
    try:
        return backend_for(obj).is_layer(obj)
    except UnsupportedModel:
        return False


def seed_frameworks(seed: int) -> None:
    """Seed numpy and every framework the process has imported, so a model built next gets the
    same random weights on every run."""
    import numpy as np

    from hookkit.backends import loaded_backends

    np.random.seed(seed)
    for backend in loaded_backends():
        try:
            backend.family("demo_kit").seed(seed)
        except NotImplementedError:
            pass


def load_model(
    target: str,
    kw: dict[str, Any],
    *,
    seed: int | None = None,
    weights: str | None = None,
    meta: bool = False,
    config: dict[str, Any] | None = None,
) -> Any:
    """Import ``package.module:callable`` and call it with ``kw`` (a transformers model class is
    built from its config class); unknown keywords are refused with the closest valid ones.

    ``seed``: seed the frameworks after the import, before the model is built (random weights that
    are the same on every run). ``weights``: a ``from_pretrained`` folder (a transformers class;
    read locally, nothing downloaded) or a weights file loaded strictly into the built model
    (``.safetensors``; PyTorch ``.pt``/``.pth``/``.bin``/``.ckpt`` read with ``weights_only``; Paddle
    ``.pdparams``, a pickle: only files you trust). ``meta``: build the model without allocating its
    weights (PyTorch's meta device), for ``hookkit summary --meta``. ``config``: settings of a
    transformers model class's config (a ``config.json``'s), under ``kw``."""
    obj = _resolve(target)
    folder = weights is not None and os.path.isdir(weights)
    if weights is not None and not folder and not os.path.isfile(weights):
        raise TargetError(f"--weights {weights!r}: no such file or folder")
    build = _builder(obj, target, kw, weights if folder else None, config)
    if seed is not None:
        seed_frameworks(seed)
    try:
        if meta:
            with _empty_init(target, weights):
                model = build()
        else:
            model = build()
    except TargetError:
        raise
    except Exception as e:  # noqa: BLE001
        raise TargetError(f"calling {target} failed: {type(e).__name__}: {e}"[:500]) from None
    if not is_model(model):
        raise TargetError(f"{target} returned {type(model).__name__}, not a model (torch.nn.Module or paddle.nn.Layer)")
    if meta:
        try:
            backend_for(model).family("meta").empty_init()
        except NotImplementedError:
            raise TargetError(f"--meta: {target} built a {backend_for(model).name} model, and only PyTorch has a meta device") from None
    if weights is not None and not folder:
        _load_file(model, weights)
    return model


def _resolve(target: str) -> Any:
    """The object ``package.module:callable`` names (the module imported)."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise TargetError(f"TARGET must look like package.module:callable; got {target!r}")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001 - any import failure is the user's target
        raise TargetError(f"cannot import module {module_name!r}: {type(e).__name__}: {e}") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(obj) if not n.startswith("_")]
            close = close_matches(part, names)
            hint = f"; closest: {', '.join(close)}" if close else ""
            raise TargetError(f"{module_name!r} has no attribute {attr!r} ({part!r} is missing{hint})")
        obj = getattr(obj, part)
    return obj


def _builder(obj: Any, target: str, kw: dict[str, Any], folder: str | None, config: dict[str, Any] | None = None) -> Callable[[], Any]:
    """What builds the model from ``obj`` and ``kw`` (checked first); ``folder``: a from_pretrained folder;
    ``config``: a transformers config's settings (``--config``), under ``kw``."""
    config_class = getattr(obj, "config_class", None) if isinstance(obj, type) else None
    if folder is not None:  # a transformers model class from a local from_pretrained folder; --kw overrides its config
        if config_class is None:
            raise TargetError(
                f"--weights {folder!r} is a folder: a from_pretrained folder needs a transformers model class as TARGET; "
                "for other models give a weights file (.safetensors, .pt, .pdparams)"
            )
        _check_keys(kw, _config_keys(config_class), config_class.__name__)
        return lambda: obj.from_pretrained(folder, local_files_only=True, **kw)
    if config_class is not None:  # a transformers model class: build it from a config
        _check_keys(kw, _config_keys(config_class), config_class.__name__)
        settings = {**(config or {}), **kw}
        return lambda: obj(config_class(**settings))
    if config is not None:
        raise TargetError(f"--config: {target} is not a transformers model class (one with a config_class): give its settings with --kw")
    if callable(obj) and not is_model(obj):
        valid = _signature_keys(obj)
        if valid is not None:
            _check_keys(kw, valid, target)
        return lambda: obj(**kw)
    if kw:
        raise TargetError(f"{target} is a model object, not a callable: --kw has nothing to configure")
    return lambda: obj


def _empty_init(target: str, weights: str | None) -> Any:
    """The first loaded framework's context for building without weights (PyTorch's meta device)."""
    from hookkit.backends import loaded_backends

    if weights is not None:
        raise TargetError("--meta builds the model without weights: it takes no --weights")
    for backend in loaded_backends():
        try:
            return backend.family("meta").empty_init()
        except NotImplementedError:
            continue
    raise TargetError(f"--meta: {target} is not a PyTorch model, and only PyTorch has a meta device (Paddle has none)")


def _load_file(model: Any, path: str) -> None:
    ops = backend_for(model).family("checkpoints")
    ext = os.path.splitext(path)[1].lower()
    if ext not in ops.suffixes:
        raise TargetError(f"--weights {path!r}: this model's framework reads {', '.join(ops.suffixes)} files; got {ext or 'no suffix'}")
    try:
        ops.load(model, path)
    except ValueError as e:
        raise TargetError(f"--weights {e}"[:600]) from None
    except Exception as e:  # noqa: BLE001 - a file the framework cannot read
        raise TargetError(f"--weights {path!r}: cannot read it ({type(e).__name__}: {e})"[:600]) from None
