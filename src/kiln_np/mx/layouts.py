"""The layouts an MX tensor travels in, and the pure bit moves between them.

:data:`LAYOUTS` is the table of the ``kiln_np.mx`` docstring as data.  GGUF's
``ggml.mxfp4`` and ``ggml.nvfp4`` blocks (:func:`from_ggml`, :func:`to_ggml`),
gpt-oss's ``*_blocks``/``*_scales`` pairs (:func:`from_gpt_oss`,
:func:`to_gpt_oss`) and ONNX's ``FLOAT4E2M1``/``FLOAT8E8M0`` tensors
(:func:`from_onnx`, :func:`to_onnx`) become Kiln e2m1 values and e8m0 (or
f8e4m3) scales and back, bit for bit; no arithmetic happens here.  GGML's
type table comes from :mod:`kiln_np.gguf` and ONNX's types from
:mod:`kiln_np.onnx`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from kiln_np import gguf
from kiln_np import onnx as kiln_onnx
from kiln_np._codec import Payload, check_content, decode, from_numpy, readonly_view
from kiln_np._core.checks import U8, set_module, show_value
from kiln_np._core.errors import KilnError
from kiln_np._core.payload import payload_info
from kiln_np._core.table import Code, Layout, code_label
from kiln_np._kernels import block_scaled

from .exact import dequantize
from .inputs import input_array, payload_bytes, payload_of, scales_bytes, values_source
from .kinds import ELEMENTS, SCALES, Kind

__all__ = [
    "LAYOUTS",
    "MXLayout",
    "dequantize_gpt_oss",
    "dequantize_onnx",
    "from_ggml",
    "from_gpt_oss",
    "from_onnx",
    "to_ggml",
    "to_gpt_oss",
    "to_onnx",
]

_MODULE = "kiln_np.mx"
_E2M1 = ELEMENTS[Code.E2M1]
_E8M0 = SCALES[Code.E8M0]
_F8E4M3 = SCALES[Code.F8E4M3]

# -- the layouts table ---------------------------------------------------------------------


@set_module(_MODULE)
@dataclass(frozen=True)
class MXLayout:
    """One row of :data:`LAYOUTS`: how a layout stores an MX tensor.

    Attributes
    ----------
    name : str
        ``"kiln"``, ``"ggml.mxfp4"``, ``"ggml.nvfp4"``, ``"gpt-oss"``, ``"onnx"``.
    container : str
        What holds the bytes.
    nibble_order : str
        Which element each nibble holds.
    block : str
        Elements per scale (``"any"``: chosen by the caller; ``"attr"``: the
        ONNX ``block_size`` attribute).
    scale : str
        The scale type.
    scale_ff : str
        What kiln_np makes of a scale byte 0xff in this layout.
    """

    name: str
    container: str
    nibble_order: str
    block: str
    scale: str
    scale_ff: str


LAYOUTS: tuple[MXLayout, ...] = (
    MXLayout("kiln", "e2m1 + e8m0/f8e4m3", "element 2k low, 2k+1 high", "any", "e8m0", "NaN block"),
    MXLayout(
        "ggml.mxfp4", "17-byte blocks", "byte j: j low, j+16 high", "32", "e8m0 first", "NaN block"
    ),
    MXLayout(
        "ggml.nvfp4",
        "36-byte blocks of 64",
        "8-byte group: j low, j+8 hi",
        "16",
        "f8e4m3 x 4",
        "NaN block",
    ),
    MXLayout(
        "gpt-oss",
        "_blocks + _scales (u8)",
        "element 2k low, 2k+1 high",
        "32",
        "e8m0 bytes",
        "NaN block",
    ),
    MXLayout(
        "onnx", "FLOAT4E2M1/FLOAT8E8M0", "element 2k low, 2k+1 high", "attr", "e8m0", "NaN block"
    ),
)
"""The layouts an MX tensor travels in (the table of the module docstring)."""


@dataclass(frozen=True)
class _GGMLLayout:
    code: int
    layout: Layout
    elements: int  # per block
    header: int  # scale bytes at the start of a block
    group: int  # bytes per half-split nibble group
    scale: Kind
    record: np.dtype[Any]  # one block: its scale bytes, then its element bytes


def _ggml_layout(name: str, scale: Kind, group: int) -> _GGMLLayout:
    # The one use of kiln_np.gguf's type table here: GGML's row of type ``name``.
    row = next(t for t in gguf.TYPES.values() if t.name == name)
    assert row.layout is not None
    header = row.block_bytes - row.block_elements // 2
    record = np.dtype([("scales", f"V{header}"), ("elements", f"V{row.block_elements // 2}")])
    return _GGMLLayout(row.code, row.layout, row.block_elements, header, group, scale, record)


_MXFP4 = _ggml_layout("MXFP4", _E8M0, 16)
_NVFP4 = _ggml_layout("NVFP4", _F8E4M3, 8)
_GGML = {"ggml.mxfp4": _MXFP4, "ggml.nvfp4": _NVFP4}
_GGML_NAMES = (
    f"ggml.mxfp4 (code 0x{_MXFP4.code:04x}, {_MXFP4.layout!r}) or "
    f"ggml.nvfp4 (code 0x{_NVFP4.code:04x}, {_NVFP4.layout!r})"
)

_REPACK_BLOCKS = 1 << 15  # blocks per step: the step's temporaries stay in L2
# Half a nibble group's bytes as one integer lane, by group size.
_HALF: dict[int, np.dtype[Any]] = {8: np.dtype("<u4"), 16: np.dtype("<u8")}


def _split_to_kiln(q: np.ndarray, group: int) -> np.ndarray:
    """Half-split groups of ``group`` bytes (low nibbles: the group's first half of
    elements, high nibbles: the second) -> Kiln's order; ``q`` is ``(m, bytes)``
    uint8, the result the same shape.

    Byte ``2i`` (even) and ``2i + 1`` (odd) of a group hold elements ``2i, 2i + 1``
    in their low nibbles and ``2i + G, 2i + 1 + G`` in their high ones, so Kiln's
    byte ``i`` is ``even & 0xf | odd << 4`` and byte ``G / 2 + i`` is ``even >> 4
    | odd & 0xf0``: bytewise arithmetic on lanes of half a group.
    """
    lane = _HALF[group]
    mask = np.array(0x0F0F0F0F0F0F0F0F, np.uint64).astype(lane)
    pairs = np.ascontiguousarray(q).reshape(-1).view("<u2")  # even byte low, odd high
    even = pairs.astype(U8).view(lane)
    odd = (pairs >> 8).astype(U8).view(lane)
    out = np.empty((even.size, 2), lane)
    low = even & mask
    low |= (odd & mask) << 4
    out[:, 0] = low
    even >>= 4
    even &= mask
    odd &= ~mask
    even |= odd
    out[:, 1] = even
    result: np.ndarray = out.view(U8).reshape(q.shape)
    return result


def _kiln_to_split(k: np.ndarray, group: int) -> np.ndarray:
    """The inverse of :func:`_split_to_kiln`."""
    lane = _HALF[group]
    mask = np.array(0x0F0F0F0F0F0F0F0F, np.uint64).astype(lane)
    halves = np.ascontiguousarray(k).reshape(-1).view(lane).reshape(-1, 2)
    first, second = halves[:, 0], halves[:, 1]
    even = ((first & mask) | ((second & mask) << 4)).view(U8)
    odd = (((first >> 4) & mask) | (second & ~mask)).view(U8)
    out = even.astype("<u2")
    out |= odd.astype("<u2") << 8
    result: np.ndarray = out.view(U8).reshape(k.shape)
    return result


def _ggml_of(code: int, layout: Layout | None) -> _GGMLLayout | None:
    g = _GGML.get(layout.name) if layout is not None else None
    return g if g is not None and g.code == code and g.layout == layout else None


@set_module(_MODULE)
def from_ggml(payload: object) -> tuple[Payload, Payload]:
    """Split a GGUF ``ggml.mxfp4`` or ``ggml.nvfp4`` payload into Kiln payloads.

    Parameters
    ----------
    payload : Payload
        Opaque code ``0x4727`` with ``Layout("ggml.mxfp4", 17)`` or ``0x4728``
        with ``Layout("ggml.nvfp4", 36)``, of block shape ``(..., m)`` (what
        :func:`kiln_np.open_weights` gives for a GGUF MXFP4/NVFP4 tensor; the
        tensor itself is accepted too).

    Returns
    -------
    tuple of Payload
        ``(values, scales)``: e2m1 of shape ``(..., m * 32)`` (``m * 64`` for
        NVFP4) and e8m0 of shape ``(..., m)`` (f8e4m3 of shape ``(..., m *
        4)`` for NVFP4).  Pure bit moves: :func:`to_ggml` gives the bytes back.

    Raises
    ------
    KilnError
        TYPE for another code or layout; LENGTH for a payload of the wrong
        size; SHAPE for a 0-d payload.

    Examples
    --------
    >>> block = bytes([127]) + bytes(range(0x10, 0x100, 0x10))  + b"\\x00"
    >>> values, scales = from_ggml(Payload(0x4727, memoryview(block), (1,),
    ...                                    Layout("ggml.mxfp4", 17)))
    >>> bytes(values.data).hex(" ")
    '00 00 00 00 00 00 00 00 21 43 65 87 a9 cb ed 0f'
    >>> scales
    Payload(code 19 (e8m0), shape=(1,), 1 bytes [7f])
    """
    p = payload_of(payload)
    g = _ggml_of(int(p.code), p.layout) if p is not None else None
    if p is None or g is None:
        found = (
            type(payload).__name__
            if p is None
            else f"{code_label(int(p.code))} with layout {p.layout!r}"
        )
        raise KilnError("TYPE", f"expected a payload of {_GGML_NAMES}, found {found}")
    info, raw = payload_bytes(p, g.layout.name)
    if not info.shape:
        raise KilnError(
            "SHAPE", f"{info.context}expected at least one dimension of blocks, found shape ()"
        )
    # Blocks as records (scale bytes, element bytes): copying a field is one strided
    # loop over blocks, where a 2-D slice of the bytes would be a loop per block.
    blocks = raw.view(g.record)
    m = blocks.shape[0]
    body = g.layout.block_size - g.header
    values = np.empty((m, body), U8)
    scales = np.empty(m * g.header, U8)
    if not block_scaled.repack_ggml(raw, values, scales, g.layout.block_size, to_kiln=True):
        scales.view(g.record["scales"])[...] = blocks["scales"]
        for b0 in range(0, m, _REPACK_BLOCKS):
            b1 = min(m, b0 + _REPACK_BLOCKS)
            q = np.ascontiguousarray(blocks["elements"][b0:b1]).view(U8).reshape(-1, body)
            values[b0:b1] = _split_to_kiln(q, g.group)
    lead = info.shape[:-1]
    last = info.shape[-1]
    vinfo = payload_info(Code.E2M1, (*lead, last * g.elements))
    sinfo = payload_info(g.scale.code, (*lead, last * g.header))
    return (
        Payload(vinfo.code, readonly_view(values), vinfo.shape),
        Payload(sinfo.code, readonly_view(scales), sinfo.shape),
    )


def _e2m1_bytes(values: object, what: str) -> tuple[np.ndarray, tuple[int, ...]]:
    """Kiln's packed e2m1 bytes of ``values`` (a payload, a tensor or an array) and
    its shape."""
    p = payload_of(values)
    if p is None:
        arr = input_array(values, what)
        if arr.dtype != _E2M1.dtype:
            raise KilnError(
                "TYPE",
                f"{what}: expected float4_e2m1fn values or an e2m1 payload, found {arr.dtype}",
                found=str(arr.dtype),
            )
        p = from_numpy(arr)
    if p.layout is not None or int(p.code) != Code.E2M1:
        raise KilnError(
            "TYPE",
            f"{what}: expected an e2m1 payload (code 18), found {code_label(int(p.code))}",
            code=int(p.code),
        )
    info, src = payload_bytes(p, what)
    check_content(info, src)  # an odd count's padding nibble
    return src, info.shape


def _scale_array(scales: object, kind: Kind, what: str) -> np.ndarray:
    sk, sbytes = scales_bytes(scales)
    if sk is not kind:
        raise KilnError(
            "TYPE",
            f"{what}: expected {kind.name} scales ({kind.dtype}), found {sk.name} scales",
            expected=kind.name,
            found=sk.name,
        )
    return sbytes


def _check_blocked(
    vshape: tuple[int, ...], sshape: tuple[int, ...], elements: int, per_scale: int, what: str
) -> int:
    """Values ``(..., n)`` with ``n`` a multiple of ``elements`` and scales ``(...,
    n / per_scale)``: returns the number of ``elements``-blocks."""
    if not vshape or vshape[-1] % elements:
        raise KilnError(
            "SHAPE",
            f"{what}: expected values of shape (..., n) with n a multiple of {elements}, "
            f"found {vshape}",
            shape=vshape,
        )
    expected = (*vshape[:-1], vshape[-1] // per_scale)
    if sshape != expected:
        raise KilnError(
            "SHAPE",
            f"{what}: expected scales of shape {expected} for values of shape {vshape}, "
            f"found {sshape}",
            shape=sshape,
            expected=expected,
            found=sshape,
        )
    return math.prod(vshape) // elements


@set_module(_MODULE)
def to_ggml(values: object, scales: object, *, layout: str | Layout) -> Payload:
    """Pack Kiln e2m1 values and their scales as a GGUF MXFP4 or NVFP4 payload.

    Parameters
    ----------
    values : Payload or array
        e2m1 (a payload of code 18 or a ``float4_e2m1fn`` array) of shape
        ``(..., n)``, ``n`` a multiple of 32 (64 for NVFP4).
    scales : Payload or array
        e8m0 (``float8_e8m0fnu``, uint8 bytes, or a payload of code 19 or 9)
        of shape ``(..., n / 32)``; for NVFP4 f8e4m3 of shape ``(..., n / 16)``.
    layout : str or Layout
        ``"ggml.mxfp4"`` or ``"ggml.nvfp4"``, or the Layout itself.

    Returns
    -------
    Payload
        Opaque code ``0x4727`` (``0x4728``) with its layout, block shape
        ``(..., n / 32)`` (``(..., n / 64)``): the inverse of :func:`from_ggml`.

    Raises
    ------
    KilnError
        TYPE for another layout, element or scale type; SHAPE for shapes
        that do not match; what :func:`kiln_np.to_numpy` raises for a payload.

    Examples
    --------
    >>> import ml_dtypes
    >>> v = np.arange(32, dtype=np.uint8) % 16
    >>> p = to_ggml(v.view(ml_dtypes.float4_e2m1fn), np.array([127], np.uint8),
    ...             layout="ggml.mxfp4")
    >>> p.shape, bytes(p.data[:5]).hex(" ")
    ((1,), '7f 00 11 22 33')
    """
    name = layout.name if isinstance(layout, Layout) else layout
    g = _GGML.get(name) if isinstance(name, str) else None
    if g is None or (isinstance(layout, Layout) and layout != g.layout):
        raise KilnError("TYPE", f"expected layout {_GGML_NAMES}, found {show_value(layout)}")
    vbytes, vshape = _e2m1_bytes(values, g.layout.name)
    sbytes = _scale_array(scales, g.scale, g.layout.name)
    m = _check_blocked(vshape, tuple(sbytes.shape), g.elements, g.elements // g.header, name)
    body = g.elements // 2
    kb = vbytes.reshape(m, body)
    out = np.empty(m, g.record)
    flat_scales = np.ascontiguousarray(sbytes).reshape(-1)
    if not block_scaled.repack_ggml(
        out.view(U8), kb, flat_scales, g.layout.block_size, to_kiln=False
    ):
        out["scales"] = flat_scales.view(g.record["scales"])
        for b0 in range(0, m, _REPACK_BLOCKS):
            b1 = min(m, b0 + _REPACK_BLOCKS)
            split = _kiln_to_split(kb[b0:b1], g.group)
            out["elements"][b0:b1] = split.reshape(-1).view(g.record["elements"])
    info = payload_info(g.code, (*vshape[:-1], vshape[-1] // g.elements), g.layout)
    return Payload(info.code, readonly_view(out), info.shape, info.layout)


# -- gpt-oss ---------------------------------------------------------------------------------


def _u8_array(obj: object, what: str, *, e8m0: bool = False) -> np.ndarray:
    p = payload_of(obj)
    arr = decode(*payload_bytes(p, what)) if p is not None else input_array(obj, what)
    if arr.dtype == U8 or (e8m0 and arr.dtype == _E8M0.dtype):
        return arr.view(U8)
    allowed = "uint8 or float8_e8m0fnu" if e8m0 else "uint8"
    raise KilnError("TYPE", f"{what}: expected {allowed}, found {arr.dtype}", found=str(arr.dtype))


@set_module(_MODULE)
def from_gpt_oss(blocks: object, scales: object) -> tuple[Payload, Payload]:
    """Kiln payloads of a gpt-oss MXFP4 tensor pair (``*_blocks``, ``*_scales``).

    Parameters
    ----------
    blocks : array, Payload or weight-file tensor
        uint8 of shape ``(..., nblocks, 16)``: 32 e2m1 elements per row of
        16 bytes, the earlier element in the low nibble (Kiln's own order).
    scales : array, Payload or weight-file tensor
        uint8 (or ``float8_e8m0fnu``) e8m0 bytes of shape ``(..., nblocks)``.

    Returns
    -------
    tuple of Payload
        ``(values, scales)``: e2m1 of shape ``(..., nblocks * 32)`` and e8m0 of
        shape ``(..., nblocks)``, the same bytes (views when contiguous).

    Raises
    ------
    KilnError
        TYPE for another dtype, SHAPE for shapes that do not match.

    Examples
    --------
    >>> v, s = from_gpt_oss(np.full((1, 16), 0x21, np.uint8), np.array([127], np.uint8))
    >>> v.shape, s.shape, dequantize(v, s)[:4]
    ((32,), (1,), array([0.5, 1. , 0.5, 1. ], dtype=float32))
    """
    b = _u8_array(blocks, "gpt-oss blocks")
    s = _u8_array(scales, "gpt-oss scales", e8m0=True)
    if b.ndim < 2 or b.shape[-1] != 16 or s.shape != b.shape[:-1]:
        raise KilnError(
            "SHAPE",
            f"gpt-oss: expected blocks of shape (..., nblocks, 16) and scales of shape "
            f"(..., nblocks), found {b.shape} and {s.shape}",
            shape=tuple(b.shape),
        )
    vinfo = payload_info(Code.E2M1, (*b.shape[:-2], b.shape[-2] * 32))
    sinfo = payload_info(Code.E8M0, tuple(s.shape))
    return (
        Payload(vinfo.code, readonly_view(np.ascontiguousarray(b)), vinfo.shape),
        Payload(sinfo.code, readonly_view(np.ascontiguousarray(s)), sinfo.shape),
    )


@set_module(_MODULE)
def to_gpt_oss(values: object, scales: object) -> tuple[np.ndarray, np.ndarray]:
    """The gpt-oss ``(*_blocks, *_scales)`` arrays of Kiln e2m1 values and e8m0 scales.

    Parameters
    ----------
    values : Payload or array
        e2m1 of shape ``(..., n)``, ``n`` a multiple of 32.
    scales : Payload or array
        e8m0 (or uint8 bytes) of shape ``(..., n / 32)``.

    Returns
    -------
    tuple of numpy.ndarray
        uint8 ``(..., n / 32, 16)`` and uint8 ``(..., n / 32)``: the inverse of
        :func:`from_gpt_oss`.

    Raises
    ------
    KilnError
        TYPE for another element or scale type, SHAPE for shapes that do not
        match.

    Examples
    --------
    >>> import ml_dtypes
    >>> v = np.ones(32, ml_dtypes.float4_e2m1fn)
    >>> b, s = to_gpt_oss(v, np.array([1.0], ml_dtypes.float8_e8m0fnu))
    >>> b.shape, hex(b[0, 0]), s
    ((1, 16), '0x22', array([127], dtype=uint8))
    """
    vbytes, vshape = _e2m1_bytes(values, "gpt-oss")
    sbytes = _scale_array(scales, _E8M0, "gpt-oss")
    _check_blocked(vshape, tuple(sbytes.shape), 32, 32, "gpt-oss")
    lead = vshape[:-1]
    return (
        vbytes.reshape(*lead, vshape[-1] // 32, 16).copy(),
        np.ascontiguousarray(sbytes).copy(),
    )


@set_module(_MODULE)
def dequantize_gpt_oss(
    blocks: object, scales: object, *, dtype: npt.DTypeLike | None = np.float32
) -> np.ndarray:
    """Exact floats of a gpt-oss MXFP4 tensor pair: shape ``(..., nblocks * 32)``.

    ``dequantize(*from_gpt_oss(blocks, scales), dtype=dtype)``.  Where
    gpt-oss's ``ldexp`` gives inf for a scale byte 0xff, this gives NaN (OCP).
    A model may reshape or transpose the result further: that is the model's
    layout, not the format's.

    Raises
    ------
    KilnError
        As :func:`from_gpt_oss` and :func:`dequantize`.

    Examples
    --------
    >>> dequantize_gpt_oss(np.full((1, 16), 0x7F, np.uint8), np.array([0xFF], np.uint8))[:2]
    array([nan, nan], dtype=float32)
    """
    return dequantize(*from_gpt_oss(blocks, scales), dtype=dtype)


# -- ONNX ------------------------------------------------------------------------------------

_ONNX_TYPES = {t.kiln_code: t.data_type for t in kiln_onnx.DATA_TYPES if t.layout is None}
_ONNX_ELEMENTS = tuple(_ONNX_TYPES[c] for c in ELEMENTS)
_ONNX_SCALES = tuple(_ONNX_TYPES[c] for c, k in SCALES.items() if c == k.code)
"""The ONNX types of the element and scale kinds (raw u8 scale bytes are not
ONNX MX scales)."""


def _onnx_payload(tensor: Any, allowed: tuple[kiln_onnx.DataType, ...], what: str) -> Payload:
    data_type = getattr(tensor, "data_type", None)
    if data_type not in allowed:
        raise KilnError(
            "TYPE",
            f"{what}: expected an onnx.TensorProto of type {' or '.join(t.name for t in allowed)}, "
            f"found {type(tensor).__name__ if data_type is None else f'data_type {data_type}'}",
            found=data_type,
        )
    return from_numpy(kiln_onnx.to_numpy(tensor))


@set_module(_MODULE)
def from_onnx(values: Any, scales: Any) -> tuple[Payload, Payload]:
    """Kiln payloads of ONNX MX tensors (``FLOAT4E2M1`` + ``FLOAT8E8M0``).

    Parameters
    ----------
    values : onnx.TensorProto
        ``FLOAT4E2M1`` (or ``FLOAT8E4M3FN``, ``FLOAT8E5M2``, ``INT8``).
    scales : onnx.TensorProto
        ``FLOAT8E8M0`` (or ``FLOAT8E4M3FN``).

    Returns
    -------
    tuple of Payload
        ``(values, scales)``, the same bits.  The block size and axis are the
        ``DequantizeLinear`` node's attributes; pass them to
        :func:`dequantize` (or use :func:`dequantize_onnx`).

    Raises
    ------
    KilnError
        TYPE for other tensor types; what :func:`kiln_np.onnx.to_numpy`
        raises.

    Examples
    --------
    >>> import onnx
    >>> x = onnx.helper.make_tensor("x", onnx.TensorProto.FLOAT4E2M1, [2], b"\\x72", raw=True)
    >>> s = onnx.helper.make_tensor("s", onnx.TensorProto.FLOAT8E8M0, [1], b"\\x80", raw=True)
    >>> v, s = from_onnx(x, s)
    >>> v
    Payload(code 18 (e2m1), shape=(2,), 1 bytes [72])
    >>> s
    Payload(code 19 (e8m0), shape=(1,), 1 bytes [80])
    """
    return (
        _onnx_payload(values, _ONNX_ELEMENTS, "ONNX values"),
        _onnx_payload(scales, _ONNX_SCALES, "ONNX scales"),
    )


@set_module(_MODULE)
def to_onnx(
    values: object, scales: object, *, names: tuple[str, str] = ("x", "x_scale")
) -> tuple[Any, Any]:
    """ONNX tensors (``FLOAT4E2M1`` + ``FLOAT8E8M0``, ...) of Kiln MX values and scales.

    Parameters
    ----------
    values, scales : Payload or array
        As :func:`dequantize` takes them.
    names : tuple of str
        The tensors' names.

    Returns
    -------
    tuple of onnx.TensorProto
        The same bits, for a ``DequantizeLinear`` node's ``x`` and ``x_scale``.

    Raises
    ------
    KilnError
        TYPE for element or scale types :func:`dequantize` does not take.

    Examples
    --------
    >>> from kiln_np.mx import quantize
    >>> x, s = to_onnx(*quantize([1.0, 2.0], block_size=2))
    >>> x.data_type, s.data_type, x.raw_data, s.raw_data
    (23, 24, b'd', b'~')
    """
    src = values_source(values)
    sk, sbytes = scales_bytes(scales)
    codes = src.codes().reshape(src.shape).view(src.kind.dtype)
    return (
        kiln_onnx.from_numpy(codes, names[0]),
        kiln_onnx.from_numpy(sbytes.view(sk.dtype), names[1]),
    )


@set_module(_MODULE)
def dequantize_onnx(
    values: Any,
    scales: Any,
    *,
    block_size: int,
    axis: int = 1,
    dtype: npt.DTypeLike | None = np.float32,
) -> np.ndarray:
    """Exact floats of ONNX MX tensors, as ``DequantizeLinear`` defines them.

    ``dequantize(*from_onnx(values, scales), block_size=block_size, axis=axis,
    dtype=dtype)``; ``axis`` defaults to 1 as in ONNX.  (ONNX's zero point is
    absent for these types.)

    Raises
    ------
    KilnError
        As :func:`from_onnx` and :func:`dequantize`.

    Examples
    --------
    >>> from kiln_np.mx import quantize
    >>> x, s = to_onnx(*quantize([[1.0, 2.0]], block_size=2))
    >>> dequantize_onnx(x, s, block_size=2)
    array([[1., 2.]], dtype=float32)
    """
    v, s = from_onnx(values, scales)
    return dequantize(v, s, block_size=block_size, axis=axis, dtype=dtype)
