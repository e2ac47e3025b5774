"""Ctrl-C: a real ``kiln-np`` process sent SIGINT while it writes ends with one
line on stderr and exit status 130, and leaves no partial file (an existing
output keeps its old bytes).

The inputs are sparse files of 4 GiB, so a command takes seconds to finish and
the signal arrives while it writes; each run is bounded by a timeout.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest
from _helpers import kiln_np_exe

_BIG = 4 << 30  # sparse: costs no disk until written
_LINE = "kiln-np: INTERRUPTED: stopped by SIGINT (Ctrl-C); unfinished outputs were removed\n"


def _sparse_safetensors(path: Path) -> None:
    """Four I8 tensors of 1 GiB each, all holes."""
    quarter = _BIG // 4
    header = {
        f"t{i}": {"dtype": "I8", "shape": [quarter], "data_offsets": [start, start + quarter]}
        for i, start in enumerate(range(0, _BIG, quarter))
    }
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + _BIG)


def _interrupt(cwd: Path, *argv: str) -> tuple[int, str, str]:
    """Run ``kiln-np argv`` in ``cwd``, send SIGINT once its first temporary
    output appears, and return (status, stdout, stderr)."""
    before = set(os.listdir(cwd))
    proc = subprocess.Popen(
        [*kiln_np_exe(), *argv],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not any(".kiln-np-" in n for n in set(os.listdir(cwd)) - before):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no temporary output appeared"
            time.sleep(0.005)
        time.sleep(0.1)  # well inside the write: seconds of data are left
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, err


def test_ctrl_c_during_decode_is_one_line_and_keeps_the_old_output(tmp_path: Path) -> None:
    with (tmp_path / "big.kiln").open("wb") as f:
        f.truncate(_BIG)
    (tmp_path / "out.npy").write_bytes(b"the old output")
    status, out, err = _interrupt(
        tmp_path, "decode", "big.kiln", "--code", "f32", "--shape", str(_BIG // 4), "out.npy"
    )
    assert (status, out, err) == (130, "", _LINE)
    assert sorted(os.listdir(tmp_path)) == ["big.kiln", "out.npy"]
    assert (tmp_path / "out.npy").read_bytes() == b"the old output"


@pytest.mark.parametrize(
    "target",
    [
        ["out.gguf", "--to", "gguf", "--max-shard-size", "2GB"],
        ["kdir", "--to", "kiln"],
        ["ckpt", "--to", "safetensors", "--max-shard-size", "1500000000"],
    ],
    ids=["gguf-splits", "kiln-directory", "sharded-safetensors"],
)
def test_ctrl_c_during_convert_leaves_nothing(tmp_path: Path, target: list[str]) -> None:
    _sparse_safetensors(tmp_path / "big.safetensors")
    status, out, err = _interrupt(tmp_path, "convert", "big.safetensors", *target)
    assert (status, out, err) == (130, "", _LINE)
    assert os.listdir(tmp_path) == ["big.safetensors"]
