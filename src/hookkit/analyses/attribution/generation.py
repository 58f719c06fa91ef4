"""``attribute_generation``: each target token's log-probability attributed to the tokens before it
(captum ``LLMAttribution``'s meaning), for one sequence of a causal LM.

Target token ``t`` is predicted at position ``T + t - 1`` from the prefix of the ``T`` input tokens
and the ``t`` target tokens before it; its score is ``log p(y_t | prefix)`` (or, with ``contrast_ids``,
inseq's ``contrast_prob_diff``: ``p(y_t | prefix) - p(c_t | prefix)``). Each target is one call of
``hookkit.attribute`` on its prefix: gradient methods at the embedding layer (the embedding's
attribution summed over its width), perturbation methods over the token ids. No BOS token is assumed
(every token is attributed, the first included) and no key-value cache is used (captum's cached
outputs gave wrong numbers from the second token on); memory stays within ``max_memory`` per call.

>>> res = hookkit.attribute_generation(gpt2, ids, max_new_tokens=8)     # doctest: +SKIP
>>> res.input_attr.shape                                                # (8, n_input_tokens)
>>> fig = res.plot(tokens=tokenizer.convert_ids_to_tokens(res.ids))     # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hookkit.analyses.attribution.heatmap import token_heatmap
from hookkit.analyses.attribution.template import attribute
from hookkit.analyses.passes import analysis_pass
from hookkit.analyses.targets import logits_of
from hookkit.core.entry import entry_name, public_entry
from hookkit.core.types import Layer
from hookkit.core.validate import ArgumentTypeError, check_bool, check_choice, check_int, check_model, check_tensor_like, fail

GRADIENT_METHODS = ("integrated_gradients", "gradient_x_activation")
TOKEN_METHODS = ("feature_ablation", "shapley", "shapley_sampling", "kernel_shap", "lime")


@dataclass
class GenerationAttribution:
    """``token_attr[t, i]``: target token ``t``'s score attributed to token ``i`` of the sequence
    ``ids`` (the inputs, then the targets); NaN where ``i`` is not before target ``t``'s position.
    ``input_attr``: its first ``n_input`` columns ``[n_target, n_input]``; ``seq_attr``: their sum over
    the targets (captum's ``seq_attr``); ``scores``: each target's score. ``tokens``: the texts of ``ids``
    for the heat map's labels (``res.tokens = tokenizer.convert_ids_to_tokens(res.ids)``; default the ids).
    ``html()`` (a notebook shows it) and ``hookkit.report(..., attributions=res)`` draw the heat map."""

    token_attr: np.ndarray
    ids: list[int]
    n_input: int
    target_ids: list[int]
    scores: np.ndarray
    method: str
    contrast_ids: list[int] | None = field(default=None)
    tokens: list[str] | None = field(default=None)

    @property
    def input_attr(self) -> np.ndarray:
        return self.token_attr[:, : self.n_input]

    @property
    def seq_attr(self) -> np.ndarray:
        return self.input_attr.sum(0)

    def labels(self, tokens: Sequence[str] | None = None) -> list[str]:
        """The texts of ``ids``: ``tokens``, else ``self.tokens``, else the ids."""
        given = tokens if tokens is not None else self.tokens
        if given is not None and len(given) != len(self.ids):
            fail(entry_name("GenerationAttribution"), "tokens", f"one text per token of ids ({len(self.ids)})", f"{len(given)} texts")
        return [str(t) for t in (given if given is not None else self.ids)]

    def html(self, tokens: Sequence[str] | None = None) -> str:
        """The token heat map as a self-contained HTML table (token texts escaped)."""
        return token_heatmap(self.token_attr, self.labels(tokens), self.n_input, self.method, self.scores.tolist())

    def _repr_html_(self) -> str:
        return self.html()

    def plot(self, tokens: Sequence[str] | None = None, *, ax: Any = None, figsize: tuple[float, float] | None = None) -> Any:
        """A heat map: one row per target token, one column per token before it (inputs, then the
        generated prefix); ``tokens``: the labels of ``ids`` (default: the ids). Returns the matplotlib
        Figure (pyplot is not used: nothing is left open)."""
        labels = self.labels(tokens)
        data = self.token_attr
        if ax is None:
            from matplotlib.figure import Figure

            w, h = data.shape[1], data.shape[0]
            fig = Figure(figsize=figsize or (min(2 + 0.45 * w, 20), min(1.5 + 0.4 * h, 14)), layout="constrained")
            ax = fig.add_subplot()
        else:
            fig = ax.figure
        lim = float(np.nanmax(np.abs(data))) if np.isfinite(data).any() else 1.0
        im = ax.imshow(np.ma.masked_invalid(data), cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
        ax.set_xticks(range(data.shape[1]), labels[: data.shape[1]], rotation=90)
        ax.set_yticks(range(data.shape[0]), labels[self.n_input : self.n_input + data.shape[0]])
        ax.axvline(self.n_input - 0.5, color="k", lw=0.8)
        ax.set_xlabel("attributed token (inputs | generated prefix)")
        ax.set_ylabel("target token")
        fig.colorbar(im, ax=ax, label=self.method)
        return fig


@public_entry("attribute_generation")
def attribute_generation(
    model: Layer,
    input_ids: Any,
    target_ids: Any = None,
    method: str = "integrated_gradients",
    *,
    max_new_tokens: int = 8,
    contrast_ids: Any = None,
    layer: Any = None,
    baseline_id: int = 0,
    n_steps: int = 50,
    n_samples: int | None = None,
    seed: int | None = None,
    max_memory: float | None = None,
    internal_batch_size: int | str | None = "auto",
    attribute_prefix: bool = True,
    eval: bool = True,
) -> GenerationAttribution:
    """Attributions of each target token's log-probability to the tokens before it.

    ``input_ids``: one sequence ``[T]`` or ``[1, T]``. ``target_ids``: the tokens to explain (``[M]``);
    None generates ``max_new_tokens`` greedily (argmax) first. ``method``: "integrated_gradients" or
    "gradient_x_activation" at the embedding layer (``layer``: default the model's
    ``get_input_embeddings()``, else its one embedding layer with a row per vocabulary token), from ``baseline_id`` tokens; or "feature_ablation", "shapley",
    "shapley_sampling", "kernel_shap", "lime" over the token ids, a token replaced by ``baseline_id``.
    ``contrast_ids``: an alternative target per position: the score is ``p(target) - p(contrast)``.
    ``attribute_prefix=False``: the generated tokens before a target stay as they are (never scaled or
    replaced; their columns NaN), captum ``LLMAttribution``'s numbers.
    ``n_steps``: the integral's points for "integrated_gradients" (captum's default, 50).
    ``n_samples``: samples of the sampling methods ("shapley_sampling", "kernel_shap", "lime"); None
    takes captum's default for the method. ``seed``: the seed of those samples (the same seed gives the
    same attributions).
    ``max_memory``, ``internal_batch_size``: the memory budget and the copies per forward, as
    ``hookkit.attribute`` takes them (None: its default budget; "auto": copies derived from the budget).
    ``eval``: run the model in eval mode (dropout off), its modes restored afterwards.

    >>> res = hookkit.attribute_generation(model, ids, max_new_tokens=4, method="feature_ablation")  # doctest: +SKIP
    >>> res.input_attr          # [4, T]
    """
    fn = entry_name()
    be = check_model(model, fn=fn)
    check_choice(method, GRADIENT_METHODS + TOKEN_METHODS, fn=fn, arg="method")
    check_int(max_new_tokens, fn=fn, arg="max_new_tokens", low=1)
    check_int(baseline_id, fn=fn, arg="baseline_id", low=0)
    check_bool(attribute_prefix, fn=fn, arg="attribute_prefix")
    ids = _ids(be, input_ids, "input_ids")
    with analysis_pass(model, be, eval=eval, grad=False), be.no_grad():
        like = check_tensor_like(input_ids, be, fn=fn, arg="input_ids")
        vocab = be.shape(logits_of(be, model(be.from_numpy(ids[None, :], like=like))))[-1]
        targets = _ids(be, target_ids, "target_ids", vocab) if target_ids is not None else _greedy(be, model, ids, like, max_new_tokens)
    contrast = None
    if contrast_ids is not None:
        contrast = _ids(be, contrast_ids, "contrast_ids", vocab)
        if len(contrast) != len(targets):
            fail(fn, "contrast_ids", f"one alternative token per target token ({len(targets)})", f"{len(contrast)} tokens")
    if baseline_id >= vocab:
        fail(fn, "baseline_id", f"a token id in [0, {vocab - 1}]", baseline_id)
    name = _embedding_name(be, model, layer, vocab) if method in GRADIENT_METHODS else None
    full = np.concatenate([ids, targets])
    t_in, m = len(ids), len(targets)
    out = np.full((m, t_in + m - 1), np.nan)
    scores = np.zeros(m)
    kw: dict[str, Any] = dict(max_memory=max_memory, internal_batch_size=internal_batch_size, eval=eval)
    if method == "integrated_gradients":
        kw["n_steps"] = n_steps
    if method in ("shapley_sampling", "kernel_shap", "lime"):
        kw.update(n_samples=n_samples, seed=seed)
    for t in range(m):
        prefix = be.from_numpy(full[None, : t_in + t], like=like)
        score = _score(be, int(targets[t]), None if contrast is None else int(contrast[t]))
        held = 0 if attribute_prefix else t  # generated tokens kept as they are (captum's LLMAttribution)
        base_ids = np.concatenate([np.full(t_in + t - held, baseline_id, dtype=full.dtype), full[t_in + t - held : t_in + t]])
        base = be.from_numpy(base_ids[None, :], like=like)
        if name is not None:
            attr = attribute(model, name, prefix, method, target=score, baselines=base, **kw)
            row = be.to_numpy(attr).astype(np.float64).reshape(t_in + t, -1).sum(-1)
        else:
            mask = None if not held else np.minimum(np.arange(t_in + t), t_in)[None, :]  # the held tokens: one null feature
            attr = attribute(model, None, prefix, method, target=score, baselines=base, feature_mask=mask, **kw)
            row = be.to_numpy(attr).astype(np.float64).reshape(-1)
        out[t, : t_in + t - held] = row[: t_in + t - held]
        with analysis_pass(model, be, eval=eval, grad=False), be.no_grad():
            scores[t] = float(be.to_numpy(score(model(prefix))).reshape(-1)[0])
    return GenerationAttribution(
        out, full.tolist(), t_in, targets.tolist(), scores, method, None if contrast is None else contrast.tolist()
    )


def _ids(be: Any, ids: Any, arg: str, vocab: int | None = None) -> np.ndarray:
    """A sequence of token ids as int64 numpy ``[T]``, checked against the vocabulary."""
    fn = entry_name()
    arr = np.asarray(be.to_numpy(ids) if be.is_tensor(ids) else ids)
    if arr.ndim == 2 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != 1 or arr.size == 0 or arr.dtype.kind not in "iu":
        fail(
            fn,
            arg,
            "one sequence of token ids, [T] or [1, T] ints (one sequence at a time)",
            f"{arr.dtype} array of shape {list(arr.shape)}",
            kind=ArgumentTypeError,
        )
    if vocab is not None and ((arr < 0) | (arr >= vocab)).any():
        bad = arr[(arr < 0) | (arr >= vocab)]
        fail(fn, arg, f"token ids in [0, {vocab - 1}] (the model's vocabulary)", f"id {int(bad[0])}")
    return arr.astype(np.int64)


def _greedy(be: Any, model: Any, ids: np.ndarray, like: Any, n: int) -> np.ndarray:
    """``n`` tokens generated greedily (argmax), without a cache: the full forward each step."""
    m, seq = be.family("tensor_math"), be.from_numpy(ids[None, :], like=like)
    for _ in range(n):
        nxt = m.argmax(logits_of(be, model(seq))[:, -1], -1)
        seq = m.cat([seq, be.cast(m.reshape(nxt, [1, 1]), be.dtype_name(seq))], 1)
    return be.to_numpy(seq).reshape(-1)[len(ids) :].astype(np.int64)


def _score(be: Any, token: int, contrast: int | None) -> Any:
    m = be.family("tensor_math")

    def score(out: Any) -> Any:
        last = logits_of(be, out)[:, -1]
        if contrast is None:
            return m.log_softmax(last, -1)[:, token]
        p = m.softmax(last, -1)
        return p[:, token] - p[:, contrast]

    return score


def _embedding_name(be: Any, model: Any, layer: Any, vocab: int) -> Any:
    """``layer`` when given; else the model's ``get_input_embeddings()`` (transformers, PaddleNLP), else
    its one token-embedding layer with a row per token of the vocabulary (the backend knows the class)."""
    if layer is not None:
        return layer
    get = getattr(model, "get_input_embeddings", None)
    emb = get() if callable(get) else None
    named = list(be.named_layers(model))
    for name, found in named:
        if emb is not None and found is emb:
            return name
    ops = be.family("attribution")
    tables = [(name, ops.embedding_rows(found)) for name, found in named]
    tables = [(name, rows) for name, rows in tables if rows is not None]
    fits = [name for name, rows in tables if rows == vocab]
    if len(fits) == 1:
        return fits[0]
    seen = ", ".join(f"{n or '(root)'!r} ({r} rows)" for n, r in tables) or "none"
    fail(
        entry_name(),
        "layer",
        f"the embedding layer's name: the model has no get_input_embeddings() and not one embedding layer with {vocab} rows (its vocabulary); embedding layers: {seen}",
        layer,
    )
