"""Block-scaled weights (OCP MX, NVFP4): decoded exactly, repacked bit for bit.

The formats
===========
A block-scaled tensor is a tensor of small elements plus one scale per block
of ``block_size`` consecutive elements along one axis; element ``i`` of block
``b`` stands for ``element[i] * scale[b]``.

Elements (Kiln codes): ``e2m1`` (18, OCP FP4: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and
their negatives), ``f8e4m3`` (5, OFP8 E4M3, max 448, 0x7f/0xff NaN),
``f8e5m2`` (6, OFP8 E5M2, max 57344, infinities), ``i8`` (8, OCP MXINT8: the
two's-complement byte times the implicit 2**-6, so -2.0 to 1.984375).

Scales: ``e8m0`` (19, OCP MX: byte ``s`` is ``2**(s - 127)``, 0x00 is
2**-127, 0xfe is 2**127, **0xff is NaN and makes its whole block NaN**); or
``f8e4m3`` (5, the NVFP4 style: the scale is the E4M3 value itself, so 0x7f
and 0xff are NaN and a set sign bit is a negative scale).  MXFP4 is e2m1 +
e8m0 per 32, MXFP8 f8e4m3/f8e5m2 + e8m0 per 32, MXINT8 i8 + e8m0 per 32,
NVFP4 e2m1 + f8e4m3 per 16.

Exactness
---------
:func:`dequantize` returns every element's exact product or raises.  float64
holds every product of these elements and scales exactly.  A narrower output
(float32, bfloat16, float16) is allowed when each product is exact in it: the
call raises a TYPE :class:`~kiln_np.KilnError` naming the first block (in the
scales' C order) holding an element whose exact product overflows or would
round, and suggests ``dtype=numpy.float64``.  Zeros and NaNs never raise
(whatever their scale); an infinite f8e5m2 element times a finite nonzero
scale is that infinity, exactly.  For MXFP4 into float32 only the scale bytes
0xfd and 0xfe can raise (6 x 2**126 and 2 x 2**127 overflow).  Every NaN in
the output is the output type's canonical quiet NaN (float32 ``0x7fc00000``):
NaN payloads and signs are not values and are not kept.

The layouts
===========
The same MX tensor travels in several layouts; every conversion here is a
pure bit move (no arithmetic), so converting back gives the original bytes.
:data:`LAYOUTS` holds this table as data (``docs/mx.md`` shows it, and a test
checks both against the code):

========== ====================== ============================ ===== ========== ===========
layout     container              nibble order                 block scale      0xff scale
========== ====================== ============================ ===== ========== ===========
kiln       e2m1 + e8m0/f8e4m3     element 2k low, 2k+1 high    any   e8m0       NaN block
ggml.mxfp4 17-byte blocks         byte j: j low, j+16 high     32    e8m0 first NaN block
ggml.nvfp4 36-byte blocks of 64   8-byte group: j low, j+8 hi  16    f8e4m3 x 4 NaN block
gpt-oss    _blocks + _scales (u8) element 2k low, 2k+1 high    32    e8m0 bytes NaN block
onnx       FLOAT4E2M1/FLOAT8E8M0  element 2k low, 2k+1 high    attr  e8m0       NaN block
========== ====================== ============================ ===== ========== ===========

What the format's own tool makes of a 0xff scale byte: gguf-py reads a
``ggml.mxfp4`` 0xff as 2**128 (its helper returns the finite half, 2**127)
and an NVFP4 0xff as unsigned E4M3 480 (halved to 240 against its doubled
value table); gpt-oss's ``ldexp(x, 255 - 127)`` gives inf (NaN for a zero
element); ONNX defines FLOAT8E8M0 0xff as NaN.  kiln_np makes the block NaN
in every layout (an NVFP4 scale of 0xff or 0x7f is an E4M3 NaN).

- **kiln**: an e2m1 payload (code 18, two elements per byte, the earlier in
  the low nibble) and an e8m0 payload (code 19) or f8e4m3 payload (code 5) of
  scales; shapes ``(..., n)`` and ``(..., ceil(n / block_size))``.
- **ggml.mxfp4** (GGML type 39; Kiln opaque code ``0x4727``,
  ``Layout("ggml.mxfp4", 17)``): per 32 elements, the e8m0 scale byte then
  16 bytes; byte ``j`` holds element ``j`` in its low nibble and element
  ``j + 16`` in its high nibble.  gguf-py's ``e8m0_to_fp32_half`` reads 0xff
  as the finite 2**127 (half of 2**128).
- **ggml.nvfp4** (GGML type 40; ``0x4728``, ``Layout("ggml.nvfp4", 36)``):
  per 64 elements, 4 scale bytes (one per 16 elements, read as f8e4m3), then
  4 groups of 8 bytes; byte ``j`` of group ``g`` holds element ``16g + j``
  low and ``16g + 8 + j`` high.  gguf-py reads the scale as *unsigned* E4M3:
  it ignores the sign bit and reads 0x7f as 0 (kiln_np: NaN).
- **gpt-oss** (OpenAI's checkpoints): ``*_blocks`` uint8 ``(..., nblocks,
  16)`` holding exactly Kiln's e2m1 bytes, and ``*_scales`` uint8 ``(...,
  nblocks)`` holding e8m0 bytes (gpt-oss computes ``ldexp(x, s - 127)``, which
  overflows to inf for 0xff).
- **onnx**: ``FLOAT4E2M1`` and ``FLOAT8E8M0`` tensors hold Kiln's bytes; the
  block size and axis are ``DequantizeLinear``'s attributes.

Quantization rules
==================
``rule="ocp"`` (OCP MX v1.0, section 6.3): shared exponent
``floor(log2(max |x|)) - emax`` (emax 2 for e2m1, 8 for f8e4m3, 15 for
f8e5m2), clamped to [-127, 127] (an all-zero block gets 2**-127); elements
``x / 2**exponent`` rounded to nearest, ties to even, saturating at the
element's largest finite value.  ``rule="ggml"`` (e2m1 only): the bytes of
gguf-py's (ggml's Python) MXFP4 ``quantize``: the input is rounded to float32
first, the exponent is the floor of the float32-rounded ``log2`` of the
float32 block max (so 1023.99994 gives 10), elements are the nearest value
with ties toward zero, and zero is +0.  A block holding a NaN or an infinity
gets the NaN scale 0xff and +0 elements under every rule (the OCP reference
code, microxcaling, also gives such a block a NaN scale).  ``rule="ceil"``
picks the smallest exponent that does not saturate, exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import ml_dtypes
import numpy as np
import numpy.typing as npt

from kiln_np._codec import Payload, from_numpy, readonly_view, to_numpy
from kiln_np._core.checks import byte_view, check_int, set_module, show_value, storage_error
from kiln_np._core.errors import KilnError
from kiln_np._core.payload import PayloadInfo, payload_info
from kiln_np._core.table import Code, Layout, code_label
from kiln_np._kernels import block_scaled, nibbles, pool
from kiln_np.gguf import TYPES as _GGML_TYPES

__all__ = [
    "LAYOUTS",
    "MXLayout",
    "dequantize",
    "dequantize_ggml",
    "dequantize_gpt_oss",
    "dequantize_onnx",
    "from_ggml",
    "from_gpt_oss",
    "from_onnx",
    "quantize",
    "to_ggml",
    "to_gpt_oss",
    "to_onnx",
]

_MODULE = "kiln_np.mx"
_U8 = np.dtype(np.uint8)

Rule = Literal["ocp", "ceil", "ggml"]

# -- elements and scales as data ---------------------------------------------------------


@dataclass(frozen=True)
class _Kind:
    """One element or scale type: its Kiln code, numpy dtype and value per byte."""

    name: str
    code: Code
    dtype: np.dtype[Any]
    codes: int  # valid storage bytes: 16 for e2m1, 256 otherwise
    emax: int  # the OCP emax_elem (elements) / unused for scales
    values: npt.NDArray[np.float64]  # value of each storage byte, NaNs canonical


def _decoded(dtype: npt.DTypeLike, count: int = 256) -> npt.NDArray[np.float64]:
    v = np.arange(count, dtype=np.uint8).view(dtype).astype(np.float64)
    full = np.zeros(256, np.float64)
    full[:count] = v
    full[np.isnan(full)] = np.nan  # one canonical NaN, whatever the code's sign
    return full


_E2M1 = _Kind(
    "e2m1",
    Code.E2M1,
    np.dtype(ml_dtypes.float4_e2m1fn),
    16,
    2,
    _decoded(ml_dtypes.float4_e2m1fn, 16),
)
_F8E4M3 = _Kind(
    "f8e4m3",
    Code.F8E4M3,
    np.dtype(ml_dtypes.float8_e4m3fn),
    256,
    8,
    _decoded(ml_dtypes.float8_e4m3fn),
)
_F8E5M2 = _Kind(
    "f8e5m2", Code.F8E5M2, np.dtype(ml_dtypes.float8_e5m2), 256, 15, _decoded(ml_dtypes.float8_e5m2)
)
_I8 = _Kind("i8", Code.I8, np.dtype(np.int8), 256, 0, _decoded(np.int8) / 64.0)
_E8M0 = _Kind(
    "e8m0",
    Code.E8M0,
    np.dtype(ml_dtypes.float8_e8m0fnu),
    256,
    0,
    np.concatenate([np.ldexp(1.0, np.arange(-127, 128)), [np.nan]]),
)

_ELEMENTS = {k.dtype: k for k in (_E2M1, _F8E4M3, _F8E5M2, _I8)}
_ELEMENT_CODES = {int(k.code): k for k in (_E2M1, _F8E4M3, _F8E5M2, _I8)}
_SCALES = {_E8M0.dtype: _E8M0, _F8E4M3.dtype: _F8E4M3, _U8: _E8M0}
_SCALE_CODES = {int(Code.E8M0): _E8M0, int(Code.F8E4M3): _F8E4M3, int(Code.U8): _E8M0}
_QUANT_ELEMENTS = {"e2m1": _E2M1, "f8e4m3": _F8E4M3, "f8e5m2": _F8E5M2}
_OUT_DTYPES = (
    np.dtype(np.float32),
    np.dtype(np.float64),
    np.dtype(np.float16),
    np.dtype(ml_dtypes.bfloat16),
)
_ELEMENT_NAMES = "float4_e2m1fn, float8_e4m3fn, float8_e5m2 or int8 (or their Kiln payloads)"
_SCALE_NAMES = "float8_e8m0fnu, float8_e4m3fn or uint8 e8m0 bytes (or their Kiln payloads)"

_CHUNK_ELEMENTS = 1 << 16
"""Elements decoded per step: the gather table, the chunk and its scales stay in cache."""


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


# -- inputs ----------------------------------------------------------------------------------


def _payload_of(obj: object) -> Payload | None:
    """``obj`` as a Payload: itself, or what its ``payload()`` returns (a tensor of
    :func:`kiln_np.open_weights`); None for anything else (an array)."""
    if isinstance(obj, Payload):
        return obj
    method = getattr(obj, "payload", None)
    if callable(method) and not isinstance(obj, np.ndarray):
        p = method()
        if isinstance(p, Payload):
            return p
    return None


def _checked(p: Payload, what: str) -> PayloadInfo:
    info = payload_info(p.code, p.shape, p.layout)
    info.check_length(p.data.nbytes, f"{what}: ")
    return info


class _Source:
    """The element codes of ``values``: flat storage bytes, packed or one per byte."""

    __slots__ = ("data", "kind", "packed", "shape")

    def __init__(
        self, kind: _Kind, data: np.ndarray, shape: tuple[int, ...], *, packed: bool
    ) -> None:
        self.kind = kind
        self.data = data  # flat uint8
        self.shape = shape
        self.packed = packed

    def codes(self) -> np.ndarray:
        """One storage byte per element, flat."""
        if not self.packed:
            return self.data
        count = math.prod(self.shape)
        return to_numpy(Code.E2M1, self.data, (count,)).view(_U8)


def _values_source(values: object) -> _Source:
    p = _payload_of(values)
    if p is not None:
        kind = _ELEMENT_CODES.get(int(p.code)) if p.layout is None else None
        if kind is None:
            raise KilnError(
                "TYPE",
                f"values: expected a Kiln payload of code 18 (e2m1), 5 (f8e4m3), 6 (f8e5m2) or "
                f"8 (i8), found {code_label(int(p.code))}",
                code=int(p.code),
            )
        info = _checked(p, "values")
        if kind is _E2M1 and info.count % 2 == 0:
            return _Source(kind, byte_view(p.data, "values"), info.shape, packed=True)
        arr = to_numpy(info.code, p.data, info.shape)
        return _Source(kind, arr.reshape(-1).view(_U8), info.shape, packed=False)
    arr = np.asarray(values)
    kind = _ELEMENTS.get(arr.dtype)
    if kind is None:
        raise KilnError(
            "TYPE",
            f"values: expected an array of {_ELEMENT_NAMES}, found {arr.dtype}",
            found=str(arr.dtype),
        )
    flat = np.ascontiguousarray(arr).reshape(-1).view(_U8)
    # One read; on failure the first bad byte is found without a mask of it all.
    bad = nibbles.first_above(flat, kind.codes - 1) if kind.codes < 256 else -1
    if bad >= 0:
        raise storage_error(flat, bad, 4, f"values: {kind.dtype}: ")
    return _Source(kind, flat, tuple(arr.shape), packed=False)


def _scales_bytes(scales: object) -> tuple[_Kind, np.ndarray]:
    """The scale kind and the scales as a uint8 array of their shape."""
    p = _payload_of(scales)
    if p is not None:
        kind = _SCALE_CODES.get(int(p.code)) if p.layout is None else None
        if kind is None:
            raise KilnError(
                "TYPE",
                f"scales: expected a Kiln payload of code 19 (e8m0), 5 (f8e4m3) or 9 (u8, read "
                f"as e8m0), found {code_label(int(p.code))}",
                code=int(p.code),
            )
        info = _checked(p, "scales")
        return kind, to_numpy(info.code, p.data, info.shape).view(_U8)
    arr = np.asarray(scales)
    kind = _SCALES.get(arr.dtype)
    if kind is None:
        raise KilnError(
            "TYPE",
            f"scales: expected an array of {_SCALE_NAMES}, found {arr.dtype}",
            found=str(arr.dtype),
        )
    return kind, arr.view(_U8)


def _check_axis(axis: object, ndim: int, what: str) -> int:
    a = check_int(axis, "axis", kind="SHAPE", minimum=-(2**63))
    if ndim == 0:
        raise KilnError("SHAPE", f"expected {what} to have at least one axis, found 0-d")
    if not -ndim <= a < ndim:
        raise KilnError(
            "SHAPE",
            f"expected axis in {-ndim}..{ndim - 1} for {what}, found {a}",
        )
    return a % ndim


def _blocked_shape(shape: tuple[int, ...], axis: int, block_size: int) -> tuple[int, ...]:
    return (*shape[:axis], -(-shape[axis] // block_size), *shape[axis + 1 :])


# -- exactness -------------------------------------------------------------------------------


@lru_cache(maxsize=64)
def _exact_table(element: str, scale: str, out: str) -> np.ndarray:
    """``ok[s, c]``: is element byte ``c`` times scale byte ``s`` exact in ``out``?"""
    ek = _BY_NAME[element]
    sk = _BY_NAME[scale]
    d = np.dtype(out) if out != "bfloat16" else np.dtype(ml_dtypes.bfloat16)
    with np.errstate(over="ignore", invalid="ignore"):
        p = sk.values[:, None] * ek.values[None, :]
        back = p.astype(d).astype(np.float64)
    ok: np.ndarray = (back == p) | np.isnan(p)
    ok[:, ek.codes :] = True  # not element codes (e2m1 bytes above 0x0f are refused)
    ok.flags.writeable = False
    return ok


_BY_NAME = {k.name: k for k in (_E2M1, _F8E4M3, _F8E5M2, _I8, _E8M0)}


def _first_inexact(
    codes: np.ndarray,
    sbytes: np.ndarray,
    ok: np.ndarray,
    dims: tuple[int, int, int],
    block_size: int,
) -> tuple[int, int] | None:
    """(flat block index in C order of the (P, nb, Q) scales, flat element index in
    C order of the (P, n, Q) values) of the first bad product, or None.

    Looks a chunk of rows at a time (rows are the outermost axis, so the first
    chunk holding a bad product holds the first bad block), with each pair's
    entry of ``ok`` found by one ``take`` at ``scale << 8 | code``."""
    p, n, q = dims
    nb = -(-n // block_size)
    s3 = sbytes.reshape(p, nb, q)
    c3 = codes.reshape(p, n, q)
    table = ok.reshape(-1)
    reps = _repeats(n, block_size)
    rows = max(1, _CHUNK_ELEMENTS // max(1, n * q))
    for r0 in range(0, p, rows):
        r1 = min(p, r0 + rows)
        index = np.repeat(s3[r0:r1], reps, axis=1).astype(np.uint16) << 8
        index |= c3[r0:r1]
        bad = ~table.take(index)
        if bad.any():
            per_block = np.logical_or.reduceat(bad, np.arange(0, n, block_size), axis=1)
            bp, bb, bq = np.unravel_index(int(np.flatnonzero(per_block)[0]), per_block.shape)
            lo = int(bb) * block_size
            inside = int(np.flatnonzero(bad[bp, lo : lo + block_size, bq])[0])
            block = int(np.ravel_multi_index((r0 + int(bp), int(bb), int(bq)), (p, nb, q)))
            return block, int(np.ravel_multi_index((r0 + int(bp), lo + inside, int(bq)), dims))
    return None


def _repeats(n: int, block_size: int) -> int | np.ndarray:
    nb = -(-n // block_size)
    if nb * block_size == n:
        return block_size
    reps = np.full(nb, block_size, np.intp)
    reps[-1] = n - (nb - 1) * block_size
    return reps


def _inexact_error(
    ek: _Kind,
    sk: _Kind,
    out: np.dtype[Any],
    codes: np.ndarray,
    sbytes: np.ndarray,
    where: tuple[int, int],
    values_shape: tuple[int, ...],
    scales_shape: tuple[int, ...],
) -> KilnError:
    block, element = where
    c = int(codes[element])
    s = int(sbytes[block])
    exact = float(ek.values[c]) * float(sk.values[s])
    with np.errstate(over="ignore"):
        rounded = float(np.float64(exact).astype(out))
    why = "overflows" if math.isinf(rounded) else f"would round to {rounded!r}"
    bidx = np.unravel_index(block, scales_shape) if scales_shape else ()
    eidx = np.unravel_index(element, values_shape) if values_shape else ()
    return KilnError(
        "TYPE",
        f"block {tuple(int(i) for i in bidx)}: element {tuple(int(i) for i in eidx)} "
        f"({ek.name} 0x{c:02x} = {float(ek.values[c])!r}) times its scale ({sk.name} "
        f"0x{s:02x} = {float(sk.values[s])!r}) is {exact!r}, which {out.name} cannot hold "
        f"exactly (it {why}); expected every product exact in {out.name}: pass "
        f"dtype=numpy.float64, which holds every MX product",
        expected=out.name,
        found=exact,
        index=element,
    )


# -- the decode kernel -----------------------------------------------------------------------


@lru_cache(maxsize=16)
def _gather_table(element: str, compute: str, packed: bool) -> tuple[np.ndarray, int, int]:
    """A lookup table from a 1- or 2-byte index to that index's elements' values.

    Returns ``(table, bytes per index, elements per index)``; the table's dtype is
    an unsigned integer or complex128 as wide as those values, so one ``take``
    moves 2 or 4 values at once without reading them as floats.
    """
    v = _BY_NAME[element].values.astype(compute)
    per_byte = 2 if packed else 1
    width = np.dtype(compute).itemsize
    index_bytes = 2 if 2 * per_byte * width <= 16 else 1
    i = np.arange(256**index_bytes)
    parts = [(i >> (8 * b)) & 0xFF for b in range(index_bytes)]
    if packed:
        parts = [x for b in parts for x in (b & 0x0F, b >> 4)]
    table = np.stack([v[x] for x in parts], axis=1)
    unit = {4: np.uint32, 8: np.uint64, 16: np.complex128}[table.shape[1] * width]
    out: np.ndarray = np.ascontiguousarray(table).view(unit).reshape(-1)
    out.flags.writeable = False
    return out, index_bytes, index_bytes * per_byte


def _gather(src: _Source, compute: str, out_flat: np.ndarray, e0: int, e1: int) -> None:
    """Write the values of elements ``e0:e1`` (unscaled) into ``out_flat[e0:e1]``;
    ``e0`` is a multiple of the elements per index."""
    table, index_bytes, per_index = _gather_table(src.kind.name, compute, src.packed)
    per_byte = 2 if src.packed else 1
    full = (e1 - e0) // per_index * per_index
    if full:
        b0 = e0 // per_byte
        idx = src.data[b0 : b0 + full // per_byte]
        if index_bytes == 2:
            idx = idx.view("<u2")
        np.take(table, idx, out=out_flat[e0 : e0 + full].view(table.dtype), mode="wrap")
    if e0 + full < e1:
        rest = np.arange(e0 + full, e1)
        codes = (src.data[rest // 2] >> (4 * (rest % 2))) & 0x0F if src.packed else src.data[rest]
        out_flat[e0 + full : e1] = src.kind.values.astype(compute)[codes]


def _decode(
    src: _Source,
    sk: _Kind,
    sbytes: np.ndarray,
    dims: tuple[int, int, int],
    block_size: int,
    compute: np.dtype[Any],
) -> np.ndarray:
    p, n, q = dims
    out = pool.empty(p * n * q, compute, p * n * q)
    if out.size == 0:
        return out
    nb = -(-n // block_size)
    svalues = sk.values.astype(compute)[sbytes].reshape(p, nb, q)
    reps = _repeats(n, block_size)
    row = n * q
    _, _, per_index = _gather_table(src.kind.name, compute.name, src.packed)
    align = per_index // math.gcd(row, per_index)
    rows = max(align, _CHUNK_ELEMENTS // row // align * align)
    with np.errstate(invalid="ignore"):  # an f8e5m2 inf times a zero f8e4m3 scale: NaN
        _decode_rows(src, svalues, out, dims, block_size, reps, rows)
    if src.kind is _F8E5M2 and sk is _F8E4M3:
        out[np.isnan(out)] = np.nan  # inf x 0: the CPU's default NaN, made canonical
    return out


def _decode_rows(
    src: _Source,
    svalues: np.ndarray,
    out: np.ndarray,
    dims: tuple[int, int, int],
    block_size: int,
    reps: int | np.ndarray,
    rows: int,
) -> None:
    p, n, q = dims
    row = n * q
    compute = out.dtype
    for r0 in range(0, p, rows):
        r1 = min(p, r0 + rows)
        e0, e1 = r0 * row, r1 * row
        _gather(src, compute.name, out, e0, e1)
        if q == 1 and n == block_size:  # one block per row: a flat repeat is fastest
            chunk = out[e0:e1]
            np.multiply(chunk, np.repeat(svalues[r0:r1].reshape(-1), n), out=chunk)
        else:
            chunk = out[e0:e1].reshape(r1 - r0, n, q)
            np.multiply(chunk, np.repeat(svalues[r0:r1], reps, axis=1), out=chunk)


def _compiled_mxfp4(
    src: _Source, sk: _Kind, out: np.dtype[Any], dims: tuple[int, int, int], block_size: int
) -> bool:
    """Can the compiled MXFP4 kernel (``block_scaled.mxfp4_to_float32_into``) decode this:
    e2m1 times e8m0 into float32, whole blocks one after another in memory?"""
    p, n, q = dims
    return (
        src.kind is _E2M1
        and sk is _E8M0
        and out == np.float32
        and q == 1
        and n == block_size
        and p * n > 0
        and not (src.packed and block_size % 2)
    )


# -- dequantize --------------------------------------------------------------------------------


@set_module(_MODULE)
def dequantize(
    values: object,
    scales: object,
    *,
    block_size: int | None = None,
    axis: int = -1,
    dtype: npt.DTypeLike = np.float32,
) -> np.ndarray:
    """Exact values of a block-scaled tensor: ``element * scale`` per block.

    Parameters
    ----------
    values : array or Payload
        ml_dtypes ``float4_e2m1fn``, ``float8_e4m3fn``, ``float8_e5m2`` or
        numpy ``int8`` (MXINT8: the byte times 2**-6); or a Kiln payload of
        code 18, 5, 6 or 8; or a tensor of :func:`kiln_np.open_weights`.
    scales : array or Payload
        ``float8_e8m0fnu`` (or raw ``uint8`` bytes read as e8m0; a u8 payload
        too) or ``float8_e4m3fn`` (NVFP4 style: the scale is its value), of
        the values' shape with ``axis`` divided by ``block_size`` rounded up
        (the last block may be partial).
    block_size : int, optional
        Elements per scale: 32 for e8m0 scales, 16 for f8e4m3 when omitted.
    axis : int
        The axis the blocks run along.
    dtype : dtype
        float32 (the default), float64, float16 or bfloat16.

    Returns
    -------
    numpy.ndarray
        A new C-contiguous array of the values' shape and ``dtype``.  An e8m0
        scale 0xff makes its block NaN; a NaN element stays NaN; every NaN
        is ``dtype``'s canonical quiet NaN.

    Raises
    ------
    KilnError
        TYPE for an element, scale or output dtype not listed, an e2m1
        storage byte above 0x0f, or a product ``dtype`` cannot hold exactly
        (naming the first such block; float64 always can); SHAPE for scales
        of the wrong shape, a ``block_size`` below 1, an axis out of range;
        what :func:`kiln_np.to_numpy` raises for a payload.

    Examples
    --------
    >>> import ml_dtypes
    >>> v = np.array([0.5, 1, -6, 3], dtype=ml_dtypes.float4_e2m1fn)
    >>> s = np.array([2.0**-3, 4.0], dtype=ml_dtypes.float8_e8m0fnu)
    >>> dequantize(v, s, block_size=2)
    array([  0.0625,   0.125 , -24.    ,  12.    ], dtype=float32)
    """
    src = _values_source(values)
    sk, sbytes = _scales_bytes(scales)
    bs = check_int(
        32 if (block_size is None and sk is _E8M0) else 16 if block_size is None else block_size,
        "block_size",
        kind="SHAPE",
        minimum=1,
    )
    try:
        out_dtype = np.dtype(dtype)
    except (TypeError, ValueError) as exc:
        raise KilnError("TYPE", f"expected an output dtype, found {show_value(dtype)}") from exc
    if out_dtype not in _OUT_DTYPES:
        raise KilnError(
            "TYPE",
            f"expected dtype float32, float64, float16 or bfloat16, found {out_dtype}",
            found=str(out_dtype),
        )
    shape = src.shape
    a = _check_axis(axis, len(shape), f"values of shape {shape}")
    expected = _blocked_shape(shape, a, bs)
    if tuple(sbytes.shape) != expected:
        raise KilnError(
            "SHAPE",
            f"expected scales of shape {expected} for values of shape {shape} in blocks of "
            f"{bs} along axis {a}, found {tuple(sbytes.shape)}",
            shape=tuple(sbytes.shape),
            expected=expected,
            found=tuple(sbytes.shape),
        )
    p = math.prod(shape[:a])
    n = shape[a]
    q = math.prod(shape[a + 1 :])
    if n % bs == 0 and n:
        p, n = p * (n // bs), bs  # whole blocks: one block per row, finer chunks
    dims = (p, n, q)
    flat_scales = np.ascontiguousarray(sbytes).reshape(-1)
    compute = np.dtype(np.float64) if out_dtype == np.float64 else np.dtype(np.float32)
    ok = _exact_table(src.kind.name, sk.name, out_dtype.name)
    safe = np.asarray(ok.all(axis=1))
    # Scale bytes usually span a narrow range of safe bytes: two reductions decide.
    if flat_scales.size and not (
        safe[int(flat_scales.min()) : int(flat_scales.max()) + 1].all() or safe[flat_scales].all()
    ):
        codes = src.codes()
        where = _first_inexact(codes, flat_scales, ok, dims, bs)
        if where is not None:
            raise _inexact_error(
                src.kind, sk, out_dtype, codes, flat_scales, where, shape, expected
            )
    if _compiled_mxfp4(src, sk, out_dtype, dims, bs):
        count = math.prod(shape)
        out = pool.empty(count, np.float32, count)
        if block_scaled.mxfp4_to_float32_into(src.data, flat_scales, out, bs, packed=src.packed):
            return out.reshape(shape)
    out = _decode(src, sk, flat_scales, dims, bs, compute)
    if out_dtype != compute:
        out = out.astype(out_dtype)
    return out.reshape(shape)


# -- quantize ----------------------------------------------------------------------------------


def _float64(x: npt.ArrayLike) -> np.ndarray:
    arr = np.asarray(x)
    try:
        info = ml_dtypes.finfo(arr.dtype)  # type: ignore[no-untyped-call]
    except (TypeError, ValueError):
        info = None
    if info is None or arr.dtype.itemsize > 8 or arr.dtype.kind == "c":
        raise KilnError(
            "TYPE",
            f"expected real floating-point input (float16/32/64, bfloat16, ml_dtypes floats), "
            f"found {arr.dtype}",
            found=str(arr.dtype),
        )
    return arr.astype(np.float64)


@lru_cache(maxsize=1)
def _e2m1_midpoints() -> np.ndarray:
    mags = _E2M1.values[:8]
    return (mags[:-1] + mags[1:]) / 2


def _largest(kind: _Kind) -> float:
    """The element type's largest finite value: 6, 448, 57344."""
    return float(np.nanmax(kind.values[: kind.codes][np.isfinite(kind.values[: kind.codes])]))


def _shared_exponent(amax: np.ndarray, kind: _Kind, rule: Rule) -> np.ndarray:
    """Each block's scale exponent (before clamping) from its finite max ``amax``
    (0 for an all-zero or non-finite block, which gets -127)."""
    zero = amax == 0
    if rule == "ggml":
        with np.errstate(divide="ignore"):
            log2 = np.log2(amax).astype(np.float32)  # float32-rounded, as gguf-py's
        floor = np.floor(log2, where=~zero, out=np.zeros_like(log2))
        exponent: np.ndarray = floor.astype(np.int64) - 2
    elif rule == "ceil":
        # The smallest e with amax <= top * 2**e: an estimate, then exact comparisons
        # (ldexp of the element's max is exact), one step each way.
        top = _largest(kind)
        with np.errstate(divide="ignore"):
            guess = np.ceil(np.log2(amax / top), where=~zero, out=np.zeros_like(amax))
        exponent = guess.astype(np.int64)
        exponent += np.ldexp(top, exponent) < amax
        exponent -= np.ldexp(top, exponent - 1) >= amax
    else:  # OCP: floor(log2(amax)) - emax, exactly (frexp's exponent is floor + 1)
        exponent = np.frexp(amax)[1].astype(np.int64) - 1 - kind.emax
    exponent[zero] = -127
    return exponent


@set_module(_MODULE)
def quantize(
    x: npt.ArrayLike,
    *,
    element: str = "e2m1",
    block_size: int = 32,
    axis: int = -1,
    rule: Rule = "ocp",
) -> tuple[np.ndarray, np.ndarray]:
    """Quantize ``x`` to block-scaled elements and e8m0 scales.

    Parameters
    ----------
    x : array_like of float
        float16/32/64, bfloat16 or another ml_dtypes float.
    element : {"e2m1", "f8e4m3", "f8e5m2"}
        The element type (MXFP4, MXFP8).
    block_size : int
        Elements per scale along ``axis``; the last block may be partial.
    axis : int
        The axis the blocks run along.
    rule : {"ocp", "ceil", "ggml"}
        ``"ocp"``: OCP MX v1.0: exponent ``floor(log2(max|x|)) - emax``
        clamped to [-127, 127], elements rounded to nearest, ties to even,
        saturating.  ``"ceil"``: the smallest exponent that does not saturate,
        ``ceil(log2(max|x| / max_element))`` computed exactly (the rule of
        torchao's ``RCEIL`` mode, which computes it in float32), elements as
        for ``"ocp"``.  ``"ggml"`` (e2m1 only): gguf-py's (ggml's Python) MXFP4
        rule: ``x`` rounded to float32 first, exponent from the float32-rounded
        ``log2`` of the block max (1023.99994 gives 10), nearest element with
        ties toward zero, +0 for zero; where gguf-py wraps the scale byte of a
        block whose max is below 2**-125, kiln_np clamps it to 0 (2**-127).
        A block holding a NaN or an infinity gets scale 0xff and +0 elements
        under every rule.

    Returns
    -------
    tuple of numpy.ndarray
        ``(values, scales)``: ``values`` of ``x``'s shape and the element's
        ml_dtypes type, ``scales`` ``float8_e8m0fnu`` of ``x``'s shape with
        ``axis`` divided by ``block_size`` rounded up.

    Raises
    ------
    KilnError
        TYPE for a non-float input, an unknown element or rule, ``"ggml"``
        with an element other than e2m1; SHAPE for a ``block_size`` below 1
        or an axis out of range.

    Examples
    --------
    >>> v, s = quantize([0.1, 1.0, -3.0, 5.0], block_size=4)
    >>> v.astype(float), s.view(np.uint8)
    (array([ 0.,  1., -3.,  4.]), array([127], dtype=uint8))
    >>> dequantize(v, s, block_size=4)
    array([ 0.,  1., -3.,  4.], dtype=float32)
    """
    kind = _QUANT_ELEMENTS.get(element) if isinstance(element, str) else None
    if kind is None:
        raise KilnError(
            "TYPE",
            f"expected element 'e2m1', 'f8e4m3' or 'f8e5m2', found {show_value(element)}",
        )
    if rule not in ("ocp", "ceil", "ggml"):
        raise KilnError("TYPE", f"expected rule 'ocp', 'ceil' or 'ggml', found {show_value(rule)}")
    if rule == "ggml" and kind is not _E2M1:
        raise KilnError(
            "TYPE", f"rule 'ggml' is GGML's MXFP4 rule: expected element 'e2m1', found {element!r}"
        )
    bs = check_int(block_size, "block_size", kind="SHAPE", minimum=1)
    arr = _float64(x)
    shape = tuple(arr.shape)
    a = _check_axis(axis, len(shape), f"x of shape {shape}")
    p, n, q = math.prod(shape[:a]), shape[a], math.prod(shape[a + 1 :])
    x3 = arr.reshape(p, n, q)
    if rule == "ggml":
        with np.errstate(over="ignore"):  # past float32's range: inf, so a NaN block
            x3 = x3.astype(np.float32).astype(np.float64)
    nb = -(-n // bs)
    scales = np.zeros((p, nb, q), _U8)
    codes = np.zeros((p, n, q), _U8)
    if x3.size:
        mag = np.abs(x3)
        amax = np.maximum.reduceat(mag, np.arange(0, n, bs), axis=1)
        finite = np.isfinite(amax)
        amax = np.where(finite, amax, 0.0)
        exponent = _shared_exponent(amax, kind, rule)
        exponent = np.clip(exponent, -127, 127)
        scales[...] = np.where(finite, exponent + 127, 255)
        shift = np.repeat(np.where(finite, exponent, 0), _repeats(n, bs), axis=1)
        y = np.ldexp(x3, -shift)
        y[~np.repeat(finite, _repeats(n, bs), axis=1)] = 0.0
        if rule == "ggml":
            m = np.searchsorted(_e2m1_midpoints(), np.abs(y), side="left").astype(_U8)
            codes[...] = m | np.where((y < 0) & (m > 0), 8, 0).astype(_U8)
        else:
            top = _largest(kind)
            codes[...] = np.clip(y, -top, top).astype(kind.dtype).view(_U8)
    values = codes.reshape(shape).view(kind.dtype)
    return values, scales.reshape(_blocked_shape(shape, a, bs)).view(_E8M0.dtype)


# -- GGUF layouts ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _GGMLLayout:
    code: int
    layout: Layout
    elements: int  # per block
    header: int  # scale bytes at the start of a block
    group: int  # bytes per half-split nibble group
    scale: _Kind
    record: np.dtype[Any]  # one block: its scale bytes, then its element bytes


def _ggml_layout(name: str, scale: _Kind, group: int) -> _GGMLLayout:
    row = next(t for t in _GGML_TYPES.values() if t.name == name)
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
    even = pairs.astype(_U8).view(lane)
    odd = (pairs >> 8).astype(_U8).view(lane)
    out = np.empty((even.size, 2), lane)
    low = even & mask
    low |= (odd & mask) << 4
    out[:, 0] = low
    even >>= 4
    even &= mask
    odd &= ~mask
    even |= odd
    out[:, 1] = even
    result: np.ndarray = out.view(_U8).reshape(q.shape)
    return result


def _kiln_to_split(k: np.ndarray, group: int) -> np.ndarray:
    """The inverse of :func:`_split_to_kiln`."""
    lane = _HALF[group]
    mask = np.array(0x0F0F0F0F0F0F0F0F, np.uint64).astype(lane)
    halves = np.ascontiguousarray(k).reshape(-1).view(lane).reshape(-1, 2)
    first, second = halves[:, 0], halves[:, 1]
    even = ((first & mask) | ((second & mask) << 4)).view(_U8)
    odd = (((first >> 4) & mask) | (second & ~mask)).view(_U8)
    out = even.astype("<u2")
    out |= odd.astype("<u2") << 8
    result: np.ndarray = out.view(_U8).reshape(k.shape)
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
    p = _payload_of(payload)
    g = _ggml_of(int(p.code), p.layout) if p is not None else None
    if p is None or g is None:
        found = (
            type(payload).__name__
            if p is None
            else f"{code_label(int(p.code))} with layout {p.layout!r}"
        )
        raise KilnError("TYPE", f"expected a payload of {_GGML_NAMES}, found {found}")
    info = _checked(p, g.layout.name)
    if not info.shape:
        raise KilnError(
            "SHAPE", f"{info.context}expected at least one dimension of blocks, found shape ()"
        )
    # Blocks as records (scale bytes, element bytes): copying a field is one strided
    # loop over blocks, where a 2-D slice of the bytes would be a loop per block.
    raw = to_numpy(p.code, p.data, info.shape, info.layout).reshape(-1)
    blocks = raw.view(g.record)
    m = blocks.shape[0]
    body = g.layout.block_size - g.header
    values = np.empty((m, body), _U8)
    scales = np.empty(m * g.header, _U8)
    if not block_scaled.repack_ggml(raw, values, scales, g.layout.block_size, to_kiln=True):
        scales.view(g.record["scales"])[...] = blocks["scales"]
        for b0 in range(0, m, _REPACK_BLOCKS):
            b1 = min(m, b0 + _REPACK_BLOCKS)
            q = np.ascontiguousarray(blocks["elements"][b0:b1]).view(_U8).reshape(-1, body)
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
    p = _payload_of(values)
    if p is None:
        arr = np.asarray(values)
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
    info = _checked(p, what)
    if info.count % 2:
        to_numpy(info.code, p.data, info.shape)  # the padding nibble's check
    return byte_view(p.data, what), info.shape


def _scale_array(scales: object, kind: _Kind, what: str) -> np.ndarray:
    sk, sbytes = _scales_bytes(scales)
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
        out.view(_U8), kb, flat_scales, g.layout.block_size, to_kiln=False
    ):
        out["scales"] = flat_scales.view(g.record["scales"])
        for b0 in range(0, m, _REPACK_BLOCKS):
            b1 = min(m, b0 + _REPACK_BLOCKS)
            split = _kiln_to_split(kb[b0:b1], g.group)
            out["elements"][b0:b1] = split.reshape(-1).view(g.record["elements"])
    info = payload_info(g.code, (*vshape[:-1], vshape[-1] // g.elements), g.layout)
    return Payload(info.code, readonly_view(out), info.shape, info.layout)


@set_module(_MODULE)
def dequantize_ggml(payload: object, *, dtype: npt.DTypeLike = np.float32) -> np.ndarray:
    """Exact floats of a GGUF MXFP4 or NVFP4 payload (or tensor), C order.

    ``dequantize(*from_ggml(payload), dtype=dtype)``: shape ``(..., m * 32)``
    (``m * 64`` for NVFP4) for block shape ``(..., m)``.

    Raises
    ------
    KilnError
        As :func:`from_ggml` and :func:`dequantize`.

    Examples
    --------
    >>> block = bytes([128]) + bytes([0x72]) + bytes(15)
    >>> dequantize_ggml(Payload(0x4727, memoryview(block), (1,), Layout("ggml.mxfp4", 17)))[
    ...     [0, 16]]
    array([ 2., 12.], dtype=float32)
    """
    return dequantize(*from_ggml(payload), dtype=dtype)


# -- gpt-oss ---------------------------------------------------------------------------------


def _u8_array(obj: object, what: str, *, e8m0: bool = False) -> np.ndarray:
    p = _payload_of(obj)
    arr = to_numpy(*p) if p is not None else np.asarray(obj)
    if arr.dtype == _U8 or (e8m0 and arr.dtype == _E8M0.dtype):
        return arr.view(_U8)
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
    blocks: object, scales: object, *, dtype: npt.DTypeLike = np.float32
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

_ONNX_ELEMENTS = {23: "FLOAT4E2M1", 17: "FLOAT8E4M3FN", 19: "FLOAT8E5M2", 3: "INT8"}
_ONNX_SCALES = {24: "FLOAT8E8M0", 17: "FLOAT8E4M3FN"}


def _onnx_payload(tensor: Any, allowed: dict[int, str], what: str) -> Payload:
    from kiln_np import onnx as kiln_onnx

    data_type = getattr(tensor, "data_type", None)
    if data_type not in allowed:
        raise KilnError(
            "TYPE",
            f"{what}: expected an onnx.TensorProto of type {' or '.join(allowed.values())}, "
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
    >>> x, s = to_onnx(*quantize([1.0, 2.0], block_size=2))
    >>> x.data_type, s.data_type, x.raw_data, s.raw_data
    (23, 24, b'd', b'~')
    """
    from kiln_np import onnx as kiln_onnx

    src = _values_source(values)
    sk, sbytes = _scales_bytes(scales)
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
    dtype: npt.DTypeLike = np.float32,
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
    >>> x, s = to_onnx(*quantize([[1.0, 2.0]], block_size=2))
    >>> dequantize_onnx(x, s, block_size=2)
    array([[1., 2.]], dtype=float32)
    """
    v, s = from_onnx(values, scales)
    return dequantize(v, s, block_size=block_size, axis=axis, dtype=dtype)
