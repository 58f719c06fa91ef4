"""SAELens-format folders written by hand (cfg.json + safetensors) and numpy versions of each
architecture's formula, for tests/test_sae*.py (CI has no sae-lens)."""

from __future__ import annotations

import json
import os
import struct
from typing import Any

import numpy as np

CODES = {"float32": "F32", "float64": "F64", "float16": "F16", "int32": "I32"}


def write_safetensors(path: str, tensors: dict[str, np.ndarray]) -> None:
    header: dict[str, Any] = {}
    offset = 0
    for k, a in tensors.items():
        header[k] = {"dtype": CODES[a.dtype.name], "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for a in tensors.values():
            f.write(np.ascontiguousarray(a).tobytes())


def random_weights(arch: str, d_in: int, d_sae: int, rng: np.random.Generator, d_out: int | None = None) -> dict[str, np.ndarray]:
    d_out = d_out or d_in

    def r(*shape: int, scale: float = 0.5) -> np.ndarray:
        return (rng.normal(size=shape) * scale).astype(np.float32)

    if arch == "gated":
        return {
            "W_enc": r(d_in, d_sae),
            "b_gate": r(d_sae),
            "b_mag": r(d_sae),
            "r_mag": r(d_sae, scale=0.2),
            "W_dec": r(d_sae, d_in),
            "b_dec": r(d_in),
        }
    w = {"W_enc": r(d_in, d_sae), "b_enc": r(d_sae), "W_dec": r(d_sae, d_out), "b_dec": r(d_out)}
    if arch.startswith("jumprelu"):
        w["threshold"] = rng.uniform(0, 0.6, size=d_sae).astype(np.float32)
    if arch.endswith("skip_transcoder"):
        w["W_skip"] = r(d_out, d_in)
    if arch == "batchtopk":
        w["topk_threshold"] = np.asarray(0.3, dtype=np.float64)
    return w


def write_folder(folder: str, arch: str, weights: dict[str, np.ndarray], **cfg: Any) -> str:
    os.makedirs(folder, exist_ok=True)
    d_in, d_sae = weights["W_enc"].shape
    conf = {
        "architecture": arch,
        "d_in": int(d_in),
        "d_sae": int(d_sae),
        "dtype": "float32",
        "device": "cpu",
        "apply_b_dec_to_input": "transcoder" not in arch,
        "normalize_activations": "none",
        "metadata": {"sae_lens_version": "6.54.12", "hook_name": "blocks.0.hook_resid_post"},
    }
    if "transcoder" in arch:
        conf["d_out"] = int(weights["W_dec"].shape[1])
    conf.update(cfg)
    with open(os.path.join(folder, "cfg.json"), "w") as f:
        json.dump(conf, f)
    write_safetensors(os.path.join(folder, "sae_weights.safetensors"), weights)
    return folder


def relu(a: np.ndarray) -> np.ndarray:
    return np.maximum(a, 0)


def np_encode(
    arch: str, w: dict[str, np.ndarray], x: np.ndarray, k: int | None = None, apply_b_dec: bool = True, norm: str = "none"
) -> tuple[np.ndarray, Any]:
    x = x.astype(np.float64)
    state = None
    if norm == "constant_norm_rescale":
        coeff = np.sqrt(x.shape[-1]) / np.linalg.norm(x, axis=-1, keepdims=True)
        x, state = x * coeff, ("scale", coeff)
    if "transcoder" not in arch and apply_b_dec:
        x = x - w["b_dec"]
    if arch == "gated":
        active = (x @ w["W_enc"] + w["b_gate"]) > 0
        return active * relu(x @ (w["W_enc"] * np.exp(w["r_mag"])) + w["b_mag"]), state
    h = x @ w["W_enc"] + w["b_enc"]
    if arch == "topk":
        out = np.zeros_like(h)
        idx = np.argsort(-h, axis=-1)[..., :k]
        np.put_along_axis(out, idx, relu(np.take_along_axis(h, idx, -1)), -1)
        return out, state
    if arch == "batchtopk":
        return relu(h) * (h > float(w["topk_threshold"])), state
    if arch.startswith("jumprelu"):
        return relu(h) * (h > w["threshold"]), state
    return relu(h), state


def np_decode(arch: str, w: dict[str, np.ndarray], f: np.ndarray, state: Any = None) -> np.ndarray:
    out = f @ w["W_dec"] + w["b_dec"]
    if state is not None and state[0] == "scale" and "transcoder" not in arch:
        out = out / state[1]
    return out


def np_forward(arch: str, w: dict[str, np.ndarray], x: np.ndarray, **kw: Any) -> np.ndarray:
    f, state = np_encode(arch, w, x, **kw)
    out = np_decode(arch, w, f, state)
    if "W_skip" in w:
        out = out + x.astype(np.float64) @ w["W_skip"].T
    return out
