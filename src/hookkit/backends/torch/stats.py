"""The monitoring reductions for PyTorch tensors: accurate, and as few passes over memory as we can.

Two routes. On an accelerator every reduction is a kernel and nothing is read on the host (the
results are 0-d device tensors, read later in bulk). On the CPU the host *is* the device: reading a
0-d result is a memory load, not a stall, and numpy's compare and cast loops are several times
faster than ATen's for bool/uint8 outputs, so the CPU route uses both.

Why not the obvious calls (measured on 20 M float32 values, one core):
- ``torch.linalg.vector_norm`` accumulates in float32 lanes: 1.4e-4 relative error on 4 M values.
  Row norms over 2048-value rows, then a cascade ``sum``, are as fast and accurate to ~1e-7.
- ``t.std()`` is a Welford pass at ~1.2 ns a value; ``mean`` + sum of squares is ~0.4 ns and is
  as accurate while ``mean**2 / var`` stays below ~30 (checked; otherwise a second pass).
- ``(t <= c).sum()`` (fastai) widens to int64; ``torch.count_nonzero(t <= c)`` still writes
  the bool through ATen's slow path (0.65 ns a value); numpy's compare + count: 0.26 ns.
- ``torch.histc`` on the CPU is a scalar loop (3-11 ns a value); see ``histc_host``.

On the CPU, ``activation_sums_host`` reads each value once with the C kernel (host_stats.py: sums
in float64 lanes, max |x|, histc's bins in the same pass; ~1 ns a value with a histogram, ~0.3
without). Installed without a C compiler, the numpy routes below give the same results, 2-3x slower.
"""

from __future__ import annotations

import numpy as np
import torch

from hookkit.backends import host_stats

_ROW = 2048  # values per row of the row-norm sum of squares
_CHUNK = 1 << 17  # values per chunk of the histogram: the float scratch (512 KiB) stays in L2
_WELL_CONDITIONED = 30.0  # mean**2 / var above which the one-pass variance (float32 sums) loses digits


def sum_of_squares(flat: torch.Tensor) -> torch.Tensor:
    """``sum(flat**2)`` of a contiguous 1-d float tensor, accurate to ~1e-7, no full-size copy."""
    rows = flat.numel() // _ROW
    if rows < 2:  # one short accumulation: a dot product is as accurate, and one call
        return torch.dot(flat, flat)
    total = torch.linalg.vector_norm(flat[: rows * _ROW].view(rows, _ROW), dim=1).square_().sum()
    if flat.numel() % _ROW:
        total = total + flat[rows * _ROW :].square().sum()
    return total


def activation_sums_device(t: torch.Tensor, near_zero: float) -> torch.Tensor:
    """``[mean, sum of squared deviations, count <= near_zero]``: kernels only, no host read."""
    t = t.float()
    mean = t.mean()
    m2 = sum_of_squares((t - mean).reshape(-1))  # two passes: an accelerator has bandwidth to spare
    return torch.stack((mean, m2, torch.count_nonzero(t <= near_zero).float()))


def activation_sums_host(t: torch.Tensor, near_zero: float, hist: tuple | None = None) -> tuple:
    """``(row, counts)`` of a CPU tensor: the row of ``activation_sums_device`` in float64, and
    ``torch.histc(t, bins, lo, hi)`` for ``hist=(bins, lo, hi)`` (else None). One pass with the kernel:

        row, counts = activation_sums_host(torch.randn(1000), 0.05, (40, 0.0, 10.0))
    """
    flat = t.detach().float().reshape(-1).contiguous()  # an expanded (stride-0) tensor stays one after reshape
    n = flat.numel()
    if host_stats.applies(n, hist):
        row, counts = host_stats.activation_row(flat.numpy(), near_zero, hist, torch.get_num_threads())
        return torch.from_numpy(row), None if counts is None else torch.from_numpy(counts).float()
    counts = None
    if hist is not None:  # the numpy route, or histc where it does not apply
        counts = histc_host(flat, *hist) if n else None
        counts = torch.histc(flat, *hist) if counts is None else counts
    return _activation_sums_numpy(flat, near_zero), counts


def _activation_sums_numpy(flat: torch.Tensor, near_zero: float) -> torch.Tensor:
    n = flat.numel()
    values = flat.numpy()
    mean = float(flat.mean().numpy())  # 0-d CPU tensor: a load from host memory, not a sync
    ssq = float(sum_of_squares(flat).numpy())
    m2 = ssq - n * mean * mean
    if m2 * _WELL_CONDITIONED < n * mean * mean:  # var << mean**2: the one-pass formula cancels
        m2 = float(sum_of_squares(flat - mean).numpy())
    count = np.count_nonzero(values <= np.float32(near_zero))
    return torch.tensor((mean, max(m2, 0.0), count), dtype=torch.float64)


def histc_host(t: torch.Tensor, bins: int, lo: float, hi: float) -> torch.Tensor | None:
    """``torch.histc(t, bins, lo, hi)`` of a CPU tensor, same counts, ~4x faster, in numpy (the route
    without the C kernel); None when it does not apply (fewer than 16k values, more than 126 bins: histc then).

    histc's own formula, pos = int((x - lo) * bins / (hi - lo)) in float32, x in [lo, hi], x == hi
    in the last bin, vectorized per chunk: clamp to [-1, bins + 1] (NaN to -1), floor, cast to a
    byte, one ``bincount`` at the end. Values at pos == bins (x == hi, or just above it) are
    re-checked against hi. The byte slots are spread over up to 4 interleaved copies of the
    histogram: bincount then does not stall on runs of one value (1.24 -> 0.8 ns a value)."""
    n = t.numel()
    if n < 16384 or bins > 126:
        return None
    flat = t.detach().float().reshape(-1).contiguous()  # an expanded (stride-0) tensor stays one after reshape
    values = flat.numpy()
    lo32, hi32 = np.float32(lo), np.float32(hi)
    width = float(hi32 - lo32)
    span = bins + 3  # slots -1 .. bins + 1, shifted by one
    copies = min(4, (255 - bins - 2) // span + 1)
    m = min(n, _CHUNK)
    scratch = torch.empty(m)
    scratch_np = scratch.numpy()
    offsets = (torch.arange(m) % copies * span + 1).float()
    slots = np.empty(n, np.uint8)
    top = 0
    for i in range(0, n, _CHUNK):
        chunk = flat[i : i + _CHUNK]
        j = chunk.numel()
        y, y_np = scratch[:j], scratch_np[:j]
        if lo32 != 0:
            torch.sub(chunk, float(lo32), out=y).mul_(float(bins))
        else:
            torch.mul(chunk, float(bins), out=y)
        y.div_(width).clamp_(-1.0, bins + 1.0).nan_to_num_(-1.0).floor_()
        at_top = np.flatnonzero(y_np == bins)
        if at_top.size:
            top += int(np.count_nonzero(values[i + at_top] <= hi32))
        y.add_(offsets[:j])
        np.copyto(slots[i : i + j], y_np, casting="unsafe")
    counts = torch.bincount(torch.from_numpy(slots), minlength=256)[: copies * span].view(copies, span).sum(0)
    hist = counts[1 : bins + 1].float()
    hist[-1] += top
    return hist


def tensor_sums_device(t: torch.Tensor) -> torch.Tensor:
    """``[sum, ||t||, max |t|]`` (NaN when any value is): kernels only. Mergeable across tensors;
    mean and std follow when read (gradients have |mean| << std: the one-pass variance keeps its digits)."""
    flat = t.float().reshape(-1)
    if flat.numel() == 0:  # the sums of nothing; no max |x| (aminmax refuses an empty tensor)
        return torch.tensor((0.0, 0.0, float("nan")), device=flat.device)
    lo, hi = torch.aminmax(flat)  # one pass, no |t| temporary; NaN propagates
    return torch.stack((flat.sum(), sum_of_squares(flat).sqrt(), torch.maximum(-lo, hi)))


def tensor_sums_host(t: torch.Tensor) -> torch.Tensor:
    """The row of ``tensor_sums_device`` for a CPU tensor, in float64; one pass with the kernel."""
    if not host_stats.applies(t.numel()):
        return tensor_sums_device(t).double()
    # contiguous: the gradient of a sum is an expanded tensor (stride 0) and stays one after reshape
    return torch.from_numpy(host_stats.tensor_row(t.detach().float().reshape(-1).contiguous().numpy(), torch.get_num_threads()))
