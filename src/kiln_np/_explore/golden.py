"""Golden case files: load them and run them against this implementation.

A case file is JSON: ``{"format": "kiln-golden/1", "description": ...,
"cases": [...]}``.  Each case has ``name``, ``code``, ``shape`` (a list),
optional ``layout`` (``{"name", "block_size"}``), ``payload`` (wire bytes in
hex, spaces allowed) and either ``elements`` (each element's bits in hex, in
value order: the integer the element's bits spell, most significant digit
first; opaque blocks are written in wire order) or ``error`` (``TYPE``,
``LENGTH`` or ``SHAPE``).  See ``docs/golden.md``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kiln_np._codec import from_numpy, to_numpy
from kiln_np._core.checks import printable, show_int, show_value
from kiln_np._core.errors import KilnError
from kiln_np._core.table import Layout, dtype_info
from kiln_np._files.io import open_regular

__all__ = ["Case", "CaseFileError", "CaseResult", "format_table", "load_cases", "run_case"]

FORMAT = "kiln-golden/1"


@dataclass(frozen=True)
class Case:
    """One golden case, as written in its file."""

    file: str
    name: str
    code: int
    shape: tuple[int, ...]
    payload: bytes
    elements: tuple[str, ...] | None
    error: str | None
    layout: Layout | None


@dataclass(frozen=True)
class CaseResult:
    """What running one case found; ``ok`` is False with ``detail`` on failure."""

    case: Case
    ok: bool
    detail: str

    @property
    def dtype_name(self) -> str:
        if self.case.layout is not None:
            return f"opaque:{self.case.layout.name}"
        try:
            return dtype_info(self.case.code).name
        except KilnError:
            return "-"


_KINDS = ("TYPE", "LENGTH", "SHAPE")
_HEX = re.compile(r"[0-9a-fA-F]+")


class CaseFileError(ValueError):
    """A case file that is not a well-formed ``kiln-golden/1`` file; the message
    names the file and, for a malformed case, the case."""


def _integer(value: object, what: str) -> int:
    # JSON numbers: 1e400 is a float (inf), true is a bool; neither is an integer.
    if type(value) is not int:
        raise ValueError(f"expected {what} to be a JSON integer, found {show_value(value)}")
    return value


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected {what} to be a string, found {show_value(value)}")
    return value


def _case(file: str, raw: object) -> Case:
    if not isinstance(raw, dict):
        raise ValueError(f"expected a case object, found {show_value(raw)}")
    shape = raw.get("shape")
    if not isinstance(shape, list):
        raise ValueError(f"expected shape to be a list of integers, found {show_value(shape)}")
    elements, error = raw.get("elements"), raw.get("error")
    if (elements is None) == (error is None):
        raise ValueError(
            "expected exactly one of elements (a valid case) and error (an invalid one)"
        )
    if error is not None and error not in _KINDS:
        raise ValueError(
            f"expected error to be one of {', '.join(_KINDS)}, found {show_value(error)}"
        )
    if elements is not None and not (
        isinstance(elements, list)
        and all(isinstance(e, str) and _HEX.fullmatch(e) for e in elements)
    ):
        raise ValueError(
            f"expected elements to be a list of hex strings, found {show_value(elements)}"
        )
    layout = raw.get("layout")
    if layout is not None and not isinstance(layout, dict):
        raise ValueError(f"expected layout to be an object, found {show_value(layout)}")
    try:
        payload = bytes.fromhex(_text(raw.get("payload"), "payload"))
    except ValueError as exc:
        raise ValueError(f"expected payload to be hex bytes: {exc}") from None
    return Case(
        file=file,
        name=_text(raw.get("name"), "name"),
        code=_integer(raw.get("code"), "code"),
        shape=tuple(_integer(d, f"shape[{i}]") for i, d in enumerate(shape)),
        payload=payload,
        elements=None if elements is None else tuple(elements),
        error=error,
        layout=None
        if layout is None
        else Layout(
            _text(layout.get("name"), "layout name"),
            _integer(layout.get("block_size"), "layout block_size"),
        ),
    )


def _files(directory: Path | None) -> Iterator[tuple[str, bytes]]:
    if directory is None:
        # Imported here: importlib.resources (with tempfile, zipfile) costs more
        # than the rest of `kiln-np --version`, and only the golden command reads it.
        from importlib import resources

        root = resources.files("kiln_np") / "golden"
        for entry in sorted(root.iterdir(), key=lambda e: e.name):
            if entry.name.endswith(".json"):
                yield entry.name, entry.read_bytes()
    else:
        for path in sorted(directory.glob("*.json")):
            with open_regular(str(path)) as f:  # a FIFO named *.json is TYPE, never opened
                yield path.name, f.read()


def _parse(name: str, data: bytes) -> list[Case]:
    try:
        doc = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # not UTF-8, bad JSON, ints past 4300 digits
        raise CaseFileError(f"{name}: expected UTF-8 JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CaseFileError(f"{name}: expected a {FORMAT!r} case file")
    raws = doc.get("cases")
    if not isinstance(raws, list):
        raise CaseFileError(f'{name}: expected "cases" to be a list, found {show_value(raws)}')
    cases = []
    for index, raw in enumerate(raws):
        label = raw.get("name") if isinstance(raw, dict) else None
        case = f"case {index}" + (f" ({label!r})" if isinstance(label, str) else "")
        try:
            cases.append(_case(name, raw))
        except ValueError as exc:  # KilnError too: a layout Layout() refuses
            raise CaseFileError(f"{name}: {case}: {exc}") from None
    return cases


def load_cases(directory: str | Path | None = None) -> list[Case]:
    """Every case in the ``*.json`` files of ``directory`` (default: the
    cases shipped with kiln_np), in file then case order.

    Raises
    ------
    CaseFileError
        (a ``ValueError``) For a file that is not valid JSON or not a
        ``kiln-golden/1`` case file, or a malformed case: the message names
        the file and the case.
    OSError
        When a file cannot be read.

    Examples
    --------
    >>> [c.name for c in load_cases() if c.name.startswith("kiln-v2")]
    ['kiln-v2-u4', 'kiln-v2-f8-pair', 'kiln-v2-bool-byte', 'kiln-v2-high-nibble']
    """
    cases: list[Case] = []
    for name, data in _files(None if directory is None else Path(directory)):
        cases += _parse(name, data)
    return cases


def _element_bits(arr: np.ndarray, layout: Layout | None) -> list[str]:
    if layout is not None:
        return [bytes(block).hex() for block in arr.reshape(-1, layout.block_size)]
    row_bits = 8 * arr.dtype.itemsize
    digits = row_bits // 4
    flat = np.ascontiguousarray(arr).reshape(-1).view(f"<u{arr.dtype.itemsize}")
    return [format(int(v), f"0{digits}x") for v in flat.tolist()]


def _normalize(element: str, digits: int) -> str:
    return element.lower().rjust(digits, "0")


def _array_from_elements(case: Case) -> np.ndarray:
    assert case.elements is not None
    if case.layout is not None:
        blocks = b"".join(bytes.fromhex(e) for e in case.elements)
        return np.frombuffer(blocks, np.uint8).reshape((*case.shape, case.layout.block_size))
    row = dtype_info(case.code)
    width = max(row.bits, 8) // 8
    ints = [int(e, 16) for e in case.elements]
    return np.array(ints, f"<u{width}").view(row.dtype).reshape(case.shape)


def run_case(case: Case) -> CaseResult:
    """Decode the payload; for a valid case also encode the elements and
    compare the bytes.  Never raises for a wrong answer: the result says.

    Examples
    --------
    >>> run_case(load_cases()[0]).ok
    True
    """
    try:
        arr = to_numpy(case.code, case.payload, case.shape, case.layout)
    except KilnError as exc:
        if case.error == exc.kind:
            return CaseResult(case, True, f"{exc.kind} as expected")
        return CaseResult(case, False, f"expected {case.error or 'success'}, got {exc}")
    if case.error is not None:
        return CaseResult(case, False, f"expected {case.error}, decoded {arr.shape} instead")
    assert case.elements is not None
    got = _element_bits(arr, case.layout)
    want = [_normalize(e, len(g)) for e, g in zip(case.elements, got, strict=False)]
    if len(case.elements) != len(got) or got != want:
        return CaseResult(
            case, False, f"decode: expected elements {list(case.elements)}, got {got}"
        )
    encoded = from_numpy(_array_from_elements(case), code=case.code, layout=case.layout)
    if bytes(encoded.data) != case.payload:
        return CaseResult(
            case,
            False,
            f"encode: expected {case.payload.hex(' ')}, got {bytes(encoded.data).hex(' ')}",
        )
    return CaseResult(case, True, "decoded and encoded")


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def format_table(results: Sequence[CaseResult]) -> str:
    """A plain-text table: case, code, dtype, shape, payload hex, result; the
    case names whole, through :func:`~kiln_np._core.checks.printable`."""
    rows = [("case", "code", "dtype", "shape", "payload", "result")]
    for r in results:
        hexed = _cut(r.case.payload.hex(" "), 35)
        rows.append(
            (
                printable(r.case.name),
                show_int(r.case.code),
                r.dtype_name,
                _cut("x".join(map(show_int, r.case.shape)) or "()", 20),
                hexed or "(empty)",
                printable(("ok: " if r.ok else "FAIL: ") + r.detail),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row[:5], widths, strict=True)) + "  " + row[5]
        for row in rows
    ]
    return "\n".join(lines)
