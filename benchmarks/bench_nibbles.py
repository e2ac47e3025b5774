"""4-bit unpack and pack: kiln_np (compiled and numpy kernels) against naive numpy and
onnx, as ratios to np.copy.

Run from the repository root::

    python benchmarks/bench_nibbles.py                  # 2^6 .. 2^28 elements, x4 steps
    python benchmarks/bench_nibbles.py --json benchmarks/results/nibbles.json
    python benchmarks/bench_nibbles.py --min-elements 67108864 --max-elements 67108864

For each size ``n`` (elements) the rows time, interleaved in the same rounds:

- ``np.copy`` of the unpacked array (``n`` bytes, one element per byte): the
  baseline of every ratio;
- unpack: ``n`` elements from ``ceil(n / 2)`` packed bytes into a new array;
- pack: a new packed buffer from the ``n``-element array.

kiln_np unpacks with ``to_numpy(17, buf, (n,))`` and packs with
``from_numpy(uint4_array)``, once on the compiled kernels ("kiln_np", called
exactly as a user would) and once on the numpy kernels ("kiln_np numpy", the
fallback that ``KILN_NP_PURE=1`` selects, switched per call in the same process).
"naive" is the strided numpy of the issue (``o[0::2] = b & 15; o[1::2] = b >> 4``);
"onnx" is ``numpy_helper.to_array`` of a UINT4 ``TensorProto`` and
``numpy_helper.from_array`` (only when onnx is installed).  The last column is
the compiled row's time over naive numpy's, per round.  The peak-memory columns
are tracemalloc peaks over the output size, at ``--memory-elements``.  Sizes of
``--few-rounds-from`` elements and more get ``--few-rounds`` rounds, so the whole
run stays within a few minutes.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    cpu_pressure,
    describe_machine,
    format_size,
    markdown_table,
    peak_bytes,
    time_interleaved,
)

import kiln_np
from kiln_np._kernels import backend as _backend

U4 = int(kiln_np.Code.U4)  # an int code: the common case the small-call path is for


@dataclass(frozen=True)
class Impl:
    """One row: ``unpack(prepare(packed, n))`` and ``pack(uint4_array)``.

    ``prepare`` is set-up outside the timing (onnx wraps the bytes in a
    TensorProto, as a model file would hold them)."""

    prepare: Callable[[bytes, int], Any]
    unpack: Callable[[Any], object]
    pack: Callable[[np.ndarray], object]


def naive_unpack(job: tuple[bytes, int]) -> np.ndarray:
    packed, n = job
    b = np.frombuffer(packed, np.uint8)
    o = np.empty(2 * b.size, np.uint8)
    o[0::2] = b & 15
    o[1::2] = b >> 4
    return o[:n]


def naive_pack(values: np.ndarray) -> np.ndarray:
    a = values.view(np.uint8)
    o = a[0::2].copy()
    o[: a.size // 2] |= a[1::2] << 4
    return o


def kiln_unpack(job: tuple[bytes, int]) -> np.ndarray:
    packed, n = job
    return kiln_np.to_numpy(U4, packed, (n,))


def on_numpy_kernels(fn: Callable[[Any], object]) -> Callable[[Any], object]:
    """``fn`` run with the numpy kernels (the fallback ``KILN_NP_PURE=1`` selects),
    in the same process; setting and restoring the flag costs tens of nanoseconds."""

    def call(arg: Any) -> object:
        _backend.COMPILED = False
        try:
            return fn(arg)
        finally:
            _backend.COMPILED = COMPILED

    return call


COMPILED = _backend.COMPILED


def implementations() -> dict[str, Impl]:
    """The rows, in table order; onnx only when it imports, the compiled kernels
    only when they were built."""
    impls = {"naive numpy": Impl(lambda p, n: (p, n), naive_unpack, naive_pack)}
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError:
        pass
    else:
        impls[f"onnx {onnx.__version__}"] = Impl(
            lambda p, n: onnx.helper.make_tensor("t", onnx.TensorProto.UINT4, [n], p, raw=True),
            numpy_helper.to_array,
            numpy_helper.from_array,
        )
    impls["kiln_np numpy"] = Impl(
        lambda p, n: (p, n), on_numpy_kernels(kiln_unpack), on_numpy_kernels(kiln_np.from_numpy)
    )
    if COMPILED:
        impls["kiln_np"] = Impl(lambda p, n: (p, n), kiln_unpack, kiln_np.from_numpy)
    return impls


def packed_bytes(made: object) -> bytes:
    """The packed bytes of whatever a pack function returned."""
    if isinstance(made, kiln_np.Payload):
        return bytes(made.data)
    raw = getattr(made, "raw_data", None)  # an onnx TensorProto
    if isinstance(raw, bytes):
        return raw
    return np.asarray(made).tobytes()


def sizes(min_elements: int, max_elements: int) -> list[int]:
    """``min_elements``, then x4 up to ``max_elements``."""
    out = [min_elements]
    while out[-1] * 4 <= max_elements:
        out.append(out[-1] * 4)
    return out


def check_outputs(impls: dict[str, Impl], values: np.ndarray, packed: bytes) -> None:
    """Every row must produce the same bytes before its speed counts."""
    n = values.size
    for name, impl in impls.items():
        got = np.asarray(impl.unpack(impl.prepare(packed, n))).view(np.uint8)
        if not np.array_equal(got, values.view(np.uint8)):
            raise SystemExit(f"{name}: unpack disagrees with the reference")
        if packed_bytes(impl.pack(values)) != packed:
            raise SystemExit(f"{name}: pack disagrees with the reference")


def run(
    min_elements: int,
    max_elements: int,
    rounds: int,
    few_rounds: tuple[int, int],
    memory_elements: int,
) -> dict[str, Any]:
    impls = implementations()
    rng = np.random.default_rng(0)
    results: list[dict[str, Any]] = []
    for n in sizes(min_elements, max_elements):
        values = rng.integers(0, 16, n, dtype=np.uint8).view(ml_dtypes.uint4)
        packed = bytes(kiln_np.pack_nibbles(values.view(np.uint8)).data)
        check_outputs(impls, values, packed)
        functions: dict[str, Callable[[], object]] = {"np.copy": partial(np.copy, values)}
        for name, impl in impls.items():
            job = impl.prepare(packed, n)
            functions[f"{name} unpack"] = partial(impl.unpack, job)
            functions[f"{name} pack"] = partial(impl.pack, values)
        timing = time_interleaved(
            functions, "np.copy", few_rounds[1] if n >= few_rounds[0] else rounds
        )
        row: dict[str, Any] = {"elements": n, "copy_seconds": timing.median("np.copy")}
        for name in impls:
            for op in ("unpack", "pack"):
                key = f"{name} {op}"
                row[key] = {
                    "ratio": timing.ratio(key, "np.copy"),
                    "seconds": timing.median(key),
                    "vs_naive": timing.ratio(key, f"naive numpy {op}"),
                }
        results.append(row)
        del values, packed, functions, job
        print(f"{format_size(n):>7} elements: done", file=sys.stderr, flush=True)

    measured = sizes(min_elements, max_elements)
    n = max((m for m in measured if m <= memory_elements), default=measured[0])
    values = rng.integers(0, 16, n, dtype=np.uint8).view(ml_dtypes.uint4)
    packed = bytes(kiln_np.pack_nibbles(values.view(np.uint8)).data)
    memory = {}
    for name, impl in impls.items():
        job = impl.prepare(packed, n)
        memory[name] = {
            "unpack": peak_bytes(partial(impl.unpack, job)) / n,
            "pack": peak_bytes(partial(impl.pack, values)) / len(packed),
        }
        del job
    return {
        "machine": describe_machine(),
        "cpu_pressure_avg60": cpu_pressure(),
        "rounds": rounds,
        "few_rounds": list(few_rounds),
        "implementations": list(impls),
        "sizes": results,
        "memory_elements": n,
        "memory": memory,
    }


def report(data: dict[str, Any]) -> str:
    impls: list[str] = data["implementations"]
    n = data["memory_elements"]
    last = next(row for row in data["sizes"] if row["elements"] == n)
    machine = data["machine"]
    parts = [
        f"cores: {machine['cores']} (kiln_np threads: {machine['kiln_np_threads']}), "
        f"{machine['cpu']}, Python {machine['python']}, numpy {machine['numpy']}; "
        f"kernels: {machine['kernels']}; median of {data['rounds']} interleaved rounds "
        f"({data['few_rounds'][1]} from {format_size(data['few_rounds'][0])} elements); "
        f"CPU pressure (avg60) at the end: {data['cpu_pressure_avg60']}",
        "",
        f"At {format_size(n)} elements ({format_size(n // 2)}B packed), ratio to np.copy of the "
        f"unpacked array ({last['copy_seconds'] * 1e3:.1f} ms):",
        "",
        markdown_table(
            [
                "implementation",
                "unpack",
                "pack",
                "peak memory of unpack / output",
                "peak memory of pack / output",
            ],
            [
                [
                    name,
                    last[f"{name} unpack"]["ratio"],
                    last[f"{name} pack"]["ratio"],
                    data["memory"][name]["unpack"],
                    data["memory"][name]["pack"],
                ]
                for name in impls
            ],
        ),
    ]
    for op in ("unpack", "pack"):
        parts += [
            "",
            f"{op}, ratio to np.copy by size (elements):",
            "",
            markdown_table(
                ["elements", "np.copy µs", *impls, f"{impls[-1]} / naive numpy"],
                [
                    [
                        format_size(row["elements"]),
                        f"{row['copy_seconds'] * 1e6:.1f}",
                        *(row[f"{name} {op}"]["ratio"] for name in impls),
                        row[f"{impls[-1]} {op}"]["vs_naive"],
                    ]
                    for row in data["sizes"]
                ],
            ),
        ]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--max-elements", type=int, default=1 << 28, help="largest size (default 256 Mi)"
    )
    parser.add_argument(
        "--min-elements", type=int, default=1 << 6, help="smallest size (default 64)"
    )
    parser.add_argument("--rounds", type=int, default=11, help="timing rounds (default 11)")
    parser.add_argument(
        "--few-rounds", type=int, default=3, help="rounds of the largest sizes (default 3)"
    )
    parser.add_argument(
        "--few-rounds-from",
        type=int,
        default=1 << 26,
        help="sizes from here get --few-rounds (default 64 Mi)",
    )
    parser.add_argument(
        "--memory-elements",
        type=int,
        default=1 << 26,
        help="size of the peak-memory columns (default 64 Mi)",
    )
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    args = parser.parse_args(argv)
    data = run(
        args.min_elements,
        args.max_elements,
        args.rounds,
        (args.few_rounds_from, args.few_rounds),
        args.memory_elements,
    )
    print(report(data))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
