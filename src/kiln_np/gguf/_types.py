"""The GGML type table as data, and the constants of the GGUF format that its reader
and writer share.

Each :class:`GGMLType` row says how GGML lays out one tensor type (elements and
bytes per block) and which Kiln code holds it: a closed code for the plain
types, an opaque ``0x4700 + type id`` with a ``ggml.<name>`` layout for the
block types.  :data:`TYPES` indexes the rows by GGML type id, as GGUF tensor
infos store it; :func:`ggml_type_for_code` goes the other way, from a Kiln code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from kiln_np._core.checks import set_module
from kiln_np._core.errors import KilnError
from kiln_np._core.table import Code, Layout, code_label
from kiln_np._quants.blocks import BLOCKS

__all__ = [
    "DEFAULT_ALIGNMENT",
    "MAGIC",
    "MAX_ALIGNMENT",
    "MAX_DIMS",
    "SET_KEY",
    "TYPES",
    "GGMLType",
    "ggml_type_for_code",
    "split_path",
]

MAGIC = b"GGUF"
"""The first four bytes of every GGUF file."""
DEFAULT_ALIGNMENT = 32
"""Data alignment when ``general.alignment`` is absent."""
MAX_ALIGNMENT = 1 << 16
"""The largest ``general.alignment`` kiln_np reads or writes: 64 KiB, the largest
page size in use (arm64 and ppc64le kernels with 64 KiB pages; Windows maps in
64 KiB granules), so a larger one gains a mapping nothing and costs padding
(2**30 turns a 4 KiB model into gigabytes).  llama.cpp itself accepts any power
of two; its writers and gguf-py's use 32."""
MAX_DIMS = 4
"""GGML's ``GGML_MAX_DIMS``: a GGUF tensor has at most 4 dims."""


def split_path(stem: str, no: int, count: int) -> str:
    """The name gguf-split gives split ``no`` (1-based) of ``count``: ``STEM-0000N-of-0000M.gguf``.

    >>> split_path("llama", 1, 3)
    'llama-00001-of-00003.gguf'
    """
    return f"{stem}-{no:05d}-of-{count:05d}.gguf"


SET_KEY = "kiln_np.split.set_id"
"""The key (a string of 32 random hex digits) that ``save_gguf`` writes into every
split of one write, so a reader can tell a set from a mix of two writes' splits."""


@set_module("kiln_np.gguf")
@dataclass(frozen=True)
class GGMLType:
    """One GGML tensor type and its Kiln form.

    Attributes
    ----------
    type_id : int
        GGML's ``enum ggml_type`` value, as GGUF tensor infos store it.
    name : str
        GGML's name (``"F32"``, ``"Q4_0"``, ``"MXFP4"``).
    block_elements : int
        Elements per block (1 for the plain types).
    block_bytes : int
        Bytes per block.
    code : int
        The Kiln code: a closed :class:`~kiln_np.Code` for F32, F16, BF16, F64,
        I8, I16, I32, I64; ``0x4700 + type_id`` (opaque) for the others.
    layout : Layout or None
        ``Layout("ggml.<name in lower case>", block_bytes)`` for opaque codes.
    """

    type_id: int
    name: str
    block_elements: int
    block_bytes: int
    code: int
    layout: Layout | None


_CLOSED: Mapping[str, Code] = MappingProxyType(
    {
        "F32": Code.F32,
        "F16": Code.F16,
        "BF16": Code.BF16,
        "F64": Code.F64,
        "I8": Code.I8,
        "I16": Code.I16,
        "I32": Code.I32,
        "I64": Code.I64,
    }
)


def _plain(type_id: int, name: str, nbytes: int) -> GGMLType:
    return GGMLType(type_id, name, 1, nbytes, _CLOSED[name], None)


TYPES: Mapping[int, GGMLType] = MappingProxyType(
    {
        row.type_id: row
        for row in sorted(
            (
                _plain(0, "F32", 4),
                _plain(1, "F16", 2),
                _plain(24, "I8", 1),
                _plain(25, "I16", 2),
                _plain(26, "I32", 4),
                _plain(27, "I64", 8),
                _plain(28, "F64", 8),
                _plain(30, "BF16", 2),
                *(
                    GGMLType(
                        b.type_id,
                        b.name,
                        b.elements,
                        b.bytes,
                        b.code,
                        Layout(b.layout_name, b.bytes),
                    )
                    for b in BLOCKS.values()
                ),
            ),
            key=lambda row: row.type_id,
        )
    }
)
"""Every GGML type a GGUF tensor may have, by type id (``TYPES[8]`` is Q8_0), in
type-id order: the plain types and ``kiln_np._quants.blocks.BLOCKS`` (ggml's
block sizes: Q8_1 is 36 bytes, where gguf-py 0.19's table says 40).  Ids 4, 5
(Q4_2, Q4_3) and 31-33, 36-38 (the repacked Q4_0/IQ4_NL variants) were removed
from GGML."""

_BY_CODE: Mapping[int, GGMLType] = MappingProxyType({int(t.code): t for t in TYPES.values()})


@set_module("kiln_np.gguf")
def ggml_type_for_code(code: int, layout: Layout | None = None) -> GGMLType:
    """The GGML type that holds Kiln payloads of ``code`` (and ``layout``).

    Raises
    ------
    KilnError
        TYPE for a code GGUF cannot hold (u8, bool, the 4-bit and 8-bit floats,
        e8m0, u16-u64, opaque codes other than ``0x4700 + type id`` with its
        exact layout).

    Examples
    --------
    >>> ggml_type_for_code(2).name
    'F32'
    >>> ggml_type_for_code(0x4708, Layout("ggml.q8_0", 34)).block_elements
    32
    """
    row = _BY_CODE.get(int(code))
    if row is None or row.layout != layout:
        wanted = "" if row is None else f" (GGML {row.name} needs layout {row.layout!r})"
        raise KilnError(
            "TYPE",
            f"GGUF cannot hold {code_label(int(code))} with layout {layout!r}{wanted}: expected "
            "f32, f16, bf16, f64, i8, i16, i32, i64 or a GGML block layout (code 0x4700 + "
            "GGML type id, Layout('ggml.<type>', bytes per block))",
            code=int(code),
        )
    return row
