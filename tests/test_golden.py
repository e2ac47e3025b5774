"""The golden case files: every case runs both ways, and they cover what the spec names."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kiln_np._golden import Case, load_cases, run_case

CASES = load_cases()
REPO_GOLDEN = Path(__file__).resolve().parents[1] / "golden"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(case: Case) -> None:
    result = run_case(case)
    assert result.ok, result.detail


def test_names_are_unique() -> None:
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))


def test_coverage_of_required_cases() -> None:
    by_name = {c.name: c for c in CASES}
    for name in ("kiln-v2-u4", "kiln-v2-f8-pair", "kiln-v2-bool-byte", "kiln-v2-high-nibble"):
        assert name in by_name
    assert by_name["kiln-v2-u4"].payload == b"\x21\x03"
    assert by_name["kiln-v2-f8-pair"].payload == b"\x38\x3c"
    assert by_name["bf16-one"].payload == b"\x80\x3f"
    assert by_name["f16-one"].payload == b"\x00\x3c"
    valid_codes = {c.code for c in CASES if c.error is None}
    assert set(range(1, 20)) <= valid_codes
    all_codes = {c.code for c in CASES}
    assert {0, 19, 20, 4095, 4096, 32767, 32768, 65535} <= all_codes
    kinds = {c.error for c in CASES}
    assert {"TYPE", "LENGTH", "SHAPE"} <= kinds


def test_repo_golden_is_the_shipped_golden() -> None:
    # golden/ in the repository is what the package ships (a link to the package data).
    shipped = sorted((c.file, c.name) for c in CASES)
    assert sorted((c.file, c.name) for c in load_cases(REPO_GOLDEN)) == shipped


def _write(tmp: Path, cases: list[dict[str, object]]) -> Path:
    (tmp / "cases.json").write_text(json.dumps({"format": "kiln-golden/1", "cases": cases}))
    return tmp


def test_a_wrong_expectation_is_caught(tmp_path: Path) -> None:
    wrong = [
        {"name": "bad-decode", "code": 17, "shape": [3], "payload": "21 03",
         "elements": ["1", "2", "4"]},
        {"name": "bad-error", "code": 2, "shape": [1], "payload": "00 00 80 3f",
         "error": "LENGTH"},
        {"name": "missed-error", "code": 2, "shape": [1], "payload": "00 00 80",
         "elements": ["00000000"]},
        {"name": "wrong-kind", "code": 2, "shape": [2], "payload": "00", "error": "TYPE"},
    ]  # fmt: skip
    results = [run_case(c) for c in load_cases(_write(tmp_path, wrong))]
    assert [r.ok for r in results] == [False] * 4
    assert "expected elements" in results[0].detail
    assert "expected LENGTH" in results[1].detail


def test_malformed_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text('{"format": "other"}')
    with pytest.raises(ValueError, match="kiln-golden/1"):
        load_cases(tmp_path)


def _cli() -> list[str]:
    exe = shutil.which("kiln-np")
    return [exe] if exe else [sys.executable, "-m", "kiln_np.cli"]


def test_cli_golden_table_and_exit_status(tmp_path: Path) -> None:
    done = subprocess.run([*_cli(), "golden"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    header = done.stdout.splitlines()[0].split()
    assert header == ["case", "code", "dtype", "shape", "payload", "result"]
    assert f"{len(CASES)} passed, 0 failed" in done.stdout
    assert "kiln-v2-high-nibble" in done.stdout
    failing = [{"name": "nope", "code": 17, "shape": [3], "payload": "21 03", "elements": ["0"]}]
    done = subprocess.run(
        [*_cli(), "golden", str(_write(tmp_path, failing))],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "FAIL" in done.stdout
    assert "0 passed, 1 failed" in done.stdout
