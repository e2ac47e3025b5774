"""Hostile input at every public entry point: the allow-list oracle.

Each call either returns a result consistent with ``byte_length`` or raises
``KilnError`` (or ``TypeError`` for a ``buf`` without the buffer protocol).  Any
other exception is a bug.  ``fuzz/run.py`` runs these same properties for longer.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from strategies import arrays, buffers, codes, expect_allowed, layouts, shapes

import kiln_np
from kiln_np import Layout


@given(code=codes, buf=buffers(), shape=shapes, layout=layouts, copy=st.booleans())
def test_to_numpy_oracle(code: Any, buf: Any, shape: Any, layout: Any, copy: bool) -> None:
    try:
        arr = kiln_np.to_numpy(code, buf, shape, layout, copy=copy)
    except Exception as exc:
        expect_allowed(exc, buf)
        return
    dims = tuple(int(d) for d in shape)
    assert kiln_np.byte_length(code, dims, layout) == memoryview(buf).nbytes
    assert arr.shape == ((*dims, layout.block_size) if isinstance(layout, Layout) else dims)


@given(code=codes, shape=shapes, layout=layouts)
def test_byte_length_oracle(code: Any, shape: Any, layout: Any) -> None:
    try:
        n = kiln_np.byte_length(code, shape, layout)
    except Exception as exc:
        expect_allowed(exc)
        return
    assert isinstance(n, int)
    assert n >= 0


@given(arr=arrays(), code=st.one_of(st.none(), codes), layout=layouts)
def test_from_numpy_oracle(arr: Any, code: Any, layout: Any) -> None:
    before = np.array(arr, copy=True) if isinstance(arr, np.ndarray) else None
    try:
        p = kiln_np.from_numpy(arr, code=code, layout=layout)
    except Exception as exc:
        expect_allowed(exc)
    else:
        assert p.byte_length == kiln_np.byte_length(p.code, p.shape, p.layout)
        back = kiln_np.to_numpy(*p)
        assert bytes(kiln_np.from_numpy(back, code=p.code, layout=p.layout).data) == bytes(p.data)
    if before is not None:  # the input is never written
        assert np.asarray(arr).tobytes() == before.tobytes()


@given(
    values=st.one_of(
        st.lists(st.integers(-(2**70), 2**70), max_size=20),
        st.lists(st.integers(0, 15), max_size=40),
        arrays(),
    )
)
def test_pack_nibbles_oracle(values: Any) -> None:
    try:
        out = kiln_np.pack_nibbles(values)
    except Exception as exc:
        expect_allowed(exc)
        return
    flat = np.asarray(values).reshape(-1)
    assert out.size == (flat.size + 1) // 2
    assert np.array_equal(kiln_np.unpack_nibbles(out, flat.size), flat.astype(np.uint8))


@given(buf=buffers(), count=st.one_of(st.integers(-3, 90), st.sampled_from([2**63, True, 1.0])))
def test_unpack_nibbles_oracle(buf: Any, count: Any) -> None:
    try:
        out = kiln_np.unpack_nibbles(buf, count)
    except Exception as exc:
        expect_allowed(exc, buf)
        return
    assert out.dtype == np.uint8
    assert out.size == count
    assert memoryview(buf).nbytes == (count + 1) // 2
    assert int(out.max(initial=0)) <= 15


@given(name=st.one_of(st.text(max_size=4), st.none(), st.binary(max_size=2)), size=codes)
def test_layout_oracle(name: Any, size: Any) -> None:
    try:
        layout = Layout(name, size)
    except Exception as exc:
        expect_allowed(exc)
        return
    assert layout.block_size >= 1
    assert isinstance(layout.name, str)


@given(code=codes)
def test_lookups_oracle(code: Any) -> None:
    try:
        kind = kiln_np.code_range(code)
    except Exception as exc:
        expect_allowed(exc)
        return
    try:
        dtype = kiln_np.dtype_for_code(code)
    except Exception as exc:
        expect_allowed(exc)
        assert kind != "closed"
    else:
        assert kind == "closed"
        assert kiln_np.code_for_dtype(dtype) == int(code)
