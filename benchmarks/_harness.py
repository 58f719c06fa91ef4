"""Interleaved ratio timing shared by the benchmarks.

A *variant* is (name, setup) where ``setup()`` attaches whatever the variant needs and returns
``(step, teardown)``. Each round runs every variant once, in a rotated order (drift and cache
warmth cancel out across rounds): setup, a few untimed warm-up steps, ``reps`` timed steps,
teardown. A variant's figure is the median of all its timed steps; its ratio to a baseline is
the median over rounds of (variant median in the round / baseline median in the same round).
"""

from __future__ import annotations

import gc
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

Setup = Callable[[], tuple[Callable[[], object], Callable[[], None]]]

# CPU time of this process, not wall time: the machines these run on are shared (other jobs,
# load well above the core count), and with one intra-op thread the process's CPU time is what
# the hooks cost. ``use_clock("wall")`` switches to perf_counter for an idle machine.
CLOCK = {"fn": time.process_time}


def use_clock(name: str) -> None:
    CLOCK["fn"] = {"cpu": time.process_time, "wall": time.perf_counter}[name]


def least_ms(fn, n: int = 15) -> float:
    """Least CPU time of ``n`` runs of ``fn`` (after one untimed run), in ms: the work's own cost;
    this shared machine's noise only adds to it."""
    fn()
    times = []
    for _ in range(n):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return min(times) * 1e3


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed blocks instead of returning them to the OS.

    By default every block over ~32 MB (GPT-2's 51 MB logits and their gradient) is mmap'ed
    and unmapped each step, so each step page-faults them in again: measured, a third of the
    GPT-2 step (bare 330 -> 240 ms) and most of the +-15% noise between rounds. With this every
    variant runs on the same stable allocator, as with jemalloc/tcmalloc in production."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        return bool(libc.mallopt(m_mmap_threshold, 1 << 30) and libc.mallopt(m_trim_threshold, 1 << 31))
    except OSError:  # not glibc
        return False


def block_torchvision() -> None:
    """fastai drags a torchvision built for another torch into the benchmark environment; it
    fails on import (``torchvision::nms does not exist``) and transformers imports it when it is
    there. Mark it absent: nothing benchmarked here needs it."""
    sys.modules.setdefault("torchvision", None)  # type: ignore[arg-type]


def set_threads(n: int) -> None:
    """Fix the intra-op thread count of every framework; call before importing them."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "CPU_NUM"):
        os.environ[var] = str(n)


@dataclass
class Result:
    name: str
    times: list[float] = field(default_factory=list)  # seconds per step, all rounds
    per_round: list[float] = field(default_factory=list)  # median per round
    error: str = ""

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times) * 1e3 if self.times else float("nan")


def run_interleaved(
    variants: list[tuple[str, Setup]],
    rounds: int,
    reps: int,
    warmup: int = 2,
    slow: dict[str, int] | None = None,
    gc_on: bool = False,
) -> dict[str, Result]:
    """Time every variant in ``rounds`` interleaved rounds of ``reps`` steps each.

    ``slow`` maps a variant name to its own (smaller) reps per round, for very slow peers.
    The garbage collector is off during timed steps unless ``gc_on`` (then the collections that
    a variant's allocations trigger are counted too)."""
    slow = slow or {}
    results = {name: Result(name) for name, _ in variants}
    for r in range(rounds):
        k = r % len(variants)
        for name, setup in variants[k:] + variants[:k]:
            res = results[name]
            if res.error:
                continue
            try:
                step, teardown = setup()
            except Exception as exc:  # a peer that cannot handle the model: report, go on
                res.error = f"{type(exc).__name__}: {exc}"[:200]
                continue
            try:
                for _ in range(warmup):
                    step()
                gc.collect()
                if not gc_on:
                    gc.disable()  # a collection of other objects inside a timed step is noise
                ts = []
                clock = CLOCK["fn"]
                for _ in range(slow.get(name, reps)):
                    t0 = clock()
                    step()
                    ts.append(clock() - t0)
            except Exception as exc:
                res.error = f"{type(exc).__name__}: {exc}"[:200]
                continue
            finally:
                gc.enable()
                teardown()
            res.times += ts
            res.per_round.append(statistics.median(ts))
    return results


def ratio(results: dict[str, Result], name: str, base: str) -> float:
    """Median over rounds of the paired per-round ratio ``name / base``."""
    a, b = results[name], results[base]
    if a.error or b.error or not a.per_round or not b.per_round:
        return float("nan")
    n = min(len(a.per_round), len(b.per_round))
    return statistics.median(x / y for x, y in zip(a.per_round[:n], b.per_round[:n]))


def spread(results: dict[str, Result], name: str, base: str) -> str:
    """Inter-quartile range of the per-round ratio, to show how much to trust the median."""
    a, b = results[name], results[base]
    n = min(len(a.per_round), len(b.per_round))
    if n < 4 or a.error or b.error:
        return ""
    qs = statistics.quantiles([x / y for x, y in zip(a.per_round[:n], b.per_round[:n])], n=4)
    return f"{qs[0]:.3f}-{qs[2]:.3f}"


def machine() -> dict[str, str]:
    model = platform.processor() or ""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return {
        "cpu": model,
        "cores": str(os.cpu_count()),
        "python": sys.version.split()[0],
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def rss_mb() -> float:
    """Resident set size now, in MiB (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def table(rows: list[list[str]], header: list[str]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def callgrind_client():
    """callgrind's client requests (``on()``: start instrumenting and zero the counts; ``dump(name)``:
    write the counts since then to a file named after ``name``), compiled on first use with gcc;
    exits unless the process runs under ``valgrind --tool=callgrind --instr-atstart=no``."""
    import ctypes
    import tempfile

    src = "#include <valgrind/callgrind.h>\nvoid on(void){CALLGRIND_START_INSTRUMENTATION;CALLGRIND_ZERO_STATS;}\n"
    src += "void dump(const char *s){CALLGRIND_DUMP_STATS_AT(s);}\nint running(void){return RUNNING_ON_VALGRIND;}\n"
    d = tempfile.mkdtemp()
    with open(os.path.join(d, "cg.c"), "w") as f:
        f.write(src)
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", os.path.join(d, "cg.c"), "-o", os.path.join(d, "cg.so")], check=True)
    cg = ctypes.CDLL(os.path.join(d, "cg.so"))
    if not cg.running():
        sys.exit("run under valgrind --tool=callgrind --instr-atstart=no")
    return cg
