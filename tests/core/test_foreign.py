"""The registry of foreign element types: data, its docstring table, and the
invariant every adapter relies on (one block is one element's numpy storage)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import kiln_np
from kiln_np._core import foreign as _foreign
from kiln_np._core.foreign import FOREIGN, FOREIGN_BY_CODE, FOREIGN_BY_NAME, foreign_for_dtype


def test_docstring_table_is_the_registry() -> None:
    doc = _foreign.__doc__ or ""
    rows = [line.split(maxsplit=4) for line in doc.splitlines() if line.startswith("0x")]
    assert rows == [
        [
            f"0x{f.code:04x}",
            f"{f.layout.name}/{f.layout.block_size}",
            f.name,
            str(f.bits),
            f.element,
        ]
        for f in FOREIGN
    ]


@pytest.mark.parametrize("foreign", FOREIGN, ids=lambda f: f.name)
def test_a_block_is_one_element(foreign: _foreign.ForeignType) -> None:
    assert kiln_np.code_range(foreign.code) == "opaque"
    assert foreign.layout.block_size == foreign.dtype.itemsize
    assert foreign.name == foreign.dtype.name
    assert foreign.bits <= 8 * foreign.dtype.itemsize
    assert FOREIGN_BY_CODE[foreign.code] is foreign
    assert FOREIGN_BY_NAME[foreign.name] is foreign
    assert foreign_for_dtype(foreign.dtype) is foreign
    assert foreign_for_dtype(foreign.dtype.newbyteorder(">")) is foreign
    # A block of storage decodes as the element: round trip through the payload.
    elements = np.zeros(3, foreign.dtype)
    blocks = kiln_np.to_numpy(foreign.code, elements.view(np.uint8), (3,), foreign.layout)
    assert blocks.shape == (3, foreign.layout.block_size)
    assert blocks.view(foreign.dtype).reshape(3).tobytes() == elements.tobytes()


def test_codes_and_layouts_are_unique() -> None:
    assert len({f.code for f in FOREIGN}) == len({f.layout for f in FOREIGN}) == len(FOREIGN)
    assert [f.code for f in FOREIGN] == sorted(f.code for f in FOREIGN)


@pytest.mark.parametrize("dtype", ["<f4", "u1", [("a", "<c8")], ("<c8", (2,)), "O"])
def test_no_foreign_type(dtype: Any) -> None:
    assert foreign_for_dtype(np.dtype(dtype)) is None
