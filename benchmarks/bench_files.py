"""Payload files: open_payload + full decode and save_payload against plain numpy I/O.

Run from the repository root::

    python benchmarks/bench_files.py              # 64 MiB payloads
    python benchmarks/bench_files.py --mib 256 --rounds 7
    python benchmarks/bench_files.py --memory     # peak memory of stepped slices

Every row is timed in the same interleaved rounds as ``np.copy`` of a payload-
sized array (so a noisy machine moves all of them together) and reported as a
ratio to its plain-numpy counterpart measured in the same rounds:

- whole-byte read: ``np.array(open_payload(...))`` (map, then copy every byte
  into memory) against ``np.fromfile``;
- whole-byte write: ``save_payload(path, array)`` (temporary file, rename)
  and ``save_payload`` from 4 MiB chunks, against ``ndarray.tofile``, both to
  a path that does not exist yet and over the file the previous round wrote
  (there ext4 starts writing the renamed file's data back at once, see
  docs/big-files.md);
- 4-bit read: ``np.asarray(open_payload(...))`` and a pass over
  ``iter_chunks()`` against ``np.fromfile`` + ``to_numpy`` (decode in memory);
- 4-bit write: ``save_payload`` against ``from_numpy`` + ``tofile``.

Files live in a temporary directory and the reads hit the page cache, so the
read figures measure kiln_np's overhead over numpy's, not the disk.

``--memory`` measures instead what stepped ``LazyPayload`` slices of a sparse
``--mib`` MiB u4 file allocate (``tracemalloc`` peak: the library's
allocations, not the mapped file's pages): ``lp[::n-1]`` selects 2 elements
and must cost about nothing, ``lp[3::1000]`` about its output.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import tracemalloc
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import describe_machine, markdown_table, time_interleaved

import kiln_np
from kiln_np import Code


def chunks_of(arr: np.ndarray, rows: int) -> Iterator[np.ndarray]:
    """``arr`` as consecutive slabs of ``rows`` along axis 0."""
    for start in range(0, arr.shape[0], rows):
        yield arr[start : start + rows]


def run(mib: int, rounds: int, directory: str) -> list[list[object]]:
    """Time every row; return ``[case, MB/s, ratio to baseline, baseline]`` rows."""
    rng = np.random.default_rng(0)
    nbytes = mib << 20
    f32 = rng.standard_normal(nbytes // 4, dtype=np.float32)
    u4 = rng.integers(0, 16, 2 * nbytes, dtype=np.uint8).view(ml_dtypes.uint4)
    f32_path = os.path.join(directory, "f32.bin")
    u4_path = os.path.join(directory, "u4.bin")

    kiln_np.save_payload(f32_path, f32)
    kiln_np.save_payload(u4_path, u4)
    chunk_rows = (4 << 20) // 4

    def new_file(name: str, write: Callable[[str], object]) -> Callable[[], object]:
        """``write(path)`` to a path that does not exist yet (removed first, timed)."""
        path = os.path.join(directory, name)

        def run() -> object:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
            return write(path)

        return run

    def over(name: str, write: Callable[[str], object]) -> Callable[[], object]:
        """``write(path)`` over the file the previous round left there."""
        return partial(write, os.path.join(directory, name))

    def chunked_decode() -> None:
        lazy = kiln_np.open_payload(u4_path, Code.U4, u4.shape)
        assert isinstance(lazy, kiln_np.LazyPayload)
        for _ in lazy.iter_chunks():
            pass

    def u4_tofile(path: str) -> None:
        np.frombuffer(kiln_np.from_numpy(u4).data, np.uint8).tofile(path)

    # The first row of each group is its numpy baseline.
    groups: dict[str, dict[str, Callable[[], object]]] = {
        "f32 read": {
            "np.fromfile": lambda: np.fromfile(f32_path, "<f4"),
            "np.array(open_payload(...))": lambda: np.array(
                kiln_np.open_payload(f32_path, Code.F32, f32.shape)
            ),
        },
        "f32 write, new file": {
            "ndarray.tofile": new_file("a", f32.tofile),
            "save_payload(array)": new_file(
                "b", partial(kiln_np.save_payload, array_or_chunks=f32)
            ),
            "save_payload(4 MiB chunks)": new_file(
                "c", lambda p: kiln_np.save_payload(p, chunks_of(f32, chunk_rows))
            ),
        },
        "f32 write, over a file": {
            "ndarray.tofile": over("d", f32.tofile),
            "save_payload(array)": over("e", lambda p: kiln_np.save_payload(p, f32)),
        },
        "u4 read": {
            "np.fromfile + to_numpy": lambda: kiln_np.to_numpy(
                Code.U4, np.fromfile(u4_path, np.uint8), u4.shape
            ),
            "np.asarray(open_payload(...))": lambda: np.asarray(
                kiln_np.open_payload(u4_path, Code.U4, u4.shape)
            ),
            "open_payload(...).iter_chunks()": chunked_decode,
        },
        "u4 write, new file": {
            "from_numpy + tofile": new_file("f", u4_tofile),
            "save_payload(array)": new_file("g", partial(kiln_np.save_payload, array_or_chunks=u4)),
        },
    }
    functions: dict[str, Callable[[], object]] = {"np.copy": lambda: np.copy(f32)}
    for group, cases in groups.items():
        functions.update({f"{group}: {case}": fn for case, fn in cases.items()})
    timing = time_interleaved(functions, "np.copy", rounds)
    rows: list[list[object]] = []
    for group, cases in groups.items():
        base = f"{group}: {next(iter(cases))}"
        for case in cases:
            name = f"{group}: {case}"
            mbps = nbytes / timing.median(name) / 1e6
            ratio = "1.00 (baseline)" if name == base else f"{timing.ratio(name, base):.2f}"
            rows.append([name, f"{mbps:,.0f}", ratio, f"{timing.ratio(name, 'np.copy'):.2f}"])
    return rows


def memory(mib: int, directory: str) -> list[list[object]]:
    """``[slice, elements, output KiB, peak KiB]`` for stepped slices of a u4 file."""
    path = os.path.join(directory, "u4.bin")
    with open(path, "wb") as f:
        f.truncate(mib << 20)  # sparse: only the pages read are ever in memory
    n = 2 * (mib << 20)
    lazy = kiln_np.LazyPayload(path, Code.U4, (n,))
    rows: list[list[object]] = []
    for text, key in (
        ("lp[::n-1]", slice(None, None, n - 1)),
        ("lp[::-(n-1)]", slice(None, None, -(n - 1))),
        ("lp[3::1000]", slice(3, None, 1000)),
        ("lp[::2]", slice(None, None, 2)),
    ):
        tracemalloc.start()
        try:
            out = lazy[key]
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        rows.append([text, f"{out.size:,}", f"{out.nbytes / 1024:,.1f}", f"{peak / 1024:,.1f}"])
        del out
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=64, help="payload size in MiB")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--memory", action="store_true", help="stepped-slice peak memory")
    args = parser.parse_args(argv)
    if args.memory:
        with tempfile.TemporaryDirectory() as directory:
            rows = memory(args.mib, directory)
        print(f"u4 file: {args.mib} MiB ({2 * (args.mib << 20):,} elements); tracemalloc peak")
        print()
        print(markdown_table(["slice", "elements", "output KiB", "peak KiB"], rows))
        return
    with tempfile.TemporaryDirectory() as directory:
        rows = run(args.mib, args.rounds, directory)
    print(f"payload: {args.mib} MiB; machine: {describe_machine()}")
    print()
    header = ["case", "payload MB/s", "time / numpy baseline", "time / np.copy"]
    print(markdown_table(header, rows))


if __name__ == "__main__":
    main()
