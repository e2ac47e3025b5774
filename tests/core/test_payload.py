"""The one payload description (issue 10) and the core's second reliability pass (issue 11)."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import kiln_np
from kiln_np import DTYPES, Code, KilnError, Layout, PayloadInfo, payload_info, to_numpy
from kiln_np._core.table import MAX_RANK

# -- the description ---------------------------------------------------------------------


@pytest.mark.parametrize("row", DTYPES, ids=lambda r: r.name)
def test_description_of_every_closed_code(row: kiln_np.DType) -> None:
    info = payload_info(int(row.code), (3, 5))
    assert info.code is row.code
    assert info.element is row
    assert (info.count, info.shape, info.decoded_shape) == (15, (3, 5), (3, 5))
    assert info.byte_length == (8 if row.packed else 15 * row.bits // 8)
    assert info.dtype == row.dtype
    assert info.context == f"code {int(row.code)} ({row.name}) shape (3, 5): "


def test_description_of_an_opaque_code_answers_the_same_questions() -> None:
    layout = Layout("q4_k", 144)
    info = payload_info(0x470C, (2, 3), layout)
    assert (info.code, info.element, info.count, info.byte_length) == (0x470C, layout, 6, 864)
    assert (info.dtype, info.decoded_shape) == (np.dtype(np.uint8), (2, 3, 144))
    assert layout.length_rule(6) == "6 blocks x 144 bytes (q4_k)"


def test_description_is_immutable_hashable_and_pickles() -> None:
    info = PayloadInfo("u4", [3], offset=8)
    with pytest.raises(AttributeError):
        info.count = 4
    again = pickle.loads(pickle.dumps(info))
    assert again == info
    assert hash(again) == hash(info)
    assert again.offset == 8
    assert info.with_offset(0) == PayloadInfo(17, (3,))
    assert repr(info) == (
        "PayloadInfo(code=<Code.U4: 17>, shape=(3,), layout=None, offset=8, byte_length=2)"
    )


def test_the_cache_returns_the_checked_description_and_still_checks_bad_input() -> None:
    assert payload_info(2, (4,)) is payload_info(2, (4,))
    for _ in range(2):  # a failed check is not cached as a success
        with pytest.raises(KilnError, match="SHAPE"):
            payload_info(2, (-1,))


@pytest.mark.parametrize("found", [0, 7, 9, 2**70])
def test_length_error_wording_is_the_one_the_core_uses(found: int) -> None:
    info = payload_info(2, (2,))
    with pytest.raises(KilnError) as caught:
        info.check_length(found, "'x.bin' at offset 0: ")
    err = caught.value
    assert (err.kind, err.expected, err.found, err.code, err.shape) == ("LENGTH", 8, found, 2, (2,))
    way = "short" if found < 8 else "long"
    if found < 2**64:
        assert err.message == (
            f"'x.bin' at offset 0: code 2 (f32) shape (2,): expected 2 x 4 = 8 bytes, "
            f"found {found} ({way} by {abs(found - 8)})"
        )
    info.check_length(8)  # exactly right: nothing raised


# -- one check order: SHAPE (representability included) before LENGTH -------------------


def test_unrepresentable_shape_is_shape_before_length_and_byte_length_still_answers() -> None:
    with pytest.raises(KilnError) as caught:
        to_numpy(1, b"\x00" * 7, (2**62, 4))
    assert caught.value.kind == "SHAPE"
    assert kiln_np.byte_length(1, (2**62, 4)) == 2**67  # pure arithmetic never wraps


@pytest.mark.parametrize("rank", [MAX_RANK - 1, MAX_RANK])
def test_opaque_payloads_have_one_dimension_less_than_numpy(rank: int) -> None:
    # numpy 2 allows 64 dimensions (numpy 1, 32); the block axis takes one.
    layout = Layout("pair", 2)
    shape = (1,) * rank
    if rank < MAX_RANK:
        assert to_numpy(4096, b"ab", shape, layout).shape == (*shape, 2)
    else:
        with pytest.raises(KilnError, match=f"at most {MAX_RANK - 1} dimensions") as caught:
            to_numpy(4096, b"ab", shape, layout)
        assert caught.value.kind == "SHAPE"


class _LyingShape(tuple[int, ...]):
    """A tuple whose len() is short: the rank is counted by iterating it."""

    def __len__(self) -> int:
        return 1


@pytest.mark.parametrize("rank", [MAX_RANK + 1, 300])
def test_rank_is_counted_on_iteration_not_len(rank: int) -> None:
    with pytest.raises(KilnError, match=f"at most {MAX_RANK} dimensions") as caught:
        payload_info(9, _LyingShape((1,) * rank))
    assert caught.value.kind == "SHAPE"


def test_endless_shape_sequence_stops_at_the_rank_limit() -> None:
    class Endless(list[int]):
        def __len__(self) -> int:
            return 2

        def __iter__(self) -> Iterator[int]:
            while True:
                yield 1

    with pytest.raises(KilnError, match="SHAPE"):
        payload_info(9, Endless())


# -- codes by name -----------------------------------------------------------------------


@pytest.mark.parametrize("row", DTYPES, ids=lambda r: r.name)
def test_codes_by_spec_name_and_member_name(row: kiln_np.DType) -> None:
    for name in (row.name, row.code.name):
        assert kiln_np.dtype_info(name) is row
        assert payload_info(name, (2,)).code is row.code
        assert kiln_np.byte_length(name, (5,)) == row.byte_length(5)


@pytest.mark.parametrize("code", [True, np.bool_(True), 2.0, "Bf16", "float32", "", " f32", b"f32"])
def test_other_spellings_stay_type_errors(code: object) -> None:
    with pytest.raises(KilnError) as caught:
        to_numpy(code, b"\x00\x00", (1,))  # type: ignore[arg-type]
    assert caught.value.kind == "TYPE"
    assert "expected an integer dtype code" in caught.value.message


def test_names_reach_every_core_entry_point() -> None:
    assert to_numpy("bf16", b"\x80\x3f", ()).reshape(1).view(np.uint8).tobytes() == b"\x80\x3f"
    assert kiln_np.from_numpy(np.array([1], np.int8), code="I8").code is Code.I8
    with pytest.raises(KilnError, match="never casts"):
        kiln_np.from_numpy(np.array([1], np.int8), code="u8")


# -- integers past Python's 4300-digit limit ---------------------------------------------

HUGE = 10**5000


@pytest.mark.parametrize(
    ("call", "kind"),
    [
        (lambda: to_numpy(HUGE, b"", (1,)), "TYPE"),
        (lambda: to_numpy(-HUGE, b"", (1,)), "TYPE"),
        (lambda: to_numpy(2, b"", (HUGE,)), "SHAPE"),
        (lambda: to_numpy(2, b"", (1, -HUGE)), "SHAPE"),
        (lambda: Layout("x", HUGE), "TYPE"),
        (lambda: Layout("x", 2**63), "TYPE"),
        (lambda: kiln_np.unpack_nibbles(b"", HUGE), "SHAPE"),
        (lambda: kiln_np.code_range("x" * 10), "TYPE"),
        (lambda: PayloadInfo(2, (1,), offset=HUGE), "TYPE"),
    ],
    ids=["code", "negative code", "dim", "negative dim", "block_size", "block_size 2**63",
         "count", "name", "offset"],
)  # fmt: skip
def test_huge_integers_give_bounded_messages(call: Any, kind: str) -> None:
    with pytest.raises(KilnError) as caught:
        call()
    assert caught.value.kind == kind
    assert len(str(caught.value)) < 1000


def test_largest_block_size_has_a_repr() -> None:
    assert repr(Layout("x", 2**63 - 1)) == f"Layout(name='x', block_size={2**63 - 1})"


# -- ndarray subclasses as buf: bytes in, plain ndarrays out -----------------------------


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
@pytest.mark.parametrize(
    "make",
    [lambda b: np.matrix(b.reshape(1, -1)), lambda b: np.ma.masked_array(b, mask=b > 100)],
    ids=["matrix", "masked"],
)
@pytest.mark.parametrize(("code", "shape"), [(9, (1, 2, 2)), (17, (7,)), (7, (4,))])
def test_subclass_buffers_decode_as_their_bytes(
    make: Any, code: int, shape: tuple[int, ...]
) -> None:
    raw = np.array([1, 0, 1, 1], np.uint8)
    out = to_numpy(code, make(raw), shape)
    assert type(out) is np.ndarray
    assert out.shape == shape
    expected = to_numpy(code, raw.tobytes(), shape)
    assert out.view(np.uint8).tobytes() == expected.view(np.uint8).tobytes()


# -- from_numpy(out=) overlapping its input ----------------------------------------------


def test_overlapping_strided_input_and_out_the_reported_case() -> None:
    buf = np.arange(32, dtype=np.uint8)
    kiln_np.from_numpy(buf[0:16:2], out=buf[1:9])
    assert buf[1:9].tolist() == [0, 2, 4, 6, 8, 10, 12, 14]


@pytest.mark.parametrize("dtype", ["u1", "<i2", "<f4", ">f4", "<f8", ml_dtypes.bfloat16, "?"])
@pytest.mark.parametrize("step", [2, 3, -1, -2])
@pytest.mark.parametrize("shift", [-3, -1, 1, 5])
def test_overlap_any_dtype_any_stride(dtype: Any, step: int, shift: int) -> None:
    itemsize = np.dtype(dtype).itemsize
    n = 12
    base = np.zeros(64 * itemsize + 64, np.uint8)
    base[:] = np.arange(base.size) % 2 if np.dtype(dtype) == np.bool_ else np.arange(base.size)
    arr = base[32 : 32 + 48 * itemsize].view(dtype)[::step][:n]
    expected = kiln_np.from_numpy(arr.copy()).data.tobytes()
    start = 32 + shift * itemsize
    kiln_np.from_numpy(arr, out=base[start : start + n * itemsize])
    assert base[start : start + n * itemsize].tobytes() == expected


# -- errors keep what they carry --------------------------------------------------------


def test_kiln_error_pickles_with_notes_and_attributes() -> None:
    err = KilnError("TYPE", "expected 1, found 2", code=7, shape=(3,), expected=1, found=2, index=1)
    err.add_note("while reading tensor 'w'")
    again = pickle.loads(pickle.dumps(err))
    assert (again.kind, again.message, again.code, again.shape, again.index) == (
        "TYPE", "expected 1, found 2", 7, (3,), 1)  # fmt: skip
    assert again.__notes__ == ["while reading tensor 'w'"]
    assert not hasattr(pickle.loads(pickle.dumps(KilnError("TYPE", "x"))), "__notes__")


def test_shifted_moves_the_index_and_says_where() -> None:
    with pytest.raises(KilnError) as caught:
        to_numpy(7, bytes([0, 1, 2]), (3,))
    moved = caught.value.shifted(100, "in chunk 2")
    assert moved.index == 102
    assert "at element 102 of the payload, in chunk 2" in moved.message
    assert (moved.kind, moved.found, moved.code) == ("TYPE", 2, 7)


# -- pack_nibbles: what its input may be ------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "values"),
    [(ml_dtypes.int4, [-1, 2, -8, 7, 0]), (ml_dtypes.uint4, [15, 0, 1]),
     (ml_dtypes.float4_e2m1fn, [-6.0, 0.5, -0.0])],
    ids=["int4", "uint4", "e2m1"],
)  # fmt: skip
def test_pack_nibbles_of_ml_dtypes_packs_their_storage_nibbles(
    dtype: Any, values: list[Any]
) -> None:
    arr = np.array(values, dtype)
    assert kiln_np.pack_nibbles(arr).tobytes() == bytes(kiln_np.from_numpy(arr).data)


class _Raises:
    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise RuntimeError("no array here")


@pytest.mark.parametrize(
    "call",
    [
        lambda: kiln_np.pack_nibbles([[1, 2], [3]]),
        lambda: kiln_np.pack_nibbles(_Raises()),
        lambda: kiln_np.from_numpy(_Raises()),
        lambda: kiln_np.from_numpy([[1.0], [1.0, 2.0]]),
        lambda: kiln_np.pack_nibbles(np.array([0.5])),
    ],
    ids=["ragged pack", "raising pack", "raising from_numpy", "ragged from_numpy", "floats"],
)
def test_array_making_failures_are_type_errors(call: Any) -> None:
    with pytest.raises(KilnError) as caught:
        call()
    assert caught.value.kind == "TYPE"


def test_prefixed_and_shifted_keep_notes() -> None:
    err = KilnError("TYPE", "expected 0 or 1, found 2 at element 3", index=3)
    err.add_note("in tensor 'mask'")
    assert err.prefixed("file: ").__notes__ == ["in tensor 'mask'"]
    assert err.shifted(10).__notes__ == ["in tensor 'mask'"]
