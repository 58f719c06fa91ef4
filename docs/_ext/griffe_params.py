"""Griffe extension for the API reference: a parameters table for every function and class.

hookkit's docstrings describe arguments in prose ("``layer``: a name, glob or layer object ...").
For an object whose docstring has no ``Args:`` section, this adds one, built from the signature
(every parameter, with its annotation and default, which the renderer shows as table columns) and,
for each description, in this order:

1. the prose that names it as ```name``:`` (up to the next such name or the end of its sentence);
2. the sentence that shows it as ```name=...```;
3. the first sentence that mentions ```name```;
4. the project's glossary below, for the parameters every verb shares (``model``, ``layers``...),
   written once instead of in each docstring.

Keywords taken as ``**options: Unpack[SomeTypedDict]`` (``hookkit.attribute``, ``hookkit.cam``) get
one row each in a "Keyword Args" section (griffe's other parameters) after the table: the TypedDict's keys, with their types and defaults
(``Annotated[int, Default(50)]``), described from the same docstring.

Sentences are split outside code spans and parentheses, so "``positions=`` records ... (ints, ...;
see ``hookkit.steer``)" stays whole. ``tests/test_reference.py`` fails on a parameter left without a
description, a cut sentence, or a private type in a public signature.
"""

from __future__ import annotations

import re

import griffe

_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Params)\s*:\s*$", re.MULTILINE)
_SKIP = {"self", "cls"}
_ABBREV = ("e.g.", "i.e.", "vs.", "etc.", "cf.", "w.r.t.", "approx.")
#: names so common in prose that a sentence mentioning them rarely describes them: the glossary first
_GENERIC = {"model", "m", "inputs", "x", "layers", "layer", "name", "names", "index", "module"}

#: the parameters many public functions share, described once (used only where the docstring does
#: not name the parameter itself)
GLOSSARY = {
    "model": "The model: a `torch.nn.Module` or a `paddle.nn.Layer`.",
    "m": "The model or layer: a `torch.nn.Module` or a `paddle.nn.Layer`.",
    "module": "The layer (a `torch.nn.Module` or a `paddle.nn.Layer`).",
    "modules": "The layers (`torch.nn.Module` or `paddle.nn.Layer` objects).",
    "layers": 'Which layers: a dotted name, a glob (`"h.*.attn"`), a preset (`hookkit.LEAVES`, `hookkit.ALL`, `hookkit.WITH_PARAMS`), a layer class, a layer object, or a list of these (see `hookkit.select`).',
    "layer": "One layer: its dotted name or the layer object.",
    "inputs": "The model's input: a tensor, or a tuple of the positional inputs.",
    "x": "The model's input: a tensor, or a tuple of the positional inputs.",
    "name": "The layer's dotted name, as `hookkit.select` gives it.",
    "names": "Layer names, as `hookkit.select` gives them.",
    "name_or_index": "A layer's dotted name, or its index among the recorded layers.",
    "handle": "The handle to adopt (what a hookkit registration returns).",
    "fn": "The function called at each event.",
    "hook_func": "The function called as `hook_func(module, inputs, output)` (fastai's signature).",
    "directory": "The folder (a `str` or `os.PathLike`).",
    "path": "The file or folder (a `str` or `os.PathLike`).",
    "file": "Where to write: an open text file (default: standard output).",
    "out": "Where to write the result.",
    "index": "Which tensor of a nested output (its position among the output's tensors, depth first).",
    "call": "Which call of the layer in one forward (0 for the first).",
    "calls": "Only these calls of the layer in each forward (an int, a list or a slice; all when None).",
    "steps": "Only these generation steps (0 = the forward of the prompt; all when None).",
    "positions": 'Only these absolute token positions: ints, a list, a slice, `"prompt"`, `"generated"`, `"all"` or `"last"` (see `hookkit.steer`).',
    "token_dim": "The token axis of the value, overriding the model family's.",
    "heads": "Attention heads: `True` for all, or a list of head indices, on attention layers of a known family.",
    "head_layout": "How the heads split the output projection's input, for a family hookkit does not know (see `hookkit.ablate`).",
    "detach": "Keep recorded tensors out of the autograd graph (default True).",
    "cpu": "Move recorded tensors to the host memory.",
    "grad": "Record gradients too.",
    "priority": "Order among the consumers of one event: `hookkit.INTERVENTION` (0, first) or `hookkit.OBSERVER` (100).",
    "stats": "Statistics: live ones (`ActivationStats`, `GradientStats`, `WeightStats`) or data loaded back.",
    "title": "The figure's title (default: none, or one derived from the data).",
    "figsize": "The figure's size in inches, `(width, height)`.",
    "ax": "A matplotlib `Axes` to draw into (default: a new figure).",
    "fig": "A matplotlib `Figure` to draw into (default: a new one).",
    "cmap": "A matplotlib colormap name.",
    "ncols": "Images per row.",
    "outline": "Outline the strokes of grayscale images in white, over the heatmap.",
    "alpha": "The heatmap's opacity over the image.",
    "tile": "Inches per image.",
    "predicted": "Predicted classes, one per image (shown in the titles).",
    "labels": "True classes, one per image (a wrong prediction is marked).",
    "maps": "Heatmaps: `[N, H, W]`, or a dict `{method name: [N, H, W]}`.",
    "images": "Images: `[N, H, W]`, `[N, C, H, W]` (channels first) or `[N, H, W, C]` (channels last), arrays or tensors.",
    "target": "The output to explain: a class index, one per batch row, or a function of the output that returns a scalar per row (default: the predicted class).",
    "metric": "A function of the model's output that returns the number to compare.",
    "eval": "Run the model in eval mode (dropout off, batch-norm statistics fixed), restored afterwards.",
    "seed": "The random seed (the same results on every run).",
    "progress": "Show a progress bar (default: when standard error is a terminal).",
    "shard_size": 'The bytes of one output file (an int, or a string like `"64MB"`).',
    "size": "The input's spatial size `(height, width)`.",
    "p": "The probability of dropping a value.",
    "value": "The value to set.",
    "output": "The layer's output.",
    "phase": '`"forward"` or `"backward"`.',
    "sample": "Which sample (row) to show.",
    "step": "Which step (forward of the model) to show.",
    "max_channels": "Show at most this many channels.",
    "map": "Layer names of `a` -> layer names of `b`, where the two differ.",
    "family": "The model family's entry in `hookkit`'s architecture registry.",
    "reduce": "How to reduce each output before it is written (a reduction name or a function).",
    "kwargs": "Keyword arguments passed on.",
    "remove": "The function that undoes the registration (called once, by `remove()`).",
    "handles": "The handles to hold, removed together (last placed first).",
    "input": "The layer's positional inputs (a tuple).",
    "is_forward": "Hook the forward (True, the default) or the backward (False), as fastai's.",
    "sync": "Under distributed training, reduce across ranks at read time (default True); False: each rank reads its own.",
    "clean": "The clean input: its activations are patched into the corrupted run.",
    "corrupted": "The corrupted input: run with one cell at a time taken from the clean run.",
    "per_row": "Keep the batch rows first, `[N, ...]`, instead of their mean.",
    "args": "Positional arguments passed on.",
}


#: classes users get from hookkit rather than build: their constructor's parameters are no part of
#: the reference (no table; the signature still shows them)
MADE_BY_HOOKKIT = {
    "Diff", "FeatureArray", "Features", "LayerNotFound", "LensResult", "NonFiniteError", "Pruning", "Record", "Stop", "StopForward",
    "FeatureStats", "Graph", "Operations", "SAE", "Splice", "TopFeatures",
}  # fmt: skip


def _prose(text: str) -> list[str]:
    """The docstring's paragraphs without fenced code and doctest lines, each on one line."""
    text = re.sub(r"```.*?```", "\n\n", text, flags=re.DOTALL)
    keep = [line.strip() for line in text.splitlines() if not line.lstrip().startswith((">>>", "... ")) and line.strip() != "..."]
    return [p for p in " ".join(line or "\n" for line in keep).split("\n") if p.strip()]


def sentences(flat: str) -> list[str]:
    """Split prose at ``.``/``;``/``!``/``?`` followed by a space, outside code spans and parentheses
    (``e.g.``, ``i.e.`` and ``vs.`` do not end one)."""
    out, start, depth, code, i = [], 0, 0, False, 0
    n = len(flat)
    while i < n:
        c = flat[i]
        if c == "`":
            j = i
            while j < n and flat[j] == "`":
                j += 1
            code = not code
            i = j
            continue
        if not code:
            if c in "([":
                depth += 1
            elif c in ")]":
                depth = max(0, depth - 1)
            elif c in ".;!?" and depth == 0 and (i + 1 == n or flat[i + 1] == " "):
                if not any(flat[: i + 1].endswith(a) for a in _ABBREV):
                    out.append(flat[start : i + 1].strip())
                    start = i + 1
        i += 1
    if flat[start:].strip():
        out.append(flat[start:].strip())
    return [s for s in out if s]


def _finish(text: str) -> str:
    text = text.strip().rstrip(";:,").strip()
    if text and text[0].islower():
        text = text[0].upper() + text[1:]
    return text if not text or text[-1] in ".!?" else text + "."


#: a parameter tag: ```name``:``, or several names sharing one description (```rtol`` / ```atol``:``)
_TAG = re.compile(r"((?:``[\w.]+``\s*(?:/|,|or)\s*)*``[\w.]+``)\s*:\s")


def _until_next(rest: str) -> str:
    """``rest`` up to the next ```other``:`` outside code and parentheses, or up to the parenthesis
    that closes around the tag (a tag written inside one)."""
    depth, code, i, n = 0, False, 0, len(rest)
    while i < n:
        c = rest[i]
        if c == "`":
            if not code and depth == 0 and i > 0:
                m = re.match(r"``[\w.]+``\s*:\s", rest[i:])
                if m and rest[:i].rstrip()[-1:] in (";", ",", ".", ""):
                    return rest[:i]
            j = i
            while j < n and rest[j] == "`":
                j += 1
            code, i = not code, j
            continue
        if not code:
            if c in "([":
                depth += 1
            elif c in ")]":
                if depth == 0:
                    return rest[:i]
                depth -= 1
        i += 1
    return rest


def describe(name: str, text: str) -> str:
    """The description of parameter ``name`` from the docstring ``text`` (see the module's docstring);
    '' when neither the prose nor the glossary has one."""
    parts = [s for para in _prose(text) for s in sentences(para.strip())]
    for s in parts:  # ``name``: (or ``name`` / ``other``:) description, up to the next tag of the sentence
        for m in _TAG.finditer(s):
            if name in re.findall(r"``([\w.]+)``", m.group(1)):
                return _finish(_until_next(s[m.end() :]))
    word = re.escape(name)
    for s in parts:
        if re.search(rf"``{word}=[^`]*``", s):
            return _finish(s)
    if name in _GENERIC and name in GLOSSARY:  # a sentence naming ``model`` rarely describes it
        return GLOSSARY[name]
    for s in parts:
        if re.search(rf"``{word}``(?!\s*:)", s):
            return _finish(s)
    if name in GLOSSARY:
        return GLOSSARY[name]
    for s in parts:  # the name inside a code span: ``loss_fn(output)``, ``<= near_zero``
        if any(re.search(rf"(?<![\w.]){word}(?!\w)", span) for span in re.findall(r"``(.+?)``", s)):
            return _finish(s)
    return ""


def _unpacked(p: griffe.Parameter) -> griffe.Expr | None:
    """The TypedDict name of ``**options: Unpack[TypedDict]``, or None."""
    ann = p.annotation
    if p.kind is not griffe.ParameterKind.var_keyword or not isinstance(ann, griffe.ExprSubscript):
        return None
    return ann.slice if str(ann.left).rpartition(".")[2] == "Unpack" and isinstance(ann.slice, griffe.ExprName) else None


def _keys(typed: griffe.Expr | None, root: griffe.Module | None) -> list[tuple[str, str, str]]:
    """``(name, type, default)`` of each key of the TypedDict ``typed`` names (``Annotated[T, Default(v)]``)."""
    if typed is None or root is None:
        return []
    path = typed.canonical_path
    try:
        cls = root.get_member(path.split(".", 1)[1]) if path.startswith(root.name + ".") else None
        cls = cls.final_target if isinstance(cls, griffe.Alias) else cls
    except Exception:  # noqa: BLE001 - not resolvable: no rows rather than a broken build
        return []
    out = []
    for name, member in getattr(cls, "members", {}).items():
        if not isinstance(member, griffe.Attribute) or name.startswith("_"):
            continue
        ann, default = member.annotation, ""
        if isinstance(ann, griffe.ExprSubscript) and str(ann.left).rpartition(".")[2] == "Annotated":
            parts = getattr(ann.slice, "elements", [ann.slice])
            ann = parts[0]
            found = [str(e) for e in parts[1:] if str(e).startswith("Default(")]
            default = found[0][len("Default(") : -1] if found else ""
        out.append((name, str(ann), default))
    return out


def args_section(params: griffe.Parameters, text: str, root: griffe.Module | None = None) -> str:
    lines, more = ["Args:"], ["Keyword Args:"]
    for p in params:
        if p.name in _SKIP or p.name.startswith("_"):  # a private parameter is no part of the API
            continue
        star = "*" if p.kind is griffe.ParameterKind.var_positional else "**" if p.kind is griffe.ParameterKind.var_keyword else ""
        desc = describe(p.name, text)
        keys = _keys(_unpacked(p), root)
        if not desc and keys:
            desc = f"The keyword arguments below, typed in `{_unpacked(p)}`; each is optional."
        if not desc:
            continue  # the test names it: a parameter needs a description in its docstring
        lines.append(f"    {star}{p.name}: {desc.replace(chr(10), ' ')}")
        for name, ann, default in keys:
            about = describe(name, text)
            if about:
                about += f" Default: `{default}`." if default else ""
                more.append(f"    {name} ({ann}): {about.replace(chr(10), ' ')}")
    out = "\n".join(lines) if len(lines) > 1 else ""
    return out + ("\n\n" + "\n".join(more) if len(more) > 1 else "")


class ParameterTables(griffe.Extension):
    def on_function_instance(self, *, func: griffe.Function, **kwargs: object) -> None:
        self._add(func, func.parameters)

    def on_class_members(self, *, cls: griffe.Class, **kwargs: object) -> None:
        init = cls.members.get("__init__")
        if cls.name in MADE_BY_HOOKKIT:
            return
        if isinstance(init, griffe.Function) and not (init.docstring and init.docstring.value.strip()):
            self._add(cls, init.parameters)

    def on_package(self, *, pkg: griffe.Module, **kwargs: object) -> None:
        """The functions taking ``**options: Unpack[...]``: their tables once every module is loaded."""
        for obj, params in self._later:
            self._add(obj, params, pkg)
        self._later.clear()

    def __init__(self) -> None:
        super().__init__()
        self._later: list[tuple[griffe.Object, griffe.Parameters]] = []

    def _add(self, obj: griffe.Object, params: griffe.Parameters, root: griffe.Module | None = None) -> None:
        doc = obj.docstring
        if doc is None or _SECTION.search(doc.value):
            return
        if root is None and any(_unpacked(p) is not None for p in params):
            self._later.append((obj, params))  # the TypedDict's module may not be loaded yet
            return
        section = args_section(params, doc.value, root)
        if section:
            doc.value = doc.value.rstrip() + "\n\n" + section
