"""Long fuzz runs of kiln_np's public entry points.

    python fuzz/run.py hypothesis --examples 10000
    python fuzz/run.py hypothesis --examples 2000 --match onnx
    python fuzz/run.py atheris --seconds 600        # needs: pip install atheris

``hypothesis`` runs the ``test_*_oracle`` properties of tests/fuzz/test_fuzz.py (the
core), tests/fuzz/test_fuzz_adapters.py (``kiln_np.onnx``, the file functions and
the explore functions) and tests/fuzz/test_fuzz_cli.py (``kiln-np`` command lines and
``.npy`` headers) with many more, non-derandomized examples: the allow-list
oracle, a result consistent with ``byte_length`` or ``KilnError`` (plus the few
documented exceptions listed in each file's docstring).  It counts the calls each
entry point received from the properties, and how each call ended.  The file
properties run half as many examples (each creates a file).

``atheris`` drives the core entry points and ``kiln_np.onnx.decode_raw``/
``decode_field`` from coverage-guided bytes.  Either exits nonzero on the first
input that breaks the oracle and prints it.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import kiln_np
import kiln_np.cli
from kiln_np import KilnError, Layout
from kiln_np import gguf as kgg
from kiln_np import onnx as ko
from kiln_np import safetensors as kst

TESTS = Path(__file__).resolve().parents[1] / "tests"
PROPERTY_MODULES = [  # (folder of tests/, module)
    ("fuzz", "test_fuzz"),
    ("fuzz", "test_fuzz_adapters"),
    ("fuzz", "test_fuzz_cli"),
    ("fuzz", "test_fuzz_gguf"),
    ("formats", "test_safetensors"),
    ("formats", "test_weights"),
]

ENTRY_POINTS: list[tuple[Any, str, list[str]]] = [
    (
        kiln_np,
        "kiln_np",
        [
            "to_numpy",
            "from_numpy",
            "byte_length",
            "pack_nibbles",
            "unpack_nibbles",
            "code_range",
            "dtype_for_code",
            "code_for_dtype",
            "open_payload",
            "save_payload",
            "describe",
            "bit_histogram",
            "bit_values",
        ],
    ),
    (kiln_np.Layout, "Layout", ["__init__"]),
    (kiln_np, "kiln_np (weights)", ["open_weights", "save_weights"]),
    (kst, "kiln_np.safetensors", ["open_safetensors", "save_safetensors"]),
    (kgg, "kiln_np.gguf", ["read_gguf", "open_gguf", "save_gguf"]),
    (kiln_np.cli, "kiln_np.cli", ["main"]),
    (kiln_np.LazyPayload, "LazyPayload", ["__init__", "__getitem__", "iter_chunks"]),
    (
        ko,
        "kiln_np.onnx",
        [
            "decode_raw",
            "decode_field",
            "encode_raw",
            "to_kiln",
            "from_kiln",
            "data_type_info",
            "data_type_for_dtype",
            "to_numpy",
            "from_numpy",
            "model_to_kiln",
        ],
    ),
]


def _count_calls(calls: defaultdict[str, Counter[str]]) -> None:
    """Wrap the entry points so that every call from outside kiln_np is counted
    with how it ended: ``returned``, ``KilnError``, or the exception's type."""
    for owner, prefix, names in ENTRY_POINTS:
        for name in names:
            original = getattr(owner, name)

            def counted(
                *args: Any,
                _f: Callable[..., Any] = original,
                _n: str = f"{prefix}.{name}",
                **kw: Any,
            ) -> Any:
                if sys._getframe(1).f_globals.get("__name__", "").startswith("kiln_np"):
                    return _f(*args, **kw)  # an internal call: counted at the entry point
                try:
                    result = _f(*args, **kw)
                except KilnError:
                    calls[_n]["KilnError"] += 1
                    raise
                except Exception as exc:
                    calls[_n][type(exc).__name__] += 1
                    raise
                calls[_n]["returned"] += 1
                return result

            setattr(owner, name, counted)


def run_hypothesis(examples: int, match: str) -> int:
    from hypothesis import HealthCheck, settings

    # Loaded before the properties are imported, so that the ones with their
    # own @settings (the file properties) derive their examples from it.
    settings.register_profile(
        "fuzz",
        max_examples=examples,
        derandomize=False,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    settings.load_profile("fuzz")
    sys.path[:0] = [str(TESTS), *sorted({str(TESTS / folder) for folder, _ in PROPERTY_MODULES})]
    calls: defaultdict[str, Counter[str]] = defaultdict(Counter)
    _count_calls(calls)
    properties = []
    for _, module_name in PROPERTY_MODULES:
        module = __import__(module_name)
        properties += [
            getattr(module, n)
            for n in sorted(dir(module))
            if n.startswith("test_") and n.endswith("_oracle") and match in n
        ]
    start = time.perf_counter()
    for prop in properties:
        began = time.perf_counter()
        prop()
        print(f"{prop.__name__}: ok ({time.perf_counter() - began:.0f} s)", flush=True)
    took = time.perf_counter() - start
    total = sum(sum(c.values()) for c in calls.values())
    print(f"\n{len(properties)} properties, {total} calls in {took:.0f} s, no oracle violation")
    for name, outcomes in sorted(calls.items(), key=lambda kv: -sum(kv[1].values())):
        ends = ", ".join(f"{k} {v}" for k, v in outcomes.most_common())
        print(f"  {name}: {sum(outcomes.values())} ({ends})")
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
    _one_onnx_input(fdp)


def _one_onnx_input(fdp: Any) -> None:
    """``decode_raw`` and ``decode_field``: a result that round-trips through
    ``encode_raw``, or KilnError."""
    data_type = fdp.ConsumeIntInRange(-1, 30)
    dims = [fdp.ConsumeIntInRange(0, 6) if fdp.ConsumeBool() else fdp.ConsumeIntInRange(-2, 2**64)
            for _ in range(fdp.ConsumeIntInRange(0, 4))]  # fmt: skip
    raw = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 64))
    try:
        arr = ko.decode_raw(data_type, raw, dims)
    except KilnError:
        pass
    else:
        assert arr.shape == tuple(dims)
        assert bytes(ko.encode_raw(arr, data_type)) == raw
    n = fdp.ConsumeIntInRange(0, 48)
    values: Any = fdp.PickValueInList(
        [
            fdp.ConsumeIntListInRange(n, -(2**64), 2**64),
            fdp.ConsumeIntListInRange(n, 0, 0xFF),
            fdp.ConsumeFloatList(n),
            [fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 4)) for _ in range(n)],
        ]
    )
    try:
        arr = ko.decode_field(data_type, values, dims)
    except KilnError:
        return
    assert arr.shape == tuple(dims)
    if ko.data_type_info(data_type).bits is not None:
        again = ko.decode_raw(data_type, ko.encode_raw(arr, data_type), dims)
        assert again.tobytes() == arr.tobytes()  # both native, C order: compares bits


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
    hyp.add_argument("--match", default="", help="run only properties whose name contains this")
    ath = sub.add_parser("atheris", help="coverage-guided (pip install atheris)")
    ath.add_argument("--seconds", type=int, default=300)
    args = parser.parse_args()
    if args.engine == "hypothesis":
        return run_hypothesis(args.examples, args.match)
    return run_atheris(args.seconds)


if __name__ == "__main__":
    sys.exit(main())
