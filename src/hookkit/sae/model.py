"""``hookkit.SAE``: a sparse autoencoder or transcoder in SAELens's format, on either framework.

The formulas are SAELens 6's (``StandardSAE``, ``TopKSAE``, ``JumpReLUSAE``, ``GatedSAE``, the
transcoders, and a batch-top-k training checkpoint in its inference form, a JumpReLU with the learned
threshold), written once with the tensors' operators and the ``sae`` op family.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from hookkit.backends import Backend, backend_for
from hookkit.core.entry import public_entry
from hookkit.core.registry import backend_named
from hookkit.core.validate import ArgumentTypeError, fail
from hookkit.sae.files import (
    CFG_FILE,
    WEIGHTS_FILE,
    SAEFileError,
    check_folder,
    inside,
    read_cfg,
    read_safetensors,
    write_json,
    write_safetensors,
)

SAE_ARCHITECTURES = (
    "standard",
    "topk",
    "batchtopk",
    "jumprelu",
    "gated",
    "transcoder",
    "skip_transcoder",
    "jumprelu_transcoder",
    "jumprelu_skip_transcoder",
)
NORMALIZATIONS = ("none", "expected_average_only_in", "constant_norm_rescale", "layer_norm", "covariance_whitening")
_LN_EPS = 1e-5


def expected_shapes(arch: str, d_in: int, d_sae: int, d_out: int) -> dict[str, tuple[int, ...]]:
    """The weights an architecture holds and their shapes (SAELens's state-dict names)."""
    if arch == "gated":
        return {"W_enc": (d_in, d_sae), "b_gate": (d_sae,), "b_mag": (d_sae,), "r_mag": (d_sae,), "W_dec": (d_sae, d_in), "b_dec": (d_in,)}
    out = {"W_enc": (d_in, d_sae), "b_enc": (d_sae,), "W_dec": (d_sae, d_out), "b_dec": (d_out,)}
    if arch == "batchtopk":
        out["topk_threshold"] = ()
    if arch.startswith("jumprelu"):
        out["threshold"] = (d_sae,)
    if arch.endswith("skip_transcoder"):
        out["W_skip"] = (d_out, d_in)
    return out


def _dim(cfg: Mapping[str, Any], key: str, where: str) -> int:
    v = cfg.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        raise SAEFileError(f"{where}: {key!r} must be a positive integer; got {v!r}")
    return v


def _dtype_name(value: Any) -> str:
    name = str(value or "float32").rpartition(".")[2]
    return name


class SAE:
    """A sparse autoencoder (or transcoder) whose ``encode``/``decode``/``forward`` equal SAELens's.

    >>> sae = hookkit.SAE.load("saes/blocks.6.hook_resid_post", like=model)   # doctest: +SKIP
    >>> feats = sae.encode(x)            # [..., d_sae]
    >>> x_hat = sae.decode(feats)        # [..., d_in] (d_out for a transcoder)

    Made by ``SAE.load``, ``SAE.from_arrays``, ``SAE.from_sae_lens`` or ``train_sae``.
    Attributes: ``architecture``, ``d_in``, ``d_sae``, ``d_out``, ``k`` (top-k), ``hook_name`` (and
    ``hook_name_out`` for a transcoder), ``cfg`` (the config as SAELens writes it), ``weights``
    (name -> tensor), ``W_enc``, ``W_dec``, ``b_enc``, ``b_dec``.
    """

    def __init__(
        self,
        cfg: Mapping[str, Any],
        arrays: Mapping[str, np.ndarray],
        *,
        backend: Backend,
        device: str | None,
        dtype: str | None,
        where: str = "arrays",
    ):
        cfg = dict(cfg)
        arch, d_in, d_sae, d_out, norm, reshape = _check_cfg(cfg, where)
        self.is_transcoder = "transcoder" in arch
        arrays = _checked_weights(cfg, arrays, expected_shapes(arch, d_in, d_sae, d_out), where)
        if arch == "batchtopk":
            arch = _batchtopk_as_jumprelu(cfg, arrays, d_sae)
        self.architecture: str = arch
        self.cfg = cfg
        self.d_in, self.d_sae, self.d_out = d_in, d_sae, d_out
        self.k: int | None = cfg.get("k") if arch == "topk" else None
        meta: dict[str, Any] = cfg["metadata"] if isinstance(cfg.get("metadata"), dict) else {}
        self.hook_name: str | None = meta.get("hook_name", cfg.get("hook_name"))
        self.hook_name_out: str | None = meta.get("hook_name_out", cfg.get("hook_name_out"))
        self.apply_b_dec_to_input = bool(cfg.get("apply_b_dec_to_input", not self.is_transcoder)) and not self.is_transcoder
        self.normalize_activations: str = norm
        self.reshape_hook_z = reshape == "hook_z"
        self.rescale_acts_by_decoder_norm = bool(cfg.get("rescale_acts_by_decoder_norm", False)) and arch == "topk"
        self.backend = backend
        self.ops = backend.family("sae")
        self.dtype: str = _dtype_name(dtype or cfg.get("dtype"))
        if self.dtype not in ("float16", "bfloat16", "float32", "float64"):
            raise SAEFileError(f"{where}: dtype {self.dtype!r} is not a floating dtype (float32, float16, bfloat16, float64)")
        self.device = device
        # bfloat16 has no numpy dtype: its values go as float32 and are cast on the framework's side
        self.weights: dict[str, Any] = {
            key: self.ops.tensor(a.astype(np.float32) if self.dtype == "bfloat16" else a, device, self.dtype) for key, a in arrays.items()
        }
        self.cfg["dtype"] = self.dtype
        self._derived()
        self._last_state: Any = None

    def _derived(self) -> None:
        w = self.weights
        self.W_enc, self.W_dec, self.b_dec = w["W_enc"], w["W_dec"], w["b_dec"]
        self.b_enc = w.get("b_enc")
        self.threshold = w.get("threshold")
        self._W_mag = self.W_enc * self.ops.exp(w["r_mag"]) if self.architecture == "gated" else None
        self._W_skip_T = w["W_skip"].T if "W_skip" in w else None
        self._dec_norm = self.ops.row_norm(self.W_dec) if self.rescale_acts_by_decoder_norm else None

    # -- constructors -----------------------------------------------------------------------------
    @classmethod
    @public_entry("SAE.load")
    def load(
        cls,
        folder: str | os.PathLike,
        *,
        framework: str | None = None,
        like: Any = None,
        device: str | None = None,
        dtype: str | None = None,
    ) -> SAE:
        """Read a folder SAELens's ``save_model`` wrote (``cfg.json`` + ``sae_weights.safetensors``).

        ``folder``: the folder holding ``cfg.json`` and ``sae_weights.safetensors``.
        ``like``: a model or tensor whose framework, device and (floating) dtype the weights take.
        ``framework``: "torch" or "paddle", when no ``like`` is given (default: torch when installed).
        ``device``: where the weights go, such as "cpu" or "cuda:0" (default: ``like``'s device, else
        the framework's default one).
        ``dtype``: "float32", "float16", "bfloat16" or "float64", overriding ``like``'s and the config's.

        >>> sae = hookkit.SAE.load("my_sae", like=model)   # doctest: +SKIP
        """
        path = check_folder(folder)
        cfg = read_cfg(path)
        weights_path = inside(path, WEIGHTS_FILE)
        arrays = read_safetensors(weights_path)
        backend, device, dtype = _placement(framework, like, device, dtype)
        return cls(
            cfg,
            arrays,
            backend=backend,
            device=device,
            dtype=dtype or cfg.get("dtype"),
            where=f"{weights_path} (config {os.path.join(path, CFG_FILE)})",
        )

    @classmethod
    @public_entry("SAE.from_arrays")
    def from_arrays(
        cls,
        *,
        W_enc: Any,
        W_dec: Any,
        b_dec: Any,
        b_enc: Any = None,
        architecture: str = "standard",
        threshold: Any = None,
        k: int | None = None,
        b_gate: Any = None,
        b_mag: Any = None,
        r_mag: Any = None,
        W_skip: Any = None,
        apply_b_dec_to_input: bool | None = None,
        normalize_activations: str = "none",
        rescale_acts_by_decoder_norm: bool = False,
        hook_name: str | None = None,
        framework: str | None = None,
        like: Any = None,
        device: str | None = None,
        dtype: str | None = None,
    ) -> SAE:
        """An SAE from weight arrays (numpy arrays or tensors) in SAELens's shapes; ``d_in`` and ``d_sae``
        are read from ``W_enc``, a transcoder's ``d_out`` from ``W_dec``.

        ``W_enc``: the encoder ``[d_in, d_sae]``.
        ``W_dec``: the decoder ``[d_sae, d_in]`` (``[d_sae, d_out]`` for a transcoder).
        ``b_dec``: the decoder's bias ``[d_in]`` (``[d_out]`` for a transcoder).
        ``b_enc``: the encoder's bias ``[d_sae]``, for every architecture but "gated".
        ``architecture``: "standard" (the default), "topk", "batchtopk", "jumprelu", "gated",
        "transcoder", "skip_transcoder", "jumprelu_transcoder" or "jumprelu_skip_transcoder".
        ``threshold``: the JumpReLU thresholds ``[d_sae]``, or for "batchtopk" the one learned threshold
        (a number).
        ``k``: the number of features kept per row, required for "topk".
        ``b_gate`` / ``b_mag`` / ``r_mag``: a "gated" SAE's gate bias, magnitude bias and magnitude
        rescaling (the log of a scale), each ``[d_sae]``.
        ``W_skip``: a skip transcoder's skip connection ``[d_out, d_in]`` (``forward`` adds ``x @ W_skip.T``).
        ``apply_b_dec_to_input``: subtract ``b_dec`` from the input before encoding (default: True for
        an SAE, while a transcoder never does).
        ``normalize_activations``: SAELens's input normalisation, "none" by default: "constant_norm_rescale"
        and "layer_norm" normalise each row before encoding and undo it after decoding, while
        "expected_average_only_in" and "covariance_whitening" are accepted and leave the input as it is.
        ``rescale_acts_by_decoder_norm``: for "topk", multiply the pre-activations by the norms of the
        decoder's rows before keeping the top ``k`` (and divide the features by them before decoding).
        ``hook_name``: the site the SAE reads, kept in its config (``splice`` uses it when given no site).
        ``framework``: "torch" or "paddle" (default: the framework of the tensors given, else torch when
        installed).
        ``like``: a model or tensor whose framework, device and (floating) dtype the weights take
        (default: the first tensor given, when any).
        ``device``: where the weights go, such as "cpu" or "cuda:0" (default: ``like``'s device, else
        the framework's default one).
        ``dtype``: "float32", "float16", "bfloat16" or "float64" (default: ``like``'s floating dtype,
        else ``W_enc``'s).

        >>> sae = hookkit.SAE.from_arrays(W_enc=We, b_enc=be, W_dec=Wd, b_dec=bd, architecture="topk", k=32)   # doctest: +SKIP
        """
        given = {
            "W_enc": W_enc,
            "b_enc": b_enc,
            "W_dec": W_dec,
            "b_dec": b_dec,
            "b_gate": b_gate,
            "b_mag": b_mag,
            "r_mag": r_mag,
            "W_skip": W_skip,
        }
        if architecture not in SAE_ARCHITECTURES:
            fail("SAE.from_arrays", "architecture", f"one of {', '.join(SAE_ARCHITECTURES)}", architecture)
        if threshold is not None:
            given["topk_threshold" if architecture == "batchtopk" else "threshold"] = threshold
        arrays = {key: _numpy(v) for key, v in given.items() if v is not None}
        if framework is None and like is None:
            like = next((v for v in given.values() if v is not None and not isinstance(v, (np.ndarray, list, tuple, float, int))), None)
        W = arrays["W_enc"]
        if W.ndim != 2:
            fail("SAE.from_arrays", "W_enc", "a 2-D array [d_in, d_sae]", f"shape {list(W.shape)}")
        cfg: dict[str, Any] = {
            "architecture": architecture,
            "d_in": int(W.shape[0]),
            "d_sae": int(W.shape[1]),
            "dtype": dtype or str(arrays["W_enc"].dtype),
            "apply_b_dec_to_input": ("transcoder" not in architecture) if apply_b_dec_to_input is None else apply_b_dec_to_input,
            "normalize_activations": normalize_activations,
            "metadata": {"hook_name": hook_name} if hook_name else {},
        }
        if "transcoder" in architecture:
            cfg["d_out"] = int(np.shape(arrays["W_dec"])[-1])
        if architecture == "topk":
            if k is None:
                fail("SAE.from_arrays", "k", "the number of features kept (an int) for architecture='topk'", k)
            cfg["k"] = k
            cfg["rescale_acts_by_decoder_norm"] = rescale_acts_by_decoder_norm
        backend, dev, dt = _placement(framework, like, device, dtype)
        return cls(cfg, arrays, backend=backend, device=dev, dtype=dt or cfg["dtype"], where="SAE.from_arrays()")

    @classmethod
    @public_entry("SAE.from_sae_lens")
    def from_sae_lens(
        cls, sae: Any, *, framework: str | None = None, like: Any = None, device: str | None = None, dtype: str | None = None
    ) -> SAE:
        """The same SAE as a SAELens object (``StandardSAE``, ``TopKSAE``..., or a training SAE).

        ``sae``: the SAELens SAE (its ``cfg`` and ``state_dict()`` are read, it is not changed).
        ``framework``: "torch" or "paddle" (default: the SAELens SAE's framework, torch).
        ``like``: a model or tensor whose framework, device and (floating) dtype the weights take.
        ``device``: where the weights go, such as "cpu" or "cuda:0" (default: ``like``'s device, else
        the framework's default one).
        ``dtype``: "float32", "float16", "bfloat16" or "float64" (default: ``like``'s floating dtype,
        else the SAELens config's).

        >>> mine = hookkit.SAE.from_sae_lens(sae_lens_sae)   # doctest: +SKIP
        """
        cfg = sae.cfg.to_dict()
        state = sae.state_dict()
        be = backend_for(next(iter(state.values())))
        arrays = {k: _host(be, v) for k, v in state.items()}
        if cfg.get("architecture") == "batchtopk" and "topk_threshold" not in arrays:
            raise SAEFileError("SAE.from_sae_lens(): a batch-top-k SAE without its 'topk_threshold' buffer")
        if framework is None and like is None:
            framework = be.name
        backend, dev, dt = _placement(framework, like, device, dtype)
        return cls(cfg, arrays, backend=backend, device=dev, dtype=dt or cfg.get("dtype"), where=f"SAE.from_sae_lens({type(sae).__name__})")

    @public_entry("SAE.to")
    def to(self, *, like: Any = None, framework: str | None = None, device: str | None = None, dtype: str | None = None) -> SAE:
        """A copy of this SAE on another framework, device or dtype (this one is left as it is).

        ``like``: a model or tensor whose framework, device and (floating) dtype the copy takes.
        ``framework``: "torch" or "paddle" (default: this SAE's, on its device).
        ``device``: where the copy's weights go, such as "cpu" or "cuda:0" (default: ``like``'s device,
        else this SAE's when neither ``like`` nor ``framework`` is given, else the framework's default one).
        ``dtype``: "float32", "float16", "bfloat16" or "float64" (default: ``like``'s floating dtype,
        else this SAE's).

        >>> sae_paddle = sae.to(framework="paddle")   # doctest: +SKIP
        """
        arrays = self.state_arrays()
        if framework is None and like is None:
            framework = self.backend.name
            device = device or self.device
        backend, dev, dt = _placement(framework, like, device, dtype)
        return type(self)(self.cfg, arrays, backend=backend, device=dev, dtype=dt or self.dtype)

    # -- the formulas ------------------------------------------------------------------------------
    def _encode(self, x: Any) -> tuple[Any, Any]:
        """Features and the normalisation state ``decode`` needs (None when stateless)."""
        ops = self.ops
        x = self.backend.cast(x, self.dtype)
        state: Any = None
        if self.reshape_hook_z:
            state = ("z", tuple(x.shape[-2:]))
            x = x.reshape([*x.shape[:-2], -1])
        norm = self.normalize_activations
        if norm == "constant_norm_rescale":
            coeff = (self.d_in**0.5) / ops.row_norm(x, keepdim=True)
            x = x * coeff
            state = (state, "scale", coeff)
        elif norm == "layer_norm":
            mu, std = ops.mean_std(x)
            x = (x - mu) / (std + _LN_EPS)
            state = (state, "ln", mu, std)
        elif state is not None:
            state = (state, None)
        if self.apply_b_dec_to_input:
            x = x - self.b_dec
        arch = self.architecture
        if arch == "gated":
            active = ops.greater(x @ self.W_enc + self.weights["b_gate"], 0.0)
            return active * ops.relu(x @ self._W_mag + self.weights["b_mag"]), state
        hidden = x @ self.W_enc + self.b_enc
        if arch == "topk":
            if self._dec_norm is not None:
                hidden = hidden * self._dec_norm
            return ops.topk_dense(hidden, self.k), state
        acts = ops.relu(hidden)
        if self.threshold is not None:
            acts = acts * ops.greater(hidden, self.threshold)
        return acts, state

    def _decode(self, feats: Any, state: Any) -> Any:
        if self._dec_norm is not None:
            feats = feats * (1 / self._dec_norm)
        out = feats @ self.W_dec + self.b_dec
        if self.is_transcoder or state is None:
            return out
        z, kind, *vals = state
        if kind == "scale":
            out = out / vals[0]
        elif kind == "ln":
            out = out * vals[1] + vals[0]
        if z is not None:
            out = out.reshape([*out.shape[:-1], *z[1]])
        return out

    def encode(self, x: Any) -> Any:
        """Feature activations ``[..., d_sae]`` of activations ``x [..., d_in]``, in the SAE's dtype.

        ``x``: activations of the SAE's site, a tensor ``[..., d_in]`` of its framework (cast to the
        SAE's dtype)."""
        feats, state = self._encode(x)
        if state is not None:
            self._last_state = state
        return feats

    def decode(self, feats: Any) -> Any:
        """The reconstruction ``[..., d_in]`` (``d_out`` for a transcoder) of feature activations; an
        SAE that normalises its input uses the norm of the last ``encode``, as SAELens does.

        ``feats``: feature activations ``[..., d_sae]``, such as ``encode`` returns (changed or not)."""
        state, self._last_state = self._last_state, None
        return self._decode(feats, state)

    def forward(self, x: Any) -> Any:
        """``decode(encode(x))``, plus ``x @ W_skip.T`` for a skip transcoder.

        ``x``: activations of the SAE's site, a tensor ``[..., d_in]`` of its framework."""
        feats, state = self._encode(x)
        out = self._decode(feats, state)
        if self._W_skip_T is not None:
            out = out + self.backend.cast(x, self.dtype) @ self._W_skip_T
        return out

    __call__ = forward

    def features_to_output(self, x: Any, feats: Any, clean: Any, state: Any) -> Any:
        """The spliced output: ``x + decode(feats) - decode(clean)`` (the error term kept), in ``x``'s dtype;
        ``x`` itself when ``feats`` is ``clean``.

        ``x``: the site's activation that ``clean`` was encoded from.
        ``feats``: the features as the verbs on the features' site left them, ``[..., d_sae]``.
        ``clean``: the features as encoded from ``x``, ``[..., d_sae]``.
        ``state``: the input normalisation computed while encoding ``x`` (None when the SAE does not
        normalise), which both decodes undo."""
        if feats is clean:
            return x
        return x + self.backend.cast(self._decode(feats, state) - self._decode(clean, state), self.backend.dtype_name(x))

    # -- saving ------------------------------------------------------------------------------------
    def state_arrays(self) -> dict[str, np.ndarray]:
        """The weights as float32/float64 numpy arrays under SAELens's names (a host copy)."""
        return {k: _host(self.backend, v) for k, v in self.weights.items()}

    def save(self, folder: str | os.PathLike) -> str:
        """Write the SAE as SAELens's ``save_model`` does: ``cfg.json`` + ``sae_weights.safetensors``
        (loads with ``sae_lens.SAE.load_from_disk``); returns the folder.

        ``folder``: the folder to write into (created when missing, its two files replaced).

        >>> sae.save("my_sae")   # doctest: +SKIP
        """
        folder = os.fspath(folder)
        os.makedirs(folder, exist_ok=True)
        arrays = self.state_arrays()
        if self.dtype in ("float16",):
            arrays = {k: v.astype(np.float16) for k, v in arrays.items()}
        write_safetensors(os.path.join(folder, WEIGHTS_FILE), arrays)
        write_json(os.path.join(folder, CFG_FILE), self.cfg)
        return folder

    def __repr__(self) -> str:
        extra = f", k={self.k}" if self.k else ""
        out = f", d_out={self.d_out}" if self.is_transcoder else ""
        return f"SAE({self.architecture!r}, d_in={self.d_in}, d_sae={self.d_sae}{out}{extra}, hook_name={self.hook_name!r}, {self.backend.name} {self.dtype})"


def _check_cfg(cfg: dict[str, Any], where: str) -> tuple[str, int, int, int, str, str]:
    """``(architecture, d_in, d_sae, d_out, normalize_activations, reshape_activations)``, checked."""
    arch = cfg.get("architecture", "standard")
    if arch not in SAE_ARCHITECTURES:
        raise SAEFileError(f"{where}: architecture {arch!r} is not supported; supported: {', '.join(SAE_ARCHITECTURES)}")
    d_in, d_sae = _dim(cfg, "d_in", where), _dim(cfg, "d_sae", where)
    d_out = _dim(cfg, "d_out", where) if "transcoder" in arch else d_in
    norm = cfg.get("normalize_activations", "none")
    if norm not in NORMALIZATIONS:
        raise SAEFileError(f"{where}: normalize_activations {norm!r} is not one of {', '.join(NORMALIZATIONS)}")
    reshape = cfg.get("reshape_activations", "none")
    if reshape not in ("none", "hook_z"):
        raise SAEFileError(f"{where}: reshape_activations {reshape!r} is not 'none' or 'hook_z'")
    if arch == "topk":
        k = cfg.get("k", 100)
        if not isinstance(k, int) or isinstance(k, bool) or not 0 < k <= d_sae:
            raise SAEFileError(f"{where}: 'k' must be an integer in 1..d_sae={d_sae}; got {k!r}")
    return arch, d_in, d_sae, d_out, norm, reshape


def _checked_weights(
    cfg: dict[str, Any], arrays: Mapping[str, Any], shapes: dict[str, tuple[int, ...]], where: str
) -> dict[str, np.ndarray]:
    """The weights an architecture holds, each present, of its shape and a floating dtype; no others."""
    dims = f"d_in={cfg['d_in']}, d_sae={cfg['d_sae']}"
    if "transcoder" in cfg.get("architecture", ""):
        dims += f", d_out={cfg['d_out']}"
    for key, shape in shapes.items():
        if key not in arrays:
            raise SAEFileError(
                f"{where}: key {key!r} missing (expected shape {list(shape)} from {dims}; architecture {cfg.get('architecture')!r} holds {', '.join(shapes)})"
            )
        got = tuple(np.shape(arrays[key]))
        if got != shape:
            raise SAEFileError(f"{where}: key {key!r} has shape {list(got)}; expected {list(shape)} (from {dims} in the config)")
        kind = np.asarray(arrays[key]).dtype
        if not np.issubdtype(kind, np.floating):
            raise SAEFileError(
                f"{where}: key {key!r} has dtype {kind}; expected a floating dtype (the config's {cfg.get('dtype', 'float32')!r})"
            )
    extra = sorted(set(arrays) - set(shapes))
    if extra:
        raise SAEFileError(
            f"{where}: unexpected keys {', '.join(map(repr, extra))} for architecture {cfg.get('architecture')!r} (holds {', '.join(shapes)})"
        )
    return {k: np.asarray(arrays[k]) for k in shapes}


def _batchtopk_as_jumprelu(cfg: dict[str, Any], arrays: dict[str, np.ndarray], d_sae: int) -> str:
    """SAELens's inference form of a batch-top-k checkpoint, in place: a JumpReLU at the learned
    threshold, the decoder norms folded in when it rescaled by them."""
    thr = float(arrays.pop("topk_threshold"))
    if cfg.get("rescale_acts_by_decoder_norm"):
        norms = np.linalg.norm(arrays["W_dec"].astype(np.float64), axis=-1).astype(arrays["W_dec"].dtype)
        arrays["b_enc"] = arrays["b_enc"] * norms
        arrays["W_dec"] = arrays["W_dec"] / norms[:, None]
        arrays["W_enc"] = arrays["W_enc"] * norms[None, :]
        cfg["rescale_acts_by_decoder_norm"] = False
    arrays["threshold"] = np.full((d_sae,), thr, dtype=arrays["b_enc"].dtype)
    cfg["architecture"] = "jumprelu"
    return "jumprelu"


def _host(be: Backend, t: Any) -> np.ndarray:
    name = be.dtype_name(t)
    if name == "bfloat16":
        t = be.cast(t, "float32")
    return np.asarray(be.to_numpy(be.detach(t)))


def _numpy(v: Any) -> np.ndarray:
    if isinstance(v, (np.ndarray, list, tuple, float, int, np.floating)):
        return np.asarray(v)
    try:
        be = backend_for(v)
    except Exception:
        fail("SAE.from_arrays", "weights", "numpy arrays or tensors", type(v).__name__, kind=ArgumentTypeError)
    return _host(be, v)


def _placement(framework: str | None, like: Any, device: str | None, dtype: str | None) -> tuple[Backend, str | None, str | None]:
    """(backend, device, dtype override) from ``framework=`` / ``like=``."""
    if like is not None:
        be = backend_for(like)
        t = like if be.is_tensor(like) else next(iter(be.parameters(like, recurse=True)), None)
        if framework is not None and framework != be.name:
            fail(None, "framework", f"{be.name!r} (the framework of like=) or None", framework)
        if t is None:
            return be, device, dtype
        name = be.dtype_name(t)
        return be, device or be.device_of(t), dtype or (name if name in ("float16", "bfloat16", "float32", "float64") else None)
    if framework is None:
        for name in ("torch", "paddle"):
            try:
                return backend_named(name), device, dtype
            except Exception:  # noqa: S112 - not installed: try the next
                continue
        fail(None, "framework", "an installed framework ('torch' or 'paddle')", framework)
    if framework not in ("torch", "paddle"):
        fail(None, "framework", "'torch' or 'paddle' (or like=model)", framework)
    return backend_named(framework), device, dtype
