"""``--tensor-type PATTERN=TYPE`` patterns as llama-quantize reads them.

llama-quantize lower-cases ``PATTERN`` (ASCII letters only: ``tolower`` in the C
locale), compiles it as a C++ ``std::regex`` (the ECMAScript grammar, over the
bytes of the string) and *searches* each tensor name with it.  Python's
:mod:`re` reads most patterns the same way, but not all: its ``.`` matches a
``\\r`` and its ``$`` matches before a final newline, it has syntax ECMAScript
has not (``(?P<n>...)``, lookbehind, ``\\A``, ``\\Z``, inline flags,
possessive quantifiers) and it accepts a ``{`` that ECMAScript refuses.
:func:`compile_pattern` therefore translates the ECMAScript pattern into a
Python bytes pattern that means the same, and refuses what the two would read
differently, so a pattern either matches what llama-quantize's would or is a
``KilnError``.  Names are searched as their UTF-8 bytes (:func:`name_bytes`),
as ``std::regex`` over ``std::string`` searches them.
"""

from __future__ import annotations

import re

from kiln_np._core.errors import KilnError

__all__ = ["compile_pattern", "name_bytes"]

_QUANTIFIER = re.compile(rb"\{[0-9]+(?:,[0-9]*)?\}")
_HEX2 = re.compile(rb"[0-9a-f]{2}")  # lower case: the pattern is lower-cased first
_KEPT_ESCAPES = frozenset(b"dswbfnrtv")  # the same in both grammars (after lower-casing)
_CLASS_ESCAPES = frozenset(b"dswfnrtv")  # inside [...], \b is a backspace
_SET_OPERATORS = frozenset(b"[&~|")  # Python may read these doubled as set operations


def name_bytes(name: str) -> bytes:
    """A tensor name as the bytes llama.cpp holds (a GGUF name that is not UTF-8
    comes back as those bytes).

    >>> name_bytes("blk.0.attn_v.weight")
    b'blk.0.attn_v.weight'
    """
    return name.encode("utf-8", "surrogateescape")


def _refuse(pattern: str, why: str) -> KilnError:
    return KilnError(
        "TYPE",
        f"--tensor-type pattern {pattern!r}: expected an ECMAScript regular expression "
        f"(std::regex, as llama-quantize compiles it) that Python's re reads alike; {why}",
    )


def _escape(src: bytes, i: int, in_class: bool, pattern: str) -> tuple[bytes, int]:
    """The Python form of the escape at ``src[i] == '\\'`` and where it ends."""
    if i + 1 >= len(src):
        raise _refuse(pattern, "found a '\\' that ends the pattern")
    c = src[i + 1]
    if c in (_CLASS_ESCAPES if in_class else _KEPT_ESCAPES):
        return src[i : i + 2], i + 2
    if c == ord("b"):  # only in a class: backspace
        return rb"\x08", i + 2
    if c == ord("x") and _HEX2.fullmatch(src, i + 2, i + 4):
        return src[i : i + 4], i + 4
    if c == ord("c") and i + 2 < len(src) and chr(src[i + 2]).isalpha() and src[i + 2] < 128:
        return b"\\x%02x" % (src[i + 2] % 32), i + 3
    if c == ord("0") and not (i + 2 < len(src) and chr(src[i + 2]).isdigit()):
        return rb"\x00", i + 2
    if not in_class and ord("1") <= c <= ord("9"):
        if i + 2 < len(src) and chr(src[i + 2]).isdigit():
            raise _refuse(pattern, f"found a back-reference of two digits at byte {i}")
        return src[i : i + 2], i + 2
    if c < 128 and chr(c).isalnum():
        raise _refuse(pattern, f"found the escape '\\{chr(c)}' at byte {i}")
    return b"\\" + bytes([c]), i + 2  # an identity escape: the byte itself


def _class(src: bytes, i: int, pattern: str) -> tuple[bytes, int]:
    """The Python form of the class ``[...]`` starting at ``src[i]`` and its end."""
    j = i + 1
    negated = j < len(src) and src[j] == ord("^")
    j += negated
    if j < len(src) and src[j] == ord("]"):  # ECMAScript: [] matches nothing, [^] anything
        return (rb"[\x00-\xff]" if negated else rb"(?!)"), j + 1
    out = [b"[^" if negated else b"["]
    can_start_range = False  # the last member was one character, not a range's end
    while j < len(src) and src[j] != ord("]"):
        c = src[j]
        if c == ord("-") and can_start_range and src[j + 1 : j + 2] not in (b"]", b""):
            out.append(b"-")  # a range: the next member is its end
            can_start_range = False
            j += 1
            c = src[j]
            ends_range = True
        else:
            ends_range = False
        if c == ord("\\"):
            piece, j = _escape(src, j, True, pattern)
            one_char = piece[1:2] not in (b"d", b"s", b"w")
        else:  # escaped where Python could read it as a set operation or a range
            piece, j = (b"\\" if c in _SET_OPERATORS or c == ord("-") else b"") + bytes([c]), j + 1
            one_char = True
        out.append(piece)
        can_start_range = one_char and not ends_range
    if j >= len(src):
        raise _refuse(pattern, f"found a '[' at byte {i} that no ']' closes")
    out.append(b"]")
    return b"".join(out), j + 1


def _translate(src: bytes, pattern: str) -> bytes:
    out: list[bytes] = []
    i = 0
    while i < len(src):
        c = src[i]
        if c == ord("\\"):
            piece, i = _escape(src, i, False, pattern)
            out.append(piece)
            continue
        if c == ord("["):
            piece, i = _class(src, i, pattern)
            out.append(piece)
            continue
        if c == ord("(") and src[i + 1 : i + 2] == b"?":
            if src[i + 2 : i + 3] not in (b":", b"=", b"!"):
                raise _refuse(pattern, f"found '{src[i : i + 3].decode('latin-1')}' at byte {i}")
            out.append(src[i : i + 3])
            i += 3
            continue
        if c == ord("{"):
            found = _QUANTIFIER.match(src, i)
            if found is None:
                raise _refuse(pattern, f"found a '{{' at byte {i} that is not a {{n,m}} count")
            out.append(found.group())
            i = found.end()
        elif c == ord("."):
            out.append(rb"[^\n\r]")  # ECMAScript's '.' stops at both line terminators
            i += 1
        elif c == ord("$"):
            out.append(rb"\Z")  # the end of the name only, never before a final newline
            i += 1
        else:
            out.append(bytes([c]))
            i += 1
        if c in b"*+?{" and src[i : i + 1] == b"+":
            raise _refuse(pattern, f"found a '+' after a quantifier at byte {i}")
    return b"".join(out)


def compile_pattern(pattern: str) -> re.Pattern[bytes]:
    """``pattern`` lower-cased and compiled as llama-quantize compiles it, to
    search :func:`name_bytes` with.

    Raises
    ------
    KilnError
        TYPE for a pattern that is not an ECMAScript regular expression, or
        that Python would read otherwise (lookbehind, named groups, ``\\A``,
        possessive quantifiers, a stray ``{``, a back-reference of two digits).

    Examples
    --------
    >>> p = compile_pattern("ATTN_V")  # lower-cased, then searched
    >>> bool(p.search(name_bytes("blk.0.attn_v.weight"))), bool(p.search(b"blk.0.attn_q.weight"))
    (True, False)
    >>> bool(compile_pattern(r"^blk\\.1\\.").search(b"blk.11.ffn_up.weight"))
    False
    >>> bool(compile_pattern("weight$").search(b"output.weight\\n"))
    False
    """
    src = name_bytes(pattern).lower()  # ASCII letters only, as tolower() in the C locale
    translated = _translate(src, pattern)
    try:
        return re.compile(translated)
    except re.error as e:
        raise _refuse(pattern, f"found {e}") from None
