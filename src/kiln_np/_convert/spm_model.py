"""The pieces of a SentencePiece ``tokenizer.model``, read without the sentencepiece
package.

A ``tokenizer.model`` is a protobuf ``ModelProto`` (sentencepiece's
``sentencepiece_model.proto``).  Only its field 1 matters to llama.cpp's converter:
the pieces, in id order, each a ``SentencePiece`` message of

- field 1 ``piece`` (string, wire type 2): the text, UTF-8;
- field 2 ``score`` (float, wire type 5): a little-endian binary32, 0 when absent;
- field 3 ``type`` (enum, wire type 0): 1 normal (the default), 2 unknown,
  3 control, 4 user-defined, 5 unused, 6 byte.

Every other field (the trainer and normalizer specs, ...) is skipped by its wire
type.  The reader is strict where sentencepiece's loader is: a varint longer than
10 bytes, a length past the end, a group wire type (3, 4) or an unknown one, a
piece that is not UTF-8, empty or given twice, a type outside 1-6, and a model
without an unknown piece are TYPE (LENGTH for a cut message).  Reading it here
keeps the sentencepiece package out of a conversion: its ``IdToPiece``,
``GetScore``, ``IsUnknown``/``IsControl``/``IsUnused``/``IsByte`` answer from
these three fields only.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from kiln_np._core.errors import KilnError

__all__ = ["BYTE", "CONTROL", "NORMAL", "UNKNOWN", "UNUSED", "USER_DEFINED", "Piece", "read_pieces"]

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
_MAX_VARINT = 10


class Piece(NamedTuple):
    """One piece of a SentencePiece model: its text, score (a binary32 value) and type."""

    text: str
    score: float
    type: int


def _varint(data: bytes, at: int, where: str) -> tuple[int, int]:
    value = shift = 0
    for i in range(at, min(at + _MAX_VARINT, len(data))):
        value |= (data[i] & 0x7F) << shift
        shift += 7
        if not data[i] & 0x80:
            return value, i + 1
    if len(data) - at < _MAX_VARINT:
        raise KilnError(
            "LENGTH",
            f"{where}expected a varint at byte {at}, found the message cut after "
            f"{len(data) - at} byte(s)",
        )
    raise _malformed(where, f"a varint of at most {_MAX_VARINT} bytes at byte {at}", "a longer one")


def _malformed(where: str, expected: str, found: str) -> KilnError:
    return KilnError("TYPE", f"{where}expected {expected}, found {found}")


def _fields(data: bytes, where: str) -> list[tuple[int, int, int | bytes]]:
    """The (field number, wire type, value) of a protobuf message, in order."""
    out: list[tuple[int, int, int | bytes]] = []
    at = 0
    while at < len(data):
        tag, at = _varint(data, at, where)
        number, wire = tag >> 3, tag & 7
        value: int | bytes
        if wire == 0:
            value, at = _varint(data, at, where)
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, at = data[at : at + size], at + size
        elif wire == 2:
            size, at = _varint(data, at, where)
            value, at = data[at : at + size], at + size
        else:
            raise _malformed(where, "wire type 0, 1, 2 or 5", f"{wire} (field {number})")
        if at > len(data):
            raise KilnError(
                "LENGTH",
                f"{where}expected field {number} to end by byte {len(data)}, found it "
                f"ending at byte {at}",
            )
        out.append((number, wire, value))
    return out


def _piece(data: bytes, where: str) -> Piece:
    text, score, kind = None, 0.0, NORMAL
    for number, wire, value in _fields(data, where):
        if (number, wire) == (1, 2) and isinstance(value, bytes):
            try:
                text = value.decode("utf-8")
            except UnicodeDecodeError:
                raise _malformed(where, "a piece in UTF-8", repr(value[:40])) from None
        elif (number, wire) == (2, 5) and isinstance(value, bytes):
            score = struct.unpack("<f", value)[0]
        elif (number, wire) == (3, 0) and isinstance(value, int):
            kind = value
        elif number in (1, 2, 3):
            raise _malformed(
                where, f"field {number} of wire type {(2, 5, 0)[number - 1]}", str(wire)
            )
    if not text:
        raise _malformed(where, "a piece's text", "none")
    if not NORMAL <= kind <= BYTE:
        raise _malformed(where, "a piece type from 1 to 6", f"{kind} for {text!r}")
    return Piece(text, score, kind)


def read_pieces(data: bytes, where: str = "") -> list[Piece]:
    """The pieces of a serialized SentencePiece ``ModelProto``, in id order.

    >>> piece = b"\\x0a\\x05<unk>\\x15\\x00\\x00\\x00\\x00\\x18\\x02"
    >>> read_pieces(b"\\x0a" + bytes([len(piece)]) + piece)
    [Piece(text='<unk>', score=0.0, type=2)]
    """
    pieces: list[Piece] = []
    for number, wire, value in _fields(data, where):
        if number == 1:
            if wire != 2 or not isinstance(value, bytes):
                raise _malformed(where, "the pieces (field 1) of wire type 2", f"wire type {wire}")
            pieces.append(_piece(value, f"{where}piece {len(pieces)}: "))
    seen: set[str] = set()
    for i, piece in enumerate(pieces):
        if piece.text in seen:
            raise _malformed(where, "each piece once", f"{piece.text!r} again at id {i}")
        seen.add(piece.text)
    if not any(p.type == UNKNOWN for p in pieces):
        raise _malformed(where, "an unknown piece (type 2), as sentencepiece does", "none")
    return pieces
