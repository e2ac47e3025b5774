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


def _interrupt(cwd: Path, *argv: str, signal_number: int = signal.SIGINT) -> tuple[int, str, str]:
    """Run ``kiln-np argv`` in ``cwd``, send ``signal_number`` once its first
    temporary output appears, and return (status, stdout, stderr)."""
    before = set(os.listdir(cwd))
    # As a terminal starts it, with SIGINT at its default: a suite run in the
    # background (`nohup ... &`) would pass it on ignored, and Python keeps ignoring
    # it.  A handler of the parent's own becomes the default in the child.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(
            [*kiln_np_exe(), *argv],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        deadline = time.monotonic() + 60
        while not any(".kiln-np-" in n for n in set(os.listdir(cwd)) - before):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no temporary output appeared"
            time.sleep(0.005)
        time.sleep(0.1)  # well inside the write: seconds of data are left
        proc.send_signal(signal_number)
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


_TERM = "kiln-np: INTERRUPTED: stopped by SIGTERM; unfinished outputs were removed\n"


@pytest.mark.parametrize(
    "target",
    [
        ["out.safetensors"],
        ["out.gguf", "--to", "gguf", "--max-shard-size", "2GB"],
        ["kdir", "--to", "kiln"],
    ],
    ids=["file", "gguf-splits", "kiln-directory"],
)
def test_sigterm_during_convert_leaves_nothing(tmp_path: Path, target: list[str]) -> None:
    # Issue 36 item 12: SIGTERM (what a job scheduler or `timeout` sends) left a
    # multi-MB .part behind where SIGINT cleaned up.
    _sparse_safetensors(tmp_path / "big.safetensors")
    status, out, err = _interrupt(
        tmp_path, "convert", "big.safetensors", *target, signal_number=signal.SIGTERM
    )
    assert (status, out, err) == (143, "", _TERM)
    assert os.listdir(tmp_path) == ["big.safetensors"]


def test_sigterm_during_decode_keeps_the_old_output(tmp_path: Path) -> None:
    with (tmp_path / "big.kiln").open("wb") as f:
        f.truncate(_BIG)
    (tmp_path / "out.npy").write_bytes(b"the old output")
    status, out, err = _interrupt(
        tmp_path,
        "decode", "big.kiln", "--code", "f32", "--shape", str(_BIG // 4), "out.npy",
        signal_number=signal.SIGTERM,
    )  # fmt: skip
    assert (status, out, err) == (143, "", _TERM)
    assert sorted(os.listdir(tmp_path)) == ["big.kiln", "out.npy"]
    assert (tmp_path / "out.npy").read_bytes() == b"the old output"


def _raise_after_the_write(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    """Make the report that follows a finished write raise ``exc``: a signal that
    arrives just after the final rename."""

    def report(*args: object, **kwargs: object) -> None:
        raise exc

    monkeypatch.setattr("kiln_np.cli.weights.emit", report)


@pytest.mark.parametrize(
    ("target", "signal_name", "status"),
    [
        (["o.safetensors"], "SIGINT (Ctrl-C)", 130),
        (["o.gguf", "--max-shard-size", "64"], "SIGINT (Ctrl-C)", 130),
        (["o.zarr"], "SIGTERM", 143),
    ],
    ids=["file", "gguf-splits", "zarr-sigterm"],
)
def test_a_signal_after_the_final_rename_says_the_output_is_complete(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    target: list[str],
    signal_name: str,
    status: int,
) -> None:
    # Issue 36 item 15: a SIGINT just after the final rename was reported as
    # "unfinished outputs were removed" although DST was the new, whole file.
    import numpy as np
    from _helpers import run_main

    import kiln_np
    from kiln_np.cli.errors import Stopped

    monkeypatch.chdir(tmp_path)
    kiln_np.save_weights("m.safetensors", {"a": np.zeros(8), "b": np.ones(8)}, format="safetensors")
    exc = KeyboardInterrupt() if status == 130 else Stopped("SIGTERM", signal.SIGTERM)
    _raise_after_the_write(monkeypatch, exc)
    code, out, err = run_main(capsys, "convert", "m.safetensors", *target)
    assert (code, out) == (status, "")
    assert err == (
        f"kiln-np: INTERRUPTED: stopped by {signal_name} after the output was written: "
        f"{target[0]!r} is complete\n"
    )
    opened = "o-00001-of-00002.gguf" if "--max-shard-size" in target else target[0]
    with kiln_np.open_weights(opened) as got:
        assert got["b"].payload().data.tobytes() == np.ones(8).tobytes()
    assert not [n for n in os.listdir(tmp_path) if ".kiln-np-" in n]


def test_a_signal_during_the_write_still_removes_what_is_unfinished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import numpy as np
    from _helpers import run_main

    import kiln_np
    from kiln_np._convert.sources import TensorSource

    monkeypatch.chdir(tmp_path)
    kiln_np.save_weights("m.safetensors", {"a": np.zeros(8)}, format="safetensors")

    def interrupted(self: TensorSource, fd: int, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(TensorSource, "write_to", interrupted)
    code, out, err = run_main(capsys, "convert", "m.safetensors", "o.gguf")
    assert (code, out, err) == (130, "", _LINE)
    assert sorted(os.listdir(tmp_path)) == ["m.safetensors"]
