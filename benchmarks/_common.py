"""Shared helpers for the kiln_np benchmarks: interleaved timing, peak memory, tables.

Every figure a benchmark prints is a ratio to a baseline timed in the same
process and the same round, so a noisy machine moves both sides together.
"""

from __future__ import annotations

import gc
import os
import platform
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = [
    "Timing",
    "cpu_pressure",
    "describe_machine",
    "format_size",
    "markdown_table",
    "peak_bytes",
    "time_interleaved",
]

MIN_SAMPLE_SECONDS = 0.005
"""Each sample repeats a call until it has run at least this long."""


@dataclass
class Timing:
    """Seconds per call of each function, one list entry per round."""

    seconds: dict[str, list[float]] = field(default_factory=dict)

    def median(self, name: str) -> float:
        """Median seconds per call of ``name``."""
        return statistics.median(self.seconds[name])

    def ratio(self, name: str, baseline: str) -> float:
        """Median over rounds of ``name``'s time over ``baseline``'s in the same round."""
        pairs = zip(self.seconds[name], self.seconds[baseline], strict=True)
        return statistics.median(a / b for a, b in pairs)

    def row(
        self, label: str, name: str, baseline: str, target: str = "", *, digits: int = 1
    ) -> list[object]:
        """A table row: ``label``, ``name``'s median in ms, its ratio to ``baseline``,
        ``target``."""
        return [
            label,
            f"{self.median(name) * 1e3:.{digits}f} ms",
            self.ratio(name, baseline),
            target,
        ]


def _calls_per_sample(fn: Callable[[], object]) -> int:
    """Calls of ``fn`` that take at least :data:`MIN_SAMPLE_SECONDS` together.

    One call first, untimed: a first call that pays a one-time cost (a lazy
    import, a cache filled) would otherwise make every sample a single cold call."""
    fn()
    calls = 1
    while True:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        if time.perf_counter() - start >= MIN_SAMPLE_SECONDS or calls >= 1 << 20:
            return calls
        calls *= 4


def time_interleaved(
    functions: dict[str, Callable[[], object]], baseline: str, rounds: int
) -> Timing:
    """Time every function once per round, the baseline before and after the others.

    The baseline's time in a round is the mean of its two samples, so slow
    drift of the machine cancels out of the ratios.  The garbage collector is
    off while timing, as in :mod:`timeit`.
    """
    calls = {name: _calls_per_sample(fn) for name, fn in functions.items()}
    timing = Timing({name: [] for name in functions})

    def sample(name: str) -> float:
        fn, n = functions[name], calls[name]
        start = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - start) / n

    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for _ in range(rounds):
            before = sample(baseline)
            for name in functions:
                if name != baseline:
                    timing.seconds[name].append(sample(name))
            timing.seconds[baseline].append((before + sample(baseline)) / 2)
    finally:
        if enabled:
            gc.enable()
    return timing


def speedup_over(
    ours: Callable[[], object], theirs: Callable[[], object] | None, rounds: int
) -> object:
    """How many times faster ``ours`` runs than ``theirs`` (another library's
    function on the same input), timed in a loop of their own, so that the other
    library's temporaries slow nothing else; ``"(gguf-py cannot)"`` without one."""
    if theirs is None:
        return "(gguf-py cannot)"
    with np.errstate(all="ignore"):
        timing = time_interleaved({"ours": ours, "theirs": theirs}, "ours", max(1, rounds // 2))
    return timing.ratio("theirs", "ours")


def peak_bytes(fn: Callable[[], object]) -> int:
    """Peak bytes allocated while ``fn()`` runs, its result included (tracemalloc
    sees numpy's data buffers too)."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        result = fn()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    del result
    return peak


def format_size(n: int) -> str:
    """``1024`` -> ``'1 Ki'``, ``64 << 20`` -> ``'64 Mi'``."""
    for shift, unit in ((30, "Gi"), (20, "Mi"), (10, "Ki")):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return str(n)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub markdown table; floats with two decimals."""

    def cell(value: object) -> str:
        return f"{value:.2f}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def cpu_pressure() -> str:
    """Linux's CPU pressure (share of the last 60 s that runnable tasks waited
    for a core), to tell a quiet run from one that shared the machine."""
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except (OSError, IndexError):
        return "unknown"
    fields = dict(f.split("=") for f in line.split()[1:])
    return f"{fields.get('avg60', '?')}%"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe_machine() -> dict[str, object]:
    """What the figures depend on: cores, CPU, Python, numpy, kiln_np's threads
    and kernels."""
    import kiln_np
    from kiln_np._kernels import pool as _pool

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cores": cores,
        "kiln_np_threads": _pool._threads(),
        # kernel_backend() is new: an older tree (a "before" run) has only numpy kernels.
        "kernels": getattr(kiln_np, "kernel_backend", lambda: "numpy")(),
        "cpu": _cpu_model(),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "byteorder": sys.byteorder,
    }
