"""Features on disk: sharded safetensors files plus ``index.json``, written by ``hookkit.extract``
and read back, memory-mapped, by ``hookkit.load_features``.

The safetensors header is parsed here with ``json`` and every field is checked against the file
(header length, dtypes, shapes, offsets), and shard names in the index must be plain file names
inside the folder: a folder someone sent you runs no code and reads nothing outside its files.
"""

from __future__ import annotations

import bisect
import json
import mmap
import os
import re
import struct
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from hookkit.core.errors import HookkitError

FORMAT = "hookkit.features"
VERSION = 1
INDEX = "index.json"
# safetensors dtype codes <-> numpy (little-endian). bfloat16 has no numpy dtype: not stored.
DTYPES = {
    "F16": "float16",
    "F32": "float32",
    "F64": "float64",
    "I8": "int8",
    "I16": "int16",
    "I32": "int32",
    "I64": "int64",
    "U8": "uint8",
    "U16": "uint16",
    "U32": "uint32",
    "U64": "uint64",
    "BOOL": "bool",
}
CODES = {v: k for k, v in DTYPES.items()}
_MAX_HEADER = 100 * 2**20  # the safetensors library's own limit
_MAX_INDEX = 256 * 2**20
_SHARD_NAME = re.compile(r"shard-(?:r[0-9]{5}-)?[0-9]{5,}\.safetensors")
_RANK_INDEX = re.compile(r"index-rank[0-9]{5}\.json")
SAMPLE_KEY = ":sample"  # per row, the sample's index in the data set (multi-rank folders)


class FeaturesError(HookkitError, ValueError):
    """A features folder (index or shard) is malformed, inconsistent, or points outside itself."""


class ExtractError(HookkitError, ValueError):
    """Bad arguments or data for ``hookkit.extract``; the message names the argument, layer or batch."""


def shard_name(k: int, rank: int | None = None) -> str:
    """The k-th shard's file: ``shard-00003.safetensors``; of a rank in a multi-rank run ``shard-r00001-00003.safetensors``."""
    return f"shard-{k:05d}.safetensors" if rank is None else f"shard-r{rank:05d}-{k:05d}.safetensors"


def rank_index_name(rank: int) -> str:
    """The index of one rank's shards in a multi-rank run: ``index-rank00001.json``."""
    return f"index-rank{rank:05d}.json"


# -- writing --------------------------------------------------------------------------------------
def write_shard(path: str, chunks: dict[str, list[np.ndarray]], metadata: dict[str, str] | None = None) -> int:
    """Write one safetensors file atomically (a temporary file, then ``os.replace``); each entry is
    the row-wise concatenation of its chunks, written chunk by chunk (never concatenated in memory).
    Returns the file's size in bytes."""
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = metadata
    offset = 0
    for name, parts in chunks.items():
        first = parts[0]
        code = CODES.get(first.dtype.name)
        if code is None:
            raise FeaturesError(f"cannot store dtype {first.dtype.name} for {name!r}; storable: {', '.join(CODES)}")
        rows = sum(int(p.shape[0]) for p in parts)
        size = sum(p.nbytes for p in parts)
        header[name] = {"dtype": code, "shape": [rows, *first.shape[1:]], "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data region starts 8-byte aligned
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for parts in chunks.values():
            for p in parts:
                f.write(np.ascontiguousarray(p).data.cast("B"))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return 8 + len(text) + offset


def write_json(path: str, obj: Any) -> None:
    """Write JSON atomically: a reader (or a resumed run) sees the old file or the new one, whole."""
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# -- reading: validation ----------------------------------------------------------------------------
def _int(value: Any, what: str, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise FeaturesError(f"{where}: {what} must be a non-negative integer; got {value!r}")
    return value


def _shape(value: Any, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) > 64:
        raise FeaturesError(f"{where}: shape must be a list of at most 64 integers; got {value!r}"[:300])
    return tuple(_int(v, "each dimension", where) for v in value)


def _prod(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def read_header(path: str) -> tuple[dict[str, tuple[str, tuple[int, ...], int, int]], dict[str, str], int]:
    """Parse and check a safetensors header: ``({name: (numpy dtype, shape, start, end)}, metadata,
    data start)``; offsets are relative to the data region, checked to lie inside the file."""
    where = f"shard {os.path.basename(path)!r}"
    size = os.path.getsize(path)
    if size < 8:
        raise FeaturesError(f"{where}: {size} bytes, too short for a safetensors file")
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > min(_MAX_HEADER, size - 8):
            raise FeaturesError(f"{where}: header length {n} exceeds the file ({size} bytes) or the {_MAX_HEADER}-byte limit")
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise FeaturesError(f"{where}: the header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise FeaturesError(f"{where}: the header must be a JSON object; got {type(header).__name__}")
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise FeaturesError(f"{where}: __metadata__ must map strings to strings")
    data_size = size - 8 - n
    out = {}
    for name, entry in header.items():
        at = f"{where}, tensor {name!r}"
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise FeaturesError(f"{at}: expected keys dtype, shape, data_offsets; got {entry!r}"[:300])
        dtype = DTYPES.get(entry["dtype"]) if isinstance(entry["dtype"], str) else None
        if dtype is None:
            raise FeaturesError(f"{at}: dtype {entry['dtype']!r} is not readable; readable: {', '.join(DTYPES)}"[:300])
        shape = _shape(entry["shape"], at)
        offsets = entry["data_offsets"]
        if not isinstance(offsets, list) or len(offsets) != 2:
            raise FeaturesError(f"{at}: data_offsets must be [start, end]; got {offsets!r}"[:300])
        start, end = (_int(o, "data_offsets", at) for o in offsets)
        if not start <= end <= data_size:
            raise FeaturesError(f"{at}: data_offsets [{start}, {end}] lie outside the data region ({data_size} bytes)")
        if end - start != _prod(shape) * np.dtype(dtype).itemsize:
            raise FeaturesError(
                f"{at}: data_offsets span {end - start} bytes but shape {list(shape)} of {dtype} needs {_prod(shape) * np.dtype(dtype).itemsize}"
            )
        out[name] = (dtype, shape, start, end)
    return out, meta, 8 + n


class _Shard:
    """One safetensors file: header checked at open, data memory-mapped on first access."""

    def __init__(self, path: str):
        self.path = path
        self.entries, self.metadata, self.data_start = read_header(path)
        self._map: mmap.mmap | None = None

    def array(self, name: str) -> np.ndarray:
        dtype, shape, start, end = self.entries[name]
        if end == start:
            a = np.empty(shape, dtype)
            a.flags.writeable = False
            return a
        if self._map is None:
            with open(self.path, "rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        # frombuffer checks the range against the mapping: nothing outside the file is read
        return np.frombuffer(
            self._map, dtype=np.dtype(dtype).newbyteorder("<"), count=_prod(shape), offset=self.data_start + start
        ).reshape(shape)


# -- reading: arrays ------------------------------------------------------------------------------
class FeatureArray:
    """One layer's features, ``[N, ...]``, over all shards, memory-mapped; read-only.

    Indexing (an int, a slice, an index array or mask, then other dims) reads only the rows asked;
    ``np.asarray(arr)`` reads them all. ``arr.to_torch()`` / ``arr.to_paddle()`` copy into a tensor.

    >>> feats = hookkit.load_features("feats")   # doctest: +SKIP
    >>> feats["fc"][:10], feats["fc"].shape, np.asarray(feats["fc"])
    """

    def __init__(
        self, name: str, shards: list[_Shard], counts: list[int], row_shape: tuple[int, ...], dtype: str, order: np.ndarray | None = None
    ):
        self.name = name
        self._shards = shards
        self._starts = [0]
        for c in counts:
            self._starts.append(self._starts[-1] + c)
        # order[i]: the stored row that is sample i (multi-rank folders: ranks' rows back in data order)
        self._order = order
        self.shape = (self._starts[-1] if order is None else len(order), *row_shape)
        self.dtype = np.dtype(dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return _prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"<FeatureArray {self.name!r} shape={self.shape} dtype={self.dtype} shards={len(self._shards)}>"

    def _part(self, k: int) -> np.ndarray:
        return self._shards[k].array(self.name)

    def _rows(self, idx: np.ndarray) -> np.ndarray:
        if self._order is not None:
            idx = self._order[idx]
        out = np.empty((len(idx), *self.shape[1:]), self.dtype)
        which = np.searchsorted(self._starts, idx, side="right") - 1
        for k in np.unique(which):
            sel = which == k
            out[sel] = self._part(int(k))[idx[sel] - self._starts[k]]
        return out

    def __getitem__(self, key: Any) -> Any:
        rest: tuple = ()
        if isinstance(key, tuple):
            key, rest = (key[0], key[1:]) if key else (slice(None), ())
        whole_rows = (slice(None), *rest)
        if key is Ellipsis:
            where = (Ellipsis, *rest)
            return np.asarray(self)[where]
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            row = self._row(int(key))
            return row[rest] if rest else row
        if isinstance(key, slice):
            view = self._view(key)
            if view is not None:  # rows of one shard: a view
                return view[whole_rows] if rest else view
            start, stop, step = key.indices(len(self))
            idx = np.arange(start, stop, step)
        else:
            idx = self._indices(key)
        out = self._rows(idx)
        return out[whole_rows] if rest else out

    def _row(self, key: int) -> np.ndarray:
        n = len(self)
        i = key + (n if key < 0 else 0)
        if not 0 <= i < n:
            raise IndexError(f"index {key} is out of range for {n} samples of {self.name!r}")
        if self._order is not None:
            i = int(self._order[i])
        k = bisect.bisect_right(self._starts, i) - 1
        return self._part(k)[i - self._starts[k]]

    def _view(self, key: slice) -> np.ndarray | None:
        """The rows of a step-1 slice within one shard, as a view of it (None: not so)."""
        start, stop, step = key.indices(len(self))
        if step != 1 or self._order is not None:
            return None
        k = bisect.bisect_right(self._starts, start) - 1
        if stop <= self._starts[min(k + 1, len(self._starts) - 1)] and start < stop:
            return self._part(k)[start - self._starts[k] : stop - self._starts[k]]
        return None

    def _indices(self, key: Any) -> np.ndarray:
        """Row indices from a 1-d integer array (negatives from the end) or a boolean mask."""
        n = len(self)
        idx = np.asarray(key)
        if idx.dtype == bool:
            if idx.shape != (n,):
                raise IndexError(f"a boolean mask over {self.name!r} must have shape ({n},); got {idx.shape}")
            return np.flatnonzero(idx)
        if not np.issubdtype(idx.dtype, np.integer) or idx.ndim != 1:
            raise IndexError(f"index {self.name!r} with an int, a slice, a 1-d integer array or a mask; got {key!r}"[:200])
        if idx.size and (idx.min() < -n or idx.max() >= n):
            raise IndexError(f"indices out of range for {n} samples of {self.name!r}")
        return np.where(idx < 0, idx + n, idx)

    def __iter__(self) -> Iterator[np.ndarray]:
        if self._order is not None:
            for start in range(0, len(self), 4096):  # in data order, a block of rows at a time
                yield from self._rows(np.arange(start, min(start + 4096, len(self))))
            return
        for k in range(len(self._shards)):
            yield from self._part(k)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if self._order is not None:
            out = self._rows(np.arange(len(self)))
            return out.astype(dtype, copy=False) if dtype is not None else out
        parts = [self._part(k) for k in range(len(self._shards))]
        if len(parts) == 1:  # the memory-mapped view itself, unless a copy is asked for
            out = parts[0].copy() if copy else parts[0]
        else:
            out = np.concatenate(parts) if parts else np.empty(self.shape, self.dtype)
        return out.astype(dtype, copy=False) if dtype is not None else out

    def numpy(self) -> np.ndarray:
        """All rows as one (writable) numpy array, in memory."""
        return np.array(self)

    def to_torch(self) -> Any:
        """All rows as a torch tensor (a copy in memory)."""
        from hookkit.backends import backend_named

        return backend_named("torch").from_numpy(self.numpy())

    def to_paddle(self) -> Any:
        """All rows as a paddle tensor (a copy in memory)."""
        from hookkit.backends import backend_named

        return backend_named("paddle").from_numpy(self.numpy())


class Features(Mapping):
    """What ``hookkit.load_features`` returns: a read-only mapping key -> ``FeatureArray`` (keys are
    layer names; with ``inputs=True`` also ``"<layer>:input"``), all with the same number of rows, in
    data order; plus ``metadata`` (model class, layers, reductions, dtype, count, complete)."""

    def __init__(self, path: str, arrays: dict[str, FeatureArray], metadata: dict[str, Any]):
        self.path = path
        self._arrays = arrays
        self.metadata = metadata

    def __getitem__(self, key: str) -> FeatureArray:
        try:
            return self._arrays[key]
        except KeyError:
            raise KeyError(f"no features for {key!r} in {self.path!r}; stored: {', '.join(self._arrays) or '(none)'}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._arrays)

    def __len__(self) -> int:
        return len(self._arrays)

    @property
    def count(self) -> int:
        """Number of samples (rows of every array)."""
        return int(self.metadata["count"])

    def to_torch(self) -> dict[str, Any]:
        return {k: a.to_torch() for k, a in self._arrays.items()}

    def to_paddle(self) -> dict[str, Any]:
        return {k: a.to_paddle() for k, a in self._arrays.items()}

    def __repr__(self) -> str:
        inner = ", ".join(f"{k!r}: {list(a.shape)} {a.dtype}" for k, a in self._arrays.items())
        return f"<hookkit.Features {self.path!r} {self.count} sample{'' if self.count == 1 else 's'} {{{inner}}}>"

    def _repr_html_(self) -> str:
        from hookkit.viz.display import features_html

        return features_html(self)


def read_index(out: str, name: str = INDEX, rank: int | None = None) -> dict[str, Any]:
    """The checked ``index.json`` of a features folder (``name``/``rank``: one rank's index of a multi-rank run)."""
    path = os.path.join(out, name)
    INDEX = name  # noqa: N806 - the messages name the file read
    where = f"load_features({out!r})"
    if not os.path.isfile(path):
        raise FeaturesError(f"{where}: no {INDEX} in the folder; it is not the output of hookkit.extract")
    if os.path.getsize(path) > _MAX_INDEX:
        raise FeaturesError(f"{where}: {INDEX} is larger than {_MAX_INDEX} bytes")
    try:
        with open(path, encoding="utf-8") as f:
            index = json.load(f)
    except (UnicodeDecodeError, ValueError) as e:
        raise FeaturesError(f"{where}: {INDEX} is not valid JSON ({e})") from None
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise FeaturesError(f"{where}: {INDEX} is not a {FORMAT} index")
    if index.get("version") != VERSION:
        raise FeaturesError(f"{where}: index version {index.get('version')!r}; this hookkit reads version {VERSION}")
    if "ranks" in index:
        return _read_ranked(out, index, where)
    layers, shards = index.get("layers"), index.get("shards")
    if not isinstance(layers, dict) or not isinstance(shards, list):
        raise FeaturesError(f"{where}: {INDEX} needs 'layers' (an object) and 'shards' (a list)")
    for key, spec in layers.items():
        if not isinstance(spec, dict) or spec.get("dtype") not in CODES:
            raise FeaturesError(f"{where}: layer {key!r} needs a dtype among {', '.join(CODES)}; got {spec!r}"[:300])
        _shape(spec.get("shape"), f"{where}, layer {key!r}")
    total = batches = 0
    first: dict[str, int] = {}
    for i, s in enumerate(shards):
        count, sizes = _shard_entry(i, s, first, where, INDEX, rank)
        total += count
        batches += sizes
    if _int(index.get("batches", batches), "batches", where) != batches:
        raise FeaturesError(f"{where}: the index counts {index.get('batches')} batches but its shards list {batches} batch sizes")
    if _int(index.get("count"), "count", where) != total:
        raise FeaturesError(f"{where}: the index counts {index.get('count')} samples but its shards hold {total}")
    return index


def _shard_entry(i: int, s: Any, first: dict[str, int], where: str, index_name: str, rank: int | None) -> tuple[int, int]:
    """Entry ``i`` of an index's shard list, checked: ``(its rows, its batches)``; ``first``: files seen so far."""
    if not isinstance(s, dict):
        raise FeaturesError(f"{where}: shard entry {i} must be an object")
    fname = s.get("file")
    if not isinstance(fname, str) or not _SHARD_NAME.fullmatch(fname):
        raise FeaturesError(
            f"{where}: shard entry {i} names file {fname!r}; shard files are plain names like 'shard-00000.safetensors' inside the folder"[
                :300
            ]
        )
    if fname in first:  # the same rows twice, or rows in another order: refused, never read
        raise FeaturesError(
            f"{where}: {index_name} lists shard {fname!r} twice (entries {first[fname]} and {i}); each shard is listed once"
        )
    first[fname] = i
    if fname != shard_name(i, rank):
        raise FeaturesError(
            f"{where}: {index_name} lists shard {fname!r} as entry {i}; shards are listed in the order written: expected {shard_name(i, rank)!r}"
        )
    count = _int(s.get("count"), "count", f"{where}, shard {fname!r}")
    sizes = s.get("batch_sizes", [count])
    if not isinstance(sizes, list) or sum(_int(n, "batch_sizes", f"{where}, shard {fname!r}") for n in sizes) != count:
        raise FeaturesError(f"{where}: shard {fname!r}: batch_sizes must be a list of integers summing to its count {count}")
    return count, len(sizes)


def _read_ranked(out: str, top: dict[str, Any], where: str) -> dict[str, Any]:
    """A multi-rank folder's ``index.json``: the list of rank indexes, each checked like a
    single-process index and against the others (same fingerprint, layers, world size)."""
    ranks, world = top.get("ranks"), top.get("world")
    if not isinstance(ranks, list) or not ranks or _int(world, "world", where) != len(ranks):
        raise FeaturesError(f"{where}: a multi-rank {INDEX} lists one rank index per rank ('ranks', 'world'); got {ranks!r}"[:300])
    top["_ranks"] = [read_rank_index(out, r, where) for r in range(len(ranks))]
    for r, name in enumerate(ranks):
        if name != rank_index_name(r):
            raise FeaturesError(f"{where}: rank {r}'s index must be {rank_index_name(r)!r}; the index names {name!r}"[:300])
    first = top["_ranks"][0]

    def shared(idx: dict[str, Any]) -> dict[str, Any]:  # each rank's sampler gives it other samples
        return {k: v for k, v in (idx.get("fingerprint") or {}).items() if k != "sampler"}

    for r, idx in enumerate(top["_ranks"]):
        if shared(idx) != shared(first) or idx.get("world") != len(ranks):
            raise FeaturesError(
                f"{where}: {rank_index_name(r)} comes from another extraction than rank 0's (fingerprint or world size differ)"
            )
    top["layers"] = first["layers"]
    return top


def read_rank_index(out: str, rank: int, where: str = "") -> dict[str, Any]:
    """One rank's checked index in a multi-rank folder."""
    index = read_index(out, rank_index_name(rank), rank)
    if index.get("rank") != rank:
        raise FeaturesError(f"{where or out}: {rank_index_name(rank)} says it is rank {index.get('rank')!r}")
    return index


def rank_indexes_on_disk(out: str) -> list[int]:
    """The ranks with an index file in ``out`` (a multi-rank run, finished or not)."""
    return sorted(int(n[10:15]) for n in os.listdir(out) if _RANK_INDEX.fullmatch(n))


def _open_shards(out: str, index: dict[str, Any], rank: int | None, layers: dict[str, Any]) -> tuple[list[_Shard], list[int]]:
    root = os.path.realpath(out)
    shards, counts = [], []
    keys = dict(layers)
    if index.get("samples"):
        keys[SAMPLE_KEY] = {"dtype": "int64", "shape": []}
    for s in index["shards"]:
        path = os.path.join(out, s["file"])
        real = os.path.realpath(path)
        if os.path.dirname(real) != root:  # a symbolic link out of the folder
            raise FeaturesError(f"load_features({out!r}): shard {s['file']!r} resolves outside the folder, to {real!r}")
        if not os.path.isfile(real):
            raise FeaturesError(f"load_features({out!r}): shard {s['file']!r} listed in its index is missing")
        shard = _Shard(path)
        for key, spec in keys.items():
            want = (spec["dtype"], (s["count"], *spec["shape"]))
            got = shard.entries.get(key)
            if got is None or (got[0], got[1]) != want:
                have = "missing" if got is None else f"{got[0]} {list(got[1])}"
                raise FeaturesError(
                    f"load_features({out!r}): shard {s['file']!r} holds {key!r} as {have}; the index says {want[0]} {list(want[1])}"
                )
        shards.append(shard)
        counts.append(s["count"])
    return shards, counts


def data_order(samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(order, ids)``: the stored rows in data-set order, each sample once (the padding
    ``DistributedSampler`` repeats to even out the ranks is dropped: the first copy is kept), and
    the sample indices they hold."""
    perm = np.argsort(samples, kind="stable")
    ids = samples[perm]
    keep = np.ones(len(ids), dtype=bool)
    keep[1:] = ids[1:] != ids[:-1]
    return perm[keep], ids[keep]


def load_features(out: str | os.PathLike) -> Features:
    """Open what ``hookkit.extract`` wrote to ``out``: a read-only mapping layer -> ``[N, ...]`` array,
    memory-mapped (opening reads only the headers). Runs no code from the folder.

    A folder written by several ranks (``extract`` under ``torch.distributed`` or Paddle's launcher)
    reads as one data set in the data's order, each sample once, whatever the world size that wrote it.

    >>> feats = hookkit.load_features("feats")   # doctest: +SKIP
    >>> feats["fc"].shape, feats.metadata["reduce"], feats["fc"].to_torch()
    """
    out = os.fspath(out)
    if not os.path.exists(os.path.join(out, INDEX)) and os.path.isdir(out) and rank_indexes_on_disk(out):
        index = _unfinished_ranked(out)  # a multi-rank run that has not finished: what its ranks wrote so far
    else:
        index = read_index(out)
    order = None
    parts = index["_ranks"] if "ranks" in index else [index]
    shards, counts, samples = [], [], []
    for r, idx in enumerate(parts):
        sh, co = _open_shards(out, idx, r, index["layers"])
        shards += sh
        counts += co
        if idx.get("samples"):
            samples += [s.array(SAMPLE_KEY) for s in sh]
    if samples:  # the rows carry their data-set index: back in data order, each sample once
        order, _ = data_order(np.concatenate(samples))
        index["count"] = len(order)
    elif "ranks" in index:  # no sampler known: the ranks' rows one rank after the other
        index["count"] = sum(counts)
    arrays = {key: FeatureArray(key, shards, counts, tuple(spec["shape"]), spec["dtype"], order) for key, spec in index["layers"].items()}
    meta = dict(index.get("metadata") or {})
    meta.update(count=index["count"], complete=bool(index.get("complete")))
    if "ranks" in index:
        meta.update(world=len(index["_ranks"]), order="data" if order is not None else "rank")
    elif order is not None:
        meta.update(order="data")
    if not meta["complete"]:
        warnings.warn(
            f"load_features({out!r}): the extraction is incomplete (interrupted?); {index['count']} samples of the complete shards are readable. Re-run extract with the same arguments to finish it.",
            stacklevel=2,
        )
    return Features(out, arrays, meta)


def _unfinished_ranked(out: str) -> dict[str, Any]:
    ranks = rank_indexes_on_disk(out)
    if ranks != list(range(len(ranks))):
        raise FeaturesError(f"load_features({out!r}): rank indexes {ranks} on disk; expected ranks 0 to {len(ranks) - 1}")
    top: dict[str, Any] = {"ranks": [rank_index_name(r) for r in ranks], "world": len(ranks), "complete": False, "count": 0}
    top = _read_ranked(out, top, f"load_features({out!r})")
    top["metadata"] = top["_ranks"][0].get("metadata")
    return top
