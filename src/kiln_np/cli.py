"""The ``kiln-np`` command line.

Every error is one line on stderr, ``kiln-np: KIND: message``, with exit
status 2; a golden case that fails exits 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ._errors import KilnError
from ._golden import format_table, load_cases, run_case

__all__ = ["main"]


def _cmd_golden(args: argparse.Namespace) -> int:
    try:
        cases = load_cases(args.dir)
    except (OSError, ValueError) as exc:
        print(f"kiln-np: golden: {exc}", file=sys.stderr)
        return 2
    if not cases:
        print(f"kiln-np: golden: no *.json case files in {args.dir}", file=sys.stderr)
        return 2
    results = [run_case(case) for case in cases]
    print(format_table(results))
    failed = sum(not r.ok for r in results)
    print(f"\n{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kiln-np",
        description="Kiln tensor payloads <-> numpy arrays, bit for bit.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    golden = sub.add_parser(
        "golden",
        help="run the golden cases",
        description="Run golden case files: decode every payload, encode every valid case.",
        epilog="example: kiln-np golden            (the cases shipped with kiln_np)\n"
        "         kiln-np golden ./vectors  (another implementation's case files)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    golden.add_argument("dir", nargs="?", default=None, help="a directory of *.json case files")
    golden.set_defaults(run=_cmd_golden)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        status: int = args.run(args)
    except KilnError as exc:
        print(f"kiln-np: {exc}", file=sys.stderr)
        return 2
    return status


if __name__ == "__main__":
    sys.exit(main())
