"""``Payload.__repr__`` shows any buffer a Payload may hold, and never raises."""

from __future__ import annotations

import mmap
from typing import Any, cast

import ml_dtypes
import numpy as np
import pytest

from kiln_np import Payload


def _released() -> memoryview:
    view = memoryview(b"ab")
    view.release()
    return view


SHOWN = {
    "bytes": (b"\x01\x02\x03", "3 bytes [01 02 03]"),
    "bytearray": (bytearray(range(10)), "10 bytes [00 01 02 03 04 05 06 07 ...]"),
    "memoryview-f4": (memoryview(cast(Any, np.ones(1, "<f4"))), "4 bytes [00 00 80 3f]"),
    "bf16-array": (np.ones(2, ml_dtypes.bfloat16), "4 bytes [80 3f 80 3f]"),
    "2-d-array": (np.arange(4, dtype=np.uint8).reshape(2, 2), "4 bytes [00 01 02 03]"),
    "strided": (np.arange(8, dtype=np.uint8)[::2], "4 bytes [not C-contiguous]"),
    "list": ([1, 2], "data=list [1, 2]"),
    "objects": (np.array([None]), "data=ndarray array([None], dtype=object)"),
}


@pytest.mark.parametrize(("data", "shown"), SHOWN.values(), ids=SHOWN.keys())
def test_repr_shows_any_buffer(data: Any, shown: str) -> None:
    assert repr(Payload(9, cast(Any, data), (4,))) == f"Payload(code 9 (u8), shape=(4,), {shown})"


def test_repr_of_a_released_view_or_closed_map_does_not_raise() -> None:
    assert "data=memoryview <released memory" in repr(Payload(9, _released(), (2,)))
    m = mmap.mmap(-1, 4)
    m.close()
    assert "data=mmap <mmap.mmap closed=True" in repr(Payload(9, cast(Any, m), (4,)))
