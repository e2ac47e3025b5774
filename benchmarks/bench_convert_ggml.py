"""``kiln-np convert --dequantize``: a GGUF of GGML blocks to float safetensors.

Run from the repository root::

    python benchmarks/bench_convert_ggml.py                      # 1 GiB of Q4_K blocks
    python benchmarks/bench_convert_ggml.py --type Q8_0 --rounds 3
    python benchmarks/bench_convert_ggml.py --size-mib 256 --dtype bf16

Writes a GGUF of about ``--size-mib`` MiB of ``--type`` blocks in eight tensors
of different sizes (random bytes, the f16 scales ``d``/``dmin`` set to ordinary
values, as in a real model: a random scale byte makes one block in 32
subnormal, whose arithmetic is slow on x86 in every implementation), then per
round:

- ``kiln-np convert SRC OUT.safetensors --dequantize f32`` (a subprocess, as a
  user runs it) and ``kiln_np.save_weights(OUT, open_weights(SRC),
  format="safetensors", dequantize=...)`` in process;
- the baseline: ``kiln_np.gguf.dequantize`` of every tensor (each result
  dropped before the next) plus ``shutil.copyfile`` of the output file, which
  is what a conversion must at least do: compute the values and write them.

Issue 20's targets: convert time / baseline <= 1.3; the ``tracemalloc`` peak of
the in-process conversion <= the largest output tensor + 64 MiB (printed as a
ratio to that bound, <= 1.0).  Figures are medians over ``--rounds`` of ratios
taken in the same round.  Files go in ``--dir`` (default: the system temporary
directory; the 1 GiB Q4_K source makes a 7.1 GiB float32 output and its copy)
and are deleted at the end.  The exit status is 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cpu_pressure, describe_machine, markdown_table, peak_bytes

import kiln_np
from kiln_np import Layout, Payload
from kiln_np._quants.blocks import BLOCKS
from kiln_np._quants.decode import DECODERS
from kiln_np.gguf import dequantize

TIME_TARGET = 1.3
PEAK_SLACK = 64 << 20
SHARES = (0.25, 0.18, 0.14, 0.12, 0.10, 0.08, 0.07, 0.06)
"""Each tensor's share of the blocks: eight tensors of different sizes."""
F16_SCALES = {
    "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,),
    "Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,),
    "IQ4_NL": (0,), "IQ4_XS": (0,),
}  # fmt: skip
"""Byte offsets of each type's f16 scale fields (ggml-common.h's block structs)."""
NUMPY = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}
ITEMSIZE = {"f32": 4, "f16": 2, "bf16": 2}


def source_gguf(path: Path, name: str, size: int) -> None:
    """A GGUF of about ``size`` bytes of ``name`` blocks, in len(SHARES) tensors
    of 4096-element rows (fewer when a tensor is small)."""
    block = BLOCKS[name]
    rng = np.random.default_rng(block.type_id)
    per_row = max(1, 4096 // block.elements)
    tensors = {}
    for i, share in enumerate(SHARES):
        rows = max(1, int(size * share) // (per_row * block.bytes))
        raw = rng.integers(0, 256, (rows, per_row, block.bytes), np.uint8)
        for offset in F16_SCALES.get(name, ()):
            d = rng.integers(0x1400, 0x2C00, (rows, per_row)).astype("<u2")
            raw[..., offset : offset + 2] = d[..., None].view(np.uint8)
        layout = Layout(block.layout_name, block.bytes)
        tensors[f"blk.{i}.weight"] = Payload(
            block.code, raw.reshape(-1).data, raw.shape[:2], layout
        )
    kiln_np.save_weights(path, tensors, format="gguf")


def _seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _remove(path: Path) -> None:
    if path.exists():
        path.unlink()


def _dequantize_all(src: Path, dtype: str) -> None:
    with kiln_np.open_weights(src) as weights:
        for tensor in weights.values():
            values = dequantize(tensor, dtype=NUMPY[dtype])
            del values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--type", default="Q4_K", help="the GGML block type (Q4_K)")
    parser.add_argument("--size-mib", type=int, default=1024, help="MiB of blocks (1024)")
    parser.add_argument("--dtype", default="f32", choices=list(NUMPY), help="(f32)")
    parser.add_argument("--rounds", type=int, default=3, help="timing rounds (3)")
    parser.add_argument("--dir", default=None, help="where the files go")
    args = parser.parse_args(argv)
    if args.type not in DECODERS:
        parser.error(f"{args.type} does not decode here; decodable: {', '.join(DECODERS)}")
    print(describe_machine(), "cpu pressure (avg60)", cpu_pressure())
    work = Path(tempfile.mkdtemp(prefix="kiln-bench-convert-", dir=args.dir))
    src, out, copy = work / "src.gguf", work / "out.safetensors", work / "copy.safetensors"
    try:
        source_gguf(src, args.type, args.size_mib << 20)
        with kiln_np.open_weights(src) as weights:
            largest = max(
                dequantize_bytes(t.info.shape, args.type, args.dtype) for t in weights.values()
            )
        cli = [sys.executable, "-m", "kiln_np.cli", "convert", str(src), str(out)]
        cli += ["--dequantize", args.dtype]

        def convert_cli() -> None:
            subprocess.run(cli, check=True, stdout=subprocess.DEVNULL)

        def convert_python() -> None:
            with kiln_np.open_weights(src) as weights:
                kiln_np.save_weights(out, weights, format="safetensors", dequantize=args.dtype)

        seconds: dict[str, list[float]] = {k: [] for k in ("cli", "python", "deq", "copy")}
        for _ in range(args.rounds):
            _remove(out)
            seconds["cli"].append(_seconds(convert_cli))
            seconds["copy"].append(_seconds(lambda: shutil.copyfile(out, copy)))
            _remove(copy)
            seconds["deq"].append(_seconds(lambda: _dequantize_all(src, args.dtype)))
            _remove(out)
            seconds["python"].append(_seconds(convert_python))
        _remove(out)
        peak = peak_bytes(convert_python)
        output_bytes = out.stat().st_size
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def ratio(name: str) -> float:
        pairs = zip(seconds[name], seconds["deq"], seconds["copy"], strict=True)
        return statistics.median(t / (d + c) for t, d, c in pairs)

    def ms(name: str) -> str:
        return f"{statistics.median(seconds[name]) * 1e3:.0f} ms"

    bound = largest + PEAK_SLACK
    rows: list[list[object]] = [
        ["kiln-np convert --dequantize", ms("cli"), ratio("cli"), f"<= {TIME_TARGET}"],
        ["save_weights(dequantize=)", ms("python"), ratio("python"), f"<= {TIME_TARGET}"],
        ["dequantize every tensor", ms("deq"), "", ""],
        ["shutil.copyfile of the output", ms("copy"), "", ""],
        ["tracemalloc peak of save_weights", f"{peak / 2**20:.1f} MiB", peak / bound, "<= 1.0"],
    ]
    print(
        f"\n{args.type} -> {args.dtype}: {args.size_mib} MiB of blocks in {len(SHARES)} tensors, "
        f"output {output_bytes / 2**30:.2f} GiB, largest tensor {largest / 2**20:.0f} MiB "
        f"(peak bound: largest + 64 MiB = {bound / 2**20:.0f} MiB)\n"
    )
    print(
        markdown_table(["what", "median", "/ (dequantize + copyfile) or / bound", "target"], rows)
    )
    met = max(ratio("cli"), ratio("python")) <= TIME_TARGET and peak <= bound
    return 0 if met else 1


def dequantize_bytes(block_shape: tuple[int, ...], name: str, dtype: str) -> int:
    """Bytes of the values of a tensor of ``block_shape`` blocks of ``name``."""
    return int(np.prod(block_shape)) * BLOCKS[name].elements * ITEMSIZE[dtype]


if __name__ == "__main__":
    raise SystemExit(main())
