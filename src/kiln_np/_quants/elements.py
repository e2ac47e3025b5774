"""What a payload's element is: the one reading of ``(code, layout)`` that every door
asks (weight tensors, the explorer, torch, dask, the command line, conversion, GGUF
dequantizing), so that a GGML block, a foreign element type and an opaque layout
mean the same thing everywhere.

- ``"code"``: a closed code (1-19), no layout: numpy holds its elements;
- ``"ggml"``: GGML blocks (code ``0x4700 + type id`` with a ``ggml.*`` layout),
  decodable (:attr:`Element.decodable`: kiln_np has the type's decoder) or not;
- ``"foreign"``: a foreign element type of ``kiln_np._core.foreign`` with its own
  layout, one element per block, numpy (or ml_dtypes) holding it;
- ``"opaque"``: any other opaque code and layout: bytes with no element type.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from kiln_np._core.foreign import FOREIGN_BY_CODE, ForeignType
from kiln_np._core.table import Layout

from .blocks import BLOCKS, CODE_BASE, Block
from .decode import block_of

__all__ = ["Element", "ElementKind", "element_of"]

ElementKind = Literal["code", "ggml", "foreign", "opaque"]


class Element(NamedTuple):
    """What one payload's element is (:func:`element_of`).

    ``block`` is the GGML block type of a ``"ggml"`` payload (for a type kiln_np
    does not know, a stand-in named ``type N`` of the layout's block size);
    ``decodable`` whether kiln_np decodes it; ``foreign`` the foreign type of a
    ``"foreign"`` payload; ``fills`` whether its bits fill each block (every bit
    of the storage is the element's: complex64 and the FNUZ float8s, not int2).
    """

    kind: ElementKind
    block: Block | None = None
    decodable: bool = False
    foreign: ForeignType | None = None

    @property
    def fills(self) -> bool:
        """Whether a foreign element's bits fill its block."""
        f = self.foreign
        return f is not None and f.bits == 8 * f.layout.block_size

    @property
    def decoded(self) -> Block | None:
        """The block type of a ``"ggml"`` payload kiln_np decodes, else None.

        >>> element_of(0x4708, Layout("ggml.q8_0", 34)).decoded.name
        'Q8_0'
        >>> element_of(0x47FF, Layout("ggml.new", 10)).decoded is None
        True
        """
        return self.block if self.decodable else None

    @property
    def per_block(self) -> int:
        """Elements per block (a closed code's element, an opaque block, GGML blocks of
        a type kiln_np does not know: 1).

        >>> element_of(0x4708, Layout("ggml.q8_0", 34)).per_block
        32
        """
        return 1 if self.block is None else self.block.elements


_CODE = Element("code")
_OPAQUE = Element("opaque")


def element_of(code: int, layout: Layout | None) -> Element:
    """The element of payloads of ``code`` with ``layout``.

    >>> element_of(2, None).kind
    'code'
    >>> e = element_of(0x4708, Layout("ggml.q8_0", 34))
    >>> e.kind, e.block.name, e.decodable
    ('ggml', 'Q8_0', True)
    >>> e = element_of(0x47FF, Layout("ggml.new", 10))
    >>> e.kind, e.block.name, e.decodable
    ('ggml', 'type 255', False)
    >>> element_of(0x1000, Layout("x", 4)).kind
    'opaque'
    """
    if layout is None:
        return _CODE
    found = FOREIGN_BY_CODE.get(code)
    if found is not None and found.layout == layout:
        return Element("foreign", foreign=found)
    if not layout.name.startswith("ggml.") or code >> 8 != CODE_BASE >> 8:
        return _OPAQUE
    decoded = block_of(code, layout)
    if decoded is not None:
        return Element("ggml", decoded, True)
    known = BLOCKS.get(layout.name[5:].upper())
    if known is not None and known.code == code and known.bytes == layout.block_size:
        return Element("ggml", known)
    type_id = int(code) - CODE_BASE
    name = layout.name[5:].upper() if known is not None else f"type {type_id}"
    return Element("ggml", Block(type_id, name, 1, layout.block_size))
