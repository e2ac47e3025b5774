"""The scheme table is data: docs/weights.md's table of schemes is checked
against it, and every row keeps the contract of ``kiln_np._schemes.scheme``."""

from __future__ import annotations

import re
from pathlib import Path

from kiln_np._schemes.table import SCHEMES, scheme_named

DOC = Path(__file__).resolve().parents[2] / "docs" / "weights.md"


def _doc_rows() -> list[list[str]]:
    text = DOC.read_text()
    table = text.split("<!-- schemes -->")[1].split("<!-- /schemes -->")[0]
    lines = [line for line in table.strip().splitlines() if line.startswith("|")][2:]
    return [[cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]


def _parts(scheme_name: str) -> str:
    scheme = scheme_named(scheme_name)
    return "<br>".join(
        f"`{p.suffix or '(base)'}` {'/'.join(sorted(p.types))}{' (optional)' * p.optional}"
        for p in scheme.parts
    )


def test_docs_list_every_scheme_in_table_order_with_its_parts_formula_reference() -> None:
    rows = _doc_rows()
    assert [r[0] for r in rows] == [f"`{s.name}`" for s in SCHEMES]
    for row, scheme in zip(rows, SCHEMES, strict=True):
        assert row[1] == _parts(scheme.name), scheme.name
        assert row[2] == scheme.formula.replace("|", "\\|"), scheme.name
        assert row[3] == scheme.reference.replace("|", "\\|"), scheme.name
        assert row[4], f"{scheme.name}: say what is checked"


def test_rows_are_unique_and_keyed() -> None:
    names = [s.name for s in SCHEMES]
    assert len(set(names)) == len(names)
    for scheme in SCHEMES:
        assert scheme.parts, scheme.name
        assert not scheme.parts[0].optional, scheme.name
        assert scheme.methods, scheme.name
        assert len({p.role for p in scheme.parts}) == len(scheme.parts), scheme.name
        assert len({p.suffix for p in scheme.parts}) == len(scheme.parts), scheme.name
