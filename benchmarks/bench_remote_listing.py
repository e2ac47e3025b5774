"""Listing a 100-shard safetensors checkpoint over HTTP: bytes read and time.

Run from the repository root::

    python benchmarks/bench_remote_listing.py             # 100 shards, 900 tensors, 5 rounds
    python benchmarks/bench_remote_listing.py --rounds 1  # a smoke run

Writes a checkpoint of 100 shards of 9 small tensors each (900 tensors, names as a
transformer's: ``model.layers.N.self_attn.q_proj.weight``, ...) and its index in a
temporary directory, serves it on 127.0.0.1 with the loopback HTTP/1.1 server of
the tests (``tests/_remote_server.py``: byte ranges, ETag, bytes served counted),
and per round, in this process, lists it with ``kiln_np.open_weights`` from the
local directory and from the index's URL.

Printed: the body bytes the server sent for one listing, over the sum of the
shards' header sizes (issue 24's target: <= 1.2 for the headers: 8-byte size
prefixes and headers, the index apart) and over what a listing must read (the
index, each shard's 8-byte size and its header: exactly 1.00 when nothing else is
read); the listing time over HTTP and locally (medians over ``--rounds``) and
their ratio.  The exit status is 1 when the header target is missed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the tests' server

from _common import describe_machine, markdown_table
from _remote_server import serving

import kiln_np
from kiln_np.safetensors import save_safetensors

ROLES = (
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
    "input_layernorm.weight",
    "post_attention_layernorm.weight",
)


def build(directory: Path, shards: int) -> None:
    tensors = {
        f"model.layers.{i}.{role}": np.full((4, 16), i, np.float32)
        for i in range(shards)
        for role in ROLES
    }
    save_safetensors(directory, tensors, max_shard_size=len(ROLES) * 4 * 16 * 4)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build(root / "ck", args.shards)
        shard_files = sorted((root / "ck").glob("*.safetensors"))
        assert len(shard_files) == args.shards, len(shard_files)
        headers = sum(int.from_bytes(p.read_bytes()[:8], "little") for p in shard_files)
        index = (root / "ck" / "model.safetensors.index.json").stat().st_size
        needed = index + 8 * args.shards + headers
        local_times, http_times = [], []
        with serving(root) as server:
            url = server.url + "ck/model.safetensors.index.json"
            for _ in range(args.rounds):
                start = time.perf_counter()
                with kiln_np.open_weights(root / "ck") as w:
                    count = len(w)
                local_times.append(time.perf_counter() - start)
                server.reset()
                start = time.perf_counter()
                with kiln_np.open_weights(url) as w:
                    assert len(w) == count
                http_times.append(time.perf_counter() - start)
                served = server.total
                requests = len(server.requests)
    local, http = statistics.median(local_times), statistics.median(http_times)
    header_ratio = (served - index) / headers
    print(describe_machine())
    print(
        f"{args.shards} shards, {count} tensors; index {index} B, headers {headers} B, "
        f"{requests} requests per listing over HTTP"
    )
    print(
        markdown_table(
            ["figure", "value"],
            [
                ["bytes served / sum of header sizes", f"{served / headers:.3f}"],
                ["(bytes served - index) / sum of header sizes", f"{header_ratio:.3f}"],
                ["bytes served / (index + 8-byte prefixes + headers)", f"{served / needed:.3f}"],
                ["listing over HTTP (s)", f"{http:.3f}"],
                ["listing local (s)", f"{local:.4f}"],
                ["HTTP / local", f"{http / local:.1f}"],
            ],
        )
    )
    return 0 if header_ratio <= 1.2 else 1


if __name__ == "__main__":
    sys.exit(main())
