"""llama.cpp's file types (``kiln_np._quants.filetypes``): the table against gguf-py's
``LlamaFileType`` (so a file type gguf-py adds fails here until it is a row), the
display rule, and what a GGUF file's ``general.file_type`` becomes on every door."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
from _helpers import needs, optional

import kiln_np
from kiln_np._quants.filetypes import (
    FILE_TYPES,
    file_type,
    file_type_label,
    file_type_number,
    file_type_record,
)

if TYPE_CHECKING:
    import gguf
else:
    gguf = optional("gguf")


@needs("gguf")
def test_the_table_is_gguf_pys_enum() -> None:
    ours = {row.number: row.gguf_name for row in FILE_TYPES if row.gguf_name is not None}
    theirs = {int(member): member.name for member in gguf.LlamaFileType}
    assert ours == theirs
    # The one row gguf-py 0.19 has no member for: llama.cpp's MOSTLY_Q2_0, past its last.
    unnamed = [row.number for row in FILE_TYPES if row.gguf_name is None]
    assert unnamed == [41]
    assert 41 not in theirs
    assert max(n for n in theirs if n < 1024) == 40


def test_rows_are_unique_and_in_order() -> None:
    numbers = [row.number for row in FILE_TYPES]
    assert numbers == sorted(set(numbers))
    names = [n for row in FILE_TYPES for n in (row.option, *row.aliases) if n is not None]
    assert len(names) == len(set(names))  # one llama-quantize name, one number


@pytest.mark.parametrize(
    ("number", "label"),
    [
        (0, "F32"),  # llama-quantize's F32 (COPY writes 0 too: an action, not a name)
        (1, "F16"),
        (2, "Q4_0"),
        (7, "Q8_0"),
        (12, "Q3_K_M"),
        (15, "Q4_K_M"),
        (17, "Q5_K_M"),
        (18, "Q6_K"),
        (21, "Q2_K_S"),
        (32, "BF16"),
        (38, "MXFP4_MOE"),
        (39, "NVFP4"),  # no llama-quantize option: gguf-py's name without MOSTLY_
        (41, "Q2_0"),  # no gguf-py name: llama-quantize's
        (1024, "GUESSED"),
        (5, "5"),  # Q4_2: removed from llama.cpp, no row
        (33, "33"),  # Q4_0_4_4: removed
        (99, "99"),
        (2**32 - 1, "4294967295"),
    ],
)
def test_the_display_rule(number: int, label: str) -> None:
    assert file_type_label(number) == label
    assert file_type_label(np.uint32(number)) == label  # as GGUF stores it
    record = file_type_record(np.uint32(number))
    assert record is not None
    assert (record["value"], record["name"]) == (number, label)
    row = file_type(number)
    if row is None:
        assert (record["option"], record["gguf_name"]) == (None, None)
    else:
        assert (record["option"], record["gguf_name"]) == (row.option, row.gguf_name)
        assert row.label == label


def test_aliases_are_llama_quantizes_other_names() -> None:
    aliases = {name: row.number for row in FILE_TYPES for name in row.aliases}
    assert aliases == {"Q3_K": 12, "Q4_K": 15, "Q5_K": 17}


@pytest.mark.parametrize("value", ["15", b"\x0f", 1.5, True, np.bool_(True), None, [15]])
def test_a_value_that_is_not_an_integer_has_no_file_type(value: object) -> None:
    assert file_type_number(value) is None
    assert file_type_label(value) is None
    assert file_type_record(value) is None


@needs("gguf")
def test_a_gguf_py_file_type_reaches_weights_and_summary(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    writer.add_tensor("w", np.ones(4, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with kiln_np.open_weights(path) as w:
        assert w.file_type == 15
        assert kiln_np.gguf.read_gguf(path).metadata.types["general.file_type"] == "uint32"
        assert w.select("w").file_type == 15
        summary = w.summary()
        assert summary.file_type_label == "Q4_K_M"
        assert "  file type    Q4_K_M (general.file_type 15)" in str(summary).splitlines()
        assert summary.to_dict()["file_type"] == {
            "value": 15,
            "name": "Q4_K_M",
            "option": "Q4_K_M",
            "gguf_name": "MOSTLY_Q4_K_M",
        }
        assert "Q4_K_M (general.file_type 15)" in summary._repr_html_()


def test_other_formats_and_files_without_the_key_have_none(tmp_path: Path) -> None:
    tensors = {"w": np.ones(4, np.float32)}
    kiln_np.save_weights(tmp_path / "m.gguf", tensors, format="gguf")
    kiln_np.save_weights(
        tmp_path / "s.gguf", tensors, format="gguf", metadata={"general.file_type": "Q4_K_M"}
    )
    kiln_np.save_weights(
        tmp_path / "k", tensors, format="kiln", metadata={"general.file_type": np.uint32(15)}
    )
    for name in ("m.gguf", "s.gguf", "k"):
        with kiln_np.open_weights(tmp_path / name) as w:
            assert w.file_type is None
            summary = w.summary()
            assert summary.file_type is None
            assert summary.to_dict()["file_type"] is None
            assert "file type" not in str(summary)


def test_the_documented_table_is_the_table() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "explore.md").read_text()
    block = text.split("### llama.cpp's file types")[1].split("```")[0]
    found = re.findall(r"\| (\d+) \| `(\w+)`([^|]*)\| (?:`(\w+)`|\(none[^|]*\)) \|", block)
    documented = {
        int(n): (label, re.findall(r"`(\w+)`", more), name or None)
        for n, label, more, name in found
    }
    assert documented == {
        row.number: (row.label, list(row.aliases), row.gguf_name) for row in FILE_TYPES
    }
