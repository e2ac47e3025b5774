"""Hostile JSON documents: peak memory and time of opening them.

Run from the repository root::

    python benchmarks/bench_json_memory.py              # every case, 99 MB each
    python benchmarks/bench_json_memory.py index --mb 300

Cases (each file built in a temporary directory, then opened by
``kiln_np.open_weights`` in a fresh subprocess, which reports its peak resident
set, ``VmHWM``, above what it held after ``import kiln_np``):

- ``header-objects``: a safetensors header of ``"aN":{}`` items;
- ``header-arrays``: a safetensors header whose one entry is a list of ``[]``;
- ``index``: a ``model.safetensors.index.json`` whose ``metadata`` holds a list
  of ``[]`` (before issue 19 it opened);
- ``manifest``: a Kiln ``manifest.json`` with such a list under a key the reader
  ignores.

Linux only (``/proc/self/status``).
"""

from __future__ import annotations

import argparse
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

import kiln_np

_CHILD = """
import re, sys, time, kiln_np
def peak():
    return int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read())[1])
base = peak()
start = time.perf_counter()
try:
    outcome = f"opened, {len(kiln_np.open_weights(sys.argv[1]))} tensors"
except Exception as exc:
    outcome = f"{type(exc).__name__}: {str(exc)[:90]}..."
took = time.perf_counter() - start
print(f"{(peak() - base) / 1024:.0f} MB above import, {took:.2f} s: {outcome}")
"""


def _arrays(n: int) -> bytes:
    return b"[" + b"[]," * max(n // 3 - 40, 0) + b"[]]"


def build(case: str, n: int, directory: str) -> str:
    """The file (or directory) of ``case``, about ``n`` bytes of JSON."""
    if case.startswith("header"):
        if case == "header-objects":
            raw = b"{" + b",".join(b'"a%d":{}' % i for i in range(n // 14)) + b"}"
        else:
            raw = b'{"x":' + _arrays(n) + b"}"
        path = os.path.join(directory, "h.safetensors")
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw)
        return path
    one = {"w": np.ones(2)}
    if case == "index":
        kiln_np.save_weights(os.path.join(directory, "a.safetensors"), one, format="safetensors")
        path = os.path.join(directory, "model.safetensors.index.json")
        with open(path, "wb") as f:
            f.write(b'{"metadata": {"junk": ' + _arrays(n) + b'}, "weight_map": ')
            f.write(b'{"w": "a.safetensors"}}')
        return path
    out = os.path.join(directory, "k")
    kiln_np.save_weights(out, one, format="kiln")
    manifest = os.path.join(out, "manifest.json")
    with open(manifest, "rb") as f:
        text = f.read()
    with open(manifest, "wb") as f:
        f.write(text.replace(b'"source_format"', b'"junk": ' + _arrays(n) + b', "source_format"'))
    return out


def main() -> None:
    cases = ("header-objects", "header-arrays", "index", "manifest")
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("case", nargs="*", help=f"any of {', '.join(cases)} (default: all)")
    parser.add_argument("--mb", type=int, default=99, help="size of each document")
    args = parser.parse_args()
    for case in args.case or cases:
        if case not in cases:
            parser.error(f"unknown case {case!r}")
        with tempfile.TemporaryDirectory() as directory:
            path = build(case, args.mb * 1_000_000, directory)
            json_file = path if os.path.isfile(path) else os.path.join(path, "manifest.json")
            print(f"{case}, {os.path.getsize(json_file) / 1e6:.0f} MB:", end=" ", flush=True)
            subprocess.run([sys.executable, "-c", _CHILD, path], check=True)


if __name__ == "__main__":
    main()
