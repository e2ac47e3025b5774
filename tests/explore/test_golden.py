"""The golden case files: every case runs both ways, and they cover what the spec names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kiln_np._explore.golden import Case, CaseFileError, load_cases, run_case

CASES = load_cases()
REPO_GOLDEN = Path(__file__).resolve().parents[2] / "golden"


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
    with pytest.raises(CaseFileError, match=r"x\.json: expected a 'kiln-golden/1' case file"):
        load_cases(tmp_path)


def test_malformed_case_names_file_and_case(tmp_path: Path) -> None:
    cases = [
        {"name": "ok", "code": 9, "shape": [1], "payload": "00", "elements": ["00"]},
        {"name": "inf", "code": 1e400, "shape": [1], "payload": "00", "error": "TYPE"},
    ]
    (tmp_path / "m.json").write_text(json.dumps({"format": "kiln-golden/1", "cases": cases}))
    with pytest.raises(
        CaseFileError,
        match=r"^m\.json: case 1 \('inf'\): expected code to be a JSON "
        r"integer, found float inf$",
    ):
        load_cases(tmp_path)
    (tmp_path / "m.json").write_bytes(b"\xff{")
    with pytest.raises(CaseFileError, match=r"^m\.json: expected UTF-8 JSON"):
        load_cases(tmp_path)


def test_opaque_rank_64_is_a_clean_shape_case() -> None:
    # The block axis would make 65 dimensions: SHAPE, never numpy's ValueError.
    by_name = {c.name: c for c in CASES}
    assert len(by_name["opaque-rank-64"].shape) == 64
    assert run_case(by_name["opaque-rank-64"]).detail == "SHAPE as expected"
    assert run_case(by_name["opaque-rank-63"]).detail == "decoded and encoded"
