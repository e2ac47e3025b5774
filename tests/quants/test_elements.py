"""One reading of a payload's element: :func:`kiln_np._quants.elements.element_of`
over every GGML block type, every foreign type, the closed codes, a GGML type kiln_np
does not know and an opaque layout; and no other module of the package deciding it
on its own (with ``block_of`` or ``FOREIGN_BY_CODE``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kiln_np._core.foreign import FOREIGN, ForeignType
from kiln_np._core.table import Code, Layout
from kiln_np._quants.blocks import BLOCKS, Block
from kiln_np._quants.elements import element_of
from kiln_np.gguf._types import unknown_layout

SRC = Path(__file__).resolve().parents[2] / "src" / "kiln_np"


@pytest.mark.parametrize("block", BLOCKS.values(), ids=list(BLOCKS))
def test_every_ggml_block_type(block: Block) -> None:
    e = element_of(block.code, Layout(block.layout_name, block.bytes))
    assert (e.kind, e.block, e.decodable, e.foreign) == ("ggml", block, True, None)
    assert (e.decoded, e.per_block, e.fills) == (block, block.elements, False)


@pytest.mark.parametrize("block", BLOCKS.values(), ids=list(BLOCKS))
def test_ggml_block_type_with_another_size_or_code_is_not_decoded(block: Block) -> None:
    for code, size in ((block.code, block.bytes + 1), (block.code + 1, block.bytes)):
        e = element_of(code, Layout(block.layout_name, size))
        assert (e.kind, e.decodable, e.decoded, e.per_block) == ("ggml", False, None, 1)
        assert e.block is not None
        assert (e.block.type_id, e.block.bytes) == (code - 0x4700, size)


@pytest.mark.parametrize("foreign", FOREIGN, ids=[f.name for f in FOREIGN])
def test_every_foreign_type(foreign: ForeignType) -> None:
    e = element_of(foreign.code, foreign.layout)
    assert (e.kind, e.foreign, e.block, e.decodable, e.decoded) == (
        "foreign",
        foreign,
        None,
        False,
        None,
    )
    assert e.per_block == 1
    # complex64/128 and the FNUZ float8s fill their bytes; int2, uint2 and the FP6s do not
    assert e.fills == (foreign.bits == 8 * foreign.layout.block_size)
    assert e.fills == (foreign.name.startswith(("complex", "float8")))


@pytest.mark.parametrize("foreign", FOREIGN, ids=[f.name for f in FOREIGN])
def test_foreign_code_with_another_layout_is_opaque(foreign: ForeignType) -> None:
    other = Layout(foreign.layout.name, foreign.layout.block_size + 1)
    for layout in (other, Layout("x", foreign.layout.block_size)):
        e = element_of(foreign.code, layout)
        assert (e.kind, e.foreign, e.fills, e.block) == ("opaque", None, False, None)


@pytest.mark.parametrize("code", list(Code), ids=[c.name.lower() for c in Code])
def test_closed_codes(code: Code) -> None:
    e = element_of(code, None)
    assert (e.kind, e.block, e.decodable, e.foreign, e.fills, e.per_block) == (
        "code",
        None,
        False,
        None,
        False,
        1,
    )


def test_unknown_ggml_type_id() -> None:
    # what open_gguf gives for a type id kiln_np does not know
    for code, layout in (
        (0x478E, unknown_layout(142, (64, 2))),
        (0x47FF, Layout("ggml.new", 10)),
    ):
        e = element_of(code, layout)
        assert (e.kind, e.decodable, e.decoded, e.foreign, e.per_block) == (
            "ggml",
            False,
            None,
            None,
            1,
        )
        assert e.block == Block(code - 0x4700, f"type {code - 0x4700}", 1, layout.block_size)


def test_opaque_layouts() -> None:
    for code, layout in (
        (0x1000, Layout("x", 4)),
        (0x1000, Layout("ggml.q8_0", 34)),  # a ggml.* layout under a code not 0x47xx
        (0x4708, Layout("onnx.q8_0", 34)),  # a GGML code with a layout not ggml.*
        (0x4F12, Layout("ggml.q8_0", 34)),  # a foreign code with a ggml.* layout
    ):
        e = element_of(code, layout)
        assert (e.kind, e.block, e.decodable, e.foreign, e.fills, e.per_block) == (
            "opaque",
            None,
            False,
            None,
            False,
            1,
        )


# What decides a payload's element: the decodable block of (code, layout), the foreign
# type of a code, a ggml.* layout name; only elements.py (and block_of's own module)
# may ask these.
_DECIDING = re.compile(r"\bblock_of\(|\bFOREIGN_BY_CODE\b|\bggml_blocks\b|startswith\(\"ggml\.")

_DECIDERS = {"_quants/elements.py", "_quants/decode.py"}

_ALLOWED = {
    ("_core/foreign.py", "FOREIGN_BY_CODE"): "defines it: the registry of foreign types by code",
    ("onnx/_types.py", "FOREIGN_BY_CODE"): (
        "builds ONNX's table of data types from the registry at import (which foreign type "
        "an ONNX data type is), no payload read"
    ),
}


def test_no_other_module_decides_an_element() -> None:
    found: set[tuple[str, str]] = set()
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel in _DECIDERS:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in _DECIDING.finditer(line):
                token = match.group().rstrip("(").replace('startswith("', "").strip()
                found.add((rel, token))
                assert (rel, token) in _ALLOWED, (
                    f"{rel}:{number} decides a payload's element with {match.group()!r}: "
                    f"ask kiln_np._quants.elements.element_of instead ({line.strip()})"
                )
    # the allow-list names only uses that are still there
    assert found == set(_ALLOWED)
