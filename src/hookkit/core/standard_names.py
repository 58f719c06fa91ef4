"""TransformerLens's hook names (``blocks.3.hook_resid_mid``) for the model families hookkit knows,
as data: each standard name is a ``Point``, a tensor at a module boundary of the family's own
modules (an output or an input, by index) and how the value TransformerLens shows is read from it
(the whole tensor, a slice split into heads, a norm's scale or normalized input).

A family is one ``NameFamily``: the class names of its blocks, where its blocks sit, the
attention submodule and the points. Point paths starting with ``"{b}"`` are relative to block
``i`` (``"{b}.attn.c_proj"``), ``"{b0}"`` is the first block, and the others are relative to the
module that holds the blocks list (``"wte"`` inside ``transformer`` for ``transformer.h``).

Adding a family (docs/standard-names.md):

>>> from hookkit.core.standard_names import NameFamily, Point, register_names   # doctest: +SKIP
>>> register_names(NameFamily("my-lm", ("MyBlock",), attn="{b}.attn", points={
...     "hook_embed": Point("embed"), "blocks.{i}.hook_resid_pre": Point("{b}", "in"),
...     "blocks.{i}.hook_resid_post": Point("{b}")}))
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hookkit.core.architectures import _MISSING, first_present, read_path, stack_family
from hookkit.core.validate import ArgumentTypeError, fail

#: views of the tensor at a point (``Point.view``)
WHOLE = ()


def split(k: int, n: int) -> tuple:
    """Chunk ``k`` of ``n`` equal contiguous chunks of the last dim, as heads ``[B, T, H, d_head]``."""
    return ("split", k, n)


def interleaved(k: int, n: int) -> tuple:
    """Last dim laid out ``[H, n * d_head]``: the ``k``-th ``d_head`` of each head (GPT-NeoX's qkv)."""
    return ("interleaved", k, n)


#: ``[batch, head, pos, d_head]`` (what the attention function takes) as ``[batch, pos, head, d_head]``
HEADS_FIRST = ("heads_first",)


def norm(which: str, kind: str) -> tuple:
    """A norm's input -> its ``"scale"`` or ``"normalized"`` value (``kind``: ``"layer"`` or ``"rms"``)."""
    return ("norm", which, kind)


def unflatten(inner: tuple = WHOLE) -> tuple:
    """A tensor the block flattened to ``[batch * pos, d]`` (OPT's MLP) as ``[batch, pos, d]``, then ``inner``."""
    return ("unflatten", inner)


@dataclasses.dataclass(frozen=True)
class Point:
    """A tensor at a module boundary: ``path`` (see the module docstring), ``event`` (``"out"``: an
    output, ``index`` among its tensors; ``"in"``: an input, ``index`` a position or ``"first"``)
    and ``view`` (``WHOLE``, ``split``, ``interleaved``, ``HEADS_FIRST``, ``norm``, ``unflatten``). A path holding
    ``"::"`` is an operation inside a module's forward (``hookkit.ops``): ``"{b}.attn::apply_rotary_pos_emb_0"``."""

    path: str
    event: str = "out"
    index: int | str = 0
    view: tuple = WHOLE
    #: ``(activation path, name, ...)``: the value is that module's (or function's) forward of the first
    #: name's value, times the others' (an MLP's ``hook_post``: ``act(hook_pre)``, gated ``act(hook_pre) *
    #: hook_pre_linear``); ``run_with_cache`` then derives it when read instead of keeping it
    replay: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class NameFamily:
    """One family: ``blocks`` class names (matched against the first block's class and bases),
    ``attn``: the attention module (its ``d_head`` attribute paths give the head size), ``points``:
    standard name (``{i}``: the block) -> ``Point``; ``when``: ``(attribute of the block, value)``
    required (Paddle's pre-/post-norm layers); ``norm``: the final norm's kind, ``norm_offset``:
    added to its weight (Gemma's ``1 + w``); ``depth``: dotted parts of the blocks path above the
    module the other paths are relative to; ``post_norms``: the attention's and MLP's outputs pass a
    norm before joining the residual stream (heads and neurons then do not sum to it)."""

    name: str
    blocks: tuple[str, ...]
    attn: str
    points: dict[str, Point]
    d_head: tuple[str, ...] = ("head_dim", "head_size", "attention_head_size")
    when: tuple[str, Any] | None = None
    norm: str = "layer"
    norm_offset: float = 0.0
    depth: int = 1
    post_norms: bool = False  # attention and MLP outputs pass a norm before the residual stream (Gemma 2)


IN = "in"
FIRST = "first"


def _pre_norm(ln1: str, attn: str, qkv: dict[str, Point], z: str, ln2: str | None, mlp: dict[str, Point], kind: str) -> dict[str, Point]:
    """The points of a pre-norm block: residual stream, norms, attention, MLP (``ln2`` None: parallel)."""
    out = {
        "blocks.{i}.hook_resid_pre": Point("{b}", IN, FIRST),
        "blocks.{i}.ln1.hook_scale": Point(ln1, IN, FIRST, norm("scale", kind)),
        "blocks.{i}.ln1.hook_normalized": Point(ln1, IN, FIRST, norm("normalized", kind)),
        **{f"blocks.{{i}}.attn.hook_{k}": p for k, p in qkv.items()},
        "blocks.{i}.attn.hook_z": Point(z, IN, FIRST, split(0, 1)),
        "blocks.{i}.hook_attn_out": Point(attn),
    }
    if ln2 is not None:
        out["blocks.{i}.hook_resid_mid"] = Point(ln2, IN, FIRST)
        out["blocks.{i}.hook_mlp_in"] = Point(ln2, IN, FIRST)
        out["blocks.{i}.ln2.hook_scale"] = Point(ln2, IN, FIRST, norm("scale", kind))
        out["blocks.{i}.ln2.hook_normalized"] = Point(ln2, IN, FIRST, norm("normalized", kind))
    out.update({f"blocks.{{i}}.{k}": p for k, p in mlp.items()})
    out["blocks.{i}.hook_resid_post"] = Point("{b}")
    return out


def _projections(q: str, k: str, v: str) -> dict[str, Point]:
    return {"q": Point(q, view=split(0, 1)), "k": Point(k, view=split(0, 1)), "v": Point(v, view=split(0, 1))}


def _final(path: str, kind: str) -> dict[str, Point]:
    return {
        "ln_final.hook_scale": Point(path, IN, FIRST, norm("scale", kind)),
        "ln_final.hook_normalized": Point(path, IN, FIRST, norm("normalized", kind)),
    }


def _gated_mlp(mlp: str) -> dict[str, Point]:
    """``down_proj(act_fn(gate_proj(x)) * up_proj(x))`` (Llama, Mistral, Qwen2, Gemma 2)."""
    post = (f"{mlp}.act_fn", "blocks.{i}.mlp.hook_pre", "blocks.{i}.mlp.hook_pre_linear")
    return {
        "mlp.hook_pre": Point(f"{mlp}.gate_proj"),
        "mlp.hook_pre_linear": Point(f"{mlp}.up_proj"),
        "mlp.hook_post": Point(f"{mlp}.down_proj", IN, FIRST, replay=post),
        "hook_mlp_out": Point(mlp),
    }


def _mlp(pre: str, post: str, out: str, act: str | None = None) -> dict[str, Point]:
    """``post(act(pre(x)))``; ``act``: the activation module's path where nothing stands between it and
    ``post`` (its forward of ``hook_pre`` is ``hook_post``)."""
    replay = (act, "blocks.{i}.mlp.hook_pre") if act else ()
    return {"mlp.hook_pre": Point(pre), "mlp.hook_post": Point(post, IN, FIRST, replay=replay), "hook_mlp_out": Point(out)}


def _rotary(attn: str) -> dict[str, Point]:
    """``hook_rot_q|k``: the outputs of ``apply_rotary_pos_emb`` in the attention's forward (an operation site)."""
    op = f"{attn}::apply_rotary_pos_emb_0"
    return {"blocks.{i}.attn.hook_rot_q": Point(op, view=HEADS_FIRST), "blocks.{i}.attn.hook_rot_k": Point(op, index=1, view=HEADS_FIRST)}


def _partial_rotary(attn: str, q: int, k: int, view: tuple) -> dict[str, Point]:
    """``hook_rot_q|k`` of partial rotary families (GPT-J, Phi): the whole query and key after the first
    ``rotary_dim`` dims were rotated, the outputs of the ``torch.cat`` calls that join both parts again
    (``cat_{q}``, ``cat_{k}``), as TransformerLens means them."""
    return {
        "blocks.{i}.attn.hook_rot_q": Point(f"{attn}::cat_{q}", view=view),
        "blocks.{i}.attn.hook_rot_k": Point(f"{attn}::cat_{k}", view=view),
    }


_GPTJ = {  # parallel, one norm
    "hook_embed": Point("wte"),
    **_pre_norm(
        "{b}.ln_1",
        "{b}.attn",
        _projections("{b}.attn.q_proj", "{b}.attn.k_proj", "{b}.attn.v_proj"),
        "{b}.attn.out_proj",
        None,
        _mlp("{b}.mlp.fc_in", "{b}.mlp.fc_out", "{b}.mlp", "{b}.mlp.act"),
        "layer",
    ),
    **_final("ln_f", "layer"),
}

_OPT_ATTN = {
    "hook_embed": Point("embed_tokens"),
    "hook_pos_embed": Point("embed_positions"),
    "blocks.{i}.hook_resid_pre": Point("{b}", IN, FIRST),
    "blocks.{i}.ln1.hook_scale": Point("{b}.self_attn_layer_norm", IN, FIRST, norm("scale", "layer")),
    "blocks.{i}.ln1.hook_normalized": Point("{b}.self_attn_layer_norm", IN, FIRST, norm("normalized", "layer")),
    **{
        f"blocks.{{i}}.attn.hook_{k}": p
        for k, p in _projections("{b}.self_attn.q_proj", "{b}.self_attn.k_proj", "{b}.self_attn.v_proj").items()
    },
    "blocks.{i}.attn.hook_z": Point("{b}.self_attn.out_proj", IN, FIRST, split(0, 1)),
    "blocks.{i}.hook_attn_out": Point("{b}.self_attn"),
}
# OPT's decoder layer flattens its residual stream to [batch * pos, d_model] around the MLP and its norm:
# those names are unflattened (the block's [batch, pos]) on read and flattened back on write
_OPT_MLP = {
    "blocks.{i}.mlp.hook_pre": Point("{b}.fc1", view=unflatten()),
    "blocks.{i}.mlp.hook_post": Point("{b}.fc2", IN, FIRST, unflatten()),
    "blocks.{i}.hook_mlp_out": Point("{b}.fc2", view=unflatten()),
}
_OPT = {  # do_layer_norm_before (every OPT but 350m)
    **_OPT_ATTN,
    "blocks.{i}.hook_resid_mid": Point("{b}::add_0"),  # residual + attention, before the flattening
    "blocks.{i}.hook_mlp_in": Point("{b}.final_layer_norm", IN, FIRST, unflatten()),
    "blocks.{i}.ln2.hook_scale": Point("{b}.final_layer_norm", IN, FIRST, unflatten(norm("scale", "layer"))),
    "blocks.{i}.ln2.hook_normalized": Point("{b}.final_layer_norm", IN, FIRST, unflatten(norm("normalized", "layer"))),
    **_OPT_MLP,
    "blocks.{i}.hook_resid_post": Point("{b}"),
    **_final("final_layer_norm", "layer"),
}
_OPT_POST_NORM = {  # OPT-350m: each norm after its residual add (hook_resid_mid after the first, as BERT's)
    **_OPT_ATTN,
    "blocks.{i}.hook_resid_mid": Point("{b}.self_attn_layer_norm"),
    **_OPT_MLP,
    "blocks.{i}.ln2.hook_scale": Point("{b}.final_layer_norm", IN, FIRST, norm("scale", "layer")),
    "blocks.{i}.ln2.hook_normalized": Point("{b}.final_layer_norm", IN, FIRST, norm("normalized", "layer")),
    "blocks.{i}.hook_resid_post": Point("{b}"),
    **_final("final_layer_norm", "layer"),
}


def _ln(k: int, path: str) -> dict[str, Point]:
    return {
        f"blocks.{{i}}.ln{k}.hook_scale": Point(path, IN, FIRST, norm("scale", "layer")),
        f"blocks.{{i}}.ln{k}.hook_normalized": Point(path, IN, FIRST, norm("normalized", "layer")),
    }


def _paddle_decoder(pre_norm: bool) -> dict[str, Point]:
    """``nn.TransformerDecoderLayer``: self-attention, cross-attention over the encoder's output, FFN.
    TransformerLens has no cross-attention vocabulary of its own; its TransformerBridge names T5's
    decoder blocks so, and so do these: ``cross_attn.hook_q|k|v|z`` (k and v over the source
    positions), ``hook_cross_attn_out``, ``hook_resid_mid2`` (after the cross-attention), and the norms
    ``ln1`` (before/after self-attention), ``ln2`` (cross-attention), ``ln3`` (FFN)."""
    cross = _projections("{b}.cross_attn.q_proj", "{b}.cross_attn.k_proj", "{b}.cross_attn.v_proj")
    out: dict[str, Point] = {"blocks.{i}.hook_resid_pre": Point("{b}", IN, FIRST)}
    out |= _ln(1, "{b}.norm1") if pre_norm else {}
    out |= {f"blocks.{{i}}.attn.hook_{k}": p for k, p in _PADDLE_ATTN.items()}
    out["blocks.{i}.attn.hook_z"] = Point("{b}.self_attn.out_proj", IN, FIRST, split(0, 1))
    out["blocks.{i}.hook_attn_out"] = Point("{b}.self_attn")
    # pre-norm: the residual stream is the next norm's input; post-norm: the last norm's output
    out |= {"blocks.{i}.hook_resid_mid": Point("{b}.norm2", IN, FIRST)} | _ln(2, "{b}.norm2") if pre_norm else {}
    out |= {} if pre_norm else _ln(1, "{b}.norm1") | {"blocks.{i}.hook_resid_mid": Point("{b}.norm1")}
    out |= {f"blocks.{{i}}.cross_attn.hook_{k}": p for k, p in cross.items()}
    # nn.MultiHeadAttention computes its attention eagerly: the softmax's input and output ([batch, head, pos, src_pos])
    out["blocks.{i}.cross_attn.hook_attn_scores"] = Point("{b}.cross_attn::softmax_0", IN, FIRST)
    out["blocks.{i}.cross_attn.hook_pattern"] = Point("{b}.cross_attn::softmax_0")
    out["blocks.{i}.cross_attn.hook_z"] = Point("{b}.cross_attn.out_proj", IN, FIRST, split(0, 1))
    out["blocks.{i}.hook_cross_attn_out"] = Point("{b}.cross_attn")
    if pre_norm:
        out["blocks.{i}.hook_resid_mid2"] = out["blocks.{i}.hook_mlp_in"] = Point("{b}.norm3", IN, FIRST)
        out |= _ln(3, "{b}.norm3")
    else:
        out |= _ln(2, "{b}.norm2") | {"blocks.{i}.hook_resid_mid2": Point("{b}.norm2")}
    out |= {f"blocks.{{i}}.{k}": p for k, p in _mlp("{b}.linear1", "{b}.linear2", "{b}.linear2").items()}
    out |= {} if pre_norm else _ln(3, "{b}.norm3")
    return out | {"blocks.{i}.hook_resid_post": Point("{b}")} | _final("norm", "layer")


_LLAMA = {
    "hook_embed": Point("embed_tokens"),
    **_pre_norm(
        "{b}.input_layernorm",
        "{b}.self_attn",
        _projections("{b}.self_attn.q_proj", "{b}.self_attn.k_proj", "{b}.self_attn.v_proj"),
        "{b}.self_attn.o_proj",
        "{b}.post_attention_layernorm",
        _gated_mlp("{b}.mlp"),
        "rms",
    ),
    **_rotary("{b}.self_attn"),
    **_final("norm", "rms"),
}

_GEMMA2 = {
    **_LLAMA,
    "blocks.{i}.ln1_post.hook_scale": Point("{b}.post_attention_layernorm", IN, FIRST, norm("scale", "rms")),
    "blocks.{i}.ln1_post.hook_normalized": Point("{b}.post_attention_layernorm", IN, FIRST, norm("normalized", "rms")),
    "blocks.{i}.hook_attn_out": Point("{b}.post_attention_layernorm"),
    "blocks.{i}.hook_resid_mid": Point("{b}.pre_feedforward_layernorm", IN, FIRST),
    "blocks.{i}.hook_mlp_in": Point("{b}.pre_feedforward_layernorm", IN, FIRST),
    "blocks.{i}.ln2.hook_scale": Point("{b}.pre_feedforward_layernorm", IN, FIRST, norm("scale", "rms")),
    "blocks.{i}.ln2.hook_normalized": Point("{b}.pre_feedforward_layernorm", IN, FIRST, norm("normalized", "rms")),
    "blocks.{i}.ln2_post.hook_scale": Point("{b}.post_feedforward_layernorm", IN, FIRST, norm("scale", "rms")),
    "blocks.{i}.ln2_post.hook_normalized": Point("{b}.post_feedforward_layernorm", IN, FIRST, norm("normalized", "rms")),
    "blocks.{i}.hook_mlp_out": Point("{b}.post_feedforward_layernorm"),
}

_PADDLE_ATTN = {
    **_projections("{b}.self_attn.q_proj", "{b}.self_attn.k_proj", "{b}.self_attn.v_proj"),
    # nn.MultiHeadAttention computes its attention eagerly: the softmax's input and output, editable as they are
    "attn_scores": Point("{b}.self_attn::softmax_0", IN, FIRST),
    "pattern": Point("{b}.self_attn::softmax_0"),
}


NAME_FAMILIES: list[NameFamily] = [
    NameFamily(
        "gpt2",
        ("GPT2Block",),
        "{b}.attn",
        {
            "hook_embed": Point("wte"),
            "hook_pos_embed": Point("wpe"),
            **_pre_norm(
                "{b}.ln_1",
                "{b}.attn",
                {k: Point("{b}.attn.c_attn", view=split(j, 3)) for j, k in enumerate("qkv")},
                "{b}.attn.c_proj",
                "{b}.ln_2",
                _mlp("{b}.mlp.c_fc", "{b}.mlp.c_proj", "{b}.mlp", "{b}.mlp.act"),
                "layer",
            ),
            **_final("ln_f", "layer"),
        },
    ),
    NameFamily(
        "gpt-neox",  # parallel attention and MLP: no hook_resid_mid
        ("GPTNeoXLayer",),
        "{b}.attention",
        {
            "hook_embed": Point("embed_in"),
            **_pre_norm(
                "{b}.input_layernorm",
                "{b}.attention",
                {k: Point("{b}.attention.query_key_value", view=interleaved(j, 3)) for j, k in enumerate("qkv")},
                "{b}.attention.dense",
                None,
                _mlp("{b}.mlp.dense_h_to_4h", "{b}.mlp.dense_4h_to_h", "{b}.mlp", "{b}.mlp.act"),
                "layer",
            ),
            "blocks.{i}.ln2.hook_scale": Point("{b}.post_attention_layernorm", IN, FIRST, norm("scale", "layer")),
            "blocks.{i}.ln2.hook_normalized": Point("{b}.post_attention_layernorm", IN, FIRST, norm("normalized", "layer")),
            **_rotary("{b}.attention"),
            **_final("final_layer_norm", "layer"),
        },
    ),
    NameFamily("gpt-j", ("GPTJBlock",), "{b}.attn", {**_GPTJ, **_partial_rotary("{b}.attn", 1, 0, WHOLE)}),
    NameFamily("llama", ("LlamaDecoderLayer", "MistralDecoderLayer", "Qwen2DecoderLayer"), "{b}.self_attn", _LLAMA, norm="rms"),
    NameFamily("gemma2", ("Gemma2DecoderLayer",), "{b}.self_attn", _GEMMA2, norm="rms", norm_offset=1.0, post_norms=True),
    NameFamily(
        "phi",  # parallel, one norm
        ("PhiDecoderLayer",),
        "{b}.self_attn",
        {
            "hook_embed": Point("embed_tokens"),
            **_pre_norm(
                "{b}.input_layernorm",
                "{b}.self_attn",
                _projections("{b}.self_attn.q_proj", "{b}.self_attn.k_proj", "{b}.self_attn.v_proj"),
                "{b}.self_attn.dense",
                None,
                _mlp("{b}.mlp.fc1", "{b}.mlp.fc2", "{b}.mlp", "{b}.mlp.activation_fn"),
                "layer",
            ),
            **_partial_rotary("{b}.self_attn", 0, 1, HEADS_FIRST),
            **_final("final_layernorm", "layer"),
        },
    ),
    NameFamily("opt", ("OPTDecoderLayer",), "{b}.self_attn", _OPT, when=("do_layer_norm_before", True)),
    NameFamily("opt-post-norm", ("OPTDecoderLayer",), "{b}.self_attn", _OPT_POST_NORM, when=("do_layer_norm_before", False)),
    NameFamily(
        "bert",  # post-norm encoder: resid_mid after the first norm, as TransformerLens's HookedEncoder
        ("BertLayer",),
        "{b}.attention.self",
        {
            "hook_embed": Point("embeddings.word_embeddings"),
            "hook_pos_embed": Point("embeddings.position_embeddings"),
            "hook_token_type_embed": Point("embeddings.token_type_embeddings"),
            "blocks.{i}.hook_resid_pre": Point("{b}", IN, FIRST),
            **{
                f"blocks.{{i}}.attn.hook_{k}": Point(f"{{b}}.attention.self.{m}", view=split(0, 1))
                for k, m in zip("qkv", ("query", "key", "value"))
            },
            "blocks.{i}.attn.hook_z": Point("{b}.attention.output.dense", IN, FIRST, split(0, 1)),
            "blocks.{i}.hook_attn_out": Point("{b}.attention.output.dense"),
            "blocks.{i}.ln1.hook_scale": Point("{b}.attention.output.LayerNorm", IN, FIRST, norm("scale", "layer")),
            "blocks.{i}.ln1.hook_normalized": Point("{b}.attention.output.LayerNorm", IN, FIRST, norm("normalized", "layer")),
            "blocks.{i}.hook_resid_mid": Point("{b}.attention.output"),
            **{
                f"blocks.{{i}}.{k}": p
                for k, p in _mlp(
                    "{b}.intermediate.dense", "{b}.output.dense", "{b}.output.dense", "{b}.intermediate.intermediate_act_fn"
                ).items()
            },
            "blocks.{i}.ln2.hook_scale": Point("{b}.output.LayerNorm", IN, FIRST, norm("scale", "layer")),
            "blocks.{i}.ln2.hook_normalized": Point("{b}.output.LayerNorm", IN, FIRST, norm("normalized", "layer")),
            "blocks.{i}.hook_resid_post": Point("{b}"),
        },
        d_head=("attention_head_size",),
        depth=2,
    ),
    NameFamily(
        "paddle-encoder",  # nn.TransformerEncoderLayer, post-norm (normalize_before=False, the default)
        ("TransformerEncoderLayer",),
        "{b}.self_attn",
        {
            "blocks.{i}.hook_resid_pre": Point("{b}", IN, FIRST),
            **{f"blocks.{{i}}.attn.hook_{k}": p for k, p in _PADDLE_ATTN.items()},
            "blocks.{i}.attn.hook_z": Point("{b}.self_attn.out_proj", IN, FIRST, split(0, 1)),
            "blocks.{i}.hook_attn_out": Point("{b}.self_attn"),
            "blocks.{i}.ln1.hook_scale": Point("{b}.norm1", IN, FIRST, norm("scale", "layer")),
            "blocks.{i}.ln1.hook_normalized": Point("{b}.norm1", IN, FIRST, norm("normalized", "layer")),
            "blocks.{i}.hook_resid_mid": Point("{b}.norm1"),
            **{f"blocks.{{i}}.{k}": p for k, p in _mlp("{b}.linear1", "{b}.linear2", "{b}.linear2").items()},
            "blocks.{i}.ln2.hook_scale": Point("{b}.norm2", IN, FIRST, norm("scale", "layer")),
            "blocks.{i}.ln2.hook_normalized": Point("{b}.norm2", IN, FIRST, norm("normalized", "layer")),
            "blocks.{i}.hook_resid_post": Point("{b}"),
            **_final("norm", "layer"),
        },
        when=("normalize_before", False),
    ),
    NameFamily(
        "paddle-encoder-pre-norm",  # nn.TransformerEncoderLayer(normalize_before=True)
        ("TransformerEncoderLayer",),
        "{b}.self_attn",
        _pre_norm(
            "{b}.norm1",
            "{b}.self_attn",
            _PADDLE_ATTN,
            "{b}.self_attn.out_proj",
            "{b}.norm2",
            _mlp("{b}.linear1", "{b}.linear2", "{b}.linear2"),
            "layer",
        )
        | _final("norm", "layer"),
        when=("normalize_before", True),
    ),
    NameFamily("paddle-decoder", ("TransformerDecoderLayer",), "{b}.self_attn", _paddle_decoder(False), when=("normalize_before", False)),
    NameFamily(
        "paddle-decoder-pre-norm", ("TransformerDecoderLayer",), "{b}.self_attn", _paddle_decoder(True), when=("normalize_before", True)
    ),
]


def register_names(family: NameFamily) -> None:
    """Teach hookkit the standard names of one more family (tried before the built-in ones)."""
    if not isinstance(family, NameFamily):
        fail("register_names", "family", "a NameFamily", family, kind=ArgumentTypeError)
    NAME_FAMILIES.insert(0, family)


def _classes(obj: Any) -> set[str]:
    return {c.__name__ for c in type(obj).__mro__}


def name_family(model: Any) -> tuple[NameFamily, str, Any] | None:
    """``(family, blocks path, blocks)`` for ``model``, or None: the model's layout from the stack
    registry (``core.architectures``), its family from the first block's class."""
    stack = stack_family(model)
    if stack is None:
        return None
    blocks = read_path(model, stack.blocks)
    if blocks is _MISSING or len(blocks) == 0:
        return None
    classes = _classes(blocks[0])
    for fam in NAME_FAMILIES:
        if not classes.intersection(fam.blocks):
            continue
        if fam.when is not None and bool(read_path(blocks[0], fam.when[0])) != fam.when[1]:
            continue
        return fam, stack.blocks, blocks
    return None


def module_path(fam: NameFamily, blocks_path: str, point: Point, i: int) -> str:
    """The dotted module path of ``point`` in block ``i`` (model-relative)."""
    path = point.path
    if path.startswith("{b0}"):
        return f"{blocks_path}.0{path[4:]}"
    if path.startswith("{b}"):
        return f"{blocks_path}.{i}{path[3:]}"
    base = ".".join(blocks_path.split(".")[: -fam.depth])
    return f"{base}.{path}" if base else path


def head_size(attn: Any, fam: NameFamily) -> int | None:
    """The head size of ``attn`` (the family's ``d_head`` attribute paths), or None."""
    _, d = first_present(attn, fam.d_head)
    return d if isinstance(d, int) and not isinstance(d, bool) and d > 0 else None
