"""The i-quant grids: ggml's tables, and both generated files exactly what their script makes.

``src/kiln_np/_quants/grids.py`` and ``src/kiln_np/_kernels/ggml_grids.h`` are
written by ``tests/fixtures/ggml/make_grids.py`` from ggml's ``ggml-common.h``.
The tables are checked against gguf-py's own copies (packed hex strings, a
second transcription of the same source), and each file against what the
script renders from the tables, so a hand edit to either fails here; the
script's reader is checked on a header written in ggml's own form.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _helpers import load_script

from kiln_np._quants import grids

pytest.importorskip(
    "gguf", reason="needs gguf (a test-only oracle of the test extra), which is not installed"
)
import gguf.quants

HERE = Path(__file__).resolve().parent
SCRIPT = HERE.parent / "fixtures" / "ggml" / "make_grids.py"


make_grids = load_script(SCRIPT)

TABLES: dict[str, np.ndarray] = {name: getattr(grids, name.upper()) for name in make_grids.TABLES}
CONSTANTS: dict[str, float] = {name: float(getattr(grids, name)) for name in make_grids.CONSTANTS}

# ggml table -> gguf-py's class holding the same grid, and the grid's values per entry.
GGUF_GRIDS = {
    "iq2xxs_grid": (gguf.quants.IQ2_XXS, 8),
    "iq2xs_grid": (gguf.quants.IQ2_XS, 8),
    "iq2s_grid": (gguf.quants.IQ2_S, 8),
    "iq3xxs_grid": (gguf.quants.IQ3_XXS, 4),
    "iq3s_grid": (gguf.quants.IQ3_S, 4),
    "iq1s_grid": (gguf.quants.IQ1_S, 8),
}


@pytest.mark.parametrize("name", sorted(GGUF_GRIDS))
def test_grid_is_gguf_pys(name: str) -> None:
    quant, width = GGUF_GRIDS[name]
    quant.init_grid()  # type: ignore[no-untyped-call]  # gguf-py leaves it unannotated
    want = np.asarray(quant.grid, np.float32).reshape(-1, width)
    signed = np.int8 if name in make_grids.SIGNED else np.uint8
    got = TABLES[name].view(signed).reshape(-1, width).astype(np.float32)
    assert got.shape == want.shape
    assert got.tolist() == want.tolist()


def test_signs_mask_and_deltas_are_gguf_pys() -> None:
    assert grids.KSIGNS_IQ2XS.tobytes() == gguf.quants.IQ2_XXS.ksigns
    # gguf-py reads value j's sign as bit j, the bit kmask_iq2xs[j] selects.
    assert grids.KMASK_IQ2XS.tolist() == [1 << j for j in range(8)]
    assert grids.IQ1S_DELTA.dtype.name == grids.IQ1M_DELTA.dtype.name == "float32"
    assert grids.IQ1S_DELTA.tobytes() == np.float32(gguf.quants.IQ1_S.delta).tobytes()
    assert grids.IQ1M_DELTA.tobytes() == np.float32(gguf.quants.IQ1_M.delta).tobytes()


@pytest.mark.parametrize("name", sorted(TABLES))
def test_tables_are_read_only_and_little_endian(name: str) -> None:
    table = TABLES[name]
    assert not table.flags.writeable
    assert table.dtype.str in {"|u1", "<u4", "<u8"}
    assert (table.dtype.name, len(table)) == (
        {"uint8_t": "uint8", "uint32_t": "uint32", "uint64_t": "uint64"}[
            make_grids.TABLES[name][0]
        ],
        make_grids.TABLES[name][1],
    )


def test_grids_py_is_what_the_script_renders() -> None:
    want = make_grids.render_python(TABLES, CONSTANTS, grids.SOURCE)
    assert make_grids.PYTHON_OUT.read_text() == want
    assert Path(grids.__file__).read_text() == want


def test_ggml_grids_h_is_what_the_script_renders() -> None:
    want = make_grids.render_c(TABLES, CONSTANTS, grids.SOURCE)
    assert make_grids.C_OUT.read_text() == want


def ggml_header(tables: dict[str, np.ndarray]) -> str:
    """A header in ggml-common.h's form: literals in hex, a size by its macro, the deltas."""
    lines = ["#define NGRID_IQ1S 2048", "#define IQ1S_DELTA 0.125f", "#define IQ1M_DELTA 0.125f"]
    for name, (ctype, count) in make_grids.TABLES.items():
        size = "NGRID_IQ1S" if name == "iq1s_grid" else str(count)
        width = 2 * tables[name].dtype.itemsize
        words = [f"0x{word:0{width}x}" for word in tables[name].tolist()]
        lines += [f"GGML_TABLE_BEGIN({ctype}, {name}, {size})", "    " + ", ".join(words) + ","]
        lines.append("GGML_TABLE_END()")
    return "\n".join(lines) + "\n"


def test_the_reader_takes_ggml_common_h_form() -> None:
    tables, constants = make_grids.read_source(ggml_header(TABLES))
    assert constants == CONSTANTS
    assert tables.keys() == TABLES.keys()
    for name, table in tables.items():
        assert table.dtype.str == TABLES[name].dtype.str
        assert table.tobytes() == TABLES[name].tobytes()


def test_the_reader_refuses_a_short_table() -> None:
    text = ggml_header({**TABLES, "iq2xxs_grid": TABLES["iq2xxs_grid"][:-1]})
    with pytest.raises(ValueError, match=r"iq2xxs_grid: expected .* with 255"):
        make_grids.read_source(text)
