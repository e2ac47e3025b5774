"""kiln_np.zarr: data types and packbits through zarr-python, Weights as a group."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import kiln_np
from kiln_np import KilnError, Layout
from kiln_np._core.foreign import FOREIGN
from kiln_np.zarr import (
    ZARR_TYPES,
    PackBitsConfig,
    decode_packbits,
    encode_packbits,
    open_zarr,
    packbits_config,
    save_zarr,
)
from kiln_np.zarr._layout import chunk_rows
from kiln_np.zarr._values import fill_from_json, fill_to_json, scalar_bits, scalar_from_bits

zarr = pytest.importorskip("zarr", reason="needs zarr (the zarr extra), which is not installed")

RNG = np.random.default_rng(25)
PACKBITS = zarr.registry.get_codec_class("packbits")


def _random(dtype: Any, shape: tuple[int, ...], bits: int) -> np.ndarray:
    dtype = np.dtype(dtype)
    n = int(np.prod(shape))
    if bits < 8:
        out: np.ndarray = RNG.integers(0, 1 << bits, n, dtype=np.uint8).view(dtype)
        return out.reshape(shape)
    if dtype == np.bool_:
        flags: np.ndarray = RNG.integers(0, 2, n).astype(bool)
        return flags.reshape(shape)
    raw: np.ndarray = RNG.integers(0, 256, n * dtype.itemsize, dtype=np.uint8)
    values: np.ndarray = raw.view(dtype).reshape(shape)
    return values


def _every_tensor() -> dict[str, Any]:
    tensors: dict[str, Any] = {}
    for row in kiln_np.DTYPES:
        tensors[f"closed/{row.name}"] = _random(row.dtype, (3, 5), row.bits)
        tensors[f"odd/{row.name}"] = _random(row.dtype, (7,), row.bits)
    for f in FOREIGN:
        raw = _random(np.dtype(np.uint8), (4, f.layout.block_size), min(f.bits, 8))
        tensors[f"foreign/{f.name}"] = kiln_np.from_numpy(raw, code=f.code, layout=f.layout)
    blocks = RNG.integers(0, 256, (3, 144), dtype=np.uint8)
    tensors["opaque.q4_k"] = kiln_np.from_numpy(blocks, code=4200, layout=Layout("q4_k", 144))
    tensors["scalar"] = np.float32(-0.0)
    tensors["empty"] = np.zeros((0, 4), ml_dtypes.bfloat16)
    nan = np.array([0x7FC1, 0xFFFF, 0x7F81], np.uint16).view(ml_dtypes.bfloat16)
    tensors["nan_payloads"] = nan
    return tensors


def _payload_bytes(value: Any) -> tuple[int, bytes]:
    p = value if isinstance(value, kiln_np.Payload) else kiln_np.from_numpy(np.asarray(value))
    return int(p.code), bytes(p.data)


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    path = tmp_path_factory.mktemp("zarr") / "every.zarr"
    tensors = _every_tensor()
    kiln_np.save_weights(path, tensors, format="zarr", metadata={"step": 3})
    return path, tensors


def test_every_code_round_trips_byte_for_byte(group: tuple[Path, dict[str, Any]]) -> None:
    path, tensors = group
    with kiln_np.open_weights(path) as w:
        assert w.format == "zarr"
        assert list(w) == list(tensors)
        assert dict(w.metadata) == {"step": 3}
        for name, value in tensors.items():
            code, data = _payload_bytes(value)
            assert (int(w[name].code), bytes(w[name].payload().data)) == (code, data), name


def test_opaque_layout_is_in_the_attributes(group: tuple[Path, dict[str, Any]]) -> None:
    path, _ = group
    doc = json.loads((path / "opaque.q4_k" / "zarr.json").read_text())
    assert doc["data_type"] == "uint8"
    assert doc["shape"] == [3, 144]
    assert doc["attributes"]["kiln_np"] == {"code": 4200, "layout": "q4_k", "block_size": 144}


def test_a_group_reads_zero_copy(group: tuple[Path, dict[str, Any]]) -> None:
    path, _ = group
    with kiln_np.open_weights(path) as w:
        t = w["closed/bf16"]
        assert t.path is not None
        assert t.path.endswith(os.path.join("closed", "bf16", "c", "0", "0"))


def test_zarr_python_reads_every_array_without_importing_kiln_np(
    group: tuple[Path, dict[str, Any]],
) -> None:
    # The reading process's code never names the package: entry points bring it in.
    path, tensors = group
    code = (
        "import json, sys, zarr\n"
        "g = zarr.open_group(sys.argv[1], mode='r')\n"
        "out = {}\n"
        "for name in json.loads(sys.argv[2]):\n"
        "    a = g[name][...]\n"
        "    out[name] = [str(a.dtype), list(a.shape), a.tobytes().hex()]\n"
        "print(json.dumps(out))\n"
    )
    names = list(tensors)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", code, str(path), json.dumps(names)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=path.parent,
    )
    found = json.loads(done.stdout)
    for name, value in tensors.items():
        dtype, _shape, hexed = found[name]
        if isinstance(value, kiln_np.Payload):  # foreign and opaque: the blocks' bytes
            assert bytes.fromhex(hexed) == bytes(value.data), name
        else:  # an ml_dtypes 4-bit array holds one element per byte, as the array here
            assert (dtype, bytes.fromhex(hexed)) == (value.dtype.name, value.tobytes()), name


def test_zarr_python_writes_what_kiln_np_reads(tmp_path: Path) -> None:
    g = zarr.open_group(tmp_path / "z.zarr", mode="w")
    values = np.array([1, -2, 3, -8, 7], ml_dtypes.int4)
    g.create_array("q", shape=(5,), dtype=ml_dtypes.int4, serializer=PACKBITS(), compressors=None)[
        :
    ] = values
    b = g.create_array("b", shape=(4,), dtype=ml_dtypes.bfloat16, compressors=None)
    b[:] = np.array([1.0, -0.0, 2.5, 3.0], ml_dtypes.bfloat16)
    z = g.create_array("zeros", shape=(6,), dtype=np.float32)  # compressed, chunk not written
    z[:] = 0
    with kiln_np.open_weights(tmp_path / "z.zarr") as w:
        assert sorted(w) == ["b", "q", "zeros"]
        assert w["q"].numpy().astype(int).tolist() == [1, -2, 3, -8, 7]
        assert w["q"].path is not None  # the packed stream is the payload: mapped
        assert w["b"].numpy().view(np.uint16).tolist() == [0x3F80, 0x8000, 0x4020, 0x4040]
        assert w["zeros"].numpy().tolist() == [0.0] * 6


def test_large_tensors_are_one_shard_of_row_chunks(tmp_path: Path) -> None:
    big = _random(ml_dtypes.bfloat16, (4096, 2304), 16)
    packed = _random(ml_dtypes.uint4, (8192, 4100), 4)
    save_zarr(tmp_path / "g", {"big": big, "packed": packed})
    doc = json.loads((tmp_path / "g" / "big" / "zarr.json").read_text())
    shard = doc["codecs"][0]
    assert shard["name"] == "sharding_indexed"
    assert shard["configuration"]["chunk_shape"] == [2048, 2304]
    with open_zarr(tmp_path / "g") as w:
        assert w["big"].path is not None
        assert bytes(w["big"].payload().data) == big.tobytes()
        assert bytes(w["packed"].payload().data) == bytes(kiln_np.from_numpy(packed).data)
    a = zarr.open_array(tmp_path / "g" / "packed", mode="r")
    assert (
        a[4000:4002, 7:9].view(np.uint8).tolist() == packed[4000:4002, 7:9].view(np.uint8).tolist()
    )


def test_chunk_rows() -> None:
    assert chunk_rows(kiln_np.payload_info("bf16", (16, 1024))) is None  # small: one chunk
    assert chunk_rows(kiln_np.payload_info("u8", (16_777_259,))) is None  # prime: no divisor
    assert chunk_rows(kiln_np.payload_info("u4", (3, 11_184_811 * 2))) == 1


# -- packbits -----------------------------------------------------------------------


PACKED = [t for t in ZARR_TYPES if t.code is not None or t.plugin]


@pytest.mark.parametrize("row", PACKED, ids=lambda r: r.name)
@pytest.mark.parametrize("padding", ["none", "first_byte", "end_byte"])
def test_packbits_round_trips_every_type(row: Any, padding: str) -> None:
    values = _random(row.dtype, (2, 9), row.bits if row.bits < 8 else 8)
    config = packbits_config({"padding_encoding": padding})
    packed = encode_packbits(values, config)
    back = decode_packbits(packed, row.dtype, values.size, config)
    assert back.view(np.uint8).tobytes() == values.view(np.uint8).tobytes()


def test_packbits_golden_bytes() -> None:
    u4 = np.array([1, 2, 3], ml_dtypes.uint4)
    assert encode_packbits(u4, PackBitsConfig()).tobytes().hex() == "2103"  # Kiln's bytes
    assert encode_packbits(u4, PackBitsConfig("start_byte")).tobytes().hex() == "042103"
    assert encode_packbits(u4, PackBitsConfig("end_byte")).tobytes().hex() == "210304"
    i2 = np.array([0, 1, -2, -1, 1], ml_dtypes.int2)
    assert encode_packbits(i2, PackBitsConfig()).tobytes().hex() == "e401"
    f6 = np.array([1, 2, 3, 63], np.uint8).view(ml_dtypes.float6_e2m3fn)
    assert encode_packbits(f6, PackBitsConfig()).tobytes().hex() == "8130fc"
    bools = np.array([1, 0, 1, 1, 0, 0, 0, 0, 1], bool)
    assert encode_packbits(bools, PackBitsConfig()).tobytes().hex() == "0d01"
    # bits 1-2 of each uint8: 0b110 -> 3, 0b010 -> 1, 0b101 -> 2
    three = np.array([6, 2, 5], np.uint8)
    ranged = packbits_config({"start_bit": 1, "end_bit": 2})
    assert encode_packbits(three, ranged).tobytes().hex() == "27"
    assert decode_packbits(np.array([0x27], np.uint8), np.dtype(np.uint8), 3, ranged).tolist() == [
        6,
        2,
        4,
    ]


def test_packbits_sign_extends_a_bit_range() -> None:
    config = packbits_config({"first_bit": 0, "last_bit": 2})  # int4 in 3 bits
    values = np.array([-4, 3, -1, 0], ml_dtypes.int4)
    back = decode_packbits(encode_packbits(values, config), values.dtype, 4, config)
    assert back.astype(int).tolist() == [-4, 3, -1, 0]


def test_packbits_reads_both_spellings() -> None:
    assert packbits_config({"first_bit": 1, "last_bit": 3}) == packbits_config(
        {"start_bit": 1, "end_bit": 3}
    )
    assert packbits_config({"padding_encoding": "first_byte"}).padding == "start_byte"
    assert packbits_config({"padding_encoding": "last_byte"}).padding == "end_byte"
    with pytest.raises(KilnError, match="found both"):
        packbits_config({"first_bit": 1, "end_bit": 3})
    with pytest.raises(KilnError, match="padding_encoding among"):
        packbits_config({"padding_encoding": "middle"})
    with pytest.raises(KilnError, match="keys among"):
        packbits_config({"bits": 4})
    with pytest.raises(KilnError, match=">= first_bit"):
        packbits_config({"first_bit": 3, "last_bit": 1})
    with pytest.raises(KilnError, match="integer >= 0"):
        packbits_config({"first_bit": True})


def test_packbits_decoding_is_strict() -> None:
    u4 = np.dtype(ml_dtypes.uint4)
    with pytest.raises(KilnError, match=r"expected ceil\(3 x 4 / 8\) = 2 bytes, found 1") as e:
        decode_packbits(np.array([0x21], np.uint8), u4, 3, PackBitsConfig())
    assert e.value.kind == "LENGTH"
    with pytest.raises(KilnError, match="padding bits of the last byte to be 0, found byte 0x13"):
        decode_packbits(np.array([0x21, 0x13], np.uint8), u4, 3, PackBitsConfig())
    with pytest.raises(KilnError, match=r"padding byte .* to be 4 \(padding bits\), found 0x03"):
        decode_packbits(np.array([3, 0x21, 0x03], np.uint8), u4, 3, PackBitsConfig("start_byte"))
    with pytest.raises(KilnError, match="bit range inside it"):
        encode_packbits(np.zeros(2, ml_dtypes.uint4), PackBitsConfig(last_bit=4))
    with pytest.raises(KilnError, match="storage byte to hold 0 or 1, found 0x02"):
        encode_packbits(np.array([0, 2], np.uint8).view(bool), PackBitsConfig())
    with pytest.raises(KilnError, match="expected a numeric data type"):
        encode_packbits(np.array(["a"]), PackBitsConfig())


def test_a_codec_error_surfaces_through_zarr(tmp_path: Path) -> None:
    a = zarr.create_array(
        tmp_path / "a", shape=(3,), dtype=ml_dtypes.uint4, serializer=PACKBITS(), compressors=None
    )
    a[:] = np.array([1, 2, 3], ml_dtypes.uint4)
    (tmp_path / "a" / "c" / "0").write_bytes(b"\x21")
    with pytest.raises(KilnError, match="found 1"):
        a[...]


# -- fill values ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "row", [t for t in ZARR_TYPES if t.plugin and t.kind == "f"], ids=lambda r: r.name
)
def test_nan_fill_values_keep_their_bits(row: Any) -> None:
    if row.nan is None:
        with pytest.raises(KilnError, match="fill value"):
            fill_from_json(row, "NaN")
        return
    assert scalar_bits(row, fill_from_json(row, "NaN")) == row.nan
    other = row.nan ^ (1 << (row.bits - 1))  # the sign flipped: another NaN where there is one
    if not np.isnan(float(scalar_from_bits(row, other))):
        other = row.nan
    written = fill_to_json(row, scalar_from_bits(row, other))
    assert isinstance(written, str)
    assert int(written, 16) == other
    assert scalar_bits(row, fill_from_json(row, written)) == other


def test_fill_values_through_zarr(tmp_path: Path) -> None:
    nan = scalar_from_bits(kiln_np.zarr.ZARR_TYPES_BY_NAME["bfloat16"], 0x7FC5)
    zarr.create_array(tmp_path / "a", shape=(2,), dtype=ml_dtypes.bfloat16, fill_value=nan)
    doc = json.loads((tmp_path / "a" / "zarr.json").read_text())
    assert doc["fill_value"] == "0x7fc5"
    assert zarr.open_array(tmp_path / "a")[...].view(np.uint16).tolist() == [0x7FC5, 0x7FC5]


def test_fill_value_errors() -> None:
    t = kiln_np.zarr.ZARR_TYPES_BY_NAME
    with pytest.raises(KilnError, match=r"an integer in -8..7"):
        fill_from_json(t["int4"], 8)
    with pytest.raises(KilnError, match="hex bits below 0x10"):
        fill_from_json(t["float4_e2m1fn"], "0x10")
    with pytest.raises(KilnError, match="Infinity"):
        fill_from_json(t["float8_e4m3fn"], "Infinity")
    with pytest.raises(KilnError, match="true or false"):
        fill_from_json(t["bool"], 1)
    assert fill_to_json(t["bfloat16"], fill_from_json(t["bfloat16"], "-Infinity")) == "-Infinity"


# -- hostile groups ------------------------------------------------------------------


def _edited(tmp_path: Path, edit: Any, tensor: Any = None) -> Path:
    path = tmp_path / "g.zarr"
    save_zarr(
        path, {"w": np.arange(6, dtype=np.float32).reshape(2, 3) if tensor is None else tensor}
    )
    doc_path = path / "w" / "zarr.json"
    doc = json.loads(doc_path.read_text())
    edit(doc, path)
    doc_path.write_text(json.dumps(doc))
    return path


def test_a_document_that_lies_about_the_shape_is_length(tmp_path: Path) -> None:
    path = _edited(
        tmp_path,
        lambda d, p: d.update(
            shape=[2, 4], chunk_grid={"name": "regular", "configuration": {"chunk_shape": [2, 4]}}
        ),
    )
    with pytest.raises(KilnError, match="expected 8 x 4 = 32 bytes, found 24") as e:
        open_zarr(path)
    assert e.value.kind == "LENGTH"


def test_a_document_that_lies_about_the_type_is_length(tmp_path: Path) -> None:
    path = _edited(tmp_path, lambda d, p: d.update(data_type="float64", attributes={}))
    with pytest.raises(KilnError, match="found 24"):
        open_zarr(path)


def test_an_absurd_shape_allocates_nothing(tmp_path: Path) -> None:
    huge = [2**40, 2**40]
    path = _edited(
        tmp_path,
        lambda d, p: d.update(
            shape=huge, chunk_grid={"name": "regular", "configuration": {"chunk_shape": huge}}
        ),
    )
    with pytest.raises(KilnError) as e:
        open_zarr(path)
    assert e.value.kind in {"SHAPE", "LENGTH"}


def test_a_chunk_file_of_the_wrong_size(tmp_path: Path) -> None:
    path = _edited(tmp_path, lambda d, p: (p / "w" / "c" / "0" / "0").write_bytes(bytes(23)))
    with pytest.raises(KilnError, match="short by 1"):
        open_zarr(path)


def test_a_huge_shape_over_few_bytes_is_refused_before_zarr_reads(tmp_path: Path) -> None:
    def edit(d: dict[str, Any], p: Path) -> None:
        d.update(
            shape=[2**14, 2**14],  # 1 GiB: under MAX_FALLBACK_BYTES, over a few bytes
            chunk_grid={"name": "regular", "configuration": {"chunk_shape": [1, 1]}},
        )

    with pytest.raises(KilnError, match="decoded bytes per stored byte") as e:
        open_zarr(_edited(tmp_path, edit))
    assert e.value.kind == "TYPE"


def test_malformed_documents_are_type(tmp_path: Path) -> None:
    cases = [
        lambda d, p: d.update(data_type="float128"),
        lambda d, p: d.update(shape="x"),
        lambda d, p: d.update(codecs=[]),
        lambda d, p: d.update(node_type="group"),
        lambda d, p: d.update(data_type="float8_e4m3"),
    ]
    for i, edit in enumerate(cases):
        (tmp_path / str(i)).mkdir()
        with pytest.raises(KilnError) as e:
            open_zarr(_edited(tmp_path / str(i), edit))
        assert e.value.kind == "TYPE"


def test_a_shard_index_that_lies(tmp_path: Path) -> None:
    path = tmp_path / "g"
    save_zarr(path, {"big": np.zeros((4096, 2304), ml_dtypes.bfloat16)})
    chunk = path / "big" / "c" / "0" / "0"
    data = bytearray(chunk.read_bytes())
    data[-16] ^= 1  # the last entry's offset
    chunk.write_bytes(bytes(data))
    with pytest.raises(KilnError, match="shard index entry 1"):
        open_zarr(path)


def test_names_that_are_no_node_paths(tmp_path: Path) -> None:
    for name in ["", "a//b", "..", "__x", "a/."]:
        with pytest.raises(KilnError, match="Zarr node path"):
            save_zarr(tmp_path / "g", {name: np.zeros(1)})
    with pytest.raises(KilnError, match="no tensor named as its group"):
        save_zarr(tmp_path / "g", {"a": np.zeros(1), "a/b": np.zeros(1)})
    assert not (tmp_path / "g").exists()


def test_save_paths_are_what_save_writes(tmp_path: Path) -> None:
    tensors = {"a/b": np.zeros(3, np.float32), "c": np.zeros((0, 2), np.int8), "d": np.int16(1)}
    listed = kiln_np.formats.save_weights_paths(tmp_path / "g", tensors, format="zarr")
    kiln_np.save_weights(tmp_path / "g", tensors, format="zarr")
    written = sorted(str(p) for p in (tmp_path / "g").rglob("*") if p.is_file())
    assert sorted(listed) == written


def _type_rows() -> list[str]:
    rows = []
    for t in ZARR_TYPES:
        if t.code is None:
            kiln = "none"
        elif t.layout is None:
            kiln = f"{t.code} ({kiln_np.dtype_info(t.code).name})"
        else:
            kiln = f"0x{t.code:04x} `{t.layout.name}`"
        nan = f"`0x{t.nan:0{2 * t.dtype.itemsize}x}`" if t.nan is not None else "-"
        spec = t.dtype_spec.removeprefix("ml_dtypes.")
        source = "kiln_np" if t.plugin else "zarr"
        inf = "yes" if t.infinity else "no"
        rows.append(f"| `{t.name}` | {source} | `{spec}` | {t.bits} | {kiln} | {nan} | {inf} |")
    return rows


def test_the_docs_table_is_the_data() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "interop.md").read_text()
    table = doc.split("<!-- zarr-types")[1].split("<!-- /zarr-types -->")[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert rows[1:] == _type_rows()  # after the header


def test_every_plugin_type_has_its_entry_point() -> None:
    from importlib.metadata import entry_points

    from kiln_np.zarr import DATA_TYPES

    ours = [e for e in entry_points(group="zarr.data_type") if e.value.startswith("kiln_np.")]
    assert {e.name: e.load() for e in ours} == DATA_TYPES
    assert {e.value for e in entry_points(group="zarr.codecs", name="packbits")} == {
        "kiln_np.zarr._plugin:PackBits"
    }


def test_kiln_np_never_imports_zarr_for_its_own_groups(group: tuple[Path, dict[str, Any]]) -> None:
    path, _ = group
    code = (
        "import sys, kiln_np, kiln_np.zarr, numpy as np\n"
        "assert not {'zarr', 'numcodecs'} & set(sys.modules)\n"
        "kiln_np.zarr.save_zarr(sys.argv[2], {'w': np.zeros(3, np.float32)})\n"
        "with kiln_np.open_weights(sys.argv[1]) as w:\n"
        "    [bytes(t.payload().data) for t in w.values()]\n"
        "print(sorted({'zarr', 'numcodecs', 'google_crc32c'} & set(sys.modules)))\n"
    )
    out = path.parent / "fresh.zarr"
    done = subprocess.run(
        [sys.executable, "-c", code, str(path), str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == ["[]"]
