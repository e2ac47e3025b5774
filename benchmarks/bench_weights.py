"""Weight files: opening headers without reading data.

Run from the repository root::

    python benchmarks/bench_weights.py                  # every case
    python benchmarks/bench_weights.py gguf-open --rounds 5

Cases:

- ``gguf-open``: ``kiln_np.gguf.open_gguf`` + ``list()`` of a GGUF file whose
  metadata holds a 150,000-entry string array (``tokenizer.ggml.tokens``, as
  a large vocabulary does) beside a 150,000-entry int32 and float32 array and
  a few tensors; the issue's target is <= 200 ms.  Also timed: reading the
  token list (decoded once, on first access), and, with ``--oracle``, one
  ``gguf.GGUFReader`` of the same file (it parses every array eagerly).

- ``st-open``: ``kiln_np.open_weights`` + ``list()`` of a 2 GiB safetensors file
  (1,000 tensors, as a 1B-parameter checkpoint has); target <= 50 ms.
- ``convert``: ``save_weights(dst, open_weights(src), ...)`` of that file to
  safetensors and to a Kiln payload directory, each as a ratio to
  ``shutil.copyfile`` of the file (plus, for the directory, which records a
  SHA-256 per tensor, one ``hashlib.sha256`` pass over the data); target
  <= 1.5x.  Also the peak of ``tracemalloc`` during each conversion (mapped
  pages are not allocations); target <= 64 MiB.

The 2 GiB file (real bytes, not a sparse file: a hole would flatter a kernel
copy) and its copies go in ``--dir`` (default: the system temporary directory)
and are deleted at the end.

Figures are absolute milliseconds (medians over ``--rounds``) or ratios; the
exit status is 1 when a case misses its target.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cpu_pressure, describe_machine, markdown_table

import kiln_np
import kiln_np.gguf as kg

GGUF_OPEN_TARGET_MS = 200.0
ST_OPEN_TARGET_MS = 50.0
CONVERT_TARGET_RATIO = 1.5
CONVERT_PEAK_TARGET = 64 << 20


def _median_ms(fn: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def vocab_gguf(path: Path, entries: int, seed: int = 0) -> Path:
    """A GGUF file with an ``entries``-long token list (1-16 byte tokens) and
    matching scores and token types, plus four small tensors."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 17, entries)
    alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789", np.uint8)
    text = alphabet[rng.integers(0, alphabet.size, int(lengths.sum()))].tobytes().decode()
    ends = np.cumsum(lengths).tolist()
    tokens = [text[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]
    metadata = {
        "general.architecture": "llama",
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": rng.standard_normal(entries).astype(np.float32),
        "tokenizer.ggml.token_type": np.ones(entries, np.int32),
    }
    tensors = {f"blk.{i}.w": np.zeros((64, 64), np.float32) for i in range(4)}
    kg.save_gguf(path, tensors, metadata)
    return path


def bench_gguf_open(args: argparse.Namespace) -> tuple[list[list[object]], bool]:
    """Open + list of a GGUF with a large token list: rows, and whether the target is met."""
    rounds, entries = args.rounds, args.entries
    with tempfile.TemporaryDirectory() as tmp:
        path = vocab_gguf(Path(tmp) / "vocab.gguf", entries)
        size = path.stat().st_size

        def open_and_list() -> list[str]:
            with kg.open_gguf(path) as weights:
                return list(weights)

        def tokens() -> int:
            return len(kg.read_gguf(path).metadata["tokenizer.ggml.tokens"])

        open_ms = _median_ms(open_and_list, rounds)
        tokens_ms = _median_ms(tokens, rounds)
        rows: list[list[object]] = [
            [f"open_gguf + list ({entries:,} tokens, {size / 2**20:.1f} MiB)", open_ms],
            ["open + decode the token list", tokens_ms],
        ]
        if args.oracle:
            import gguf

            rows.append(["gguf.GGUFReader (one run)", _median_ms(lambda: gguf.GGUFReader(path), 1)])
    return rows, open_ms <= GGUF_OPEN_TARGET_MS


def big_safetensors(path: Path, total: int, tensors: int) -> Path:
    """A safetensors file of ``tensors`` BF16 tensors, ``total`` data bytes in all,
    written by kiln_np from one 8 MiB block of random bytes repeated."""
    each = total // tensors // 2 * 2
    block = np.random.default_rng(0).integers(0, 256, 8 << 20, np.uint8)
    header = {}
    for i in range(tensors):
        begin = i * each
        header[f"model.layers.{i // 10}.mlp.w{i % 10}"] = {
            "dtype": "BF16",
            "shape": [each // 2],
            "data_offsets": [begin, begin + each],
        }
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        left = each * tensors
        while left:
            n = min(left, block.size)
            f.write(block[:n].data)
            left -= n
    return path


def _big(args: argparse.Namespace) -> tuple[tempfile.TemporaryDirectory[str], Path]:
    tmp = tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-weights-")
    return tmp, big_safetensors(Path(tmp.name) / "big.safetensors", args.size, args.tensors)


def bench_st_open(args: argparse.Namespace) -> tuple[list[list[object]], bool]:
    """Open + list of a 2 GiB safetensors file (header only)."""
    tmp, path = _big(args)
    with tmp:

        def open_and_list() -> list[str]:
            with kiln_np.open_weights(path) as weights:
                return list(weights)

        open_ms = _median_ms(open_and_list, args.rounds)
        size = path.stat().st_size
        rows: list[list[object]] = [
            [f"open_weights + list ({args.tensors:,} tensors, {size / 2**30:.2f} GiB)", open_ms]
        ]
    return rows, open_ms <= ST_OPEN_TARGET_MS


def _sha256_file(path: Path) -> None:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(8 << 20):
            digest.update(block)


def bench_convert(args: argparse.Namespace) -> tuple[list[list[object]], bool]:
    """Convert a 2 GiB safetensors file, against copying it; peak traced memory."""
    tmp, src = _big(args)
    with tmp:
        out = Path(tmp.name)
        _sha256_file(src)  # warm the page cache for every contender alike

        def copy() -> None:
            shutil.copyfile(src, out / "copy.bin")
            (out / "copy.bin").unlink()

        def copy_and_hash() -> None:
            shutil.copyfile(src, out / "copy.bin")
            _sha256_file(src)
            (out / "copy.bin").unlink()

        def to_safetensors() -> None:
            with kiln_np.open_weights(src) as w:
                kiln_np.save_weights(out / "c.safetensors", w, format="safetensors")
            (out / "c.safetensors").unlink()

        def to_kiln() -> None:
            with kiln_np.open_weights(src) as w:
                kiln_np.save_weights(out / "dir", w, format="kiln")
            shutil.rmtree(out / "dir")

        seconds: dict[str, list[float]] = {n: [] for n in ("copy", "copy+sha", "st", "kiln")}
        for _ in range(args.rounds):
            for name, fn in (
                ("copy", copy),
                ("st", to_safetensors),
                ("copy+sha", copy_and_hash),
                ("kiln", to_kiln),
            ):
                start = time.perf_counter()
                fn()
                seconds[name].append(time.perf_counter() - start)
        peaks = {}
        for name, fn in (("st", to_safetensors), ("kiln", to_kiln)):
            tracemalloc.start()
            try:
                fn()
                peaks[name] = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
        med = {name: statistics.median(v) for name, v in seconds.items()}
        st_ratio = med["st"] / med["copy"]
        kiln_ratio = med["kiln"] / med["copy+sha"]
        gib = src.stat().st_size / 2**30
        rows: list[list[object]] = [
            [f"shutil.copyfile ({gib:.2f} GiB), s", med["copy"]],
            ["-> safetensors, s", med["st"]],
            ["-> safetensors / copyfile", st_ratio],
            ["shutil.copyfile + one sha256 pass, s", med["copy+sha"]],
            ["-> Kiln directory (sha256 per tensor), s", med["kiln"]],
            ["-> Kiln directory / (copyfile + sha256)", kiln_ratio],
            ["peak tracemalloc -> safetensors, MiB", peaks["st"] / 2**20],
            ["peak tracemalloc -> Kiln directory, MiB", peaks["kiln"] / 2**20],
        ]
    met = (
        max(st_ratio, kiln_ratio) <= CONVERT_TARGET_RATIO
        and max(peaks.values()) <= CONVERT_PEAK_TARGET
    )
    return rows, met


Case = Callable[[argparse.Namespace], tuple[list[list[object]], bool]]
CASES: dict[str, Case] = {
    "gguf-open": bench_gguf_open,
    "st-open": bench_st_open,
    "convert": bench_convert,
}
"""Each case returns its table rows and whether it met its target."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", help=f"some of {', '.join(CASES)} (default: all)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--entries", type=int, default=150_000)
    parser.add_argument("--oracle", action="store_true", help="also time gguf.GGUFReader")
    parser.add_argument("--size", type=int, default=2 << 30, help="bytes of the big file")
    parser.add_argument("--tensors", type=int, default=1000, help="tensors of the big file")
    parser.add_argument("--dir", default=None, help="where the big file goes")
    args = parser.parse_args(argv)
    print(describe_machine(), "cpu pressure", cpu_pressure())
    unknown = set(args.cases) - set(CASES)
    if unknown:
        parser.error(f"unknown cases {sorted(unknown)}; expected some of {list(CASES)}")
    ok = True
    for name in args.cases or CASES:
        rows, met = CASES[name](args)
        print(f"\n{name}\n")
        print(markdown_table(["what", "median"], rows))
        ok = ok and met
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
