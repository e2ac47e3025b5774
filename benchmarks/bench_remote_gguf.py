"""``kiln-np ls`` and ``meta`` of a 4 GiB GGUF over HTTP: bytes read, requests and time.

Run from the repository root::

    python benchmarks/bench_remote_gguf.py              # 150,000 tokens, 4 GiB, 5 rounds
    python benchmarks/bench_remote_gguf.py --tokens 262144 --rounds 3   # a Gemma-sized vocabulary
    python benchmarks/bench_remote_gguf.py --rounds 1   # a smoke run

Writes a GGUF whose metadata holds a llama-like tokenizer of ``--tokens`` tokens
(token strings, float32 scores, int32 token types: ``tests/_helpers.py``'s
``gguf_with_tokenizer``) and one F32 tensor of ``--gib`` GiB whose data is a hole
(a sparse file), serves it on 127.0.0.1 with the loopback HTTP/1.1 server of the
tests (``tests/_remote_server.py``: byte ranges, ETag, If-Match, bytes served
counted), and per round runs ``kiln-np ls URL`` and ``kiln-np meta URL`` in this
process (their output discarded), and ``kiln-np ls PATH`` of the local file.

Printed: the header's size; per command the body bytes the server sent, the bytes
past the header (issue 43's target: at most 64 KiB, 65,536 bytes, whatever the
metadata's size), the ranged ``GET`` requests, and the time over HTTP and locally
(medians over ``--rounds``).  The exit status is 1 when the target is missed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the tests' server

from _common import describe_machine, markdown_table
from _helpers import gguf_with_tokenizer
from _remote_server import serving

from kiln_np.cli import main as kiln_np_main

TARGET = 1 << 16  # bytes past the header


def quietly(*argv: str) -> float:
    """Seconds one ``kiln-np`` command took, its output discarded (exit 0 asserted)."""
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        status = kiln_np_main(list(argv))
    assert status == 0, argv
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=150_000)
    parser.add_argument("--gib", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rows = []
    worst = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.gguf"
        header = gguf_with_tokenizer(path, tokens=args.tokens, data_bytes=args.gib << 30)
        size = path.stat().st_size
        with serving(Path(tmp)) as server:
            url = server.url + "big.gguf"
            for command in ("ls", "meta"):
                http_times, local_times = [], []
                for _ in range(args.rounds):
                    local_times.append(quietly(command, str(path)))
                    server.reset()
                    http_times.append(quietly(command, url))
                    served = server.total
                    gets = sum(1 for r in server.requests if r[0] == "GET")
                past = served - header
                worst = max(worst, past)
                http, local = statistics.median(http_times), statistics.median(local_times)
                rows.append(
                    [
                        f"`kiln-np {command}`",
                        f"{served:,}",
                        f"{past:,}",
                        str(gets),
                        f"{http:.3f}",
                        f"{local:.3f}",
                    ]
                )
    print(describe_machine())
    print(
        f"GGUF of {size:,} bytes ({args.gib} GiB of tensor data, sparse); {args.tokens:,}-token "
        f"tokenizer; header {header:,} bytes"
    )
    print(
        markdown_table(
            [
                "command",
                "bytes served",
                "past the header (target <= 65,536)",
                "GET requests",
                "over HTTP (s)",
                "local (s)",
            ],
            rows,
        )
    )
    return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
