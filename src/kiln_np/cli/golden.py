"""The ``golden`` command: run golden case files (the ones shipped with kiln_np,
or another implementation's), decoding every payload and encoding every valid
case; a case that fails exits 1.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kiln_np._explore.golden import CaseResult, format_table, load_cases, run_case

from .args import json_flag, subparser
from .errors import file_error
from .output import print_json, say

__all__ = ["add_golden"]


def _case_json(result: CaseResult) -> dict[str, Any]:
    """One case's result in ``golden --json``.

    Examples
    --------
    >>> result = run_case(load_cases(None)[0])
    >>> sorted(_case_json(result))
    ['code', 'detail', 'dtype', 'file', 'name', 'ok', 'shape']
    """
    case = result.case
    return {
        "file": case.file,
        "name": case.name,
        "code": case.code,
        "dtype": result.dtype_name,
        "shape": list(case.shape),
        "ok": result.ok,
        "detail": result.detail,
    }


def _cmd_golden(args: argparse.Namespace) -> int:
    try:
        cases = load_cases(args.dir)
    except OSError as exc:
        raise file_error("read", args.dir, exc) from exc
    except ValueError as exc:
        say(f"kiln-np: golden: {exc}", stream=sys.stderr)
        return 2
    if not cases:
        say(f"kiln-np: golden: no *.json case files in {args.dir}", stream=sys.stderr)
        return 2
    results = [run_case(case) for case in cases]
    failed = sum(not r.ok for r in results)
    if args.json:
        print_json(
            {
                "format": "kiln-np-golden/1",
                "passed": len(results) - failed,
                "failed": failed,
                "cases": [_case_json(r) for r in results],
            }
        )
    else:
        say(format_table(results))
        say(f"\n{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


def add_golden(sub: Any) -> None:
    """The ``golden`` command."""
    parser = subparser(
        sub,
        "golden",
        "run the golden cases",
        "Run golden case files: decode every payload, encode every valid case.",
        [
            "kiln-np golden            (the cases shipped with kiln_np)",
            "kiln-np golden ./vectors  (another implementation's case files)",
            "kiln-np golden --json",
        ],
    )
    parser.add_argument("dir", nargs="?", default=None, help="a directory of *.json case files")
    json_flag(parser, "print one JSON object: counts and every case's result")
    parser.set_defaults(run=_cmd_golden)
