"""ONNX raw_data decode and encode: kiln_np.onnx against onnx.numpy_helper.

Run from the repository root (onnx must be installed)::

    python benchmarks/bench_onnx.py              # 16 Mi elements, 15 rounds
    python benchmarks/bench_onnx.py --elements 10000 1000000 16777216 --rounds 7

For INT4, UINT2 and FLOAT6E2M3 tensors of ``n`` elements with random
``raw_data`` (padding bits 0), the rows time, interleaved in the same rounds:

- ``np.copy`` of the decoded array (``n`` bytes, one element per byte): the
  baseline every time is shown against;
- ``decode_raw``: ``kiln_np.onnx.decode_raw(data_type, raw, (n,))`` on the
  bytes of the tensor, on the active kernels (``kiln_np.kernel_backend()``);
- ``decode numpy``: the same on the numpy kernels (``_backend.COMPILED``
  switched off around the call, as ``KILN_NP_PURE=1`` would), when the
  compiled ones are active;
- ``to_numpy``: ``kiln_np.onnx.to_numpy`` of the ``TensorProto`` (includes
  protobuf handing out ``raw_data``);
- ``to_array``: ``onnx.numpy_helper.to_array`` of the ``TensorProto``;
- ``encode_raw`` (and ``encode numpy``): ``kiln_np.onnx.encode_raw`` of the
  decoded array, the check for bits above the element included;
- ``from_array``: ``onnx.numpy_helper.from_array`` of the same array (packs
  and builds a ``TensorProto``).

``speedup`` is the median over rounds of ``to_array`` time over
``decode_raw`` time in the same round; the issue asks for at least 5x.  The
exit status is 1 when a speedup is below ``--require``.

``--kernels`` times the 2- and 6-bit kernels of ``kiln_np.onnx._subbyte``
alone instead (into a preallocated output, no checks): numpy, compiled and
onnx's own private ``numpy_helper._unpack_2bit`` / ``_pack_2bitx4`` /
``_unpack_6bit`` / ``_pack_6bit``, as multiples of ``np.copy`` of the
unpacked bytes::

    python benchmarks/bench_onnx.py --kernels --elements 10000 1000000 16777216 --rounds 7
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    Timing,
    cpu_pressure,
    describe_machine,
    format_size,
    markdown_table,
    time_interleaved,
)

from kiln_np import onnx as ko
from kiln_np._kernels import backend as _backend
from kiln_np._kernels import subbyte as _subbyte

CASES = (ko.DataType.INT4, ko.DataType.UINT2, ko.DataType.FLOAT6E2M3)
T = TypeVar("T")


def random_raw(row: ko.OnnxType, count: int, seed: int) -> bytes:
    """Random raw_data for ``count`` elements with zero padding bits."""
    assert row.bits is not None
    raw = np.random.default_rng(seed).integers(0, 256, row.byte_length(count), dtype=np.uint8)
    used = count * row.bits % 8
    if used:
        raw[-1] &= (1 << used) - 1
    return raw.tobytes()


def on_numpy(fn: Callable[[], T]) -> Callable[[], T]:
    """``fn`` on the numpy kernels: the compiled ones switched off around the call."""

    def call() -> T:
        _backend.COMPILED = False
        try:
            return fn()
        finally:
            _backend.COMPILED = True

    return call


def cell(timing: Timing, name: str) -> str:
    """``name``'s time as a multiple of np.copy's, or ``-`` when it was not timed."""
    return f"{timing.ratio(name, 'np.copy'):.2f}" if name in timing.seconds else "-"


def kernel_rows(elements: list[int], rounds: int) -> list[list[str]]:
    """The ``--kernels`` table: unpack and pack alone, numpy against compiled and onnx."""
    from onnx import numpy_helper as nh

    ours = {
        2: (_subbyte.unpack2_into, _subbyte.pack2_into),
        6: (_subbyte.unpack6_into, _subbyte.pack6_into),
    }
    theirs: dict[int, tuple[Callable[..., object], Callable[..., object]]] = {
        2: (nh._unpack_2bit, nh._pack_2bitx4),
        6: (nh._unpack_6bit, nh._pack_6bit),
    }
    rows = []
    rng = np.random.default_rng(0)
    for bits, (unpack, pack) in ours.items():
        for count in elements:
            values = rng.integers(0, 1 << bits, count, dtype=np.uint8)
            packed = np.empty(-(-count * bits // 8), np.uint8)
            pack(values, packed)
            out, repacked = np.empty(count, np.uint8), np.empty_like(packed)
            functions: dict[str, Callable[[], object]] = {
                "np.copy": partial(np.copy, out),
                "unpack numpy": on_numpy(partial(unpack, packed, out, count)),
                "unpack compiled": partial(unpack, packed, out, count),
                "unpack onnx": partial(theirs[bits][0], packed, (count,)),
                "pack numpy": on_numpy(partial(pack, values, repacked)),
                "pack compiled": partial(pack, values, repacked),
                "pack onnx": partial(theirs[bits][1], values),
            }
            timing = time_interleaved(functions, baseline="np.copy", rounds=rounds)
            gains = [
                f"{timing.ratio(f'{op} numpy', f'{op} compiled'):.1f}x" for op in ("unpack", "pack")
            ]
            rows.append(
                [f"{bits}-bit", format_size(count), f"{timing.median('np.copy') * 1e6:.1f} us"]
                + [cell(timing, name) for name in list(functions)[1:4]]
                + gains[:1]
                + [cell(timing, name) for name in list(functions)[4:]]
                + gains[1:]
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, nargs="+", default=[1 << 24])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--require", type=float, default=5.0)
    parser.add_argument("--kernels", action="store_true", help="time the 2-/6-bit kernels alone")
    args = parser.parse_args(argv)
    if args.kernels:
        if not _backend.COMPILED:
            raise SystemExit("--kernels compares with the compiled kernels, which are not active")
        rows = kernel_rows(args.elements, args.rounds)
        print(describe_machine(), f"CPU pressure (some avg60): {cpu_pressure()}")
        head = ["width", "elements", "np.copy", "unpack numpy", "compiled", "onnx", "gain"]
        print(markdown_table([*head, "pack numpy", "compiled", "onnx", "gain"], rows))
        return 0

    import onnx
    from onnx import numpy_helper

    compare = _backend.COMPILED  # the numpy kernels as a second column
    decode_rows, encode_rows = [], []
    worst = float("inf")
    for count in args.elements:
        for data_type in CASES:
            row = ko.data_type_info(data_type)
            raw = random_raw(row, count, int(data_type))
            tensor = onnx.helper.make_tensor("w", int(data_type), [count], raw, raw=True)
            ours = ko.decode_raw(data_type, raw, (count,))
            theirs = numpy_helper.to_array(tensor)
            if (
                ours.dtype != theirs.dtype
                or ours.view(np.uint8).tobytes() != theirs.view(np.uint8).tobytes()
                or bytes(ko.encode_raw(ours)) != raw
                or (compare and bytes(on_numpy(partial(ko.encode_raw, ours))()) != raw)
                or numpy_helper.from_array(ours).raw_data != raw
            ):
                raise SystemExit(f"{row.name}: kiln_np and onnx disagree")
            out = np.empty(count, np.uint8)
            functions: dict[str, Callable[[], object]] = {
                "np.copy": partial(np.copy, out),
                "decode_raw": partial(ko.decode_raw, data_type, raw, (count,)),
                "to_numpy": partial(ko.to_numpy, tensor),
                "to_array": partial(numpy_helper.to_array, tensor),
                "encode_raw": partial(ko.encode_raw, ours),
                "from_array": partial(numpy_helper.from_array, ours),
            }
            if compare:
                functions["decode numpy"] = on_numpy(functions["decode_raw"])
                functions["encode numpy"] = on_numpy(functions["encode_raw"])
            timing = time_interleaved(functions, baseline="np.copy", rounds=args.rounds)

            speedup = 1 / timing.ratio("decode_raw", "to_array")
            worst = min(worst, speedup)
            size = [row.name, format_size(count), f"{timing.median('np.copy') * 1e6:.1f} us"]
            decode_rows.append(
                size
                + [cell(timing, n) for n in ("decode_raw", "decode numpy", "to_numpy", "to_array")]
                + [f"{speedup:.1f}x"]
            )
            encode_rows.append(
                size
                + [cell(timing, n) for n in ("encode_raw", "encode numpy", "from_array")]
                + [f"{1 / timing.ratio('encode_raw', 'from_array'):.1f}x"]
            )
    print(describe_machine(), "load average:", " ".join(f"{x:.1f}" for x in os.getloadavg()))
    print(f"CPU pressure (some avg60): {cpu_pressure()}; times are multiples of np.copy\n")
    head = ["type", "elements", "np.copy"]
    print(
        markdown_table(
            [*head, "decode_raw", "decode numpy", "to_numpy", "to_array", "speedup vs to_array"],
            decode_rows,
        )
    )
    print()
    print(
        markdown_table(
            [*head, "encode_raw", "encode numpy", "from_array", "speedup vs from_array"],
            encode_rows,
        )
    )
    return 0 if worst >= args.require else 1


if __name__ == "__main__":
    sys.exit(main())
