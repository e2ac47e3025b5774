"""kiln_np.torch: to_torch / from_torch zero-copy and bit for bit, and torch tensors
at every door that takes arrays (from_numpy, save_payload, save_weights, describe).

Bits are compared as bytes (``.view(torch.uint8)`` / ``.view(np.uint8)``), never
with ``==`` on floats: NaN payloads, signalling NaNs, -0.0 and subnormals are in
every float case.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import kiln_np
import kiln_np.gguf
from kiln_np import Code, KilnError, Layout
from kiln_np._core.torch_types import TORCH_TYPES, TorchType

pytest.importorskip(
    "safetensors",
    reason="needs safetensors (a test-only oracle of the test extra), which is not installed",
)
pytest.importorskip("torch", reason="needs torch (the torch extra), which is not installed")
import safetensors.torch
import torch

from kiln_np.torch import from_torch, to_torch  # imports torch

ROWS = [pytest.param(row, id=row.name) for row in TORCH_TYPES]

# Bit patterns every float case carries, by storage width: NaN payloads, a
# signalling NaN, -0.0, the smallest subnormals, infinities where the type has them.
_SPECIAL = {
    2: [0x7FC1, 0x7F81, 0xFF80, 0x8000, 0x0001, 0x8001, 0x7F80, 0x7C01, 0xFC00],
    4: [0x7FC00001, 0x7F800001, 0x80000000, 0x00000001, 0xFF800000, 0x7FBFFFFF],
    8: [0x7FF8000000000001, 0x7FF0000000000001, 0x8000000000000000, 1, 0xFFF0000000000000],
}


def bits_of(row: TorchType, n: int = 64) -> np.ndarray:
    """``n`` (or, for 1-byte types, all 256) storage patterns of ``row``'s type as its
    numpy dtype (the packed bytes for float4_e2m1fn_x2)."""
    rng = np.random.default_rng(25)
    size = row.dtype.itemsize
    if row.name == "bool":
        return np.asarray(rng.integers(0, 2, n) == 1).reshape(8, -1)
    if size == 1:
        raw = np.arange(256, dtype=np.uint8).reshape(16, 16)
    else:
        raw = rng.integers(0, 256, n * size, dtype=np.uint8).view(f"<u{min(size, 8)}").copy()
        special = _SPECIAL.get(min(size, 8), [])
        raw[: len(special)] = special
        raw = raw.reshape(8, -1)
    return raw.view(row.dtype)


def given(row: TorchType, arr: np.ndarray) -> Any:
    """What to hand to_torch for ``arr``: the array, or for float4_e2m1fn_x2 (numpy
    has no packed e2m1) a payload over the array's bytes."""
    if row.per_byte == 1:
        return arr
    shape = (arr.shape[0], arr.shape[1] * row.per_byte)
    return kiln_np.Payload(Code.E2M1, memoryview(arr.reshape(-1).data), shape)


def tensor_bytes(t: torch.Tensor) -> bytes:
    return bytes(t.contiguous().view(torch.uint8).numpy().tobytes())


def address(buf: Any) -> int:
    return int(np.frombuffer(buf, np.uint8).ctypes.data)


def test_import_kiln_np_does_not_import_torch(tmp_path: Path) -> None:
    # The doors detect a tensor through sys.modules: numpy callers never load torch.
    code = (
        "import sys, numpy as np, kiln_np\n"
        "p = kiln_np.from_numpy(np.ones(3, '<f4'))\n"
        "kiln_np.save_payload(sys.argv[1] + '/p.kiln', np.ones(3, '<f4'))\n"
        "kiln_np.save_weights(sys.argv[1] + '/w.safetensors', {'w': np.ones(2)}, "
        "format='safetensors')\n"
        "kiln_np.describe(np.ones(3))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("row", ROWS)
def test_array_round_trip_is_zero_copy_and_bit_exact(row: TorchType) -> None:
    arr = bits_of(row)
    t = to_torch(given(row, arr))
    assert t.dtype == getattr(torch, row.name)
    assert t.data_ptr() == arr.ctypes.data
    assert tensor_bytes(t) == arr.tobytes()
    p = from_torch(t)
    assert bytes(p.data) == arr.tobytes()
    assert address(p.data) == arr.ctypes.data  # contiguous: the payload is the memory
    assert p.code == row.code
    assert p.layout == row.layout
    assert p.shape == (arr.shape[0], arr.shape[1] * row.per_byte)


@pytest.mark.parametrize("row", ROWS)
def test_writes_through_either_side_are_seen(row: TorchType) -> None:
    arr = bits_of(row).copy()
    t = to_torch(given(row, arr))
    t.view(torch.uint8)[0, 0] = 1  # storage byte 1: a valid element of every type
    assert arr.view(np.uint8)[0, 0] == 1
    arr.view(np.uint8)[0, 1] = 0
    assert int(t.view(torch.uint8)[0, 1]) == 0


@pytest.mark.parametrize("row", ROWS)
def test_payload_round_trip_shares_the_payloads_memory(row: TorchType) -> None:
    arr = bits_of(row)
    p = from_torch(to_torch(given(row, arr)))
    t = to_torch(p)
    assert t.data_ptr() == address(p.data)
    assert tensor_bytes(t) == arr.tobytes()
    assert tuple(t.shape) == arr.shape
    owned = to_torch(p, copy=True)
    assert owned.data_ptr() != t.data_ptr()
    assert tensor_bytes(owned) == arr.tobytes()


@pytest.mark.parametrize("row", ROWS)
def test_from_torch_of_torch_made_tensors(row: TorchType) -> None:
    # The bits torch itself makes (its own conversions), read as torch stores them.
    dtype = getattr(torch, row.name)
    if row.per_byte == 2:
        source = torch.arange(256, dtype=torch.uint8).view(dtype)
    else:
        values = torch.tensor([0.0, -0.0, 1.5, -2.0, float("nan"), 3.0, 0.25, 1e-3])
        source = (values.abs() if dtype == torch.float8_e8m0fnu else values).to(dtype)
    p = from_torch(source)
    assert bytes(p.data) == tensor_bytes(source)
    back = to_torch(p)
    assert back.dtype == dtype
    assert tensor_bytes(back) == tensor_bytes(source)


def test_read_only_memory_is_shared_without_a_warning() -> None:
    # torch warns once per process about read-only memory; kiln_np swallows it where
    # it hands a read-only view of writable memory over (a fresh interpreter: the
    # warning not yet spent). Memory no one may write (bytes) is copied: no warning.
    code = (
        "import warnings; warnings.simplefilter('error')\n"
        "import numpy as np, kiln_np\n"
        "from kiln_np.torch import to_torch\n"
        "p = kiln_np.from_numpy(np.arange(4, dtype='<f4'))\n"
        "a, b = to_torch(p), to_torch(kiln_np.to_numpy(2, bytes(8), (2,)))\n"
        "print(a.tolist(), b.tolist(), a.data_ptr() == np.frombuffer(p.data, 'u1').ctypes.data)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split("]") == ["[0.0, 1.0, 2.0, 3.0", " [0.0, 0.0", " True\n"]
    assert done.stderr == ""


def test_a_writable_buffer_aliases_the_tensor() -> None:
    buf = bytearray(b"\x80\x3f\x00\xc0")
    t = to_torch(kiln_np.to_numpy("bf16", buf, (2,)))
    t[1] = 4.0
    assert buf.hex() == "803f8040"


def test_e2m1_counts_bytes_and_odd_innermost_is_shape() -> None:
    p = kiln_np.Payload(Code.E2M1, memoryview(bytes([0x21, 0x43, 0x65, 0x87])), (2, 4))
    t = to_torch(p)
    assert str(t.dtype) == "torch.float4_e2m1fn_x2"
    assert tuple(t.shape) == (2, 2)
    assert t.view(torch.uint8).tolist() == [[0x21, 0x43], [0x65, 0x87]]
    assert bytes(from_torch(t).data) == bytes(p.data)
    assert from_torch(t).shape == (2, 4)
    unpacked = kiln_np.to_numpy(*p)  # one element per byte: packed on the way (a copy)
    assert to_torch(unpacked).view(torch.uint8).tolist() == [[0x21, 0x43], [0x65, 0x87]]
    for shape, data in (((3,), b"\x21\x03"), ((), b"\x01"), ((2, 3), b"\x21\x43\x65")):
        with pytest.raises(KilnError, match="expected an even innermost dimension") as info:
            to_torch(kiln_np.Payload(Code.E2M1, memoryview(data), shape))
        assert info.value.kind == "SHAPE"
    # A 0-d float4_e2m1fn_x2 tensor is one byte: two elements.
    assert from_torch(torch.tensor(0x21, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)).shape == (
        2,
    )


@pytest.mark.parametrize(("code", "dtype"), [(Code.I4, ml_dtypes.int4), (Code.U4, ml_dtypes.uint4)])
def test_int4_packed_bytes_or_values(code: Code, dtype: Any) -> None:
    values = np.array([[1, 7, 0, 5], [3, 2, 6, 4]], dtype)
    if code == Code.I4:
        values = np.array([[1, -8, 0, 7], [-1, 2, -3, 4]], dtype)
    p = kiln_np.from_numpy(values)
    packed = to_torch(p)
    assert packed.dtype == torch.uint8
    assert tuple(packed.shape) == (2, 2)
    assert packed.data_ptr() == address(p.data)
    assert tensor_bytes(packed) == bytes(p.data)
    exact = to_torch(p, int4="values")
    assert exact.dtype == (torch.int8 if code == Code.I4 else torch.uint8)
    assert exact.tolist() == values.astype(int).tolist()
    assert to_torch(values).tolist() == packed.tolist()  # an unpacked array: packed first
    for back in (from_torch(packed, code=code), from_torch(exact, code=code, int4="values")):
        assert (back.code, back.shape, bytes(back.data)) == (code, (2, 4), bytes(p.data))
    with pytest.raises(KilnError, match="expected an even innermost"):
        to_torch(kiln_np.from_numpy(values[:, :3]))
    odd = to_torch(kiln_np.from_numpy(values[:, :3]), int4="values")
    assert odd.tolist() == values[:, :3].astype(int).tolist()


def test_int4_values_out_of_range_and_wrong_dtypes_are_type() -> None:
    with pytest.raises(KilnError, match=r"expected values -8\.\.7, found 8 at element 2") as info:
        from_torch(torch.tensor([0, -8, 8], dtype=torch.int8), code="i4", int4="values")
    assert (info.value.kind, info.value.index) == ("TYPE", 2)
    with pytest.raises(KilnError, match=r"found 0x10 at element 1") as info:
        from_torch(torch.tensor([15, 16], dtype=torch.uint8), code="u4", int4="values")
    with pytest.raises(KilnError, match=r"expected a torch\.uint8 tensor, found torch\.int8"):
        from_torch(torch.zeros(2, dtype=torch.int8), code="i4")
    with pytest.raises(KilnError, match=r"expected a torch\.int8 tensor, found torch\.uint8"):
        from_torch(torch.zeros(2, dtype=torch.uint8), code="i4", int4="values")
    with pytest.raises(KilnError, match="int4: expected one of 'packed', 'values'"):
        to_torch(np.zeros(2), int4="nibbles")  # type: ignore[arg-type]
    with pytest.raises(KilnError, match="int4: expected one of 'packed', 'values'"):
        from_torch(torch.zeros(2), int4=1)  # type: ignore[arg-type]


def _quantized() -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch 2.13 deprecates them
        return torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8)


def _complex32() -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "ComplexHalf support is experimental"
        return torch.zeros(2, dtype=torch.complex32)


def _zeros(name: str) -> Callable[[], torch.Tensor]:
    return lambda: torch.zeros(2, dtype=getattr(torch, name))


_SHELLS = ["bits8", "bits16"] + [f"{kind}{k}" for kind in ("uint", "int") for k in range(1, 8)]
REFUSED: dict[str, tuple[Callable[[], torch.Tensor], str]] = {
    "qint8": (_quantized, r"t\.int_repr\(\)"),
    **{name: (_zeros(name), f"found torch\\.{name} ") for name in _SHELLS},
    "complex32": (_complex32, r"found torch\.complex32"),
    "sparse": (lambda: torch.zeros(2).to_sparse(), r"t\.to_dense\(\)"),
    "meta": (lambda: torch.zeros(2, device="meta"), r"device 'meta'.*t\.cpu\(\)"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_tensors_are_type_at_every_door(case: str, tmp_path: Path) -> None:
    make, pattern = REFUSED[case]
    t = make()
    doors: dict[str, Callable[[], object]] = {
        "from_torch": lambda: from_torch(t),
        "to_torch": lambda: to_torch(t),
        "from_numpy": lambda: kiln_np.from_numpy(t),
        "save_payload": lambda: kiln_np.save_payload(tmp_path / "p.kiln", t),
        "save_weights": lambda: kiln_np.save_weights(
            tmp_path / "w.safetensors", {"w": t}, format="safetensors"
        ),
        "describe": lambda: kiln_np.describe(t),
    }
    for door, call in doors.items():
        with pytest.raises(KilnError, match=pattern) as info:
            call()
        assert info.value.kind == "TYPE", door
    assert not (tmp_path / "w.safetensors").exists()


def test_grad_conj_neg_and_strided_tensors_are_read_as_their_values() -> None:
    x = torch.tensor([1.5, -0.0, 3.0], requires_grad=True)
    assert bytes(from_torch(x).data) == np.array([1.5, -0.0, 3.0], "<f4").tobytes()
    c = torch.tensor([1 + 2j, -3 - 4j], dtype=torch.complex64).conj()
    assert np.frombuffer(from_torch(c).data, np.complex64).tolist() == [1 - 2j, -3 + 4j]
    n = torch.tensor([1 + 2j], dtype=torch.complex64).conj().imag
    assert n.is_neg()
    assert np.frombuffer(from_torch(n).data, "<f4").tolist() == [-2.0]
    base = torch.arange(24, dtype=torch.int16).view(torch.bfloat16).reshape(4, 6)
    for view in (base.T, base[:, ::2], base[1:, 2:], base[:1].expand(3, 6)):
        p = from_torch(view)
        assert p.shape == tuple(view.shape)
        assert bytes(p.data) == tensor_bytes(view)  # C order of the values seen
    x2 = torch.arange(12, dtype=torch.uint8).reshape(3, 4).T.view(torch.float4_e2m1fn_x2)
    assert bytes(from_torch(x2).data) == tensor_bytes(x2)
    assert from_torch(x2).shape == (4, 6)


def test_other_devices_say_cpu() -> None:
    t = torch.zeros(2, dtype=torch.bfloat16, device="meta")
    with pytest.raises(KilnError, match=r"expected a CPU tensor, found torch\.bfloat16 of shape"):
        from_torch(t)
    with pytest.raises(KilnError, match=r"expected a torch\.Tensor, found ndarray"):
        from_torch(np.zeros(2))  # type: ignore[arg-type]


def test_code_must_be_the_dtypes() -> None:
    t = torch.zeros(2, dtype=torch.bfloat16)
    assert from_torch(t, code="bf16").code == Code.BF16
    with pytest.raises(KilnError, match="expected float16 elements, found bfloat16"):
        from_torch(t, code="f16")
    fnuz = torch.zeros(2, dtype=torch.float8_e4m3fnuz)
    with pytest.raises(KilnError, match=r"expected code=20242, layout=Layout\(name='onnx"):
        from_torch(fnuz, code="u8")
    with pytest.raises(KilnError, match="was given with code=None"):
        from_torch(t, layout=Layout("x", 2))


def test_opaque_blocks_travel_as_uint8_blocks() -> None:
    layout = Layout("ggml.q8_0", 34)
    p = kiln_np.Payload(0x4708, memoryview(bytes(range(68))), (2,), layout)
    t = to_torch(p)
    assert t.dtype == torch.uint8
    assert tuple(t.shape) == (2, 34)
    back = from_torch(t, code=0x4708, layout=layout)
    assert (back.code, back.shape, back.layout, bytes(back.data)) == (
        0x4708,
        (2,),
        layout,
        bytes(range(68)),
    )


def test_non_native_byte_order_and_array_likes() -> None:
    big = np.array([1.0, -0.0], ">f4")
    assert tensor_bytes(to_torch(big)) == big.astype("<f4").tobytes()
    assert to_torch([1, 2, 3]).tolist() == [1, 2, 3]
    with pytest.raises(KilnError, match="TYPE"):
        to_torch(np.zeros(2, ml_dtypes.int2))  # no torch dtype, no Kiln code


def test_doors_take_torch_tensors(tmp_path: Path) -> None:
    bf16 = torch.tensor([1.0, -2.0, float("nan")], dtype=torch.bfloat16)
    f32 = torch.tensor([1.0, -0.0])
    p = kiln_np.from_numpy(bf16)
    assert (p.code, bytes(p.data)) == (Code.BF16, tensor_bytes(bf16))
    assert kiln_np.from_numpy(f32).code == Code.F32  # as before, and now documented
    kiln_np.save_payload(tmp_path / "b.kiln", bf16)
    assert (tmp_path / "b.kiln").read_bytes() == tensor_bytes(bf16)
    kiln_np.save_payload(tmp_path / "s.kiln", [bf16[:2], bf16[2:]], code="bf16", shape=(3,))
    assert (tmp_path / "s.kiln").read_bytes() == tensor_bytes(bf16)
    assert kiln_np.describe(bf16).nan == 1
    path = tmp_path / "w.gguf"
    kiln_np.save_weights(path, {"b": bf16, "f": f32}, format="gguf")
    with kiln_np.open_weights(path) as w:
        assert tensor_bytes(to_torch(w["b"])) == tensor_bytes(bf16)


def test_weight_tensors_are_views_of_a_private_map(tmp_path: Path) -> None:
    # Issue 35: to_torch of a weight tensor is zero-copy over the file's private
    # (copy-on-write) map, one per file: written, the tensors of that file see the
    # write; payloads, arrays and the file keep the file's bytes.
    path = tmp_path / "w.safetensors"
    kiln_np.save_weights(
        path, {"v": np.ones(2, "<f4"), "w": np.arange(6, dtype="<f4")}, format="safetensors"
    )
    before = path.read_bytes()
    with kiln_np.open_weights(path) as w:
        t, again, v = to_torch(w["w"]), to_torch(w["w"]), to_torch(w["v"])
        assert t.data_ptr() == again.data_ptr()
        assert t.data_ptr() - v.data_ptr() == w["w"].offset - w["v"].offset
        assert t.data_ptr() != address(w["w"].payload().data)  # not the read-only map
        t.mul_(2)
        assert again.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
        assert w["w"].numpy().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        assert to_torch(w["w"].payload()).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        owned = to_torch(w["w"], copy=True)
        assert owned.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        assert owned.data_ptr() not in (t.data_ptr(), address(w["w"].payload().data))
    assert t.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]  # outlives close(), as payloads do
    assert path.read_bytes() == before


def test_read_only_memory_is_copied_unless_it_can_be_written() -> None:
    # A read-only view of writable memory is shared (from_numpy's and from_torch's
    # payloads); memory nobody may write (bytes, a read-only map) is copied.
    arr = np.arange(4, dtype="<f4")
    p = kiln_np.from_numpy(arr)
    assert p.data.readonly
    assert to_torch(p).data_ptr() == arr.ctypes.data
    frozen = arr[:]
    frozen.flags.writeable = False
    assert to_torch(frozen).data_ptr() == arr.ctypes.data
    writable = memoryview(bytearray(8)).toreadonly()
    assert to_torch(kiln_np.Payload(Code.F32, writable, (2,))).tolist() == [0.0, 0.0]
    raw = bytes(range(8))
    for x in (kiln_np.Payload(Code.U8, memoryview(raw), (8,)), kiln_np.to_numpy("u8", raw, (8,))):
        t = to_torch(x)
        assert t.data_ptr() != address(raw)
        t.add_(1)
        assert raw == bytes(range(8))
    fp4 = bytes([0x21, 0x43])
    assert to_torch(kiln_np.Payload(Code.E2M1, memoryview(fp4), (4,))).data_ptr() != address(fp4)


# -- safetensors' own torch loader and writer as the oracle -------------------------


def _oracle_tensors() -> dict[str, torch.Tensor]:
    """A tensor of every dtype safetensors holds (all of the table but complex128)."""
    rows = (row for row in TORCH_TYPES if row.name != "complex128")
    return {row.name: to_torch(given(row, bits_of(row))) for row in rows}


def test_safetensors_torch_reads_what_kiln_np_writes_from_torch(tmp_path: Path) -> None:
    tensors = _oracle_tensors()
    path = tmp_path / "k.safetensors"
    kiln_np.save_weights(path, tensors, format="safetensors")
    loaded = safetensors.torch.load_file(path)
    assert sorted(loaded) == sorted(tensors)
    for name, t in tensors.items():
        assert loaded[name].dtype == t.dtype, name
        assert tuple(loaded[name].shape) == tuple(t.shape), name
        assert tensor_bytes(loaded[name]) == tensor_bytes(t), name


def test_kiln_np_reads_what_safetensors_torch_writes(tmp_path: Path) -> None:
    tensors = _oracle_tensors()
    path = tmp_path / "s.safetensors"
    safetensors.torch.save_file(tensors, path)
    with kiln_np.open_weights(path) as w:
        for name, t in tensors.items():
            back = to_torch(w[name])
            assert back.dtype == t.dtype, name
            assert tuple(back.shape) == tuple(t.shape), name
            assert tensor_bytes(back) == tensor_bytes(t), name


def test_interop_md_table_is_the_torch_table() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "interop.md").read_text()
    block = text.split("<!-- torch-table")[1].split("<!-- /torch-table -->")[0]
    rows = [line for line in block.splitlines() if line.startswith("| `")]
    expected = []
    for row in TORCH_TYPES:
        if row.layout is None:
            kiln = f"{row.code} {kiln_np.dtype_info(row.code).name}"
        else:
            kiln = f"foreign 0x{row.code:04x} `{row.layout.name}`"
        per_byte = "" if row.per_byte == 1 else f" {row.per_byte}"
        expected.append(f"| `{row.name}` | {kiln} | `{row.dtype.name}` |{per_byte} |")
    assert rows == expected


def test_gguf_quantize_and_pack_nibbles_take_tensors() -> None:
    import kiln_np.gguf

    values = np.linspace(-1, 1, 64, dtype=np.float32).reshape(2, 32)
    for t in (torch.from_numpy(values), torch.from_numpy(values).to(torch.bfloat16)):
        expected = kiln_np.gguf.quantize(tensor_bytes_as_array(t), "q8_0")
        assert bytes(kiln_np.gguf.quantize(t, "q8_0").data) == bytes(expected.data)
    nibbles = torch.tensor([1, 2, 3], dtype=torch.uint8)
    assert kiln_np.pack_nibbles(nibbles).tobytes().hex(" ") == "21 03"
    with pytest.raises(KilnError, match=r"t\.cpu"):
        kiln_np.pack_nibbles(torch.zeros(2, dtype=torch.uint8, device="meta"))


def tensor_bytes_as_array(t: torch.Tensor) -> np.ndarray:
    """The tensor as numpy by hand: a same-size view, then the ml_dtypes type."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


# -- issue 37: a weight's numbers, as numpy gives them ---------------------------------


def _tensor_bits(t: torch.Tensor) -> bytes:
    return bytes(t.contiguous().view(torch.uint8).numpy().tobytes())


def _fp8_block(path: Path) -> Path:
    """A DeepSeek FP8 block-scaled weight (codes and one f32 scale per 128x128 block)."""
    rng = np.random.default_rng(37)
    codes = rng.integers(0, 0x7F, (130, 40), dtype=np.uint8)  # finite, both signs below
    codes[::3] |= 0x80
    scale = rng.uniform(0.5, 2.0, (2, 1)).astype(np.float32)
    weights = {"l.weight": codes.view(ml_dtypes.float8_e4m3fn), "l.weight_scale_inv": scale}
    kiln_np.save_weights(path, weights, format="safetensors")
    return path


@pytest.mark.parametrize("ggml", ["Q4_K", "Q8_0", "MXFP4"])
def test_a_ggml_weight_is_its_numbers_as_numpy_gives_them(ggml: str, tmp_path: Path) -> None:
    x = np.random.default_rng(8).standard_normal((4, 512)).astype(np.float32)
    q = kiln_np.gguf.quantize(x, ggml)
    path = tmp_path / "q.gguf"
    kiln_np.save_weights(path, {"w": q}, format="gguf")
    with kiln_np.open_weights(path) as w:
        t = w["w"]
        got = to_torch(t)
        assert (got.dtype, tuple(got.shape)) == (torch.float32, (4, 512))
        assert _tensor_bits(got) == np.asarray(t).view(np.uint8).tobytes()
        for name in ("float16", "bfloat16", "float64"):
            wanted = to_torch(t, dtype=name)
            assert str(wanted.dtype) == f"torch.{name}"
            assert _tensor_bits(wanted) == np.asarray(t, name).view(np.uint8).tobytes()
        # The bytes stay one door away: the payload's blocks, as uint8.
        raw = to_torch(t.payload())
        assert q.layout is not None
        assert (raw.dtype, tuple(raw.shape)) == (torch.uint8, (*q.shape, q.layout.block_size))
        assert _tensor_bits(raw) == bytes(q.data)
        # A tensor of its own: writing it changes neither the file nor a second one.
        got.mul_(0)
        assert _tensor_bits(to_torch(t)) == np.asarray(t).view(np.uint8).tobytes()


def test_a_logical_weight_is_its_numbers_as_numpy_gives_them(tmp_path: Path) -> None:
    path = _fp8_block(tmp_path / "fp8.safetensors")
    with kiln_np.open_weights(path) as plain:
        t = plain.logical()["l.weight"]
        assert isinstance(t, kiln_np.LogicalTensor)
        got = to_torch(t)
        assert tuple(got.shape) == t.shape == (130, 40)
        assert str(got.dtype) == f"torch.{t.dtype.name}"
        assert _tensor_bits(got) == np.asarray(t).view(np.uint8).tobytes()
        f32 = to_torch(t, dtype=np.float32)
        assert _tensor_bits(f32) == np.asarray(t, np.float32).view(np.uint8).tobytes()
        assert not np.array_equal(f32.numpy(), plain["l.weight"].numpy().astype(np.float32))
        parts = {role: to_torch(part) for role, part in t.parts.items()}
        assert _tensor_bits(parts["weight"]) == bytes(plain["l.weight"].payload().data)


def test_dtype_picks_a_stored_weights_numbers_and_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    w = np.array([1.5, -0.0, np.nan], ml_dtypes.bfloat16)
    kiln_np.save_weights(path, {"w": w}, format="safetensors")
    with kiln_np.open_weights(path) as weights:
        t = weights["w"]
        assert _tensor_bits(to_torch(t, dtype="float32")) == w.astype(np.float32).tobytes()
        same = to_torch(t, dtype="bfloat16")  # the map's elements: copied, never the map
        same.mul_(2)
        assert bytes(t.payload().data) == w.tobytes()
    for x in (w, kiln_np.from_numpy(w), [1.0]):
        with pytest.raises(KilnError, match=r"^TYPE: dtype=: expected a weight tensor"):
            to_torch(x, dtype="float32")


def test_a_ggml_type_without_a_decoder_is_type_as_in_numpy() -> None:
    info = kiln_np.payload_info(0x4708, (2,), Layout("ggml.q8_0", 33))
    t = kiln_np.WeightTensor("odd", info, None, "Q8_0", data=memoryview(bytes(66)))
    with pytest.raises(KilnError, match=r"tensor 'odd': expected numbers.*t\.payload\(\)"):
        to_torch(t)
    assert tuple(to_torch(t.payload()).shape) == (2, 33)


# -- issue 35: no tensor to_torch hands out crashes when it is written ----------------

# Each case builds ``t`` in a fresh interpreter from the files of ``_write_files`` (in
# the folder argv[1]); the child then writes it in place three ways, and says whether
# ``t`` still lies in a mapping of one of those files (zero-copy) or in memory of its
# own (a copy). Before issue 35 the first case died of SIGSEGV at ``t.mul_(2)`` (a
# tensor over a read-only map, torch's "not writable" warning swallowed).
_DOORS = {
    # kiln_np's own map of a weight file: zero-copy, over a private (copy-on-write) map.
    "weight tensor": ("w = kiln_np.open_weights(d + '/w.safetensors'); t = to_torch(w['w'])", True),
    "gguf weight tensor": ("w = kiln_np.open_weights(d + '/w.gguf'); t = to_torch(w['w'])", True),
    "kiln directory weight tensor": (
        "w = kiln_np.open_weights(d + '/w.kiln'); t = to_torch(w['w'])",
        True,
    ),
    "zarr weight tensor": ("w = kiln_np.open_weights(d + '/w.zarr'); t = to_torch(w['w'])", True),
    "unpickled weight tensor": (
        "w = kiln_np.open_weights(d + '/w.safetensors')\n"
        "t = to_torch(pickle.loads(pickle.dumps(w['w'])))",
        True,
    ),
    "e2m1 weight tensor": (
        "w = kiln_np.open_weights(d + '/w.safetensors'); t = to_torch(w['fp4']).view(torch.uint8)",
        True,
    ),
    # Numbers computed from the bytes (issue 37): a new array, the tensor's own.
    "GGML weight tensor": ("w = kiln_np.open_weights(d + '/q.gguf'); t = to_torch(w['w'])", False),
    "logical weight tensor": (
        "w = kiln_np.open_weights(d + '/fp8.safetensors').logical(); t = to_torch(w['l.weight'])",
        False,
    ),
    "weight tensor as another dtype": (
        "w = kiln_np.open_weights(d + '/w.gguf'); t = to_torch(w['w'], dtype='float64')",
        False,
    ),
    # Read-only memory kiln_np does not own: copied.
    "weight tensor's payload": (
        "w = kiln_np.open_weights(d + '/w.safetensors'); t = to_torch(w['w'].payload())",
        False,
    ),
    "open_payload (a read-only numpy.memmap)": (
        "t = to_torch(kiln_np.open_payload(d + '/p.kiln', 'f32', (6,)))",
        False,
    ),
    "LazyPayload": ("t = to_torch(kiln_np.LazyPayload(d + '/p.kiln', 'f32', (6,)))", False),
    "read-only array over a read-only map": (
        "f = open(d + '/p.kiln', 'rb'); m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)\n"
        "a = np.frombuffer(m, '<f4'); assert not a.flags.writeable; t = to_torch(a)",
        False,
    ),
    "payload over a read-only map": (
        "f = open(d + '/p.kiln', 'rb'); m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)\n"
        "t = to_torch(kiln_np.Payload(kiln_np.Code.F32, memoryview(m), (6,)))",
        False,
    ),
    "to_numpy of a read-only map": (
        "f = open(d + '/p.kiln', 'rb'); m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)\n"
        "t = to_torch(kiln_np.to_numpy('f32', m, (6,)))",
        False,
    ),
}

_CHILD = """\
import mmap, os, pickle, sys
import numpy as np, torch, kiln_np
from kiln_np.torch import to_torch
d = sys.argv[1]
{build}
t.mul_(2); t[0] = 1; t.add_(1)
names = {{os.path.realpath(os.path.join(r, n)) for r, _, ns in os.walk(d) for n in ns}}
address = t.data_ptr()
mapped = False
with open('/proc/self/maps') as maps:
    for line in maps:
        span, *rest = line.split(maxsplit=5)
        start, stop = (int(x, 16) for x in span.split('-'))
        if start <= address < stop and len(rest) == 5 and rest[4].strip() in names:
            mapped = True
print(t.reshape(-1)[:6].tolist(), mapped)
"""


def _write_files(d: Path) -> dict[str, bytes]:
    """The files the cases read (six f32 values 0..5 each; an e2m1 tensor beside),
    and every file's bytes."""
    w = np.arange(6, dtype="<f4")
    fp4 = kiln_np.Payload(Code.E2M1, memoryview(bytes([0x21, 0x43])), (4,))
    kiln_np.save_weights(d / "w.safetensors", {"w": w, "fp4": fp4}, format="safetensors")
    kiln_np.save_weights(d / "w.gguf", {"w": w}, format="gguf")
    kiln_np.save_weights(d / "w.kiln", {"w": w}, format="kiln")
    kiln_np.save_weights(d / "w.zarr", {"w": w}, format="zarr")
    kiln_np.save_payload(d / "p.kiln", w)
    # Q8_0 of one block whose scale is 1.0 exactly (the largest magnitude 127): its
    # numbers are 0..5 first; an FP8 block-scaled weight of codes 0..5 (one a row, so
    # that t[0] = 1 writes one), scale 1.0.
    row = np.arange(32, dtype=np.float32)
    row[-1] = 127.0
    kiln_np.save_weights(d / "q.gguf", {"w": kiln_np.gguf.quantize(row, "Q8_0")}, format="gguf")
    fp8 = {
        "l.weight": w.reshape(6, 1).astype(ml_dtypes.float8_e4m3fn),
        "l.weight_scale_inv": np.ones((1, 1), np.float32),
    }
    kiln_np.save_weights(d / "fp8.safetensors", fp8, format="safetensors")
    return {str(p): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/maps")
@pytest.mark.parametrize("door", list(_DOORS))
def test_an_in_place_write_never_crashes_nor_changes_the_file(door: str, tmp_path: Path) -> None:
    files = _write_files(tmp_path)
    build, zero_copy = _DOORS[door]
    code = _CHILD.format(build=build)
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # Before issue 35: returncode -11 (SIGSEGV) for the weight tensors, no output.
    assert done.returncode == 0, f"{door}: exit {done.returncode}\n{done.stderr}"
    values, mapped = done.stdout.rsplit(" ", 1)
    if door == "e2m1 weight tensor":  # bytes 0x21 0x43: *2 = 0x42 0x86, [0] = 1, +1
        assert values == "[2, 135]"
    else:
        assert values == "[2.0, 3.0, 5.0, 7.0, 9.0, 11.0]"
    assert mapped.strip() == str(zero_copy), f"{door}: zero-copy {mapped.strip()}"
    assert {str(p): p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()} == files


@pytest.mark.parametrize(
    "view",
    [
        lambda a: a[::-1],
        lambda a: a.reshape(4, 6)[:, ::-2],
        lambda a: a.astype(ml_dtypes.bfloat16)[::-1],
        lambda a: a.reshape(2, 12)[::-1].astype(">f4"),
    ],
    ids=["reversed", "reversed-columns", "bf16-reversed", "big-endian-reversed"],
)
def test_to_torch_of_a_reversed_view_is_a_copy_of_its_values(view: Callable[[Any], Any]) -> None:
    # Issue 36 item 8: to_torch(a[::-1]) raised torch's ValueError about negative strides.
    a = view(np.arange(24, dtype=np.float32))
    t = to_torch(a)
    assert tuple(t.shape) == a.shape
    want = np.ascontiguousarray(a, a.dtype.newbyteorder("="))
    assert t.contiguous().view(torch.uint8).numpy().tobytes() == want.view(np.uint8).tobytes()


def _nested() -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # nested tensors are a prototype
        return torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])


def test_tensors_without_memory_numpy_can_read_are_type() -> None:
    # Issue 36 item 8: from_torch of a nested, fake or vmap-batched tensor raised
    # torch's RuntimeError; every door that takes tensors says TYPE.
    with pytest.raises(KilnError, match=r"^TYPE: expected a dense .* found a nested tensor"):
        from_torch(_nested())
    with pytest.raises(KilnError, match=r"tensor 'w': expected a dense .* nested tensor"):
        kiln_np.save_weights(Path("never"), {"w": _nested()}, format="safetensors")
    fake_tensor = pytest.importorskip("torch._subclasses.fake_tensor")
    with fake_tensor.FakeTensorMode():
        fake = torch.zeros(3)
    with pytest.raises(KilnError, match=r"memory numpy can read, found a FakeTensor"):
        from_torch(fake)
    seen: list[str] = []

    def inside(x: torch.Tensor) -> torch.Tensor:
        try:
            from_torch(x)
        except KilnError as exc:
            seen.append(exc.message)
        return x

    torch.vmap(inside)(torch.zeros(2, 3))
    assert len(seen) == 1
    assert seen[0].startswith("expected a tensor whose memory numpy can read")
