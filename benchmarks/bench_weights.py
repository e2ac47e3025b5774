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

Figures are absolute milliseconds (medians over ``--rounds``); the exit status
is 1 when a case misses its target.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cpu_pressure, describe_machine, markdown_table

import kiln_np.gguf as kg

GGUF_OPEN_TARGET_MS = 200.0


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
    kg.write_gguf(path, tensors, metadata)
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


Case = Callable[[argparse.Namespace], tuple[list[list[object]], bool]]
CASES: dict[str, Case] = {"gguf-open": bench_gguf_open}
"""Each case returns its table rows and whether it met its target."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", help=f"some of {', '.join(CASES)} (default: all)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--entries", type=int, default=150_000)
    parser.add_argument("--oracle", action="store_true", help="also time gguf.GGUFReader")
    args = parser.parse_args(argv)
    print(describe_machine(), "cpu pressure", cpu_pressure())
    unknown = set(args.cases) - set(CASES)
    if unknown:
        parser.error(f"unknown cases {sorted(unknown)}; expected some of {list(CASES)}")
    ok = True
    for name in args.cases or CASES:
        rows, met = CASES[name](args)
        print(f"\n{name}\n")
        print(markdown_table(["what", "ms (median)"], rows))
        ok = ok and met
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
