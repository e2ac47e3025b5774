"""Hostile input at the entry points added after the core: the allow-list oracle.

``kiln_np.onnx``, the file functions (``open_payload``, ``LazyPayload``,
``save_payload``) and the explore functions (``describe``, ``bit_histogram``,
``bit_values``).  Each call returns a result consistent with ``byte_length``
(checked by a round trip) or raises ``KilnError``.  The only other exceptions
allowed, each where its entry point documents it:

- ``TypeError`` for a ``buf``/``raw_data``/``data`` without the buffer protocol;
- ``OSError`` where a file is opened, mapped or written (a missing external-data
  file, a write past what the file system allows);
- ``LazyPayload[key]`` may raise ``IndexError``, ``TypeError`` or ``ValueError``
  (a zero slice step) for a key that numpy also refuses on the decoded array
  (a key with two faults may be refused for either), and ``TypeError`` for a
  leading-axis key that is not an int or a slice (lists, arrays, ``None``: its
  documented restriction).

Anything else escaping is a bug.  ``fuzz/run.py hypothesis`` runs these same
``*_oracle`` properties for longer.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import io
import operator
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np
import pytest
from _helpers import bits, external_tensor, needs, optional
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import (
    ONNX_BITS,
    ONNX_DTYPES,
    arrays,
    buffers,
    codes,
    data_types,
    dtype_likes,
    expect_allowed,
    index_keys,
    layouts,
    mostly,
    offsets,
    onnx_field_count,
    onnx_fields,
    onnx_raw,
    shapes,
    small_codes,
    small_dims,
)

import kiln_np
from kiln_np import KilnError, Layout, LazyPayload
from kiln_np import onnx as ko
from kiln_np._core.foreign import FOREIGN_BY_CODE, foreign_for_dtype

if TYPE_CHECKING:
    import onnx
else:
    onnx = optional("onnx")

FILE_EXAMPLES = max(1, settings().max_examples // 2)
"""File properties create and map a file per example: half the profile's examples
(100 in the ``ci`` profile; ``fuzz/run.py`` loads its profile before importing)."""


# ---------------------------------------------------------------- onnx: bytes


@given(case=onnx_raw())
def test_decode_raw_oracle(case: tuple[Any, Any, Any]) -> None:
    data_type, raw, dims = case
    try:
        arr = ko.decode_raw(data_type, raw, dims)
    except Exception as exc:
        expect_allowed(exc, raw)
        return
    row = ko.data_type_info(data_type)
    assert arr.shape == tuple(int(d) for d in dims)
    assert arr.dtype == row.dtype
    assert memoryview(raw).nbytes == row.byte_length(arr.size)
    assert bytes(ko.encode_raw(arr, data_type)) == memoryview(raw).tobytes()


@given(case=onnx_fields())
def test_decode_field_oracle(case: tuple[Any, Any, Any]) -> None:
    data_type, values, dims = case
    try:
        arr = ko.decode_field(data_type, values, dims)
    except Exception as exc:
        expect_allowed(exc)
        return
    row = ko.data_type_info(data_type)
    assert arr.shape == tuple(int(d) for d in dims)
    assert arr.dtype == row.dtype
    if row.bits is not None:  # the same bits as the same tensor in raw_data
        again = ko.decode_raw(data_type, ko.encode_raw(arr, data_type), arr.shape)
        assert bits(again) == bits(arr)


@given(arr=arrays(ONNX_DTYPES), data_type=st.one_of(st.none(), data_types))
def test_encode_raw_oracle(arr: Any, data_type: Any) -> None:
    before = bits(arr) if isinstance(arr, np.ndarray) else None
    try:
        raw = ko.encode_raw(arr, data_type)
    except Exception as exc:
        expect_allowed(exc)
    else:
        a = np.asarray(arr)
        row = ko.data_type_info(ko.data_type_for_dtype(a.dtype))
        assert data_type is None or int(data_type) == row.data_type
        assert raw.readonly
        assert raw.nbytes == row.byte_length(a.size)
        assert bits(ko.decode_raw(row.data_type, raw, a.shape)) == bits(a)
    if before is not None:  # the input is never written
        assert bits(arr) == before


@given(data_type=data_types)
def test_data_type_info_oracle(data_type: Any) -> None:
    try:
        row = ko.data_type_info(data_type)
    except Exception as exc:
        expect_allowed(exc)
        assert not (type(data_type) is int and 1 <= data_type <= 28)
        return
    assert row.data_type == int(data_type)
    assert row.bits == ONNX_BITS[int(data_type)]


@given(dtype=dtype_likes)
def test_data_type_for_dtype_oracle(dtype: Any) -> None:
    try:
        row = ko.data_type_info(ko.data_type_for_dtype(dtype))
    except Exception as exc:
        expect_allowed(exc)
        return
    d = np.dtype(dtype)
    if row.bits is None:
        assert d.kind in "OU"
    else:
        assert row.dtype == d.newbyteorder("=")


@given(case=onnx_raw())
def test_to_kiln_oracle(case: tuple[Any, Any, Any]) -> None:
    data_type, raw, dims = case
    try:
        p = ko.to_kiln(data_type, raw, dims)
    except Exception as exc:
        expect_allowed(exc, raw)
        return
    assert p.byte_length == kiln_np.byte_length(p.code, p.shape, p.layout)
    back_type, back_raw, back_dims = ko.from_kiln(*p)
    assert back_type == int(data_type)
    assert back_dims == tuple(int(d) for d in dims)
    assert bytes(back_raw) == memoryview(raw).tobytes()


_ONNX_LAYOUTS = [r.layout for r in ko.DATA_TYPES if r.layout is not None]
_ONNX_CODES = [r.kiln_code for r in ko.DATA_TYPES if r.kiln_code is not None]


@st.composite
def kiln_payloads(draw: st.DrawFn) -> tuple[Any, Any, Any, Any]:
    """``(code, data, shape, layout)``: mostly an ONNX type's Kiln code with its
    layout and the right number of random bytes (2-/6-bit blocks of 0-0x3f)."""
    row = draw(st.sampled_from([r for r in ko.DATA_TYPES if r.kiln_code is not None]))
    code = draw(mostly(st.just(row.kiln_code), st.one_of(st.sampled_from(_ONNX_CODES), codes)))
    layout = draw(mostly(st.just(row.layout), st.one_of(st.sampled_from(_ONNX_LAYOUTS), layouts)))
    shape = draw(mostly(small_dims, shapes))
    try:
        n = kiln_np.byte_length(code, shape, layout) + draw(st.sampled_from([0, 0, 0, 0, 1]))
    except KilnError:
        n = draw(st.integers(0, 8))
    small = row.bits in (2, 6) and draw(st.booleans())
    raw = draw(st.binary(min_size=n, max_size=n)) if n <= 256 else b""
    data = bytes(b & 0x3F for b in raw) if small else raw
    return code, draw(mostly(st.just(data), buffers())), shape, layout


@given(case=kiln_payloads())
def test_from_kiln_oracle(case: tuple[Any, Any, Any, Any]) -> None:
    code, data, shape, layout = case
    try:
        data_type, raw, dims = ko.from_kiln(code, data, shape, layout)
    except Exception as exc:
        expect_allowed(exc, data)
        return
    assert raw.readonly
    p = ko.to_kiln(data_type, raw, dims)
    assert (int(p.code), p.shape, p.layout) == (int(code), dims, layout)
    assert bytes(p.data) == memoryview(data).tobytes()


# ---------------------------------------------------------------- onnx: protos

_EXTERNAL_BYTES = bytes(range(256)) * 2


@functools.cache
def _external_base() -> str:
    """A directory for external data: files, a subdirectory, a FIFO and symlinks
    (one leading out of it, one dangling), inside a private temporary root."""
    root = Path(tempfile.mkdtemp(prefix="kiln-fuzz-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    base = root / "base"
    (base / "sub").mkdir(parents=True)
    (base / "data.bin").write_bytes(_EXTERNAL_BYTES)
    (base / "sub" / "d.bin").write_bytes(_EXTERNAL_BYTES[:16])
    (base / "empty.bin").write_bytes(b"")
    (root / "outside.bin").write_bytes(_EXTERNAL_BYTES)
    with contextlib.suppress(OSError, NotImplementedError):
        (base / "out").symlink_to(root / "outside.bin")
        (base / "in").symlink_to(base / "data.bin")
        (base / "dangling").symlink_to(base / "missing.bin")
        os.mkfifo(base / "fifo")
    return str(base)


_NOT_UTF8 = "\u07ff\u07ff"
"""A marker :func:`_not_utf8` turns into bytes that are not UTF-8, as a hostile
file would hold them (protobuf then hands back ``bytes``).  Its UTF-8 bytes
(df bf df bf) and their replacement (ff fe ff fe) all have the high bit set,
so where they happen to occur inside a varint its bytes stay continuation
bytes and the message still parses."""

LOCATIONS = ["data.bin", "sub/d.bin", "./data.bin", "sub\\d.bin", "empty.bin", "in", "out",
             "dangling", "fifo", "sub", ".", "", "missing.bin", "../outside.bin",
             "sub/../data.bin", "/etc/passwd", "\\data.bin", "C:data.bin", "data.bin\x00",
             "a" * 300, "data.bin/", "\u00e9.bin", _NOT_UTF8, f"sub/{_NOT_UTF8}"]  # fmt: skip
NUMBERS = ["0", "1", "4", "16", "512", "513", "", "-1", "1e3", " 1", "\u0663",
           "99999999999999999999999", "9223372036854775807", "9223372036854775808",
           "0" * 30 + "4", "9" * 5000, _NOT_UTF8]  # fmt: skip
_INT_FIELD = {"int32_data": (-(2**31), 2**31 - 1), "int64_data": (-(2**63), 2**63 - 1),
              "uint64_data": (0, 2**64 - 1)}  # fmt: skip


def _field_items(draw: st.DrawFn, field: str, n: int) -> list[Any]:
    if field in _INT_FIELD:
        lo, hi = _INT_FIELD[field]
        # The field's own range: protobuf refuses anything else at construction.
        small = st.one_of(st.integers(0, 3), st.integers(max(-1, lo), 256), st.integers(0, 0x3F))
        return draw(st.lists(st.one_of(small, st.integers(lo, hi)), min_size=n, max_size=n))
    if field == "float_data":
        return draw(st.lists(st.floats(width=32), min_size=n, max_size=n))
    if field == "double_data":
        return draw(st.lists(st.floats(), min_size=n, max_size=n))
    return draw(st.lists(st.binary(max_size=4), min_size=n, max_size=n))


@st.composite
def tensor_protos(draw: st.DrawFn) -> Any:
    """TensorProtos with wrong data types, raw_data of the right length or one off,
    typed fields with out-of-range values, values in several places, and
    external data with hostile locations, offsets and lengths."""
    t = onnx.TensorProto()
    t.name = draw(st.sampled_from(["", "w", "\u00e9", _NOT_UTF8]))
    t.data_type = draw(st.one_of(st.integers(1, 28), st.integers(0, 30), st.just(2**31 - 1)))
    big = st.sampled_from([-1, 2**62, 2**63 - 1, -(2**63)])
    t.dims.extend(draw(st.lists(st.one_of(st.integers(0, 4), big), max_size=3)))
    row = _ROWS.get(t.data_type)
    count = functools.reduce(operator.mul, t.dims, 1)
    raw_bytes = row.byte_length(count) if row and row.bits and 0 <= count <= 64 else None
    fits = row is not None and 0 <= count <= 64
    delta = draw(st.sampled_from([0, 0, 0, -1, 1]))
    where = draw(st.sampled_from(["raw", "field", "field", "external", "other field", "none"]))
    places = {where} | set(
        draw(st.lists(st.sampled_from(["raw", "external", "other"]), max_size=1))
    )
    if "raw" in places:
        n = 3 if raw_bytes is None else raw_bytes
        t.raw_data = draw(st.binary(min_size=max(n + delta, 0), max_size=max(n + delta, 0)))
    if places & {"field", "other field", "other"}:
        field = row.field if row is not None and "field" in places else None
        field = field or draw(st.sampled_from(_TYPED_FIELDS))
        n = onnx_field_count(t.data_type, count) if fits else 2
        getattr(t, field).extend(_field_items(draw, field, max(n + delta, 0)))
    if "external" in places:
        t.data_location = onnx.TensorProto.EXTERNAL
        entries = {"location": draw(st.sampled_from(LOCATIONS))}
        for key in draw(st.lists(st.sampled_from(["offset", "length", "checksum"]), max_size=3)):
            entries[key] = draw(st.sampled_from(NUMBERS))
        if raw_bytes is not None and draw(st.booleans()):
            entries["length"] = str(raw_bytes + delta)
        for key, value in entries.items():
            entry = t.external_data.add()
            entry.key = key
            entry.value = value
    if draw(st.integers(0, 20)) == 0:
        t.segment.begin = 0
    return _not_utf8(t)


_ROWS = {int(r.data_type): r for r in ko.DATA_TYPES}
_TYPED_FIELDS = sorted({r.field for r in ko.DATA_TYPES})


def _not_utf8(tensor: Any) -> Any:
    """``tensor`` with every :data:`_NOT_UTF8` marker (a name, a location, an
    external-data number) replaced by bytes that are not UTF-8."""
    wire = tensor.SerializeToString()
    return type(tensor).FromString(wire.replace(_NOT_UTF8.encode(), b"\xff\xfe\xff\xfe"))


base_dirs: st.SearchStrategy[Any] = st.one_of(
    st.just("base"),
    st.sampled_from([None, "missing", "file", "nul", 5, b"bytes"]),
)


def _base_dir(choice: Any) -> Any:
    base = _external_base()
    named = {
        "base": base,
        "missing": os.path.join(base, "no-such-dir"),
        "file": os.path.join(base, "data.bin"),
        "nul": base + "\x00",
    }
    return named.get(choice, choice) if isinstance(choice, str) else choice


@settings(max_examples=FILE_EXAMPLES)
@given(tensor=tensor_protos(), base=base_dirs)
def test_onnx_to_numpy_oracle(tensor: Any, base: Any) -> None:
    try:
        arr = ko.to_numpy(tensor, _base_dir(base))
    except Exception as exc:
        expect_allowed(exc, os_error=True)
        return
    row = ko.data_type_info(tensor.data_type)
    assert arr.shape == tuple(tensor.dims)
    assert arr.dtype == row.dtype
    assert isinstance(tensor.name, str)
    assert bits(ko.to_numpy(ko.from_numpy(arr))) == bits(arr)


@settings(max_examples=FILE_EXAMPLES)
@given(tensor=tensor_protos(), base=base_dirs)
def test_model_to_kiln_oracle(tensor: Any, base: Any) -> None:
    graph = onnx.helper.make_graph([], "g", [], [], initializer=[tensor])
    model = onnx.helper.make_model(graph)
    try:
        [(name, p)] = list(ko.model_to_kiln(model, _base_dir(base)))
    except Exception as exc:
        expect_allowed(exc, os_error=True)
        return
    assert name == tensor.name
    assert isinstance(name, str)
    assert p.byte_length == kiln_np.byte_length(p.code, p.shape, p.layout)
    assert p.shape == tuple(tensor.dims)


@needs("onnx")
@settings(max_examples=FILE_EXAMPLES)
@given(
    content=st.binary(max_size=64),
    model=st.sampled_from(["file", None, 3, b"x", "dir"]),
    suffix=st.sampled_from([".onnx", ".json", ".textproto", ".onnxtxt", ".txt", ""]),
)
def test_model_path_oracle(content: bytes, model: Any, suffix: str) -> None:
    # onnx picks a text parser by extension: kiln_np reads every file as binary.
    path = os.path.join(_external_base(), "model" + suffix)
    Path(path).write_bytes(content)
    arg = {"file": path, "dir": _external_base()}.get(model, model)
    try:
        payloads = list(ko.model_to_kiln(arg))
    except Exception as exc:
        expect_allowed(exc, os_error=True)
        return
    for _, p in payloads:
        assert p.byte_length == kiln_np.byte_length(p.code, p.shape, p.layout)


names: st.SearchStrategy[Any] = st.one_of(
    st.none(), st.text(max_size=4), st.sampled_from([5, b"w", b"\xff", "\ud800", ["w"]])
)


@needs("onnx")
@given(
    arr=st.one_of(
        arrays(ONNX_DTYPES),
        st.lists(st.one_of(st.text(max_size=3), st.binary(max_size=3)), max_size=3).map(
            lambda v: np.array(v, dtype=object)
        ),
        st.sampled_from([np.array(["\ud800"]), np.array([1, "a"], object), np.array(["ab"])]),
    ),
    name=names,
)
def test_onnx_from_numpy_oracle(arr: Any, name: Any) -> None:
    try:
        t = ko.from_numpy(arr, name)
    except Exception as exc:
        expect_allowed(exc)
        return
    assert t.name == (name or "")
    a = np.asarray(arr)
    assert tuple(t.dims) == a.shape
    back = ko.to_numpy(t)
    if a.dtype.kind in "OU":
        items = [v.decode() if isinstance(v, bytes) else v for v in a.reshape(-1).tolist()]
        assert back.reshape(-1).tolist() == items
    else:
        assert bits(back) == bits(a)


# ---------------------------------------------------------------- files


@functools.cache
def _file_dir() -> str:
    root = tempfile.mkdtemp(prefix="kiln-fuzz-files-")
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


@contextlib.contextmanager
def _temp_file(content: bytes) -> Iterator[str]:
    fd, path = tempfile.mkstemp(dir=_file_dir(), suffix=".bin")
    with os.fdopen(fd, "wb") as f:
        f.write(content)
    try:
        yield path
    finally:
        os.unlink(path)


def _unchecked(code: int, layout: Any, payload: bytes, dims: tuple[int, ...]) -> np.ndarray:
    """The payload decoded without any content check: what a successful read must
    return, bit for bit (a bad bool byte stays as it is)."""
    raw = np.frombuffer(payload, np.uint8)
    if isinstance(layout, Layout):
        return raw.reshape(*dims, layout.block_size)
    row = kiln_np.dtype_info(code)
    if row.packed:
        nibbles = np.stack([raw & 0x0F, raw >> 4], axis=-1).reshape(-1)
        return nibbles[: int(np.prod(dims, dtype=np.int64))].view(row.dtype).reshape(dims)
    return raw.view(row.dtype.newbyteorder("<")).reshape(dims)


@st.composite
def payload_files(draw: st.DrawFn) -> tuple[bytes, Any, Any, Any, Any]:
    """``(content, code, shape, offset, layout)``: mostly a file that holds the
    payload at ``offset`` (sometimes one byte short, or with bytes after it)."""
    code = draw(small_codes)
    opaque = type(code) is int and 4096 <= code <= 32767
    layout = draw(mostly(st.just(Layout("fuzz", 3) if opaque else None), layouts))
    shape = draw(mostly(small_dims, shapes))
    offset = draw(offsets)
    try:
        n = kiln_np.byte_length(code, shape, layout) + operator.index(offset)
    except (KilnError, TypeError):
        n = draw(st.integers(0, 8))
    n += draw(st.sampled_from([0, 0, 0, 1, 3, -1]))
    content = draw(st.binary(min_size=max(n, 0), max_size=max(n, 0))) if n <= 512 else b""
    return content, code, shape, offset, layout


@functools.cache
def _fifo() -> str:
    """A FIFO nobody writes to: opening it for reading would block forever."""
    path = os.path.join(_file_dir(), "fifo")
    os.mkfifo(path)
    return path


@contextlib.contextmanager
def _linked(name: str) -> Iterator[str]:
    """A symlink to ``name``, removed afterwards."""
    link = name + ".link"
    os.symlink(name, link)
    try:
        yield link
    finally:
        os.unlink(link)


@settings(max_examples=FILE_EXAMPLES)
@given(
    case=payload_files(),
    path=st.sampled_from(["file"] * 6 + ["link", "missing", "dir", "fifo", "nul", 5, b"f"]),
    exact=st.booleans(),
)
def test_open_payload_oracle(
    case: tuple[bytes, Any, Any, Any, Any], path: Any, exact: bool
) -> None:
    content, code, shape, offset, layout = case
    with _temp_file(content) as name, _linked(name) as link:
        where = {
            "file": name,
            "link": link,
            "missing": name + ".no",
            "dir": _file_dir(),
            "fifo": _fifo(),
            "nul": name + "\x00",
        }
        try:
            arr = kiln_np.open_payload(
                where.get(path, path), code, shape, offset=offset, layout=layout, exact=exact
            )
        except Exception as exc:
            expect_allowed(exc, os_error=True)
            if path in ("dir", "fifo"):  # refused by type, before any open (never blocks)
                _expect_kind(exc, "any")
            return
        assert path in ("file", "link")
        dims = tuple(int(d) for d in shape)
        n = kiln_np.byte_length(code, dims, layout)
        off = int(offset)
        assert off + n == len(content) if exact else off + n <= len(content)
        expected = _unchecked(int(code), layout, content[off : off + n], dims)
        assert arr.shape == expected.shape
        assert arr.dtype == expected.dtype
        try:
            decoded = np.asarray(arr)
        except KilnError as exc:  # a LazyPayload checks content when read
            assert isinstance(arr, LazyPayload)
            expect_allowed(exc)
            with pytest.raises(KilnError):
                kiln_np.to_numpy(code, content[off : off + n], dims, layout)
            return
        assert bits(decoded) == bits(expected)
        del arr, decoded


def _numpy_refuses(reference: np.ndarray, key: Any) -> bool:
    """numpy refuses ``key`` on the decoded array too."""
    try:
        reference[key]
    except (IndexError, TypeError, ValueError):
        return True
    return False


def _leading(key: Any) -> Any:
    if isinstance(key, tuple):
        return key[0] if key else Ellipsis
    return key


def _expect_kind(exc: BaseException, kind: str) -> None:
    assert isinstance(exc, KilnError)
    assert kind in ("any", exc.kind), str(exc)


def _expect_index_error(exc: BaseException, reference: np.ndarray, key: Any, valid: bool) -> None:
    """``lazy[key]`` raised: KilnError TYPE only for bad content (and only when
    read); otherwise what numpy raises for ``key``, or TypeError for a leading
    key that is not an int or a slice (the documented restriction)."""
    if isinstance(exc, KilnError):
        expect_allowed(exc)
        assert exc.kind == "TYPE"
        assert not valid
        return
    lead = _leading(key)
    unsupported = lead is not Ellipsis and (
        not isinstance(lead, (slice, int, np.integer)) or isinstance(lead, bool)
    )
    numpy_like = isinstance(exc, (IndexError, TypeError, ValueError)) and _numpy_refuses(
        reference, key
    )
    allowed = numpy_like or (isinstance(exc, TypeError) and unsupported)
    if not allowed:
        raise AssertionError(f"{type(exc).__name__} escaped: {exc!r}") from exc


@settings(max_examples=FILE_EXAMPLES)
@given(
    content=st.binary(max_size=48),
    code=st.one_of(st.integers(1, 19), st.just(4096)),
    shape=st.lists(st.integers(0, 4), max_size=3).map(tuple),
    offset=st.integers(0, 4),
    key=index_keys,
    rows=st.one_of(
        st.none(), st.integers(-1, 3), st.sampled_from([1.0, True, "2", 10**5000, -(10**5000)])
    ),
    extra=st.sampled_from([0, 0, 0, 1]),
    exact=st.booleans(),
)
def test_lazy_payload_oracle(
    content: bytes,
    code: int,
    shape: tuple[int, ...],
    offset: int,
    key: Any,
    rows: Any,
    extra: int,
    exact: bool,
) -> None:
    layout = Layout("fuzz", 2) if code == 4096 else None
    n = kiln_np.byte_length(code, shape, layout)
    if content:
        content = (content * (n // len(content) + 3))[: offset + n + extra]
    with _temp_file(content) as name:
        try:
            lazy = LazyPayload(name, code, shape, offset=offset, layout=layout, exact=exact)
        except Exception as exc:
            expect_allowed(exc)
            assert len(content) != offset + n if exact else len(content) < offset + n
            return
        reference = _unchecked(code, layout, content[offset : offset + n], shape)
        valid = True
        try:
            kiln_np.to_numpy(code, content[offset : offset + n], shape, layout)
        except KilnError:
            valid = False
        try:
            got = lazy[key]
        except Exception as exc:
            _expect_index_error(exc, reference, key, valid)
        else:
            expected = reference[key]
            assert np.shape(got) == np.shape(expected)
            assert bits(got) == bits(expected)
        try:
            chunks = list(lazy.iter_chunks(rows))
        except Exception as exc:
            expect_allowed(exc)
            _expect_kind(exc, "SHAPE" if valid else "any")
        else:
            whole = np.concatenate(chunks or [reference]) if lazy.shape else chunks[0]
            assert bits(whole) == bits(reference)
        try:
            d = kiln_np.describe(lazy)
        except Exception as exc:
            expect_allowed(exc)
            _expect_kind(exc, "TYPE" if valid else "any")  # valid: only an opaque code has none
        else:
            assert d.count == reference.size
        del lazy


@contextlib.contextmanager
def _target(kind: str, prefix: bytes) -> Iterator[Any]:
    """``path``: the file, mode 0640; ``link``: a symlink to it; ``file``: it, open."""
    with _temp_file(prefix) as name:
        os.chmod(name, 0o640)
        if kind == "path":
            yield name
        elif kind == "link":
            with _linked(name) as link:
                yield link
        else:
            with open(name, "r+b") as f:
                yield f


@st.composite
def chunk_streams(draw: st.DrawFn) -> list[np.ndarray]:
    """Chunks of one small-value dtype (packed 4-bit, bool bytes 0-3, f32, u8),
    1-D or 2-D with a mostly shared trailing shape: odd nibble boundaries, bad
    bool bytes and mismatched chunks."""
    dtype = np.dtype(draw(st.sampled_from([ml_dtypes.uint4, ml_dtypes.int4, "?", "<f4", "u1"])))
    tail = draw(st.sampled_from([(), (), (3,)]))
    chunks = []
    for _ in range(draw(st.integers(0, 4))):
        rows = draw(st.integers(0, 3))
        shape = (rows, *tail) if draw(st.integers(0, 9)) else (rows, 2)
        values = draw(st.lists(st.integers(0, 3), min_size=int(np.prod(shape)), max_size=9))
        raw = np.array(values[: int(np.prod(shape))], np.uint8)
        chunks.append(
            (raw.view(dtype) if dtype.itemsize == 1 else raw.astype(dtype)).reshape(shape)
        )
    return chunks


def _code_of(source: Any) -> Any:
    """The Kiln code of the source's dtype, or None."""
    first = source[0] if isinstance(source, list) and source else source
    try:
        return kiln_np.code_for_dtype(np.asarray(first).dtype)
    except (KilnError, ValueError, TypeError):
        return None


@st.composite
def write_cases(draw: st.DrawFn) -> tuple[Any, Any, Any, Any, Any, bytes]:
    """``(source, code, shape, offset, layout, prefix)``: mostly arguments that
    agree with the source (its own code, its shape, no layout), and a file that
    holds ``offset`` bytes to keep."""
    source = draw(
        mostly(
            st.one_of(arrays(), chunk_streams()),
            st.one_of(st.lists(arrays(), max_size=3), st.sampled_from(["text", 5, None, b"\x00"])),
        )
    )
    own = _code_of(source)
    code = draw(mostly(st.sampled_from([None, None, own]), small_codes))
    own_shape = np.shape(source) if isinstance(source, np.ndarray) else None
    shape = draw(mostly(st.sampled_from([None, own_shape]), st.one_of(small_dims, shapes)))
    layout = draw(mostly(st.none(), layouts))
    offset = draw(offsets)
    keep = offset if type(offset) is int and 0 <= offset <= 64 else 4
    prefix = draw(st.binary(min_size=keep, max_size=keep + 4) | st.binary(max_size=8))
    return source, code, shape, offset, layout, prefix


@settings(max_examples=FILE_EXAMPLES)
@given(case=write_cases(), kind=st.sampled_from(["path", "path", "link", "file"]))
def test_save_payload_oracle(case: tuple[Any, Any, Any, Any, Any, bytes], kind: str) -> None:
    source, code, shape, offset, layout, prefix = case
    with _target(kind, prefix) as target:
        replaced = kind != "file"  # written through a temporary file and a rename
        try:
            info = kiln_np.save_payload(
                target, source, code=code, shape=shape, offset=offset, layout=layout
            )
        except Exception as exc:
            expect_allowed(exc, os_error=True)
            if replaced:  # nothing lost: a failed write leaves the file as it was
                assert Path(target).read_bytes() == prefix
            return
        name = target.name if kind == "file" else os.path.realpath(target)
        if kind == "file":
            target.flush()
        else:  # the same file it was: a link stays a link, the mode is kept
            assert os.path.islink(target) == (kind == "link")
            assert os.stat(name).st_mode & 0o777 == 0o640
        assert info.byte_length == kiln_np.byte_length(info.code, info.shape, info.layout)
        assert info.offset == int(offset)
        data = Path(name).read_bytes()
        if replaced:
            assert len(data) == info.offset + info.byte_length
            assert data[: info.offset] == prefix[: info.offset]
        payload = data[info.offset : info.offset + info.byte_length]
        decoded = kiln_np.to_numpy(info.code, payload, info.shape, info.layout)
        if isinstance(source, np.ndarray):
            assert bits(decoded) == bits(source)


# ---------------------------------------------------------------- explore


@given(
    arr=st.one_of(
        arrays(ONNX_DTYPES),
        st.sampled_from([[[1], [1, 2]], "text", None, [1, None], object()]),
    ),
    first=st.one_of(st.integers(0, 10), st.sampled_from([-1, 2**70, 1.5, "2", None, True])),
)
def test_describe_oracle(arr: Any, first: Any) -> None:
    before = bits(arr) if isinstance(arr, np.ndarray) else None
    try:
        d = kiln_np.describe(arr, first=first)
    except Exception as exc:
        expect_allowed(exc)
    else:
        a = np.asarray(arr)
        assert d.count == a.size
        assert d.shape == a.shape
        foreign = FOREIGN_BY_CODE.get(int(d.code))  # FNUZ float8s describe as themselves
        layout = None if foreign is None else foreign.layout
        assert d.byte_length == kiln_np.byte_length(d.code, d.shape, layout)
        assert d.nan + d.inf + d.zero <= d.count
        assert d.first.size == min(int(first), a.size)
        if d.histogram is not None:
            assert int(d.histogram.sum()) == d.count
        repr(d)
        d.to_dict()
    if before is not None:
        assert bits(arr) == before


@given(arr=st.one_of(arrays(ONNX_DTYPES), st.sampled_from([[[1], [1, 2]], [True, 2], "x"])))
def test_bit_histogram_oracle(arr: Any) -> None:
    try:
        counts = kiln_np.bit_histogram(arr)
    except Exception as exc:
        expect_allowed(exc)
        return
    a = np.asarray(arr)
    assert counts.dtype == np.int64
    assert int(counts.sum()) == a.size
    assert counts.size == kiln_np.bit_values(a.dtype).size


@given(dtype=dtype_likes)
def test_bit_values_oracle(dtype: Any) -> None:
    try:
        values = kiln_np.bit_values(dtype)
    except Exception as exc:
        expect_allowed(exc)
        return
    foreign = foreign_for_dtype(np.dtype(dtype))  # the FNUZ float8s count as themselves
    if foreign is not None:
        assert foreign.bits == 8
        bits, boolean = 8, False
    else:
        row = kiln_np.dtype_info(kiln_np.code_for_dtype(dtype))
        bits, boolean = row.bits, row.code == kiln_np.Code.BOOL
    assert values.size == (2 if boolean else 1 << bits)
    storage = np.uint16 if bits == 16 else np.uint8
    assert values.view(storage).tolist() == list(range(values.size))


# ---------------------------------------------------------------- regressions
# Each input below once escaped as another exception (named in the comment).


def _model_file(content: bytes) -> str:
    path = os.path.join(_external_base(), "regression.onnx")
    Path(path).write_bytes(content)
    return path


def _external(location: str, base: Any) -> Any:
    return ko.to_numpy(external_tensor(location, data_type=2, dims=(1,)), base)


def _f32_file() -> str:
    path = os.path.join(_file_dir(), "regression.bin")
    Path(path).write_bytes(bytes(8))
    return path


def _lazy_f32() -> LazyPayload:
    return LazyPayload(_f32_file(), 2, (2,))


class _BadPath:
    def __fspath__(self) -> str:
        raise RuntimeError("no path")


F32 = np.zeros(1, np.float32)
U8 = np.zeros(2, np.uint8)
Q1 = Layout("q", 1)
_write = kiln_np.save_payload
_open = kiln_np.open_payload
_tensor: Any = ko.from_numpy  # called with hostile arguments
_field: Any = ko.decode_field
_describe: Any = kiln_np.describe
BIG = 2**63 - 1

REGRESSIONS: list[tuple[str, str, Any]] = [
    # ValueError from np.dtype: "invalid shape in fixed-type tuple"
    ("TYPE", "code_for_dtype of ('f4', -1)", lambda: kiln_np.code_for_dtype(("f4", -1))),
    ("TYPE", "bit_values of ('f4', -1)", lambda: kiln_np.bit_values(("f4", -1))),
    ("TYPE", "data_type_for_dtype of ('f4', -1)", lambda: ko.data_type_for_dtype(("f4", -1))),
    # ValueError "inhomogeneous shape" from np.asarray
    ("TYPE", "describe of a ragged list", lambda: kiln_np.describe([[1], [1, 2]])),
    ("TYPE", "bit_histogram of a ragged list", lambda: kiln_np.bit_histogram([[1], [1, 2]])),
    # TypeError from slicing with first
    ("SHAPE", "describe first='2'", lambda: _describe(U8, first="2")),
    ("SHAPE", "describe first=1.5", lambda: _describe(U8, first=1.5)),
    ("SHAPE", "describe first=-1", lambda: kiln_np.describe(U8, first=-1)),
    # ValueError "embedded null byte" from the OS
    ("TYPE", "open_payload path with NUL", lambda: _open(_f32_file() + "\x00", 2, (2,))),
    ("TYPE", "external location with NUL", lambda: _external("data.bin\x00", _external_base())),
    ("TYPE", "base_dir with NUL", lambda: _external("data.bin", _external_base() + "\x00")),
    ("TYPE", "model path with NUL", lambda: ko.model_to_kiln(_model_file(b"") + "\x00")),
    # TypeError "expected str, bytes or os.PathLike object, not int" from os.path
    ("TYPE", "base_dir not a path", lambda: _external("data.bin", 5)),
    # ValueError "array is too big" from np.empty / np.memmap
    ("SHAPE", "open_payload f32 (0, 2**62)", lambda: _open(_f32_file(), 2, (0, 2**62))),
    ("SHAPE", "LazyPayload (0, 2**63-1, 2)", lambda: LazyPayload(_f32_file(), 17, (0, BIG, 2))),
    # ValueError "cannot fit 'int' into an offset-sized integer" from seek
    ("TYPE", "write offset 2**70", lambda: kiln_np.save_payload(io.BytesIO(), U8, offset=2**70)),
    ("TYPE", "open_payload offset 2**63", lambda: _open(_f32_file(), 2, (2,), offset=2**63)),
    # ValueError "Exceeds the limit (4300 digits)" from formatting the value
    ("TYPE", "open_payload offset 10**5000", lambda: _open(_f32_file(), 2, (2,), offset=10**5000)),
    ("SHAPE", "iter_chunks rows=-10**5000", lambda: next(_lazy_f32().iter_chunks(-(10**5000)))),
    # ValueError from numpy: the block axis makes 65 dimensions
    ("SHAPE", "opaque rank 64", lambda: _open(_f32_file(), 4096, (1,) * 64, layout=Q1)),
    # an open() that blocks forever on a FIFO
    ("TYPE", "open_payload of a FIFO", lambda: _open(_fifo(), 2, (2,))),
    ("TYPE", "save_payload offset 1 into a FIFO", lambda: _write(_fifo(), U8, offset=1)),
    # RuntimeError from __fspath__
    ("TYPE", "open_payload path whose __fspath__ raises", lambda: _open(_BadPath(), 2, (2,))),
    # TypeError "bad argument type for built-in operation", Unicode errors, from protobuf
    ("TYPE", "tensor name 5", lambda: _tensor(F32, name=5)),
    ("TYPE", "tensor name bytes", lambda: _tensor(F32, name=b"w")),
    ("TYPE", "tensor name lone surrogate", lambda: _tensor(F32, name="\ud800")),
    # UnicodeEncodeError; and tensors that to_numpy itself refuses
    ("TYPE", "STRING element lone surrogate", lambda: _tensor(np.array(["\ud800"], object))),
    ("TYPE", "STRING element not UTF-8", lambda: _tensor(np.array([b"\xff"], object))),
    # a U array past U+10FFFF: silently written as another character, or SystemError
    ("TYPE", "STRING code point 0x1010101", lambda: _tensor(np.frombuffer(bytes(4 * [1]), "<U1"))),
    # DecodeError from protobuf
    ("TYPE", "model file that does not parse", lambda: list(ko.model_to_kiln(_model_file(b"\0")))),
    # TypeError "'int' object is not iterable"
    ("TYPE", "STRING field not iterable", lambda: _field(8, 5, (1,))),
]  # fmt: skip


@needs("onnx")
@pytest.mark.parametrize(("kind", "what", "call"), REGRESSIONS, ids=[w for _, w, _ in REGRESSIONS])
def test_fuzz_findings_are_kiln_errors(kind: str, what: str, call: Any) -> None:
    with pytest.raises(KilnError) as info:
        call()
    assert info.value.kind == kind
    assert any(word in str(info.value) for word in ("expected", "must", "cannot"))


@needs("onnx")
def test_unicode_string_tensor_still_round_trips() -> None:
    """The STRING checks refuse only what decode_field refuses."""
    arr = np.array(["", "\u00e9", "\U0010ffff", "ab"]).astype(">U2")
    back = ko.to_numpy(ko.from_numpy(arr, name="s"))
    assert back.tolist() == arr.tolist()
