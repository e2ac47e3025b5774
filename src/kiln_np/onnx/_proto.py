"""``onnx.TensorProto``/``ModelProto`` <-> arrays and payloads, external data.

The one module that imports ``onnx`` (when called).  A tensor's values are in
exactly one place: ``raw_data``, its typed field, or external data, which is
confined to ``base_dir`` and memory-mapped read-only, only the page-aligned
range the tensor needs.  Everything read from a proto is untrusted: names
and external-data entries that protobuf hands back as ``bytes`` (not UTF-8),
numbers of any length, and model files of any extension are checked here.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from kiln_np._codec import Payload, as_array
from kiln_np._core.checks import (
    MAX_INT64,
    check_path,
    check_regular_file,
    set_module,
    show_int,
    show_value,
)
from kiln_np._core.errors import KilnError
from kiln_np._core.payload import PayloadInfo
from kiln_np._files.io import open_regular_raw

from ._fields import decode_field, encode_strings, encodes
from ._raw import decode_bytes, encode_array, to_payload
from ._types import (
    STRING_RAW,
    DataType,
    OnnxType,
    RawType,
    data_type_info,
    raw_type,
    row_for_dtype,
)

if TYPE_CHECKING:
    import onnx

__all__ = ["from_numpy", "model_to_kiln", "to_numpy"]

_TYPED_FIELDS = (
    "float_data",
    "int32_data",
    "string_data",
    "int64_data",
    "double_data",
    "uint64_data",
)


def _onnx() -> Any:
    try:
        import onnx
    except ImportError as exc:
        raise ImportError(
            "this function takes onnx protos and needs the onnx package: "
            "pip install 'kiln-np[onnx]'"
        ) from exc
    return onnx


def _text(value: object, what: str, where: str = "") -> str:
    """A string field of a proto: protobuf hands back ``bytes`` when it is not UTF-8."""
    if not isinstance(value, str):
        raise KilnError("TYPE", f"{where}expected {what} as UTF-8 text, found {show_value(value)}")
    return value


def _external_int(entries: Mapping[object, object], key: str, where: str, default: int) -> int:
    if key not in entries:
        return default
    text = _text(entries[key], key, f"{where}: ")
    # 19 digits hold 2**63-1: longer text (leading zeros aside) is never
    # converted or shown in full (Python refuses int() of 4300 digits).
    digits = text.lstrip("0") or "0"
    if not (text.isascii() and text.isdigit() and len(digits) <= 19) or int(digits) > MAX_INT64:
        raise KilnError(
            "TYPE",
            f"{where}: expected {key} to be a decimal integer in 0..2**63-1, found "
            + (show_value(text) if len(text) <= 60 else f"a str of {len(text)} characters"),
        )
    return int(digits)


def _location(entries: Mapping[object, object], where: str) -> str:
    location = entries.get("location")
    if not location:
        raise KilnError(
            "TYPE",
            f"{where}: expected a 'location' entry naming a file, found "
            + ("none" if location is None else repr(location)),
        )
    location = _text(location, "the location", f"{where}: ")
    parts = location.replace("\\", "/").split("/")
    if (
        os.path.isabs(location)
        or location[:1] in "/\\"
        or ":" in parts[0]
        or ".." in parts
        or "\x00" in location
    ):
        raise KilnError(
            "TYPE",
            f"{where}: expected a relative location inside base_dir, found {location!r}",
            found=location,
        )
    return location


def external_range(
    tensor: onnx.TensorProto, name: str, base_dir: str | os.PathLike[str] | None
) -> tuple[str, int, int]:
    """Where an external-data tensor's bytes are, checked against the file:
    ``(path, offset, length)``, the path resolved inside ``base_dir`` (real,
    symlinks followed), a regular file holding ``offset + length`` bytes."""
    where = f"tensor {name!r}: external data"
    # Keys and values are str, or bytes where protobuf found no UTF-8.
    entries: Mapping[object, object] = {e.key: e.value for e in tensor.external_data}
    location = _location(entries, where)
    if base_dir is None:
        raise KilnError(
            "TYPE", f"{where} at {location!r} needs base_dir, the directory it is relative to"
        )
    base = os.path.realpath(check_path(base_dir))
    path = os.path.realpath(os.path.join(base, *location.replace("\\", "/").split("/")))
    if os.path.commonpath([base, path]) != base:
        raise KilnError(
            "TYPE",
            f"{where}: expected a location inside base_dir {base!r}, found {location!r}, "
            f"which resolves to {path!r} (a symlink out?)",
            found=location,
        )
    offset = _external_int(entries, "offset", where, 0)
    size = _regular_file(path, where).st_size  # a FIFO or a device could block an open
    length = _external_int(entries, "length", where, max(size - offset, 0))
    _check_end(where, location, offset, length, size)
    return path, offset, length


def _check_end(where: str, location: str, offset: int, length: int, size: int) -> None:
    end = offset + length
    if end > size:
        raise KilnError(
            "LENGTH",
            f"{where}: expected offset {offset} + length {length} = {end} bytes in "
            f"{location!r}, found a file of {size} bytes",
            expected=end,
            found=size,
        )


def _external_bytes(
    tensor: onnx.TensorProto, name: str, base_dir: str | os.PathLike[str] | None
) -> memoryview:
    """The bytes an external-data tensor points at, resolved inside ``base_dir``."""
    path, offset, length = external_range(tensor, name, base_dir)
    if length == 0:
        return memoryview(b"")
    where = f"tensor {name!r}: external data"
    try:
        f = open_regular_raw(path)  # a FIFO or a device could block: TYPE, never opened
    except KilnError as exc:
        raise exc.prefixed(f"{where}: ") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        _check_end(where, path, offset, length, size)  # cut short since it was checked?
        # A read-only map of the pages that hold [offset, end), not of the whole
        # file: thousands of tensors in one huge file would exhaust the address space.
        start = offset - offset % mmap.ALLOCATIONGRANULARITY
        mapped = mmap.mmap(
            f.fileno(), offset + length - start, access=mmap.ACCESS_READ, offset=start
        )
        return memoryview(mapped)[offset - start :]


def _regular_file(path: str, where: str) -> os.stat_result:
    try:
        return check_regular_file(path)
    except KilnError as exc:
        raise exc.prefixed(f"{where}: ") from None


@dataclass(frozen=True)
class _Values:
    """A checked tensor and where its values are: ``data`` (``raw_data`` or
    external data) or, when that is None, ``field`` (the typed field)."""

    name: str
    row: OnnxType
    dims: list[int]
    kiln: tuple[RawType, PayloadInfo] | None  # None for STRING, which has no Kiln form
    data: memoryview | None
    field: Any


def _tensor_values(tensor: onnx.TensorProto, base_dir: str | os.PathLike[str] | None) -> _Values:
    onnx_pkg = _onnx()
    if not isinstance(tensor, onnx_pkg.TensorProto):
        raise KilnError("TYPE", f"expected an onnx.TensorProto, found {show_value(tensor)}")
    name = _text(tensor.name, "a tensor name")
    where = f"tensor {name!r}"
    try:
        row = data_type_info(tensor.data_type)
    except KilnError as exc:
        raise exc.prefixed(f"{where}: ") from None
    if tensor.HasField("segment"):
        segment = tensor.segment
        raise KilnError(
            "TYPE",
            f"{where}: expected a whole tensor, found a segment (begin "
            f"{show_int(segment.begin)}, end {show_int(segment.end)}); segmented tensors are "
            "not supported",
        )
    filled = [field for field in _TYPED_FIELDS if len(getattr(tensor, field))]
    external = tensor.data_location == onnx_pkg.TensorProto.EXTERNAL
    raw_set = tensor.HasField("raw_data")
    places = filled + ["raw_data"] * raw_set + ["external data"] * external
    if len(places) > 1 or (filled and filled != [row.field]):
        raise KilnError(
            "TYPE",
            f"{where} ({row.label}): expected its values in one place, raw_data or "
            f"{row.field}, found {', '.join(places)}",
        )
    dims = list(tensor.dims)
    if row.data_type == DataType.STRING:
        if raw_set or external:
            raise KilnError("TYPE", STRING_RAW.format(label=f"{where}: {row.label}"))
        return _Values(name, row, dims, None, None, tensor.string_data)
    raw = raw_type(row.data_type)
    try:
        kiln = raw, raw.kiln(dims)  # the dims are checked here, before any file is opened
    except KilnError as exc:
        raise exc.prefixed(f"{where}: ") from None
    if external:
        return _Values(name, row, dims, kiln, _external_bytes(tensor, name, base_dir), None)
    if raw_set:
        return _Values(name, row, dims, kiln, memoryview(tensor.raw_data), None)
    return _Values(name, row, dims, kiln, None, getattr(tensor, row.field))


@set_module("kiln_np.onnx")
def to_numpy(
    tensor: onnx.TensorProto, base_dir: str | os.PathLike[str] | None = None
) -> np.ndarray:
    """Decode an ``onnx.TensorProto`` into a numpy array, bits untouched.

    Parameters
    ----------
    tensor : onnx.TensorProto
        Values in ``raw_data``, in the typed field, or in external data.
    base_dir : path, optional
        The directory external data is relative to (the model's directory).
        The location must stay inside it: absolute paths, ``..`` and symlinks
        that lead out are TYPE errors.

    Returns
    -------
    numpy.ndarray
        As :func:`decode_raw` or :func:`decode_field`; external data is
        memory-mapped read-only (only the pages the tensor needs).

    Raises
    ------
    KilnError
        As :func:`decode_raw`/:func:`decode_field`; TYPE for values in more
        than one place, a STRING tensor with ``raw_data``, a name or an
        external-data entry that is not UTF-8, an external location outside
        ``base_dir`` (or a ``base_dir`` that is not a path), an offset or
        length that is not a decimal integer in 0..2**63-1, or an external
        file that is not a regular file; LENGTH for external data past the
        end of its file.
    OSError
        When the external data file cannot be opened (missing, a dangling
        link).
    ImportError
        When onnx is not installed.

    Examples
    --------
    >>> import onnx
    >>> t = onnx.helper.make_tensor("w", onnx.TensorProto.INT4, [3], b"\\x21\\x03", raw=True)
    >>> to_numpy(t).astype(int)
    array([1, 2, 3])
    """
    values = _tensor_values(tensor, base_dir)
    try:
        if values.kiln is not None and values.data is not None:
            return decode_bytes(*values.kiln, values.data)
        return decode_field(values.row.data_type, values.field, values.dims)
    except KilnError as exc:
        raise exc.prefixed(f"tensor {values.name!r}: ") from None


@set_module("kiln_np.onnx")
def from_numpy(array: npt.ArrayLike, name: str | None = None) -> onnx.TensorProto:
    """Encode an array as an ``onnx.TensorProto``, bits untouched: the inverse
    of :func:`to_numpy`.

    Parameters
    ----------
    array : array_like
        Any array of a dtype in the table; ``str``/``object`` arrays of
        ``str`` or ``bytes`` become STRING tensors (``string_data``, UTF-8).
    name : str, optional
        The tensor's name.

    Returns
    -------
    onnx.TensorProto
        ``dims``, ``data_type`` and ``raw_data`` (``string_data`` for STRING):
        the same message ``onnx.numpy_helper.from_array`` builds.

    Raises
    ------
    KilnError
        As :func:`encode_raw`; TYPE for a STRING element that is neither
        ``str`` nor UTF-8 ``bytes`` (what :func:`decode_field` refuses is not
        written), and for a ``name`` that is not a ``str``.
    ImportError
        When onnx is not installed.

    Examples
    --------
    >>> import ml_dtypes
    >>> t = from_numpy(np.array([1.5, -3], dtype=ml_dtypes.float6_e3m2fn), name="s")
    >>> t.data_type, t.raw_data.hex(), list(t.dims)
    (28, '8e0c', [2])
    """
    onnx_pkg = _onnx()
    if name is not None and not (isinstance(name, str) and encodes(name)):
        raise KilnError(
            "TYPE",
            f"expected a tensor name that is a str UTF-8 can encode, found {show_value(name)}",
        )
    arr = as_array(array)
    row = row_for_dtype(arr.dtype)
    tensor: onnx.TensorProto = onnx_pkg.TensorProto()
    tensor.dims.extend(arr.shape)
    if name:
        tensor.name = name
    tensor.data_type = int(row.data_type)
    if row.data_type == DataType.STRING:
        tensor.string_data.extend(encode_strings(arr))
    else:
        tensor.raw_data = bytes(encode_array(arr, raw_type(row.data_type)))
    return tensor


def _tensor_to_kiln(tensor: onnx.TensorProto, base_dir: str | os.PathLike[str] | None) -> Payload:
    values = _tensor_values(tensor, base_dir)
    where = f"tensor {values.name!r}: "
    if values.kiln is None:
        raise KilnError(
            "TYPE",
            f"{where}expected a type with a Kiln form, found {values.row.label}, whose "
            "elements are strings, not bits (read it with kiln_np.onnx.to_numpy)",
        )
    raw, info = values.kiln
    try:
        data = values.data
        if data is None:
            data = encode_array(decode_field(raw.row.data_type, values.field, values.dims), raw)
        return to_payload(raw, info, data)
    except KilnError as exc:
        raise exc.prefixed(where) from None


def _load(onnx_pkg: Any, path: str) -> onnx.ModelProto:
    """The binary ``ModelProto`` in ``path``, whatever the file's extension."""
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped,unused-ignore]

    try:
        # format="protobuf": onnx picks a text parser for .json/.textproto/.onnxtxt.
        with open_regular_raw(path) as f:  # a FIFO would block the read
            model: onnx.ModelProto = onnx_pkg.load(f, format="protobuf", load_external_data=False)
    except DecodeError as exc:
        raise KilnError(
            "TYPE",
            f"{path!r}: expected an ONNX model (a ModelProto), found bytes that do "
            f"not parse: {exc}",
        ) from exc
    return model


@set_module("kiln_np.onnx")
def model_to_kiln(
    model: onnx.ModelProto | str | os.PathLike[str],
    base_dir: str | os.PathLike[str] | None = None,
) -> Iterator[tuple[str, Payload]]:
    """Yield ``(name, Payload)`` for every initializer of a model's main graph.

    Parameters
    ----------
    model : onnx.ModelProto or path
        A loaded model, or the path of a binary ONNX file, whatever its
        extension (loaded without its external data, which is then mapped
        tensor by tensor).
    base_dir : path, optional
        The directory external data is relative to; for a path, defaults to
        the file's directory.

    Returns
    -------
    iterator of (str, Payload)
        In ``graph.initializer`` order, each as :func:`to_kiln` makes it.

    Raises
    ------
    KilnError
        TYPE when ``model`` is neither, a path that is not a regular file, or
        a file that does not parse as a binary model; while iterating,
        whatever :func:`to_kiln` and :func:`to_numpy` raise for an initializer
        (TYPE for STRING, which has no Kiln form, and for a name that is not
        UTF-8), the message naming the tensor.
    OSError
        When the model file, or while iterating an external data file, cannot
        be opened.
    ImportError
        When onnx is not installed.

    Examples
    --------
    >>> import onnx
    >>> w = from_numpy(np.arange(3, dtype=np.float32), name="w")
    >>> graph = onnx.helper.make_graph([], "g", [], [], initializer=[w])
    >>> [(name, p.code, p.shape) for name, p in model_to_kiln(onnx.helper.make_model(graph))]
    [('w', <Code.F32: 2>, (3,))]
    """
    onnx_pkg = _onnx()
    if isinstance(model, (str, os.PathLike)):
        path = check_path(model)
        proto = _load(onnx_pkg, path)
        if base_dir is None:
            base_dir = os.path.dirname(os.path.abspath(path))
    elif isinstance(model, onnx_pkg.ModelProto):
        proto = model
    else:
        raise KilnError("TYPE", f"expected an onnx.ModelProto or a path, found {show_value(model)}")
    return _initializers(proto, base_dir)


def _initializers(
    proto: onnx.ModelProto, base_dir: str | os.PathLike[str] | None
) -> Iterator[tuple[str, Payload]]:
    for tensor in proto.graph.initializer:
        payload = _tensor_to_kiln(tensor, base_dir)
        yield tensor.name, payload
