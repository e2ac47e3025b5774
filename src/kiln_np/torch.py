"""Kiln payloads and torch tensors, zero-copy (optional extra: ``pip install 'kiln-np[torch]'``).

:func:`to_torch` gives a payload, a numpy (or ml_dtypes) array or a weight
tensor to torch as a tensor over the same memory; :func:`from_torch` gives a
CPU tensor back as a :class:`~kiln_np.Payload` over the tensor's memory.  No
bit passes through a float conversion: memory is viewed through a torch dtype
numpy knows of the same size (``t.view(torch.uint16).numpy()`` for bf16) and
the view is given the element's dtype.

===================== ================================ ============================
Kiln                  torch                            note
===================== ================================ ============================
f64 f32 f16 bf16      float64 float32 float16 bfloat16
f8e4m3 f8e5m2         float8_e4m3fn float8_e5m2
e8m0                  float8_e8m0fnu
bool, i8-u64          bool, int8-uint64
e2m1                  float4_e2m1fn_x2                 one torch element per byte:
                                                       the innermost dim halves
i4 u4                 uint8 (packed bytes); or int8 /  ``int4="packed"`` (default)
                      uint8 values                     or ``int4="values"``
FNUZ float8s, complex float8_e4m3fnuz float8_e5m2fnuz  foreign types (opaque codes)
                      complex64 complex128
other opaque codes    uint8 blocks                     as ``to_numpy``
===================== ================================ ============================

A weight tensor whose numbers are computed (a GGML quantized tensor, a
:class:`~kiln_np.LogicalTensor`) is given as its numbers, as ``np.asarray(t)``
gives them (float32 for GGML; ``dtype=`` for another); its bytes stay
``to_torch(t.payload())``.

The rules
---------
- **Zero-copy**: a payload and a whole-byte array share memory with the tensor
  (``t.data_ptr()`` is the buffer's address); writes through either are seen
  by the other.  Copies: an unpacked ml_dtypes 4-bit array (packed first),
  ``int4="values"``, a non-native byte order, read-only memory no one may
  write (below), and ``copy=True``.
- **Every tensor may be written** (issue 35): torch has no read-only tensors,
  and a write into a read-only map kills the process (SIGSEGV).  So numbers
  computed from the bytes (a GGML or logical weight, ``dtype=``) are a new
  array the tensor owns; a :class:`~kiln_np.WeightTensor` of a file's stored
  elements is a view of the file's *private*
  map (copy-on-write: zero-copy until written, a write copies the page it
  touches into this process's memory, the file never changes; the tensors of
  one file share that map, so they see each other's writes, while its
  payloads and arrays keep the file's bytes); a read-only view of writable
  memory (``from_numpy``'s and ``from_torch``'s payloads, an array made
  read-only) is shared; and read-only memory no one may write (``bytes``, a
  read-only map: ``open_payload``'s array, a payload's ``data``) is copied.
  torch warns once per process when handed a read-only view
  (``The given NumPy array is not writable``); kiln_np swallows that one
  warning, as ``safetensors.torch.load`` meets the same warning from
  ``torch.frombuffer``.
- **e2m1 and packed 4-bit**: torch counts bytes, so a Kiln shape ``(..., 2k)``
  is a tensor of shape ``(..., k)``; an odd innermost count is SHAPE (its last
  byte would straddle two rows).
- :func:`from_torch` reads CPU tensors only (another device is TYPE naming
  ``t.cpu()``); a tensor that requires grad is read detached; a conjugate or
  negative view is resolved (a copy); a non-contiguous tensor is read through
  its strides into C order (a copy, as :func:`kiln_np.from_numpy` does for a
  strided array); a sparse tensor, a quantized one (``torch.qint8`` ...),
  ``torch.bits*``, ``torch.uint1``-``uint7`` and ``int1``-``int7`` are TYPE.

``import kiln_np`` never imports torch; ``import kiln_np.torch`` does.  Every
door of kiln_np that takes arrays (``from_numpy``, ``save_payload``,
``save_weights``, ``describe``, ...) takes torch tensors of these dtypes too
without this module.
"""

from __future__ import annotations

import warnings
from functools import partial
from typing import Any, Literal

import numpy as np

try:
    import torch
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "kiln_np.torch needs torch: install the extra with pip install 'kiln-np[torch]'"
    ) from exc

from ._codec import (
    BIG_ENDIAN_HOST,
    Payload,
    as_array,
    check_content,
    decode,
    from_numpy,
    host_order,
)
from ._core.checks import U8, byte_view, set_module, show_value
from ._core.errors import KilnError
from ._core.payload import PayloadInfo, payload_info
from ._core.table import (
    NEEDS_OPAQUE,
    Code,
    CodeLike,
    DType,
    Layout,
    as_code,
    as_dtype,
    code_label,
    resolve,
)
from ._core.torch_types import (
    TORCH_TYPES,
    TorchType,
    element_shape,
    is_tensor,
    tensor_bits,
    torch_type_for_dtype,
)
from ._quants.elements import element_of
from ._weights.logical import LogicalTensor
from ._weights.tensors import WeightTensor, private_payload

__all__ = ["Int4", "from_torch", "to_torch"]

Int4 = Literal["packed", "values"]
"""How Kiln's 4-bit integers (i4, u4) meet torch, which has no packed dtype for
them: ``"packed"``, the payload bytes as ``torch.uint8`` (two elements a byte,
the innermost dim halved); ``"values"``, one element per ``torch.int8`` (i4) or
``torch.uint8`` (u4)."""
_INT4 = ("packed", "values")

# Per row: the numpy carrier dtype (what torch.from_numpy takes) and the torch
# dtype the tensor is viewed as (None when the carrier is the dtype itself).
_TORCH: dict[str, tuple[np.dtype[Any], Any]] = {
    row.name: (
        np.dtype(row.carrier),
        None if row.carrier == row.name else getattr(torch, row.name),
    )
    for row in TORCH_TYPES
}
# The small-call paths, by exact dtype (a look-up of a frozen dataclass would hash
# every field): numpy dtype -> (carrier or None, torch dtype or None), for
# to_torch of a native-order array; torch dtype -> (carrier torch dtype or None,
# Kiln code), for from_torch of a closed code's tensor.
_ARRAY_FAST: dict[np.dtype[Any], tuple[np.dtype[Any] | None, Any]] = {
    row.dtype: (None if row.dtype == c else c, t)
    for row in TORCH_TYPES
    if row.per_byte == 1
    for c, t in [_TORCH[row.name]]
}
_TENSOR_FAST: dict[Any, tuple[Any, int]] = {
    getattr(torch, row.name): (None if t is None else getattr(torch, row.carrier), row.code)
    for row in TORCH_TYPES
    if row.per_byte == 1 and row.layout is None and row.code != Code.BOOL
    for _, t in [_TORCH[row.name]]
}
# Payload -> torch for whole-byte closed codes but bool (whose bytes are checked):
# Kiln code -> (carrier, torch dtype or None).
_PAYLOAD_FAST: dict[int, tuple[np.dtype[Any], Any]] = {
    row.code: _TORCH[row.name]
    for row in TORCH_TYPES
    if row.per_byte == 1 and row.layout is None and row.code != Code.BOOL
}
_Tensor = torch.Tensor
_from_numpy = torch.from_numpy
_frombuffer = np.frombuffer
_new_payload = partial(tuple.__new__, Payload)  # Payload(...) without namedtuple's __new__
_U8 = next(row for row in TORCH_TYPES if row.name == "uint8")
_X2 = next(row for row in TORCH_TYPES if row.per_byte == 2)
_NOT_WRITABLE = "The given NumPy array is not writable"
_quiet = False  # torch has warned (or will not warn) about read-only memory any more


def _check_int4(int4: object) -> None:
    if int4 not in _INT4:
        raise KilnError(
            "TYPE", f"int4: expected one of {', '.join(map(repr, _INT4))}, found {show_value(int4)}"
        )


def _tensor(arr: np.ndarray, row: TorchType, copy: bool) -> torch.Tensor:
    """A tensor over ``arr`` (of ``row``'s numpy dtype or carrier) as ``row``'s dtype."""
    carrier, dtype = _TORCH[row.name]
    if arr.dtype != carrier:
        arr = arr.view(carrier)
    if copy or (arr.strides and min(arr.strides) < 0):
        arr = arr.copy()  # asked, or a reversed view: torch has no negative strides
    t = torch.from_numpy(arr) if arr.flags.writeable else _read_only(arr)
    return t if dtype is None else t.view(dtype)


def _read_only(arr: np.ndarray, owner: object = None) -> torch.Tensor:
    """A tensor of a read-only array: over its memory when that memory can be
    written (a read-only view of a writable buffer), else over a copy (bytes, a
    read-only map: a write would change an immutable object or kill the process,
    and torch tensors cannot be read-only).  ``owner``: where to start asking
    (``arr`` by default)."""
    if _writable_memory(arr if owner is None else owner):
        return _shared_readonly(arr)
    return _from_numpy(arr.copy())


def _writable_memory(owner: object) -> bool:
    """Whether the memory under ``owner`` (a read-only array or memoryview) can
    be written: asked of what owns it, through numpy bases and memoryviews
    (``Payload.data`` of ``from_numpy`` and ``from_torch`` is a read-only view of
    a writable array).  Memory of an unknown kind is not."""
    for _ in range(64):  # a chain of views is short; a longer one is not trusted
        kind = type(owner)
        if kind is memoryview:
            if not owner.readonly:  # type: ignore[attr-defined]
                return True
            owner = owner.obj  # type: ignore[attr-defined]
        elif kind is bytes:
            return False
        elif isinstance(owner, np.ndarray):
            if owner.flags.writeable:
                return True
            if owner.base is None:
                return bool(owner.flags.owndata)  # numpy's own allocation
            owner = owner.base
        else:
            try:
                with memoryview(owner) as view:  # type: ignore[arg-type]
                    return not view.readonly
            except TypeError:
                return False
    return False


def _shared_readonly(arr: np.ndarray) -> torch.Tensor:
    """``torch.from_numpy`` of a read-only array, without torch's once-per-process
    warning (the module docstring says why)."""
    global _quiet  # noqa: PLW0603 - one flag for the process, as torch's own
    if _quiet:
        return _from_numpy(arr)
    with warnings.catch_warnings(record=True) as seen:
        warnings.filterwarnings("always", _NOT_WRITABLE, UserWarning)
        t = torch.from_numpy(arr)
    # torch warns once (TORCH_WARN_ONCE): a call that no longer warns means later
    # ones will not either; until one is seen, every call is guarded.
    _quiet = not any(_NOT_WRITABLE in str(w.message) for w in seen)
    return t


def _packed_bytes(info: PayloadInfo, src: np.ndarray) -> np.ndarray:
    """The bytes of a packed 4-bit payload shaped as torch counts them."""
    shape = info.shape
    if not shape or shape[-1] % 2:
        found = shape[-1] if shape else "a scalar"
        raise KilnError(
            "SHAPE",
            f"{info.context}expected an even innermost dimension, found {found}: torch holds "
            "two 4-bit elements per byte along the innermost dim, so an odd count would split "
            "a byte between rows (reshape to an even innermost dim, or int4='values' for i4/u4)",
            code=int(info.code),
            shape=shape,
        )
    return src.reshape(*shape[:-1], shape[-1] // 2)


def _payload_tensor(p: Payload, int4: str, copy: bool) -> torch.Tensor:
    info = payload_info(p.code, p.shape, p.layout)
    try:
        src = byte_view(p.data, "the payload's data")
    except KilnError as exc:
        raise exc.prefixed(info.context, code=int(info.code), shape=info.shape) from exc.__cause__
    info.check_length(src.size)
    element = info.element
    if isinstance(element, Layout):
        foreign = element_of(info.code, element).foreign
        row = None if foreign is None else torch_type_for_dtype(foreign.dtype)
        if row is not None:
            return _tensor(src.view(row.dtype).reshape(info.shape), row, copy)
        return _tensor(src.reshape(info.decoded_shape), _U8, copy)
    check_content(info, src)
    if element.packed:
        if int4 == "values" and info.code != Code.E2M1:
            values = decode(info, src)  # a new array, one element per byte
            ints = values.astype(np.int8) if info.code == Code.I4 else values.view(U8)
            return torch.from_numpy(ints)
        return _tensor(_packed_bytes(info, src), _X2 if info.code == Code.E2M1 else _U8, copy)
    row = torch_type_for_dtype(element.dtype)
    assert row is not None  # every whole-byte Kiln code has a torch dtype
    return _tensor(host_order(src, element).reshape(info.shape), row, copy)


@set_module("kiln_np.torch")
def to_torch(
    x: Any, *, int4: Int4 = "packed", copy: bool = False, dtype: Any = None
) -> torch.Tensor:
    """A torch tensor over the memory of a payload, an array or a weight tensor,
    or of a weight's numbers.

    Parameters
    ----------
    x : Payload, array_like, WeightTensor
        A :class:`~kiln_np.Payload` (checked as :func:`kiln_np.to_numpy`
        checks it: length, bool bytes, padding nibble); a numpy or ml_dtypes
        array (or what ``np.asarray`` makes one of); a
        :class:`~kiln_np.WeightTensor` of a weight file: its numbers, as
        ``np.asarray(x)`` gives them.  Stored elements are a zero-copy view
        of the file's private (copy-on-write) map, so writes never reach the
        file; the numbers of a GGML quantized tensor (float32) or of a
        :class:`~kiln_np.LogicalTensor` (its reference's dtype) are computed
        into a new array the tensor owns.  The stored bytes are always
        ``to_torch(x.payload())`` (a copy: the payload is a view of the
        read-only map).
    int4 : {"packed", "values"}
        For i4 and u4 (:data:`Int4`): the packed bytes as ``uint8`` (the
        innermost dim halved), or one value per ``int8``/``uint8`` (a copy).
    copy : bool
        A tensor with memory of its own.
    dtype : numpy dtype or name, optional
        For a weight tensor only: its numbers as ``np.asarray(x, dtype)``
        gives them (a GGML type dequantized straight to float16 or bfloat16,
        a logical weight to float32 ...): a new array the tensor owns.

    Returns
    -------
    torch.Tensor
        On the CPU, of the dtype in the module's table; sharing ``x``'s memory
        unless a copy is listed there; always safe to write in place.

    Raises
    ------
    KilnError
        TYPE for a dtype with no torch dtype (ONNX's 2- and 6-bit types, a
        string array), a bad ``int4``, ``dtype`` with something not a weight
        tensor, a GGML type kiln_np has no decoder for (as ``np.asarray``);
        SHAPE for an e2m1 (or packed i4/u4) shape whose innermost dim is odd;
        the payload's own TYPE, SHAPE, LENGTH.

    Examples
    --------
    >>> import kiln_np
    >>> t = to_torch(kiln_np.to_numpy("bf16", b"\\x80\\x3f\\x00\\xc0", (2,)))
    >>> str(t.dtype), t.tolist()
    ('torch.bfloat16', [1.0, -2.0])
    >>> fp4 = to_torch(kiln_np.Payload(18, memoryview(b"\\x21\\x43"), (4,)))
    >>> str(fp4.dtype), tuple(fp4.shape), fp4.view(torch.uint8).tolist()
    ('torch.float4_e2m1fn_x2', (2,), [33, 67])
    """
    if type(x) is np.ndarray and not copy and dtype is None:
        fast = _ARRAY_FAST.get(x.dtype)  # native order, a whole-byte element
        if fast is not None:
            if int4 != "packed":
                _check_int4(int4)
            carrier, dtype = fast
            arr = x if carrier is None else x.view(carrier)
            if arr.strides and min(arr.strides) < 0:
                arr = arr.copy()  # a reversed view: torch has no negative strides
            t = torch.from_numpy(arr) if arr.flags.writeable else _read_only(arr)
            return t if dtype is None else t.view(dtype)
    if (
        type(x) is Payload
        and x.layout is None
        and not copy
        and dtype is None
        and not BIG_ENDIAN_HOST
    ):
        fast = _PAYLOAD_FAST.get(x.code)
        data = x.data
        if fast is not None and type(data) is memoryview and data.c_contiguous:
            info = payload_info(x.code, x.shape)
            if data.nbytes == info.byte_length:
                if int4 != "packed":
                    _check_int4(int4)
                carrier, dtype = fast
                arr = _frombuffer(data, carrier)
                if len(info.shape) != 1:
                    arr = arr.reshape(info.shape)
                t = _from_numpy(arr) if arr.flags.writeable else _read_only(arr, data)
                return t if dtype is None else t.view(dtype)
    if int4 != "packed":
        _check_int4(int4)
    if isinstance(x, WeightTensor):
        if dtype is not None or _computed(x):
            # Numbers computed from the bytes are a new array: the tensor owns it (the
            # stored elements asked as their own dtype are the read-only map's: copied).
            arr = np.asarray(x, None if dtype is None else as_dtype(dtype))
            return _array_tensor(arr, int4, copy=False)
        # Stored elements through the file's private map (copy-on-write), never the
        # read-only one.
        x = x.payload() if copy else private_payload(x)
    elif dtype is not None:
        raise KilnError(
            "TYPE",
            f"dtype=: expected a weight tensor (whose numbers it picks), found "
            f"{show_value(x)}; kiln_np hands other inputs over bit for bit (cast the "
            "tensor: .to(dtype))",
        )
    if isinstance(x, Payload):
        return _payload_tensor(x, int4, copy)
    return _array_tensor(x if type(x) is np.ndarray else as_array(x), int4, copy)


def _computed(t: WeightTensor) -> bool:
    """Whether ``t``'s numbers are computed from its bytes (not its stored elements):
    a logical weight, a GGML quantized type (one without a decoder is TYPE there)."""
    return isinstance(t, LogicalTensor) or element_of(t.info.code, t.info.layout).kind == "ggml"


def _array_tensor(arr: np.ndarray, int4: str, copy: bool) -> torch.Tensor:
    """:func:`to_torch` of an array."""
    row = torch_type_for_dtype(arr.dtype)
    if row is None:
        # A 4-bit ml_dtypes array is packed first (a copy); no Kiln code is TYPE there.
        return _payload_tensor(from_numpy(arr), int4, False)
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))  # torch takes native order only
    return _tensor(arr, row, copy)


def _int4_payload(
    t: torch.Tensor, row: TorchType, arr: np.ndarray, wanted: DType, int4: str
) -> Payload:
    """The i4 or u4 payload of a tensor of packed bytes or of values."""
    code = int(wanted.code)
    want = "uint8" if int4 == "packed" or code == Code.U4 else "int8"
    if row.name != want:
        raise KilnError(
            "TYPE",
            f"{code_label(code)} with int4={int4!r}: expected a torch.{want} tensor, found "
            f"{t.dtype}; kiln_np never casts",
            code=code,
            expected=want,
            found=row.name,
        )
    if int4 == "packed":
        data = np.ascontiguousarray(arr).reshape(-1).data.toreadonly()
        return Payload(wanted.code, data, element_shape(_X2, arr.shape))
    if code == Code.I4:
        bad = np.flatnonzero((arr < -8) | (arr > 7))
        if bad.size:
            index = int(bad[0])
            found = int(arr.reshape(-1)[index])
            raise KilnError(
                "TYPE",
                f"{code_label(code)}: expected values -8..7, found {found} at element {index}",
                code=code,
                shape=tuple(arr.shape),
                expected=7,
                found=found,
                index=index,
            )
        arr = np.bitwise_and(arr, 0x0F).view(U8)  # the nibble, as ml_dtypes stores it
    return from_numpy(arr.view(wanted.dtype))


@set_module("kiln_np.torch")
def from_torch(
    t: torch.Tensor,
    *,
    code: CodeLike | None = None,
    layout: Layout | None = None,
    int4: Int4 = "packed",
) -> Payload:
    """A CPU tensor's bits as a Kiln payload, over its memory where it can be.

    Parameters
    ----------
    t : torch.Tensor
        On the CPU, dense, of a dtype in the module's table.
    code : int or str, optional
        Inferred from the dtype when omitted; when given it must be the
        dtype's (kiln_np never casts), with two uses: ``"i4"``/``"u4"`` read
        a tensor as :func:`to_torch` gave it (``int4``), and an opaque code
        with ``layout`` reads ``uint8`` blocks (as :func:`kiln_np.from_numpy`).
    layout : Layout, optional
        For opaque codes.
    int4 : {"packed", "values"}
        With ``code`` i4 or u4: ``t`` is the packed bytes (``uint8``, the
        innermost dim doubles), or one value per ``int8`` (i4, -8..7) or
        ``uint8`` (u4, 0..15; other values are TYPE).

    Returns
    -------
    Payload
        Its ``data`` is a read-only view of ``t``'s memory when ``t`` is
        contiguous (and not a conjugate or negative view, and for 4-bit values
        never): take ``bytes(p.data)`` if ``t`` will change.

    Raises
    ------
    KilnError
        TYPE for something not a tensor, a tensor on another device than the
        CPU (move it: ``t.cpu()``), a sparse tensor, a dtype with no Kiln type
        (quantized, ``bits*``, ``uint1``-``uint7``, ``int1``-``int7``,
        ``complex32``), a ``code`` that is not the dtype's, a bool byte other
        than 0/1, an i4/u4 value out of range.

    Examples
    --------
    >>> import kiln_np
    >>> p = from_torch(torch.tensor([1.0, -2.0], dtype=torch.bfloat16))
    >>> p.code, bytes(p.data).hex(" "), p.shape
    (<Code.BF16: 4>, '80 3f 00 c0', (2,))
    >>> q = from_torch(torch.tensor([0x21, 0x03], dtype=torch.uint8), code="u4")
    >>> q.code, q.shape, kiln_np.to_numpy(*q).astype(int).tolist()
    (<Code.U4: 17>, (4,), [1, 2, 3, 0])
    """
    if type(t) is _Tensor and code is None and layout is None and not BIG_ENDIAN_HOST:
        fast = _TENSOR_FAST.get(t.dtype)
        if fast is not None:
            carrier, kiln = fast
            try:
                data = (t if carrier is None else t.view(carrier)).numpy().data
            except (RuntimeError, TypeError):  # another device, a grad, a conj or neg bit
                pass  # the general path says which, or reads it
            else:
                if data.c_contiguous and data.nbytes:
                    if int4 != "packed":
                        _check_int4(int4)
                    return _new_payload((kiln, data.cast("B").toreadonly(), data.shape, None))
    if not is_tensor(t):
        raise KilnError("TYPE", f"expected a torch.Tensor, found {show_value(t)}")
    if int4 != "packed":
        _check_int4(int4)
    row, arr = tensor_bits(t)
    if code is None and layout is not None:
        raise KilnError("TYPE", f"a layout ({layout!r}) was given with code=None: {NEEDS_OPAQUE}")
    wanted = None if code is None else resolve(code, layout)
    if isinstance(wanted, DType) and wanted.code in (Code.I4, Code.U4):
        return _int4_payload(t, row, arr, wanted, int4)
    if row.per_byte == 1 and row.layout is None:
        return from_numpy(arr, code=code, layout=layout)
    # e2m1 (its bytes are the payload) and the foreign types (their blocks).
    data = np.ascontiguousarray(arr).reshape(-1).view(U8).data.toreadonly()
    p = Payload(row.code, data, element_shape(row, arr.shape), row.layout)
    if wanted is not None and (int(p.code) != as_code(code) or p.layout != layout):
        natural = "" if p.layout is None else f", layout={p.layout!r}"
        raise KilnError(
            "TYPE",
            f"a {t.dtype} tensor: expected code={int(p.code)}{natural} ({code_label(int(p.code))})"
            f" or none, found code={code!r}{'' if layout is None else f', layout={layout!r}'}; "
            "kiln_np never casts",
            code=int(p.code),
        )
    return p
