"""Issue 37, item 7: a dtype given where a Kiln code is expected names the code.

``to_numpy("float32", ...)``, ``to_numpy(np.float32, ...)``,
``to_numpy(np.dtype("float32"), ...)``, ``from_numpy(a, code=np.float32)`` and
every other door that takes a code (they all read it through ``as_code``) are
TYPE, as any code that is not one is, and the message says which code the
dtype is.  Parametrized over the table: every row's dtype, in every spelling.
"""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import kiln_np
from kiln_np import DTYPES, DType, KilnError

ROW_IDS = [r.name for r in DTYPES]


def _spellings(row: DType) -> list[Any]:
    """What a user may pass for ``row``'s dtype: its name, scalar type, dtype,
    and the big-endian dtype of a multi-byte one."""
    found: list[Any] = [row.dtype.name, row.dtype.type, row.dtype]
    if row.dtype.itemsize > 1:
        found.append(row.dtype.newbyteorder(">"))
    return found


def _doors(code: Any) -> list[Callable[[], object]]:
    """Every public door that takes a code, given ``code``."""
    return [
        lambda: kiln_np.to_numpy(code, b"\x00" * 8, (1,)),
        lambda: kiln_np.from_numpy(np.zeros(1, np.float32), code=code),
        lambda: kiln_np.payload_info(code, (1,)),
        lambda: kiln_np.byte_length(code, (1,)),
        lambda: kiln_np.dtype_info(code),
        lambda: kiln_np.dtype_for_code(code),
        lambda: kiln_np.code_range(code),
        lambda: kiln_np.save_payload(io.BytesIO(), np.zeros(1, np.float32), code=code),
    ]


@pytest.mark.parametrize("row", DTYPES, ids=ROW_IDS)
def test_a_dtype_for_a_code_names_the_code(row: DType) -> None:
    want = (
        f"{row.dtype.name} is code {int(row.code)} (kiln_np.Code.{row.code.name}, or the "
        f"name '{row.name}'; kiln_np.code_for_dtype gives a dtype's code)"
    )
    for given in _spellings(row):
        if isinstance(given, str) and given == row.name:  # both names (bool): the code
            continue
        for door in _doors(given):
            with pytest.raises(KilnError) as info:
                door()
            assert info.value.kind == "TYPE"
            assert info.value.message.startswith(
                "expected an integer dtype code or a code name, found "
            )
            assert info.value.message.endswith(want), (given, info.value.message)


def test_the_words_of_the_issue() -> None:
    for given, shown in [
        ("float32", "str 'float32', a dtype's name"),
        (np.float32, "type <class 'numpy.float32'>, a dtype"),
        (np.dtype("float32"), "Float32DType dtype('float32'), a dtype"),
    ]:
        with pytest.raises(KilnError, match="float32 is code 2") as info:
            kiln_np.to_numpy(given, b"\x00" * 4, (1,))  # type: ignore[arg-type]
        assert f"found {shown}: float32 is code 2 (kiln_np.Code.F32" in info.value.message


def test_a_name_the_table_spells_is_still_its_code() -> None:
    """The hint never changes what is accepted: ``"bool"`` is Kiln's and numpy's
    name; ``"i4"`` is Kiln's int4 (numpy's int32) and stays so."""
    assert kiln_np.payload_info("bool", (1,)).code == kiln_np.Code.BOOL
    assert kiln_np.payload_info("i4", (2,)).code == kiln_np.Code.I4


@pytest.mark.parametrize(
    "given",
    ["complex64", "garbage", "f4,f4", "(2,)f4", "x" * 100, np.complex64, np.dtype("O"), 2.5],
    ids=["complex64", "garbage", "struct", "subarray", "long", "complex-type", "object", "float"],
)
def test_no_hint_without_a_code(given: Any) -> None:
    with pytest.raises(KilnError) as info:
        kiln_np.payload_info(given, (1,))
    assert info.value.kind == "TYPE"
    assert " is code " not in info.value.message


def test_a_type_whose_dtype_raises_gets_no_hint() -> None:
    class Hostile:
        @property
        def dtype(self) -> Any:
            raise RuntimeError("boom")

    with pytest.raises(KilnError, match="found type") as info:
        kiln_np.payload_info(Hostile, (1,))  # type: ignore[arg-type]
    assert " is code " not in info.value.message


def test_ml_dtypes_types_are_named() -> None:
    with pytest.raises(KilnError, match=r"bfloat16 is code 4 \(kiln_np.Code.BF16"):
        kiln_np.from_numpy(np.zeros(1, ml_dtypes.bfloat16), code=ml_dtypes.bfloat16)


def test_a_mistyped_name_does_not_load_ml_dtypes() -> None:
    """The hint reads numpy's names without ml_dtypes (a second to import); only the
    name of one of its types loads it."""
    script = (
        "import sys, kiln_np\n"
        "for name in ('garbage', 'float32', 'complex64'):\n"
        "    try:\n"
        "        kiln_np.payload_info(name, (1,))\n"
        "    except kiln_np.KilnError:\n"
        "        pass\n"
        "print('ml_dtypes' in sys.modules)\n"
        "try:\n"
        "    kiln_np.payload_info('bfloat16', (1,))\n"
        "except kiln_np.KilnError as exc:\n"
        "    print(exc.message.split(': ')[-1])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert out.splitlines() == [
        "False",
        "bfloat16 is code 4 (kiln_np.Code.BF16, or the name 'bf16'; kiln_np.code_for_dtype "
        "gives a dtype's code)",
    ]
