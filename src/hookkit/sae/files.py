"""SAELens's folder format, read and written as data: ``cfg.json`` and ``sae_weights.safetensors``.

The safetensors header is parsed with ``json`` and checked against the file (header length, dtypes,
shapes, offsets inside the data region); nothing else in the folder is opened, and pickle files
(``.pt``, ``.pkl``, ``.bin``, ``.ckpt``) are refused: a folder someone sent you runs no code.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any

import numpy as np

from hookkit.core.errors import HookkitError
from hookkit.core.files import InvalidFile, read_json_file

CFG_FILE = "cfg.json"
WEIGHTS_FILE = "sae_weights.safetensors"
PICKLE_SUFFIXES = (".pt", ".pth", ".pkl", ".pickle", ".bin", ".ckpt")
_MAX_HEADER = 100 * 2**20
# safetensors dtype codes readable here; BF16 is widened to float32 on the host (exactly)
_CODES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64", "I32": "int32"}
_ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4}


class SAEFileError(InvalidFile):
    """An SAE folder or file is missing, malformed, or does not match its config: the message names
    the file, the key and what was expected."""


def inside(folder: str, name: str) -> str:
    """``folder/name``, refused when it resolves outside ``folder`` (a link pointing elsewhere)."""
    path = os.path.join(folder, name)
    real, root = os.path.realpath(path), os.path.realpath(folder)
    if os.path.commonpath([real, root]) != root:
        raise SAEFileError(f"{path}: resolves outside the folder {folder!r} (to {real!r}); an SAE folder is read only inside itself")
    return path


def check_folder(folder: Any) -> str:
    """The folder as a string, refused when it is a pickle file or has no safetensors weights."""
    folder = os.fspath(folder)
    if os.path.isfile(folder):
        if folder.endswith(PICKLE_SUFFIXES):
            raise SAEFileError(f"{folder}: a pickle file; hookkit reads SAE weights from safetensors only (pickle runs code on load)")
        raise SAEFileError(f"{folder}: a file; SAE.load takes a folder holding {CFG_FILE} and {WEIGHTS_FILE}")
    if not os.path.isdir(folder):
        raise SAEFileError(f"{folder}: no such folder (expected a folder holding {CFG_FILE} and {WEIGHTS_FILE})")
    names = os.listdir(folder)
    if WEIGHTS_FILE not in names:
        pickled = [n for n in names if n.endswith(PICKLE_SUFFIXES)]
        hint = f"; found {', '.join(sorted(pickled)[:3])}: pickle files are never read (they run code on load)" if pickled else ""
        raise SAEFileError(f"{os.path.join(folder, WEIGHTS_FILE)}: missing{hint}")
    if CFG_FILE not in names:
        raise SAEFileError(f"{os.path.join(folder, CFG_FILE)}: missing")
    return folder


def read_cfg(folder: str) -> dict[str, Any]:
    path = inside(folder, CFG_FILE)
    cfg = read_json_file(path, "an SAE config")
    if not isinstance(cfg, dict):
        raise SAEFileError(f"{path}: expected a JSON object; got {type(cfg).__name__}")
    return cfg


def read_safetensors(path: str) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file as a numpy array (``bfloat16`` as float32, exactly)."""
    size = os.path.getsize(path)
    if size < 8:
        raise SAEFileError(f"{path}: {size} bytes, too short for a safetensors file")
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > min(_MAX_HEADER, size - 8):
            raise SAEFileError(f"{path}: header length {n} exceeds the file ({size} bytes)")
        try:
            header = json.loads(f.read(n).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise SAEFileError(f"{path}: the header is not valid JSON ({e})") from None
        if not isinstance(header, dict):
            raise SAEFileError(f"{path}: the header must be a JSON object")
        header.pop("__metadata__", None)
        data = f.read()
    return {key: _entry(path, key, entry, data) for key, entry in header.items()}


def _entry(path: str, key: str, entry: Any, data: bytes) -> np.ndarray:
    """One tensor of a safetensors file, its header entry checked against the data region."""
    at = f"{path}, key {key!r}"
    if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= set(entry):
        raise SAEFileError(f"{at}: expected dtype, shape, data_offsets")
    dtype = _CODES.get(entry["dtype"]) if isinstance(entry["dtype"], str) else None
    if dtype is None:
        raise SAEFileError(f"{at}: dtype {entry['dtype']!r} is not readable; readable: {', '.join(_CODES)}")
    shape, offs = entry["shape"], entry["data_offsets"]
    if not (isinstance(shape, list) and all(_count(s) for s in shape)):
        raise SAEFileError(f"{at}: shape must be a list of non-negative integers; got {shape!r}"[:300])
    if not (isinstance(offs, list) and len(offs) == 2 and all(_count(o) for o in offs)):
        raise SAEFileError(f"{at}: data_offsets must be [start, end]; got {offs!r}"[:300])
    start, end = offs
    count = int(np.prod(shape, dtype=np.int64))
    if not start <= end <= len(data) or end - start != count * _ITEMSIZE[dtype]:
        raise SAEFileError(f"{at}: data_offsets [{start}, {end}] do not hold shape {shape} of {dtype} inside the file")
    raw = np.frombuffer(data, dtype="<u2" if dtype == "bfloat16" else np.dtype(dtype).newbyteorder("<"), count=count, offset=start)
    if dtype == "bfloat16":
        raw = (raw.astype(np.uint32) << 16).view(np.float32)
    return raw.reshape(shape).astype(raw.dtype.newbyteorder("="), copy=True)


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def write_safetensors(path: str, tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> None:
    """Write numpy arrays as one safetensors file, atomically (a temporary file, then a rename)."""
    codes = {v: k for k, v in _CODES.items() if k != "BF16"}
    header: dict[str, Any] = {"__metadata__": metadata} if metadata else {}
    offset = 0
    arrays = {}
    for key, a in tensors.items():
        a = np.asarray(a)
        a = a if a.flags.c_contiguous else a.copy(order="C")  # ascontiguousarray would make a 0-d array 1-d
        code = codes.get(a.dtype.name)
        if code is None:
            raise HookkitError(f"cannot store dtype {a.dtype.name} for {key!r} in {path}")
        header[key] = {"dtype": code, "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        arrays[key] = a
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for a in arrays.values():
            f.write(a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_json(path: str, obj: Any) -> None:
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
