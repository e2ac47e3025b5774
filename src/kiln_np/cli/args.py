"""The command line's arguments: how a command declares them (its subparser, the
``--json`` flag, the payload options) and how their text is read (numbers,
shapes, codes, layouts, offsets, counts, sizes) into checked values.

A malformed value is the error its meaning calls for: ``--shape`` is SHAPE,
``--code``, ``--layout`` and ``--offset`` are TYPE; ``--first`` and
``--max-shard-size`` (counts and sizes the command line itself reads) are
USAGE.  The message shows what was given, cut to 60 characters.
"""

from __future__ import annotations

import argparse
import re
import textwrap
from collections.abc import Sequence
from typing import Any

from kiln_np._core.checks import byte_size, check_offset
from kiln_np._core.errors import ErrorKind, KilnError
from kiln_np._core.payload import PayloadInfo, payload_info
from kiln_np._core.table import Layout, as_code, code_label, code_range

__all__ = [
    "describe_payload",
    "json_flag",
    "parse_code",
    "parse_first",
    "parse_size",
    "payload_args",
    "subparser",
]

_SHAPE_HELP = "comma-separated non-negative integers such as 3,4, or () for a scalar"
_NUMBER = r"[+-]?(?:0x[0-9a-f]+|[0-9]+)"
_MAX_DIGITS = 40  # far past any valid value; longer numbers are shown by their length


# -- declaring ------------------------------------------------------------------------


def subparser(
    sub: Any, name: str, help_text: str, description: str, examples: Sequence[str]
) -> argparse.ArgumentParser:
    """One command's parser: its help line, a description wrapped to 79
    columns, and its examples as the epilog.

    Examples
    --------
    >>> sub = argparse.ArgumentParser(prog="kiln-np").add_subparsers()
    >>> subparser(sub, "ls", "list", "List the tensors.", ["kiln-np ls m.gguf"]).epilog
    'example:\\n  kiln-np ls m.gguf'
    """
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help=help_text,
        description=textwrap.fill(description, 79),
        epilog="example:\n" + "\n".join(f"  {e}" for e in examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


def json_flag(parser: argparse.ArgumentParser, help_text: str = "print one JSON object") -> None:
    """``--json``: print one JSON object (``docs/cli.md``) instead of text."""
    parser.add_argument("--json", action="store_true", help=help_text)


def payload_args(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """``IN --code --shape [--offset] [--layout]``: a payload in a file, read by
    :func:`describe_payload`."""
    parser.add_argument("input", metavar="IN", help="the payload file")
    parser.add_argument(
        "--code",
        required=required,
        help="dtype code: a number (2, 0x12) or a name (f32, bf16, BF16, e2m1, ...)",
    )
    parser.add_argument("--shape", required=required, help=f"element shape: {_SHAPE_HELP}")
    parser.add_argument(
        "--offset", default="0", help="payload start in the file, 64 or 0x40 (default 0)"
    )
    parser.add_argument(
        "--layout", help="NAME:BLOCK_SIZE, required with an opaque code (4096-32767)"
    )


# -- reading --------------------------------------------------------------------------


def _number(token: str, option: str, kind: ErrorKind) -> int:
    """A decimal or ``0x`` number from the command line; a number too long to
    be valid is refused here, by its length (Python refuses to convert past
    4300 digits, and a message should not hold them)."""
    digits = len(token.lstrip("+-"))
    if digits > _MAX_DIGITS:
        # Any value this long is out of range: say so with the option's own kind.
        raise KilnError(
            kind,
            f"{option} expects a number of at most {_MAX_DIGITS} digits, "
            f"found one of {digits} digits",
        )
    return int(token, 0 if "x" in token.lower() else 10)


def _parse_shape(text: str) -> tuple[int, ...]:
    """``--shape``: ``3,4``, ``0x10``, or ``()`` (or nothing) for a scalar.

    Examples
    --------
    >>> _parse_shape("3, 0x4"), _parse_shape("()")
    ((3, 4), ())
    """
    stripped = text.strip()
    if stripped in {"()", ""}:
        return ()
    if not re.fullmatch(rf"{_NUMBER}(\s*,\s*{_NUMBER})*", stripped, re.I):
        raise KilnError("SHAPE", f"--shape expects {_SHAPE_HELP}, got {_shown(text)}")
    return tuple(_number(d.strip(), "--shape", "SHAPE") for d in stripped.split(","))


def parse_code(text: str) -> int:
    """``--code``: a number (``2``, ``0x12``) or a name exactly as the Python
    API takes it (``bf16``, ``BF16``): one resolver for both.

    Examples
    --------
    >>> parse_code("0x12"), int(parse_code("BF16"))
    (18, 4)
    """
    if re.fullmatch(_NUMBER, text.strip(), re.I):
        return _number(text.strip(), "--code", "TYPE")
    try:
        return as_code(text)
    except KilnError as exc:
        raise exc.prefixed("--code: ") from None


def _parse_layout(text: str) -> Layout:
    name, sep, size = text.rpartition(":")
    if not sep or not name or not re.fullmatch(_NUMBER, size.strip(), re.I):
        raise KilnError(
            "TYPE", f"--layout expects NAME:BLOCK_SIZE such as q4_k:144, got {_shown(text)}"
        )
    block_size = _number(size.strip(), "--layout", "TYPE")
    try:
        return Layout(name, block_size)
    except KilnError as exc:
        raise exc.prefixed("--layout: ") from None


def _parse_offset(text: str) -> int:
    word = text.strip()
    if not re.fullmatch(_NUMBER, word, re.I):
        raise KilnError(
            "TYPE", f"--offset expects a byte offset >= 0 (such as 64 or 0x40), got {_shown(text)}"
        )
    offset = _number(word, "--offset", "TYPE")
    try:
        return check_offset(offset)
    except KilnError as exc:
        raise exc.prefixed("--offset: ") from None


def parse_first(text: str) -> int:
    """``--first``: how many leading elements ``inspect`` shows, 0 or more."""
    word = text.strip()
    if not re.fullmatch(r"\+?[0-9]{1,18}", word):
        raise argparse.ArgumentTypeError(
            f"expected a count of elements >= 0 (at most 18 digits), got {_shown(text)}"
        )
    return int(word)


def parse_size(text: str) -> int:
    """``--max-shard-size``: :func:`~kiln_np._core.checks.byte_size`, the one size
    grammar ``save_weights(max_shard_size=...)`` reads too; a malformed size is
    USAGE (an argparse type error).

    Examples
    --------
    >>> parse_size("5GB"), parse_size("2GiB"), parse_size("0x40")
    (5000000000, 2147483648, 64)
    """
    try:
        return byte_size(text, "a size")
    except KilnError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def _shown(text: str) -> str:
    """A command-line value in a message: its repr, cut to 60 characters."""
    shown = repr(text)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def describe_payload(args: argparse.Namespace) -> PayloadInfo:
    """The checked description of ``--code/--shape/--layout/--offset``.

    Examples
    --------
    >>> args = argparse.Namespace(code="u4", shape="3,5", layout=None, offset="0x40")
    >>> describe_payload(args)
    PayloadInfo(code=<Code.U4: 17>, shape=(3, 5), layout=None, offset=64, byte_length=8)
    """
    code = parse_code(args.code)
    layout = None if args.layout is None else _parse_layout(args.layout)
    if layout is None and code_range(code) == "opaque":
        raise KilnError(
            "TYPE", f"{code_label(code)} needs --layout NAME:BLOCK_SIZE (for example q4_k:144)"
        )
    shape = _parse_shape(args.shape)
    offset = _parse_offset(args.offset)
    return payload_info(code, shape, layout).with_offset(offset)
