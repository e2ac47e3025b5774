"""GGUF tensors of GGML type ids kiln_np does not know: opaque bytes, written back as they were.

gguf-py's ``GGUFWriter`` refuses unknown types, so the files here are gguf-py's
with a tensor's type field patched (a fork's private id such as 142), or built
by hand (``tests/_helpers.gguf_bytes``).  gguf-py's ``GGUFReader`` refuses them
too: a copy is checked with kiln_np's reader and its raw bytes, and by patching
the type back, when gguf-py reads the tensor as the original.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
from _helpers import gguf_bytes, gguf_info, optional, run_command

import kiln_np
import kiln_np.gguf as kg
import kiln_np.onnx as ko
from kiln_np import KilnError, Layout, mx

if TYPE_CHECKING:
    import gguf
    from gguf import GGMLQuantizationType as Q
else:
    gguf = optional("gguf")
    Q = gguf.GGMLQuantizationType

FORK_ID = 142  # a private id of a llama.cpp fork
REMOVED = (4, 5, 31, 32, 33, 36, 37, 38)  # Q4_2, Q4_3, the repacked Q4_0 / IQ4_NL variants
Q8_0_BYTES = 34  # per 32 elements


def _gguf_py_file(path: Path, *, alignment: int | None = None) -> Path:
    """F32 ``a``, Q8_0 ``q`` (ne [64, 3]: 204 bytes, 224 with padding), F32 ``b``, Q8_0 ``last``."""
    w = gguf.GGUFWriter(str(path), "llama")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    w.add_uint32("k.u32", 7)
    rng = np.random.default_rng(0)
    w.add_tensor("a", np.arange(6, dtype=np.float32).reshape(2, 3))
    for name, rows in (("q", 3), ("last", 1)):
        x = rng.standard_normal((rows, 64)).astype(np.float32)
        if name == "last":
            w.add_tensor("b", np.arange(5, dtype=np.float32))
        w.add_tensor(name, gguf.quants.quantize(x, Q.Q8_0), raw_dtype=Q.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _type_field(data: bytes, name: str) -> int:
    """The byte position of tensor ``name``'s GGML type in its tensor info: after its
    name, ``n_dims`` and dims (``_gguf_py_file``'s tensors have 2)."""
    raw = name.encode()
    head = data.index(struct.pack(f"<Q{len(raw)}sI", len(raw), raw, 2))
    return head + 8 + len(raw) + 4 + 2 * 8


def _patched(path: Path, out: Path, types: dict[str, int]) -> Path:
    """``path`` with the GGML type of each named tensor set to another id."""
    data = bytearray(path.read_bytes())
    for name, type_id in types.items():
        struct.pack_into("<I", data, _type_field(bytes(data), name), type_id)
    out.write_bytes(bytes(data))
    return out


def _hand_file(path: Path, infos: list[bytes], data_bytes: int) -> Path:
    """A GGUF of these tensor infos and ``data_bytes`` bytes of data (0, 1, 2, ...)."""
    path.write_bytes(gguf_bytes(infos=infos, data=(bytes(range(256)) * 64)[:data_bytes]))
    return path


@pytest.fixture
def forked(tmp_path: Path) -> tuple[Path, Path]:
    """gguf-py's file, and the same file with ``q`` of the fork's type id."""
    original = _gguf_py_file(tmp_path / "original.gguf")
    return original, _patched(original, tmp_path / "fork.gguf", {"q": FORK_ID})


def _file_bytes(path: Path, offset: int, length: int) -> bytes:
    return path.read_bytes()[offset : offset + length]


# -- reading -------------------------------------------------------------------


@pytest.mark.parametrize("type_id", [FORK_ID, *REMOVED, 43, 255, 14591])
def test_an_unknown_type_is_its_bytes_up_to_the_next_offset(
    forked: tuple[Path, Path], type_id: int
) -> None:
    original, _ = forked
    path = _patched(original, original.with_name("t.gguf"), {"q": type_id})
    before = {t.name: t for t in kg.read_gguf(original).tensors}
    found = {t.name: t for t in kg.read_gguf(path).tensors}
    q = found["q"]
    assert (q.ggml.type_id, q.ggml.name, q.ggml.known) == (type_id, f"type{type_id}", False)
    assert q.dims == (64, 3)  # ne, as the file lists it
    assert q.info.code == 0x4700 + type_id
    assert q.info.layout == Layout(f"ggml.type{type_id}[64,3]", 1)
    # The gap to the next tensor ("b"), its 20 bytes of alignment padding included.
    assert q.offset == before["q"].offset
    assert q.info.shape == (found["b"].offset - q.offset,) == (3 * 2 * Q8_0_BYTES + 20,)
    # Every other tensor reads as before.
    assert {n: t.info for n, t in found.items() if n != "q"} == {
        n: t.info for n, t in before.items() if n != "q"
    }


def test_the_tensor_hands_out_its_bytes(forked: tuple[Path, Path]) -> None:
    _, path = forked
    with kiln_np.open_weights(path) as weights:
        t = weights["q"]
        expected = _file_bytes(path, t.offset, t.byte_length)
        assert t.format_dtype == "type142"
        assert bytes(t.payload().data) == expected


def test_its_numbers_are_unknown_not_its_bytes(forked: tuple[Path, Path]) -> None:
    """np.asarray of a tensor whose numbers are unknown handed out its bytes as uint8,
    which then read as numbers (statistics, a conversion to float); it is TYPE
    naming .payload(), the door to the bytes (issue 36), whatever asks."""
    _, path = forked
    with kiln_np.open_weights(path) as weights:
        t = weights["q"]
        asks = (t.numpy, lambda: np.asarray(t), lambda: np.asarray(t, np.float32))
        for ask in asks:
            with pytest.raises(KilnError, match=r"tensor 'q': expected numbers") as e:
                ask()
            assert e.value.kind == "TYPE"
            assert "type 142" in str(e.value)
            assert "t.payload()" in str(e.value)
        assert bytes(t.payload().data) == _file_bytes(path, t.offset, t.byte_length)
        assert np.asarray(weights["b"]).dtype == np.float32  # a known type still reads


def test_a_ggml_type_without_a_decoder_has_no_numbers() -> None:
    """A known id whose layout is another block size has no decoder either (the
    one reading of (code, layout), kiln_np._quants.elements.element_of)."""
    info = kiln_np.payload_info(0x4708, (2,), Layout("ggml.q8_0", 33))
    t = kiln_np.WeightTensor("odd", info, None, "Q8_0", data=memoryview(bytes(66)))
    with pytest.raises(KilnError, match=r"tensor 'odd': expected numbers.*t\.payload\(\)"):
        np.asarray(t)
    assert t.shape == (2,)
    assert bytes(t.payload().data) == bytes(66)


def test_the_last_tensor_runs_to_the_end_of_the_file(tmp_path: Path) -> None:
    original = _gguf_py_file(tmp_path / "original.gguf")
    path = _patched(original, tmp_path / "t.gguf", {"last": FORK_ID})
    last = kg.read_gguf(path).tensors[-1]
    size = path.stat().st_size
    assert last.name == "last"
    assert last.offset + last.info.byte_length == size
    assert last.info.byte_length == 2 * Q8_0_BYTES + 28  # padded to 32 by gguf-py


def test_gaps_follow_offset_order_not_tensor_info_order(tmp_path: Path) -> None:
    # Tensor infos list c (unknown, offset 64), a (F32 [8], offset 0), u (unknown,
    # offset 32), d (unknown, last at 160): each unknown ends at the next larger offset.
    infos = [
        gguf_info("c", (100,), FORK_ID, 64),
        gguf_info("a", (8,), 0, 0),
        gguf_info("u", (7, 2), 143, 32),
        gguf_info("d", (1,), 144, 160),
    ]
    path = _hand_file(tmp_path / "h.gguf", infos, 200)
    found = {t.name: t for t in kg.read_gguf(path).tensors}
    start = found["a"].offset  # of the data section
    assert {n: t.offset - start for n, t in found.items()} == {"c": 64, "a": 0, "u": 32, "d": 160}
    lengths = {n: found[n].info.byte_length for n in "cud"}
    assert lengths == {"c": 96, "u": 32, "d": 40}
    with kiln_np.open_weights(path) as weights:
        for n, length in lengths.items():
            assert bytes(weights[n].payload().data) == _file_bytes(path, found[n].offset, length)


def test_an_empty_unknown_tensor_has_no_bytes(tmp_path: Path) -> None:
    # ggml_nbytes is 0 when a dim is 0: it takes no bytes from the tensor at its offset.
    infos = [gguf_info("e", (0, 4), FORK_ID, 0), gguf_info("a", (8,), 0, 0)]
    found = kg.read_gguf(_hand_file(tmp_path / "h.gguf", infos, 32)).tensors
    assert [t.info.byte_length for t in found] == [0, 32]
    assert found[0].info.layout == Layout("ggml.type142[0,4]", 1)


def test_an_empty_known_tensor_at_an_unknown_ones_offset_is_no_overlap(tmp_path: Path) -> None:
    # As llama.cpp writes an empty tensor: at the offset of the one after it.
    for infos in (
        [gguf_info("u", (4,), FORK_ID, 0), gguf_info("e", (0,), 0, 0)],
        [gguf_info("e", (0,), 0, 0), gguf_info("u", (4,), FORK_ID, 0)],
    ):
        found = {
            t.name: t for t in kg.read_gguf(_hand_file(tmp_path / "h.gguf", infos, 64)).tensors
        }
        assert (found["u"].info.byte_length, found["e"].info.byte_length) == (64, 0)


@pytest.mark.parametrize(
    ("infos", "data_bytes", "kind", "match"),
    [
        pytest.param(
            [gguf_info("u", (4,), FORK_ID, 0), gguf_info("v", (4,), 143, 0)],
            64,
            "TYPE",
            "tensors overlap",
            id="two unknown tensors at one offset",
        ),
        pytest.param(
            [gguf_info("u", (4,), FORK_ID, 0), gguf_info("a", (8,), 0, 0)],
            64,
            "TYPE",
            "tensors overlap",
            id="an unknown tensor at a known one's offset",
        ),
        pytest.param(
            [gguf_info("a", (8,), 0, 0), gguf_info("u", (4,), FORK_ID, 32)],
            32,
            "LENGTH",
            r"tensor 'u' \(type142, dims \[4\]\): its data .* at byte 128: expected 1 bytes, the "
            "file holds 0",
            id="an unknown tensor at the end of the file",
        ),
        pytest.param(
            [gguf_info("u", (4,), FORK_ID, 2**40)],
            64,
            "LENGTH",
            "tensor 'u'.* the file holds 0",
            id="an unknown tensor past the end of the file",
        ),
        pytest.param(
            [gguf_info("u", (4,), FORK_ID, 0), gguf_info("a", (8,), 0, 2**40)],
            64,
            "LENGTH",
            "tensor 'a'",
            id="a huge gap: the next tensor past the end of the file",
        ),
        pytest.param(
            [gguf_info("u", (4,), FORK_ID, 16)],
            64,
            "TYPE",
            "multiple of the alignment 32, found 16",
            id="an unknown tensor off the alignment",
        ),
        pytest.param(
            [gguf_info("u", (2**32, 2**32), FORK_ID, 0)],
            64,
            "SHAPE",
            "product is at most 2",
            id="unknown dims past int64",
        ),
        pytest.param(
            [gguf_info("u", (4,), 14592, 0)],
            64,
            "TYPE",
            r"tensor 'u': expected a GGML type id of at most 14591 .*found 14592",
            id="a type id past the opaque codes",
        ),
        pytest.param(
            [gguf_info("u", (4,), 2**32 - 1, 0)],
            64,
            "TYPE",
            "found 4294967295",
            id="type id 2**32-1",
        ),
    ],
)
def test_hostile_unknown_tensors(
    tmp_path: Path, infos: list[bytes], data_bytes: int, kind: str, match: str
) -> None:
    path = _hand_file(tmp_path / "h.gguf", infos, data_bytes)
    with pytest.raises(KilnError, match=match) as info:
        kg.read_gguf(path)
    assert info.value.kind == kind
    assert str(path) in str(info.value)


# -- writing back to GGUF -----------------------------------------------------------


def _tensors(path: Path) -> list[tuple[str, int, tuple[int, ...], bytes]]:
    """Each tensor's name, GGML type id, dims and bytes, as kiln_np reads them."""
    data = path.read_bytes()
    return [
        (t.name, t.ggml.type_id, t.dims, data[t.offset : t.offset + t.info.byte_length])
        for t in kg.read_gguf(path).tensors
    ]


@pytest.mark.parametrize("alignment", [None, 64])
def test_gguf_to_gguf_writes_the_same_file(tmp_path: Path, alignment: int | None) -> None:
    original = _gguf_py_file(tmp_path / "original.gguf", alignment=alignment)
    path = _patched(original, tmp_path / "fork.gguf", {"q": FORK_ID, "last": 31})
    copy = tmp_path / "copy.gguf"
    with kiln_np.open_weights(path) as weights:
        kiln_np.save_weights(copy, weights, format="gguf", metadata=weights.metadata)
    assert _tensors(copy) == _tensors(path)
    _as_gguf_py_reads_it(copy, original)
    assert copy.read_bytes() == path.read_bytes()  # gguf-py's layout: the same bytes


def _as_gguf_py_reads_it(path: Path, original: Path) -> None:
    """``path`` with the types patched back to Q8_0 reads in gguf-py as ``original``."""
    restored = _patched(path, path.with_name("restored.gguf"), {"q": Q.Q8_0, "last": Q.Q8_0})
    theirs = {t.name: t for t in gguf.GGUFReader(original).tensors}
    ours = gguf.GGUFReader(restored).tensors
    assert [t.name for t in ours] == list(theirs)
    for t in ours:
        assert t.tensor_type == theirs[t.name].tensor_type
        assert t.shape.tolist() == theirs[t.name].shape.tolist()
        assert t.data.tobytes() == theirs[t.name].data.tobytes()


def test_kiln_np_convert_copies_unknown_tensors(forked: tuple[Path, Path]) -> None:
    _, path = forked
    copy = path.with_name("converted.gguf")
    assert run_command("convert", str(path), str(copy), "--to", "gguf") == 0
    assert copy.read_bytes() == path.read_bytes()


def test_a_payload_alone_carries_its_type_and_dims(forked: tuple[Path, Path]) -> None:
    _, path = forked
    copy = path.with_name("payload.gguf")
    with kiln_np.open_weights(path) as weights:
        kg.save_gguf(copy, {"x": weights["q"].payload()})
    [(name, type_id, dims, data)] = _tensors(copy)
    assert (name, type_id, dims) == ("x", FORK_ID, (64, 3))
    assert data == _tensors(path)[1][3]


def test_a_kiln_directory_keeps_unknown_tensors(forked: tuple[Path, Path]) -> None:
    # The Kiln directory stores any layout as it is: the dims travel in it.
    original, path = forked
    directory, back = path.with_name("kiln"), path.with_name("back.gguf")
    with kiln_np.open_weights(path) as weights:
        kiln_np.save_weights(directory, weights, format="kiln", metadata=weights.metadata)
    with kiln_np.open_weights(directory) as weights:
        assert weights["q"].layout == Layout("ggml.type142[64,3]", 1)
        kiln_np.save_weights(back, weights, format="gguf", metadata=weights.metadata)
    assert _tensors(back) == _tensors(path)
    _as_gguf_py_reads_it(back, original)


def test_writing_an_empty_unknown_tensor_is_shape(tmp_path: Path) -> None:
    empty = kiln_np.Payload(0x478E, memoryview(b""), (0,), Layout("ggml.type142[0,4]", 1))
    with pytest.raises(KilnError, match="found an empty tensor") as info:
        kg.save_gguf(tmp_path / "e.gguf", {"e": empty})
    assert info.value.kind == "SHAPE"
    bytes_but_no_elements = kiln_np.Payload(
        0x478E, memoryview(b"\0"), (1,), Layout("ggml.type142[0]", 1)
    )
    with pytest.raises(KilnError, match="found an empty tensor"):
        kg.save_gguf(tmp_path / "e.gguf", {"e": bytes_but_no_elements})
    assert not (tmp_path / "e.gguf").exists()


@pytest.mark.parametrize(
    ("code", "layout"),
    [
        (0x478E, Layout("ggml.type142[064]", 1)),  # another spelling of 64
        (0x478E, Layout("ggml.type142[64]", 2)),
        (0x478E, Layout("ggml.type142[1,1,1,1,1]", 1)),  # 5 dims
        (0x478E, Layout(f"ggml.type142[{2**32},{2**32}]", 1)),  # product past int64
        (0x478E, Layout("ggml.type142[64, 3]", 1)),
        (0x478E, Layout("ggml.type143[64]", 1)),  # another id's layout
        (0x4708, Layout("ggml.type8[32]", 1)),  # Q8_0 is known: its blocks, not bytes
        (0x478E, Layout("ggml.type142", 1)),  # no dims
    ],
    ids=lambda v: v.name if isinstance(v, Layout) else hex(v),
)
def test_only_unknown_types_own_layout_is_written(code: int, layout: Layout) -> None:
    with pytest.raises(KilnError, match="GGUF cannot hold") as info:
        kg.ggml_type_for_code(code, layout)
    assert info.value.kind == "TYPE"


def test_ggml_type_for_code_names_the_unknown_type() -> None:
    row = kg.ggml_type_for_code(0x4700 + 4, Layout("ggml.type4[32,2,1]", 1))
    assert (row.type_id, row.name, row.known, row.layout) == (4, "type4", False, None)
    assert all(t.known for t in kg.TYPES.values())


# -- the doors that must know the type ---------------------------------------------


def test_safetensors_refuses_an_unknown_type(forked: tuple[Path, Path]) -> None:
    _, path = forked
    with kiln_np.open_weights(path) as weights, pytest.raises(KilnError) as info:
        kiln_np.save_weights(path.with_name("o.safetensors"), weights, format="safetensors")
    assert info.value.kind == "TYPE"
    assert "tensor 'q'" in str(info.value)
    assert "ggml.type142" in str(info.value)


def test_dequantize_refuses_an_unknown_type(forked: tuple[Path, Path]) -> None:
    _, path = forked
    with kiln_np.open_weights(path) as weights, pytest.raises(KilnError) as info:
        kg.dequantize(weights["q"])
    assert info.value.kind == "TYPE"
    assert "GGML type 142 is one kiln_np does not know" in str(info.value)


def test_mx_and_onnx_refuse_an_unknown_type(forked: tuple[Path, Path]) -> None:
    _, path = forked
    with kiln_np.open_weights(path) as weights:
        t = weights["q"]
        with pytest.raises(KilnError, match=r"ggml\.type142\[64,3\]") as info:
            mx.from_ggml(t)
        assert info.value.kind == "TYPE"
        p = t.payload()
        with pytest.raises(KilnError, match=r"ggml\.type142\[64,3\].* is not an ONNX type"):
            ko.from_kiln(p.code, p.data, p.shape, p.layout)
