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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ._codec import from_numpy, to_numpy
from ._errors import KilnError
from ._table import Layout, dtype_info

__all__ = ["Case", "CaseResult", "load_cases", "run_case"]

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


def _case(file: str, raw: dict[str, Any]) -> Case:
    layout = raw.get("layout")
    elements = raw.get("elements")
    return Case(
        file=file,
        name=str(raw["name"]),
        code=int(raw["code"]),
        shape=tuple(int(d) for d in raw["shape"]),
        payload=bytes.fromhex(raw["payload"]),
        elements=None if elements is None else tuple(str(e) for e in elements),
        error=raw.get("error"),
        layout=None if layout is None else Layout(layout["name"], int(layout["block_size"])),
    )


def _files(directory: Path | None) -> Iterator[tuple[str, str]]:
    if directory is None:
        root = resources.files("kiln_np") / "golden"
        for entry in sorted(root.iterdir(), key=lambda e: e.name):
            if entry.name.endswith(".json"):
                yield entry.name, entry.read_text(encoding="utf-8")
    else:
        for path in sorted(directory.glob("*.json")):
            yield path.name, path.read_text(encoding="utf-8")


def load_cases(directory: str | Path | None = None) -> list[Case]:
    """Every case in the ``*.json`` files of ``directory`` (default: the
    cases shipped with kiln_np), in file then case order.

    Raises
    ------
    ValueError
        For a file that is not a ``kiln-golden/1`` case file.

    Examples
    --------
    >>> [c.name for c in load_cases() if c.name.startswith("kiln-v2")]
    ['kiln-v2-u4', 'kiln-v2-f8-pair', 'kiln-v2-bool-byte', 'kiln-v2-high-nibble']
    """
    cases: list[Case] = []
    for name, text in _files(None if directory is None else Path(directory)):
        doc = json.loads(text)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError(f"{name}: expected a {FORMAT!r} case file")
        try:
            cases.extend(_case(name, raw) for raw in doc["cases"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{name}: malformed case: {exc!r}") from exc
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


def format_table(results: Sequence[CaseResult]) -> str:
    """A plain-text table: case, code, dtype, shape, payload hex, result."""
    rows = [("case", "code", "dtype", "shape", "payload", "result")]
    for r in results:
        hexed = r.case.payload.hex(" ")
        if len(hexed) > 35:
            hexed = hexed[:32] + "..."
        rows.append(
            (
                r.case.name,
                str(r.case.code),
                r.dtype_name,
                "x".join(map(str, r.case.shape)) or "()",
                hexed or "(empty)",
                ("ok: " if r.ok else "FAIL: ") + r.detail,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row[:5], widths, strict=True)) + "  " + row[5]
        for row in rows
    ]
    return "\n".join(lines)
