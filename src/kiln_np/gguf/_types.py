"""The GGML type table as data, and the constants of the GGUF format that its reader
and writer share.

Each :class:`GGMLType` row says how GGML lays out one tensor type (elements and
bytes per block) and which Kiln code holds it: a closed code for the plain
types, an opaque ``0x4700 + type id`` with a ``ggml.<name>`` layout for the
block types.  :data:`TYPES` indexes the rows by GGML type id, as GGUF tensor
infos store it; :func:`ggml_type_for_code` goes the other way, from a Kiln code.
A type id :data:`TYPES` does not list (a fork's, a newer ggml's, a removed one) is
an :func:`unknown_type`: its tensors are opaque bytes whose layout
(:func:`unknown_layout`) keeps the GGUF dims, so a writer can put them back.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from kiln_np._core.checks import MAX_INT64, set_module
from kiln_np._core.errors import KilnError
from kiln_np._core.table import OPAQUE_MAX, Code, Layout, code_label
from kiln_np._quants.blocks import BLOCKS, CODE_BASE

__all__ = [
    "ARCHITECTURE_KEY",
    "DEFAULT_ALIGNMENT",
    "FILE_TYPE_KEY",
    "MAGIC",
    "MAX_ALIGNMENT",
    "MAX_DIMS",
    "MAX_NAME_BYTES",
    "MAX_TYPE_ID",
    "NAME_KEY",
    "SET_KEY",
    "SPLIT_NAME",
    "TYPES",
    "GGMLType",
    "ggml_type_for_code",
    "later_split",
    "split_path",
    "split_siblings",
    "unknown_dims",
    "unknown_layout",
    "unknown_type",
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
MAX_NAME_BYTES = 63
"""llama.cpp's ``GGML_MAX_NAME`` (64) less the NUL: ``gguf_init_from_file`` refuses a
file with a longer tensor name."""


SPLIT_NAME = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")
"""A split's file name as gguf-split gives it (:func:`split_path`): the one spelling
that reading, writing, ``open_weights`` of a folder and ``kiln-np convert`` share."""


def split_path(stem: str, no: int, count: int) -> str:
    """The name gguf-split gives split ``no`` (1-based) of ``count``: ``STEM-0000N-of-0000M.gguf``.

    >>> split_path("llama", 1, 3)
    'llama-00001-of-00003.gguf'
    """
    return f"{stem}-{no:05d}-of-{count:05d}.gguf"


def later_split(name: str) -> bool:
    """Whether the file ``name`` is a split other than the first (opened with it).

    >>> later_split("m-00002-of-00003.gguf"), later_split("m-00001-of-00003.gguf")
    (True, False)
    """
    match = SPLIT_NAME.match(name)
    return match is not None and match["no"] != "00001"


def split_siblings(path: str) -> list[str]:
    """The splits of ``path``'s stem (``NAME.gguf`` -> ``NAME-NNNNN-of-NNNNN.gguf``)
    that exist beside it, whatever their count, sorted; [] when its folder cannot
    be listed.

    >>> split_siblings("/no/such/folder/m.gguf")
    []
    """
    folder, name = os.path.split(path)
    stem = name.removesuffix(".gguf")
    try:
        found = os.listdir(folder or os.curdir)
    except OSError:
        return []
    return sorted(
        os.path.join(folder, f)
        for f in found
        if (m := SPLIT_NAME.match(f)) is not None and m["stem"] == stem
    )


ARCHITECTURE_KEY = "general.architecture"
"""The model's architecture as llama.cpp names it (``"llama"``): the prefix of its
hyper-parameters' keys (``llama.context_length``)."""

NAME_KEY = "general.name"
"""The model's name, as its converter wrote it."""

FILE_TYPE_KEY = "general.file_type"
"""llama.cpp's file type of the whole file (``kiln_np._quants.filetypes``)."""

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
        For a type id :data:`TYPES` does not list, ``"type<id>"``.
    block_elements : int
        Elements per block (1 for the plain types; 0 when unknown).
    block_bytes : int
        Bytes per block (0 when unknown).
    code : int
        The Kiln code: a closed :class:`~kiln_np.Code` for F32, F16, BF16, F64,
        I8, I16, I32, I64; ``0x4700 + type_id`` (opaque) for the others.
    layout : Layout or None
        ``Layout("ggml.<name in lower case>", block_bytes)`` for opaque codes;
        None for an unknown type, whose layout is each tensor's own
        (:func:`unknown_layout`).
    """

    type_id: int
    name: str
    block_elements: int
    block_bytes: int
    code: int
    layout: Layout | None

    @property
    def known(self) -> bool:
        """Whether kiln_np knows the type's blocks (False for an :func:`unknown_type`)."""
        return self.block_bytes > 0


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
from GGML: like every id not listed here, they are an :func:`unknown_type`."""

MAX_TYPE_ID = OPAQUE_MAX - CODE_BASE
"""The largest GGML type id kiln_np opens (14591): its opaque code ``0x4700 + id``
must be a Kiln code, at most 32767."""

_UNKNOWN_LAYOUT = re.compile(
    rf"ggml\.type([0-9]{{1,5}})\[((?:[0-9]{{1,19}}(?:,[0-9]{{1,19}}){{0,{MAX_DIMS - 1}}})?)\]"
)


def unknown_type(type_id: int) -> GGMLType:
    """The row of a GGML type id that :data:`TYPES` does not list.

    Its block sizes are unknown (0), its code is ``0x4700 + type_id`` and its
    name ``"type<id>"``; each tensor's layout is :func:`unknown_layout`.

    Raises
    ------
    KilnError
        TYPE for an id above :data:`MAX_TYPE_ID`, whose code would pass 32767.

    Examples
    --------
    >>> row = unknown_type(142)
    >>> row.name, hex(row.code), row.known
    ('type142', '0x478e', False)
    """
    if not 0 <= type_id <= MAX_TYPE_ID:
        raise KilnError(
            "TYPE",
            f"expected a GGML type id of at most {MAX_TYPE_ID} (its opaque Kiln code 0x4700 + "
            f"id must be at most 32767), found {type_id}",
            expected=MAX_TYPE_ID,
            found=type_id,
        )
    return GGMLType(type_id, f"type{type_id}", 0, 0, CODE_BASE + type_id, None)


def unknown_layout(type_id: int, dims: tuple[int, ...]) -> Layout:
    """The layout of a tensor of an unknown GGML type: one byte per block, named
    by the type id and the GGUF dims (``ne``, innermost first), so that writing
    it back to GGUF needs nothing else.

    >>> unknown_layout(142, (4096, 32000))
    Layout(name='ggml.type142[4096,32000]', block_size=1)
    """
    return Layout(f"ggml.type{type_id}[{','.join(map(str, dims))}]", 1)


def unknown_dims(code: int, layout: Layout | None) -> tuple[int, ...] | None:
    """The GGUF dims that :func:`unknown_layout` put in ``layout``, or None when
    ``code`` and ``layout`` are not an unknown type's (or its dims are not
    GGUF's: more than 4, a product past 2**63-1).

    >>> unknown_dims(0x478E, unknown_layout(142, (64, 2)))
    (64, 2)
    >>> unknown_dims(0x478F, unknown_layout(142, (64, 2))) is None
    True
    """
    match = None if layout is None else _UNKNOWN_LAYOUT.fullmatch(layout.name)
    if match is None or int(match[1]) in TYPES or CODE_BASE + int(match[1]) != code:
        return None
    dims = tuple(int(d) for d in match[2].split(",")) if match[2] else ()
    if max(dims, default=0) > MAX_INT64 or math.prod(dims) > MAX_INT64:
        return None
    # Only the spelling unknown_layout gives (no "007", block size 1): one layout per tensor.
    return dims if layout == unknown_layout(int(match[1]), dims) else None


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
    >>> ggml_type_for_code(0x478E, Layout("ggml.type142[32,2]", 1)).name
    'type142'
    """
    if unknown_dims(int(code), layout) is not None:
        return unknown_type(int(code) - CODE_BASE)
    row = _BY_CODE.get(int(code))
    if row is None or row.layout != layout:
        wanted = "" if row is None else f" (GGML {row.name} needs layout {row.layout!r})"
        raise KilnError(
            "TYPE",
            f"GGUF cannot hold {code_label(int(code))} with layout {layout!r}{wanted}: expected "
            "f32, f16, bf16, f64, i8, i16, i32, i64, a GGML block layout (code 0x4700 + "
            "GGML type id, Layout('ggml.<type>', bytes per block)) or an unknown GGML type's "
            "bytes (Layout('ggml.type<id>[<ne>]', 1))",
            code=int(code),
        )
    return row
