"""torch dtypes as Kiln types: the one table, and a torch tensor's bits as numpy.

Every torch dtype that has a Kiln code or a foreign type (``_core.foreign``) is
one row.  A tensor of such a dtype is read through a numpy view of its memory:
``t.view(carrier).numpy()`` with ``carrier`` the numpy-supported torch dtype of
the same size, then viewed as the row's numpy dtype, so no bit passes through a
float conversion.

================== ============== ================== =========== ==============
torch dtype        Kiln           numpy dtype        carrier     per byte
================== ============== ================== =========== ==============
float64            1 f64          float64            float64
float32            2 f32          float32            float32
float16            3 f16          float16            float16
bfloat16           4 bf16         bfloat16           uint16
float8_e4m3fn      5 f8e4m3       float8_e4m3fn      uint8
float8_e5m2        6 f8e5m2       float8_e5m2        uint8
bool               7 bool         bool               bool
int8 ... uint64    8-15           int8 ... uint64    the same
float4_e2m1fn_x2   18 e2m1        uint8 (packed)     uint8       2 elements
float8_e8m0fnu     19 e8m0        float8_e8m0fnu     uint8
float8_e4m3fnuz    foreign 0x4f12 float8_e4m3fnuz    uint8
float8_e5m2fnuz    foreign 0x4f14 float8_e5m2fnuz    uint8
complex64          foreign 0x4f0e complex64          complex64
complex128         foreign 0x4f0f complex128         complex128
================== ============== ================== =========== ==============

``float4_e2m1fn_x2`` holds two e2m1 values per byte, the first in the low nibble
(Kiln's order), and torch counts bytes in its shape: a tensor of shape
``(..., k)`` holds Kiln elements of shape ``(..., 2k)`` (a 0-d one, two
elements).  Kiln's 4-bit integers have no packed torch dtype; every other torch
dtype (the quantized ``qint8`` ..., ``bits*``, ``uint1``-``uint7``,
``int1``-``int7``, ``complex32``) is TYPE, as is a tensor that is not on the CPU
or not dense.

torch is never imported here: a value can only be a torch tensor when torch is
in ``sys.modules`` already, so :func:`is_tensor` asks that first.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from .checks import U8
from .errors import KilnError
from .foreign import FOREIGN_BY_NAME
from .table import DTYPES, Code, DTypeIndex, Layout, spec_dtype

__all__ = [
    "TORCH_TYPES",
    "TorchType",
    "element_shape",
    "is_tensor",
    "tensor_array",
    "tensor_bits",
    "torch_type",
    "torch_type_for_dtype",
]


@dataclass(frozen=True)
class TorchType:
    """One torch dtype with a Kiln type.

    Attributes
    ----------
    name : str
        The torch attribute (``'bfloat16'``: ``torch.bfloat16``).
    code : int
        The Kiln code (a :class:`~kiln_np.Code`), or the foreign type's opaque code.
    layout : Layout or None
        The foreign type's layout (None for a closed code).
    dtype_spec : str
        The numpy dtype of an element as the table spells it; for
        ``float4_e2m1fn_x2``, ``'|u1'``: the packed bytes.
    carrier : str
        The torch dtype of the same size whose tensors ``.numpy()`` accepts.
    per_byte : int
        Kiln elements per torch element: 2 for ``float4_e2m1fn_x2``, else 1.
    """

    name: str
    code: int
    layout: Layout | None
    dtype_spec: str
    carrier: str
    per_byte: int = 1

    @functools.cached_property
    def dtype(self) -> np.dtype[Any]:
        """The numpy dtype of the tensor's numpy view (ml_dtypes loaded here)."""
        return spec_dtype(self.dtype_spec)


def _closed(name: str, kiln: str, carrier: str | None = None) -> TorchType:
    row = next(r for r in DTYPES if r.name == kiln)
    return TorchType(name, row.code, None, row.dtype_spec, carrier or name)


def _foreign(name: str, carrier: str | None = None) -> TorchType:
    f = FOREIGN_BY_NAME[name]
    return TorchType(name, f.code, f.layout, f.dtype_spec, carrier or name)


TORCH_TYPES: tuple[TorchType, ...] = (
    _closed("float64", "f64"),
    _closed("float32", "f32"),
    _closed("float16", "f16"),
    _closed("bfloat16", "bf16", "uint16"),
    _closed("float8_e4m3fn", "f8e4m3", "uint8"),
    _closed("float8_e5m2", "f8e5m2", "uint8"),
    _closed("bool", "bool"),
    _closed("int8", "i8"),
    _closed("uint8", "u8"),
    _closed("int16", "i16"),
    _closed("uint16", "u16"),
    _closed("int32", "i32"),
    _closed("uint32", "u32"),
    _closed("int64", "i64"),
    _closed("uint64", "u64"),
    TorchType("float4_e2m1fn_x2", Code.E2M1, None, "|u1", "uint8", 2),
    _closed("float8_e8m0fnu", "e8m0", "uint8"),
    _foreign("float8_e4m3fnuz", "uint8"),
    _foreign("float8_e5m2fnuz", "uint8"),
    _foreign("complex64"),
    _foreign("complex128"),
)
"""Every torch dtype with a Kiln type, Kiln code order, then the foreign ones."""

_BY_DTYPE: DTypeIndex[TorchType] = DTypeIndex(
    (t.dtype_spec, t) for t in TORCH_TYPES if t.per_byte == 1
)


def is_tensor(value: object) -> bool:
    """True for a torch tensor (any subclass); never imports torch.

    >>> is_tensor(np.zeros(2))
    False
    """
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


@functools.cache
def _by_torch_dtype() -> MappingProxyType[Any, TorchType]:
    """The rows keyed by ``torch.dtype`` and their carriers, once torch is loaded."""
    torch = sys.modules["torch"]
    return MappingProxyType({getattr(torch, t.name): t for t in TORCH_TYPES})


@functools.cache
def _carrier(row: TorchType) -> Any:
    return getattr(sys.modules["torch"], row.carrier)


def torch_type(dtype: Any) -> TorchType | None:
    """The row of a ``torch.dtype`` (torch is loaded), or None."""
    return _by_torch_dtype().get(dtype)


def torch_type_for_dtype(dtype: np.dtype[Any]) -> TorchType | None:
    """The row whose numpy dtype is ``dtype`` (byte order aside), or None.

    >>> torch_type_for_dtype(np.dtype(">f4")).name
    'float32'
    """
    return _BY_DTYPE.lookup(dtype.newbyteorder("="))


def element_shape(row: TorchType, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The Kiln element shape of a tensor of ``row`` and torch ``shape``.

    >>> element_shape(TORCH_TYPES[15], (3, 4)), element_shape(TORCH_TYPES[15], ())
    ((3, 8), (2,))
    """
    if row.per_byte == 1:
        return shape
    return (*shape[:-1], shape[-1] * row.per_byte) if shape else (row.per_byte,)


def _refused_dtype(t: Any) -> KilnError:
    torch = sys.modules["torch"]
    if t.is_quantized:
        way = "t.int_repr() for its integers, or t.dequantize() for its values"
    else:
        way = (
            "if its bytes are a Kiln type, view them as torch.uint8 (t.view(torch.uint8)) "
            "and name the code: kiln_np.torch.from_torch(t, code=...)"
        )
    names = ", ".join(r.name for r in TORCH_TYPES)
    return KilnError(
        "TYPE",
        f"expected a tensor of a torch dtype with a Kiln type ({names}), found {t.dtype} "
        f"of shape {tuple(t.shape)}: {way}",
        found=str(t.dtype).removeprefix(f"{torch.__name__}."),
    )


def _dense_cpu(t: Any) -> Any:
    """``t`` as a plain CPU tensor whose memory holds its values: detached,
    conjugate and negative views resolved (a copy); TYPE for another device or
    a sparse layout."""
    torch = sys.modules["torch"]
    if getattr(t, "is_nested", False):
        raise KilnError(
            "TYPE",
            f"expected a dense (strided) tensor, found a nested tensor of {t.dim()} dims: its "
            "rows differ in length; pad it (t.to_padded_tensor(0)) or pass each row (t.unbind())",
        )
    if t.layout is not torch.strided:
        raise KilnError(
            "TYPE",
            f"expected a dense (strided) tensor, found layout {t.layout} of shape "
            f"{tuple(t.shape)}: make it dense first (t.to_dense())",
        )
    if t.device.type != "cpu":
        raise KilnError(
            "TYPE",
            f"expected a CPU tensor, found {t.dtype} of shape {tuple(t.shape)} on device "
            f"'{t.device}': kiln_np reads host memory; move it first (t.cpu())",
        )
    if t.requires_grad:
        t = t.detach()  # the bits are read, not the graph
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    return t


def tensor_bits(t: Any) -> tuple[TorchType, np.ndarray]:
    """The row of the torch tensor ``t`` and a numpy view of its memory (the
    same strides): of the row's numpy dtype, or the packed bytes for
    ``float4_e2m1fn_x2``.  A copy only for a conjugate or negative view.

    Raises
    ------
    KilnError
        TYPE for a dtype with no Kiln type (quantized, ``bits*``, ``uint1``-
        ``uint7``, ...), a tensor on another device than the CPU, a sparse one.
    """
    row = torch_type(t.dtype)
    if row is None:
        raise _refused_dtype(t)
    try:
        arr = (t if row.carrier == row.name else t.view(_carrier(row))).numpy()
    except (RuntimeError, TypeError):  # another device, sparse, a grad, a conj or neg bit
        t = _dense_cpu(t)
        try:
            arr = (t if row.carrier == row.name else t.view(_carrier(row))).numpy()
        except (RuntimeError, TypeError) as exc:  # a fake, functional or batched tensor
            raise KilnError(
                "TYPE",
                f"expected a tensor whose memory numpy can read, found a {type(t).__name__} "
                f"of {t.dtype} that has none ({_first_line(exc)}): pass a real CPU tensor "
                "(outside torch.func transforms and fake modes)",
            ) from None
    return row, arr if arr.dtype == row.dtype else arr.view(row.dtype)


def _first_line(exc: BaseException) -> str:
    """An exception's message, its first line and at most 120 characters.

    >>> _first_line(RuntimeError("Cannot access data pointer" + chr(10) + "more"))
    'Cannot access data pointer'
    """
    line = str(exc).split("\n", 1)[0]
    return line if len(line) <= 120 else line[:117] + "..."


def tensor_array(t: Any) -> np.ndarray:
    """The torch tensor ``t`` as the numpy array a Kiln door reads: a view of
    its memory, or for ``float4_e2m1fn_x2`` a new ``float4_e2m1fn`` array,
    one element per byte (low nibble first).

    Raises
    ------
    KilnError
        As :func:`tensor_bits`.
    """
    row, arr = tensor_bits(t)
    if row.per_byte == 1:
        return arr
    packed = arr.reshape(arr.shape or (1,))
    out = np.empty(element_shape(row, arr.shape), U8)
    np.bitwise_and(packed, 0x0F, out=out[..., 0::2])
    np.right_shift(packed, 4, out=out[..., 1::2])
    return out.view(spec_dtype("ml_dtypes.float4_e2m1fn"))
