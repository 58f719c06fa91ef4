"""What hookkit knows about transformer families, as data: where an attention module's heads split,
how its attention scores can be read, the token axis of its activations, and where a language
model keeps its blocks, final norm and unembedding.

Nothing here imports a framework or asks which one a model belongs to: a family is matched by the
names of a layer's classes (and the module they come from) and by the attributes it has. Every
attribute is a dotted path read on the layer (``"self.num_attention_heads"``, ``"config.num_heads"``);
a field lists several paths when library versions differ, and the first one present wins.

Adding a family (before the first call that needs it):

>>> from hookkit.core.architectures import AttentionFamily, register_attention
>>> register_attention(AttentionFamily(                       # doctest: +SKIP
...     name="my-attn", classes=("MyAttention",), proj=("out",), n_heads=("n_heads",), d_head=("head_dim",)))

or, for one call, describe the layout directly: ``hookkit.ablate(model, "blocks.0.attn", heads=[1],
head_layout=("out", 8, 64))`` (projection submodule, number of heads, head size).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, overload

from hookkit.core.entry import entry_name
from hookkit.core.errors import UnsupportedModel
from hookkit.core.registry import backend_for
from hookkit.core.validate import ArgumentTypeError, fail


@dataclasses.dataclass(frozen=True)
class Projections:
    """Attention scores read from the layer's own query and key projections (submodules ``q`` and
    ``k``, outputs ``[B, T, H * d_head]``), the mask from the layer's call (positional index
    ``mask_arg`` or keyword ``mask_kw``) and ``scaling`` (None: ``d_head ** -0.5``)."""

    q: str
    k: str
    mask_kw: str = "attn_mask"
    mask_arg: int = 3
    scaling: float | None = None


#: the library hands q, k, the mask and the scaling to a replaceable attention function
#: (transformers' ``AttentionInterface``): scores are computed there, beside the library's own kernel
INTERFACE = "interface"


@dataclasses.dataclass(frozen=True)
class AttentionFamily:
    """One family of attention modules.

    ``classes``: class names matched against the layer's class and its bases; ``modules``: prefixes
    of the module those classes come from (empty: any); ``proj``: the output projection submodule,
    whose input ``z`` is ``[B, T, n_heads * d_head]``; ``n_heads`` / ``d_head``: attribute paths;
    ``scores``: how attention probabilities are read (``INTERFACE`` or a ``Projections``);
    ``token_axis``: the axis of tokens in the layer's activations."""

    name: str
    classes: tuple[str, ...]
    proj: tuple[str, ...]
    n_heads: tuple[str, ...]
    d_head: tuple[str, ...]
    modules: tuple[str, ...] = ()
    scores: Any = INTERFACE
    token_axis: int = 1


@dataclasses.dataclass(frozen=True)
class HeadLayout:
    """Where one attention layer's heads split: its output projection's input is
    ``[..., n_heads * d_head]``, head ``h`` owning the slice ``h * d_head:(h + 1) * d_head``."""

    proj: str
    n_heads: int
    d_head: int
    family: str = "custom"
    scores: Any = None
    token_axis: int = 1


@dataclasses.dataclass(frozen=True)
class StackFamily:
    """Where a model keeps its blocks (a list of layers whose outputs are the residual stream), its
    final norm and its unembedding (any may be None: not there). Matched by the attributes present."""

    name: str
    blocks: str
    final_norm: str | None = None
    unembed: str | None = None
    token_axis: int = 1


_HF = ("transformers.",)
ATTENTION_FAMILIES: list[AttentionFamily] = [
    AttentionFamily("gpt2", ("GPT2Attention",), ("c_proj",), ("num_heads",), ("head_dim",), _HF),
    AttentionFamily(
        "gpt-neox", ("GPTNeoXAttention",), ("dense",), ("config.num_attention_heads", "num_attention_heads"), ("head_size",), _HF
    ),
    AttentionFamily(
        "llama",  # and the families that share its attention: grouped-query, rotary
        (
            "LlamaAttention",
            "MistralAttention",
            "MixtralAttention",
            "Qwen2Attention",
            "Qwen3Attention",
            "GemmaAttention",
            "Gemma2Attention",
            "Gemma3Attention",
            "Phi3Attention",
            "OlmoAttention",
            "Olmo2Attention",
        ),
        ("o_proj",),
        ("config.num_attention_heads", "num_heads"),
        ("head_dim",),
        _HF,
    ),
    AttentionFamily("opt", ("OPTAttention",), ("out_proj",), ("num_heads",), ("head_dim",), _HF),
    AttentionFamily("gpt-j", ("GPTJAttention",), ("out_proj",), ("num_attention_heads",), ("head_dim",), _HF),
    AttentionFamily("phi", ("PhiAttention",), ("dense",), ("config.num_attention_heads",), ("head_dim",), _HF),
    AttentionFamily(
        "bert",
        ("BertAttention", "RobertaAttention", "XLMRobertaAttention", "ElectraAttention", "CamembertAttention"),
        ("output.dense",),
        ("self.num_attention_heads",),
        ("self.attention_head_size",),
        _HF,
    ),
    AttentionFamily("t5", ("T5Attention", "MT5Attention", "UMT5Attention"), ("o",), ("n_heads",), ("key_value_proj_dim",), _HF),
    AttentionFamily(
        "vit",
        ("ViTAttention", "DeiTAttention", "ViTMAEAttention", "ViTMSNAttention"),
        ("o_proj", "output.dense"),
        ("num_attention_heads", "attention.num_attention_heads"),
        ("head_dim", "attention_head_size", "attention.attention_head_size"),
        _HF,
    ),
    AttentionFamily(
        "paddle-mha",
        ("MultiHeadAttention",),
        ("out_proj",),
        ("num_heads",),
        ("head_dim",),
        ("paddle.",),
        scores=Projections(q="q_proj", k="k_proj"),
    ),
]

STACK_FAMILIES: list[StackFamily] = [
    StackFamily("gpt2", "transformer.h", "transformer.ln_f", "lm_head"),
    StackFamily("gpt2-base", "h", "ln_f"),
    StackFamily("gpt-neox", "gpt_neox.layers", "gpt_neox.final_layer_norm", "lm_head"),
    StackFamily("gpt-neox-old", "gpt_neox.layers", "gpt_neox.final_layer_norm", "embed_out"),
    StackFamily("llama", "model.layers", "model.norm", "lm_head"),  # Mistral, Qwen2, Gemma, ...
    StackFamily("llama-base", "layers", "norm"),
    StackFamily("phi", "model.layers", "model.final_layernorm", "lm_head"),
    StackFamily("opt", "model.decoder.layers", "model.decoder.final_layer_norm", "lm_head"),
    StackFamily("bert", "encoder.layer"),
    StackFamily("bert-head", "bert.encoder.layer"),
    StackFamily("paddle-encoder", "layers", "norm"),
]


def register_attention(family: AttentionFamily) -> None:
    """Teach hookkit one more family of attention modules (tried before the built-in ones)."""
    if not isinstance(family, AttentionFamily):
        fail("register_attention", "family", "an AttentionFamily", family, kind=ArgumentTypeError)
    ATTENTION_FAMILIES.insert(0, family)


def register_stack(family: StackFamily) -> None:
    """Teach hookkit one more model layout (blocks, final norm, unembedding), tried first."""
    if not isinstance(family, StackFamily):
        fail("register_stack", "family", "a StackFamily", family, kind=ArgumentTypeError)
    STACK_FAMILIES.insert(0, family)


def known_attention() -> str:
    """The known families, for messages: ``gpt2 (GPT2Attention), ...``."""
    return "; ".join(f"{f.name} ({', '.join(f.classes[:3])}{', ...' if len(f.classes) > 3 else ''})" for f in ATTENTION_FAMILIES)


# -- reading attributes -----------------------------------------------------------------------------
_MISSING = object()


def read_path(obj: Any, path: str) -> Any:
    """``obj.a.b`` for ``"a.b"`` (``""``: ``obj``); a missing step gives ``_MISSING``."""
    for part in path.split(".") if path else ():
        obj = getattr(obj, part, _MISSING)
        if obj is _MISSING:
            return _MISSING
    return obj


def first_present(obj: Any, paths: Iterable[str]) -> tuple[str, Any]:
    for p in paths:
        value = read_path(obj, p)
        if value is not _MISSING and value is not None:
            return p, value
    return "", _MISSING


def _class_names(layer: Any) -> list[tuple[str, str]]:
    return [(c.__name__, c.__module__) for c in type(layer).__mro__]


def attention_family(layer: Any) -> AttentionFamily | None:
    """The registered family ``layer`` belongs to, or None."""
    names = _class_names(layer)
    for fam in ATTENTION_FAMILIES:
        for cls, mod in names:
            if cls in fam.classes and (not fam.modules or mod.startswith(fam.modules)):
                return fam
    return None


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def check_layout(value: Any) -> HeadLayout:
    """``head_layout=``: a HeadLayout or a (projection submodule, n_heads, d_head) tuple."""
    if isinstance(value, HeadLayout):
        return value
    valid = "a (projection submodule name, number of heads, head size) tuple, e.g. ('out_proj', 8, 64)"
    if not isinstance(value, (tuple, list)) or len(value) != 3:
        fail(None, "head_layout", valid, value, kind=ArgumentTypeError)
    proj, n, d = value
    if not isinstance(proj, str) or not _positive_int(n) or not _positive_int(d):
        fail(None, "head_layout", valid, value, kind=ArgumentTypeError)
    return HeadLayout(proj, int(n), int(d))


def head_layout(layer: Any, name: str, override: Any = None) -> HeadLayout:
    """Where ``layer``'s heads split: ``override`` (``head_layout=``) or its registered family; an
    unknown module is refused naming it and the known families (named by the public entry's function)."""
    fn = entry_name()
    if override is not None:
        layout = check_layout(override)
        fam = attention_family(layer)
        return dataclasses.replace(layout, scores=fam.scores if fam else None, token_axis=fam.token_axis if fam else 1)
    fam = attention_family(layer)
    if fam is None:
        raise UnsupportedModel(
            f"{fn}(): layer {name!r} ({type(layer).__name__}) is not an attention module hookkit can split into heads; "
            f"known families: {known_attention()}. Select the attention module itself, or pass "
            "head_layout=(projection submodule, number of heads, head size)"
        )
    proj, _ = first_present(layer, fam.proj)
    _, n = first_present(layer, fam.n_heads)
    _, d = first_present(layer, fam.d_head)
    if not proj or not _positive_int(n) or not _positive_int(d):
        raise UnsupportedModel(
            f"{fn}(): layer {name!r} ({type(layer).__name__}, family {fam.name}) lacks the attributes its family names "
            f"(projection {' or '.join(fam.proj)}: {'found' if proj else 'missing'}; heads {' or '.join(fam.n_heads)}: {n if n is not _MISSING else 'missing'}; "
            f"head size {' or '.join(fam.d_head)}: {d if d is not _MISSING else 'missing'}); pass head_layout="
        )
    return HeadLayout(proj, int(n), int(d), fam.name, fam.scores, fam.token_axis)


def submodule(layer: Any, path: str, name: str) -> Any:
    """The submodule at ``path`` of ``layer`` (named ``name``), or a clear error."""
    fn = entry_name()
    sub = read_path(layer, path)
    if sub is _MISSING:
        raise UnsupportedModel(f"{fn}(): layer {name!r} ({type(layer).__name__}) has no submodule {path!r}")
    return sub


# -- model level --------------------------------------------------------------------------------------
def stack_family(model: Any) -> StackFamily | None:
    """The first registered layout whose blocks (and final norm, when it names one) ``model`` has."""
    for fam in STACK_FAMILIES:
        blocks = read_path(model, fam.blocks)
        if blocks is _MISSING or not hasattr(blocks, "__len__") or isinstance(blocks, (str, bytes)):
            continue
        if fam.final_norm and read_path(model, fam.final_norm) is _MISSING:
            continue
        if fam.unembed and read_path(model, fam.unembed) is _MISSING:
            continue
        return fam
    return None


@overload
def token_dim(model: Any, default: int = 1) -> int: ...
@overload
def token_dim(model: Any, default: None) -> int | None: ...
def token_dim(model: Any, default: int | None = 1) -> int | None:
    """The axis of tokens in ``model``'s activations (``[B, T, D]``: 1), from its first attention
    module of a known family or its known layout; ``default`` when neither is known.

    >>> token_dim(gpt2)   # doctest: +SKIP
    1
    """
    fam = stack_family(model)
    if fam is not None:
        return fam.token_axis

    for _, layer in backend_for(model).named_layers(model):
        af = attention_family(layer)
        if af is not None:
            return af.token_axis
    return default


def known_stacks() -> str:
    return "; ".join(f"{f.name} ({f.blocks})" for f in STACK_FAMILIES)
