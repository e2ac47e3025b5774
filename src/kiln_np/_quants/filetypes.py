"""llama.cpp's file types: what a GGUF file's ``general.file_type`` says, in words.

A GGUF file written by llama.cpp's converter or by ``llama-quantize`` carries
``general.file_type``, a number of llama.cpp's ``enum llama_ftype``: the label of
the whole file ("mostly Q4_K_M": most 2-D tensors of that type, the norms F32, a
few tensors of a type the mix chooses).  llama.cpp loads a file by each
tensor's own type and shows this key only as a label.

:data:`FILE_TYPES` is the one table of them: each :class:`FileType` row holds
the number, gguf-py's ``LlamaFileType`` name (``MOSTLY_Q4_K_M``; None where the
gguf-py of the test extra has none yet), the name ``llama-quantize`` takes
for it (``Q4_K_M``, from ``QUANT_OPTIONS`` in llama.cpp's
``tools/quantize/quantize.cpp``; None where it has no option), with the other
names ``llama-quantize`` takes for the same number (``Q4_K``), and the GGML
type its mix gives a quantized tensor no rule moves
(``llama_ftype_get_default_type``: ``Q4_K``; None where llama-quantize writes
no such file).  :func:`quantize_option` reads a ``llama-quantize`` name or
number into its row; ``kiln_np._quants.mix`` chooses each tensor's type from it.  A file type is
shown (:func:`file_type_label`) by its ``llama-quantize`` name, else by
gguf-py's name without ``MOSTLY_``, else by its number: 15 is ``Q4_K_M``,
1024 ``GUESSED``, an unknown 99 ``99``.

Numbers 4, 5, 6 (Q4_1_SOME_F16, Q4_2, Q4_3) and 33 to 35 (Q4_0_4_4, Q4_0_4_8,
Q4_0_8_8) were removed from llama.cpp and are not rows: a file carrying them
shows its number.  ``llama-quantize``'s ``COPY`` (copy the tensors, quantize
none) also writes 0; it names an action, not a file type, so it is no row of
the table but the row :data:`COPY` beside it.
``tests/quants/test_filetypes.py`` checks the table against gguf-py's enum, so
a file type gguf-py adds fails there until it is a row.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from kiln_np._core.checks import show_value
from kiln_np._core.errors import KilnError

__all__ = [
    "COPY",
    "FILE_TYPES",
    "OPTIONS",
    "QUANTIZATION_VERSION",
    "FileType",
    "file_type",
    "file_type_label",
    "file_type_number",
    "file_type_record",
    "guessed_file_type",
    "quantize_option",
]


@dataclass(frozen=True)
class FileType:
    """One llama.cpp file type (``enum llama_ftype``).

    Attributes
    ----------
    number : int
        Its value in ``general.file_type``.
    gguf_name : str or None
        gguf-py's ``LlamaFileType`` member (``"MOSTLY_Q4_K_M"``).
    option : str or None
        The name ``llama-quantize`` takes for it (``"Q4_K_M"``).
    aliases : tuple of str
        The other names ``llama-quantize`` takes for the same number (``"Q4_K"``).
    default : str or None
        The GGML type of a quantized tensor the mix's rules leave alone
        (``llama_ftype_get_default_type``: ``"Q4_K"``; ``"IQ2_XS"`` for
        ``IQ2_S``); None where llama-quantize writes no such file.
    """

    number: int
    gguf_name: str | None
    option: str | None
    aliases: tuple[str, ...] = ()
    default: str | None = None

    @property
    def label(self) -> str:
        """How it is shown: the ``llama-quantize`` name, else gguf-py's name
        without ``MOSTLY_``, else the number.

        >>> file_type(15).label, file_type(1024).label
        ('Q4_K_M', 'GUESSED')
        """
        if self.option is not None:
            return self.option
        if self.gguf_name is not None:
            return self.gguf_name.removeprefix("MOSTLY_")
        return str(self.number)


def _mostly(number: int, name: str, default: str | None = None, *aliases: str) -> FileType:
    """A row whose gguf-py name is ``MOSTLY_<name>``, whose option is ``name`` and
    whose default type is ``default`` (``name`` when not given)."""
    return FileType(number, f"MOSTLY_{name}", name, aliases, default or name)


FILE_TYPES: tuple[FileType, ...] = (
    FileType(0, "ALL_F32", "F32", (), "F32"),
    _mostly(1, "F16"),
    _mostly(2, "Q4_0"),
    _mostly(3, "Q4_1"),
    _mostly(7, "Q8_0"),
    _mostly(8, "Q5_0"),
    _mostly(9, "Q5_1"),
    _mostly(10, "Q2_K"),
    _mostly(11, "Q3_K_S", "Q3_K"),
    _mostly(12, "Q3_K_M", "Q3_K", "Q3_K"),
    _mostly(13, "Q3_K_L", "Q3_K"),
    _mostly(14, "Q4_K_S", "Q4_K"),
    _mostly(15, "Q4_K_M", "Q4_K", "Q4_K"),
    _mostly(16, "Q5_K_S", "Q5_K"),
    _mostly(17, "Q5_K_M", "Q5_K", "Q5_K"),
    _mostly(18, "Q6_K"),
    _mostly(19, "IQ2_XXS"),
    _mostly(20, "IQ2_XS"),
    _mostly(21, "Q2_K_S", "Q2_K"),
    _mostly(22, "IQ3_XS", "IQ3_S"),
    _mostly(23, "IQ3_XXS"),
    _mostly(24, "IQ1_S"),
    _mostly(25, "IQ4_NL"),
    _mostly(26, "IQ3_S"),
    _mostly(27, "IQ3_M", "IQ3_S"),
    _mostly(28, "IQ2_S", "IQ2_XS"),
    _mostly(29, "IQ2_M", "IQ2_S"),
    _mostly(30, "IQ4_XS"),
    _mostly(31, "IQ1_M"),
    _mostly(32, "BF16"),
    _mostly(36, "TQ1_0"),
    _mostly(37, "TQ2_0"),
    _mostly(38, "MXFP4_MOE", "MXFP4"),
    FileType(39, "MOSTLY_NVFP4", None),  # no llama-quantize option (yet), no default type
    _mostly(40, "Q1_0"),
    FileType(41, None, "Q2_0", (), "Q2_0"),  # MOSTLY_Q2_0; gguf-py 0.19 has no name for it
    FileType(1024, "GUESSED", None),  # "not specified in the model file": llama.cpp's guess
)
"""llama.cpp's file types, by number."""

QUANTIZATION_VERSION = 2
"""``GGML_QNT_VERSION``: what ``llama-quantize`` writes as
``general.quantization_version`` (the block layouts' version)."""

COPY = FileType(0, None, "COPY", (), "F32")
"""``llama-quantize COPY``: every tensor copied as it is, ``general.file_type``
the input's (0 when it has none)."""

_BY_NUMBER: Mapping[int, FileType] = MappingProxyType({row.number: row for row in FILE_TYPES})
OPTIONS: Mapping[str, FileType] = MappingProxyType(
    {
        name: row
        for row in (*FILE_TYPES, COPY)
        if row.default is not None
        for name in (row.option, *row.aliases)
        if name is not None
    }
)
"""Every name ``llama-quantize`` takes for a file type (options and aliases, and
``COPY``), upper case: its row."""


def file_type(number: int) -> FileType | None:
    """The row of ``number``, or None for a number that is no file type.

    >>> file_type(7).option, file_type(7).gguf_name, file_type(5) is None
    ('Q8_0', 'MOSTLY_Q8_0', True)
    """
    return _BY_NUMBER.get(number)


def file_type_number(value: object) -> int | None:
    """A ``general.file_type`` value as an int, or None for one that is not an
    integer (a Python or numpy one; a bool is not).

    >>> file_type_number(np.uint32(15)), file_type_number("15"), file_type_number(True)
    (15, None, None)
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        return None
    return int(value)


def file_type_label(value: object) -> str | None:
    """How a ``general.file_type`` value is shown: its row's :attr:`FileType.label`,
    the number for one that is no file type, None for a value that is not an
    integer (a hostile file's string: ``kiln-np meta`` shows it as it is).

    >>> file_type_label(15), file_type_label(np.uint32(32)), file_type_label(99)
    ('Q4_K_M', 'BF16', '99')
    >>> file_type_label("Q4_K_M") is None
    True
    """
    number = file_type_number(value)
    if number is None:
        return None
    row = _BY_NUMBER.get(number)
    return str(number) if row is None else row.label


def file_type_record(value: object) -> dict[str, Any] | None:
    """A ``general.file_type`` value as ``--json`` gives it: ``{"value", "name",
    "option", "gguf_name"}``: the number as stored, how it is shown
    (:func:`file_type_label`), ``llama-quantize``'s and gguf-py's names (``null``
    for a number that is no file type); None for a value that is not an integer.

    >>> file_type_record(15)
    {'value': 15, 'name': 'Q4_K_M', 'option': 'Q4_K_M', 'gguf_name': 'MOSTLY_Q4_K_M'}
    >>> file_type_record(99)
    {'value': 99, 'name': '99', 'option': None, 'gguf_name': None}
    """
    number = file_type_number(value)
    if number is None:
        return None
    row = _BY_NUMBER.get(number)
    return {
        "value": number,
        "name": str(number) if row is None else row.label,
        "option": None if row is None else row.option,
        "gguf_name": None if row is None else row.gguf_name,
    }


def quantize_option(value: object) -> FileType:
    """The file type ``llama-quantize`` reads from ``value``: an option name or
    alias in any case (``"q4_k"`` is ``Q4_K_M``'s row; ``"COPY"`` is
    :data:`COPY`), or a number with a default type (an int or a decimal string).

    Raises
    ------
    KilnError
        TYPE for anything else; the message lists the names.

    >>> quantize_option("q4_k").option, quantize_option(15).option, quantize_option("7").option
    ('Q4_K_M', 'Q4_K_M', 'Q8_0')
    """
    if isinstance(value, str):
        if value.upper() in OPTIONS:
            return OPTIONS[value.upper()]
        if value.isascii() and value.isdecimal() and len(value) < 10:
            value = int(value)
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        row = _BY_NUMBER.get(int(value))
        if row is not None and row.default is not None:
            return row
    raise KilnError(
        "TYPE",
        f"expected a llama-quantize file type, by name in any case or by number: "
        f"{', '.join(OPTIONS)}; found {show_value(value)}",
    )


_GUESS_ORDER = (
    "F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K TQ1_0 TQ2_0 IQ2_XXS "
    "IQ2_XS IQ2_S IQ3_XXS IQ1_S IQ1_M IQ4_NL IQ4_XS IQ3_S NVFP4 Q1_0 Q2_0"
)
_GUESSES: Mapping[str, int] = MappingProxyType(
    dict(
        zip(
            _GUESS_ORDER.split(),
            (0, 1, 32, 2, 3, 8, 9, 7, 10, 12, 15, 17, 18, 36, 37, 19, 20, 28, 23, 24, 31, 25,
             30, 26, 39, 40, 41),
            strict=True,
        )
    )
)  # fmt: skip
"""llama.cpp's loader's guess of a file type from its most common tensor type."""
GUESSED = 1024
"""``LLAMA_FTYPE_GUESSED``: the flag a guessed file type carries."""


def guessed_file_type(type_names: Iterable[str]) -> int:
    """The file type llama.cpp's loader guesses for a file without
    ``general.file_type``, from its tensors' GGML type names in its order: the
    type that first reaches the highest count (F32 for one it has no file type
    for), with the :data:`GUESSED` flag.  ``llama-quantize COPY`` writes it.

    >>> guessed_file_type(["F32", "Q8_0", "Q8_0", "F32"]), guessed_file_type([])
    (1031, 1024)
    """
    counts: dict[str, int] = {}
    best, most = "F32", 0
    for name in type_names:
        counts[name] = counts.get(name, 0) + 1
        if counts[name] > most:
            best, most = name, counts[name]
    return _GUESSES.get(best, 0) | GUESSED
