"""The documentation tables agree with the code table they describe."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

import kiln_np
from kiln_np import DTYPES, _codec

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _dtype_cell(dtype: np.dtype[np.generic]) -> str:
    if dtype.isbuiltin == 2:  # a user-defined (ml_dtypes) type
        return f"ml_dtypes `{dtype.name}`"
    if dtype.itemsize > 1:
        return f"`{dtype.str}` ({dtype.name})"
    return f"`{dtype.name}`"


def _bytes_cell(row: kiln_np.DType) -> str:
    if row.packed:
        return "ceil(n / 2)"
    width = row.bits // 8
    return "n" if width == 1 else f"{width} n"


def test_dtypes_md_table_is_the_code_table() -> None:
    text = (DOCS / "dtypes.md").read_text()
    block = text.split("<!-- dtype-table")[1].split("<!-- /dtype-table -->")[0]
    rows = [line for line in block.splitlines() if re.match(r"\| \d", line)]
    expected = [
        f"| {int(r.code)} | {r.name} | {_dtype_cell(r.dtype)} | {r.bits} | "
        f"{_bytes_cell(r)} | {r.element} |"
        for r in DTYPES
    ]
    assert rows == expected


def test_codec_docstring_table_is_the_code_table() -> None:
    doc = _codec.__doc__ or ""
    rows = re.findall(r"^(\d+)\s+(\S+)\s+.*?\s(\S+(?: \* count|\(count / 2\))|count)$", doc, re.M)
    assert [(int(c), name) for c, name, _ in rows] == [(int(r.code), r.name) for r in DTYPES]
    for (_, _, size), row in zip(rows, DTYPES, strict=True):
        if row.packed:
            assert size == "ceil(count / 2)"
        elif row.bits == 8:
            assert size == "count"
        else:
            assert size == f"{row.bits // 8} * count"
