"""Long fuzz runs of kiln_np's public entry points.

    python fuzz/run.py hypothesis --examples 20000
    python fuzz/run.py atheris --seconds 300        # needs: pip install atheris

``hypothesis`` runs the properties of tests/test_fuzz.py (the allow-list oracle: a
result consistent with ``byte_length``, or ``KilnError``, or ``TypeError`` for a
non-bytes-like buffer) with many more, non-derandomized examples, and counts the
calls each entry point received.  ``atheris`` drives the same entry points from
coverage-guided bytes.  Either exits nonzero on the first input that breaks the
oracle and prints it.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import kiln_np
from kiln_np import KilnError, Layout

TESTS = Path(__file__).resolve().parents[1] / "tests"

ENTRY_POINTS = [
    "to_numpy",
    "from_numpy",
    "byte_length",
    "pack_nibbles",
    "unpack_nibbles",
    "code_kind",
    "dtype_for_code",
    "code_for_dtype",
]


def _count_calls(calls: Counter[str]) -> None:
    """Wrap kiln_np's entry points so every call is counted."""
    for name in ENTRY_POINTS:
        original = getattr(kiln_np, name)

        def counted(
            *args: Any, _f: Callable[..., Any] = original, _n: str = name, **kw: Any
        ) -> Any:
            calls[_n] += 1
            return _f(*args, **kw)

        setattr(kiln_np, name, counted)


def run_hypothesis(examples: int) -> int:
    sys.path.insert(0, str(TESTS))
    import test_fuzz  # type: ignore[import-not-found,unused-ignore]
    from hypothesis import HealthCheck, settings

    calls: Counter[str] = Counter()
    _count_calls(calls)
    properties = [getattr(test_fuzz, n) for n in dir(test_fuzz) if n.endswith("_oracle")]
    profile = settings(
        max_examples=examples,
        derandomize=False,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    start = time.perf_counter()
    for prop in properties:
        settings(profile)(prop)()
        print(f"{prop.__name__}: ok", flush=True)
    took = time.perf_counter() - start
    print(f"\n{sum(calls.values())} calls in {took:.0f} s, no oracle violation")
    for name, n in calls.most_common():
        print(f"  {name}: {n}")
    return 0


def _one_input(data: bytes) -> None:
    import atheris  # type: ignore[import-untyped,import-not-found,unused-ignore]

    fdp = atheris.FuzzedDataProvider(data)
    code = fdp.PickValueInList([fdp.ConsumeIntInRange(0, 65535), fdp.ConsumeInt(8), 17, 7, 4096])
    rank = fdp.ConsumeIntInRange(0, 70)
    shape = [fdp.ConsumeIntInRange(-2, 2**64) if fdp.ConsumeBool() else fdp.ConsumeIntInRange(0, 5)
             for _ in range(rank)]  # fmt: skip
    layout = Layout("fuzz", fdp.ConsumeIntInRange(1, 4)) if fdp.ConsumeBool() else None
    offset = fdp.ConsumeIntInRange(0, 1)
    payload = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 64))
    buf: Any = memoryview(b"\x00" * offset + payload)[offset:]
    if fdp.ConsumeBool():
        buf = bytearray(payload)
    try:
        arr = kiln_np.to_numpy(code, buf, shape, layout)
    except KilnError:
        pass
    else:
        assert kiln_np.byte_length(code, shape, layout) == len(payload)
        p = kiln_np.from_numpy(arr, code=code, layout=layout)
        assert bytes(p.data) == payload
    with contextlib.suppress(KilnError):
        kiln_np.unpack_nibbles(payload, fdp.ConsumeIntInRange(-1, 200))
    dtype = fdp.PickValueInList([r.dtype for r in kiln_np.DTYPES] + [np.dtype("c8")])
    usable = len(payload) // dtype.itemsize * dtype.itemsize
    with contextlib.suppress(KilnError):
        kiln_np.from_numpy(np.frombuffer(payload[:usable], np.uint8).view(dtype))


def run_atheris(seconds: int) -> int:
    import atheris  # type: ignore[import-untyped,import-not-found,unused-ignore]

    atheris.instrument_all()  # kiln_np is already imported: instrument what is loaded
    atheris.Setup([sys.argv[0], f"-max_total_time={seconds}", "-print_final_stats=1"], _one_input)
    atheris.Fuzz()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="engine", required=True)
    hyp = sub.add_parser("hypothesis", help="hypothesis properties, many examples")
    hyp.add_argument("--examples", type=int, default=20000, help="examples per property")
    ath = sub.add_parser("atheris", help="coverage-guided (pip install atheris)")
    ath.add_argument("--seconds", type=int, default=300)
    args = parser.parse_args()
    if args.engine == "hypothesis":
        return run_hypothesis(args.examples)
    return run_atheris(args.seconds)


if __name__ == "__main__":
    sys.exit(main())
