"""What DLPack and JAX do with the arrays kiln_np decodes (issue 25, parts 3 and 4).

Run from the repository root; torch and JAX are each used when installed (JAX is
not a dependency of kiln_np, nor of its tests)::

    python benchmarks/check_interop.py dlpack   # numpy, ml_dtypes, torch: DLPack both ways
    python benchmarks/check_interop.py jax      # jnp.asarray of every decoded dtype keeps the bits

``dlpack`` prints, for each dtype kiln_np decodes to (the ml_dtypes ones, where
DLPack has a code), whether ``arr.__dlpack__()``, ``np.from_dlpack(arr)`` and
``torch.from_dlpack(arr)`` work (or the first line of their error), and the
DLPack ``(code, bits, lanes)`` torch exports for its own tensor of that dtype
(read from the capsule's ``DLTensor``).  ``jax`` decodes a payload of every bit
pattern (all 256 for one byte, all 65536 for bf16, the 16 nibbles for 4-bit)
with kiln_np, hands it to ``jnp.asarray`` and compares the bytes that come back
(``np.asarray`` of the JAX array, viewed as uint8), and tries
``jax.dlpack.from_dlpack`` of the same array.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
from typing import Any

import numpy as np

import kiln_np
from kiln_np._core.foreign import FOREIGN_BY_NAME

# (name, Kiln code or foreign type name, the torch dtype of the same bits or None)
CASES: list[tuple[str, int | str, str | None]] = [
    ("bfloat16", 4, "bfloat16"),
    ("float8_e4m3fn", 5, "float8_e4m3fn"),
    ("float8_e5m2", 6, "float8_e5m2"),
    ("float8_e8m0fnu", 19, "float8_e8m0fnu"),
    ("float8_e4m3fnuz", "float8_e4m3fnuz", "float8_e4m3fnuz"),
    ("float8_e5m2fnuz", "float8_e5m2fnuz", "float8_e5m2fnuz"),
    ("int4", 16, None),
    ("uint4", 17, None),
    ("float4_e2m1fn", 18, "float4_e2m1fn_x2"),
]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
    ]


def capsule_dtype(capsule: object) -> tuple[int, int, int]:
    """``(code, bits, lanes)`` of an unversioned ``dltensor`` capsule (the DLTensor
    is the first member of DLManagedTensor)."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    tensor = _DLTensor.from_address(get(capsule, b"dltensor"))
    return tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes


def decoded(code: int | str) -> np.ndarray:
    """Every bit pattern of ``code``, decoded by kiln_np."""
    if isinstance(code, str):
        return np.arange(256, dtype=np.uint8).view(FOREIGN_BY_NAME[code].dtype)
    row = kiln_np.dtype_info(code)
    if row.packed:
        nibbles = bytes([0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE])  # 0..15
        return kiln_np.to_numpy(code, nibbles, (16,))
    width = row.dtype.itemsize
    raw = np.arange(256**width, dtype=f"<u{width}").tobytes()
    return kiln_np.to_numpy(code, raw, (256**width,))


def attempt(call: Any) -> str:
    try:
        result = call()
    except Exception as exc:  # the outcome is what is measured
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:90]}"
    if isinstance(result, tuple):
        return f"ok {result}"
    return f"ok ({getattr(result, 'dtype', type(result).__name__)})"


def check_dlpack() -> None:
    import ml_dtypes

    try:
        torch: Any = importlib.import_module("torch")
    except ImportError:
        torch = None
    print(f"numpy {np.__version__}, ml_dtypes {ml_dtypes.__version__}", end="")
    print(f", torch {torch.__version__}" if torch is not None else ", no torch")
    print()
    print("| dtype | arr.__dlpack__() | np.from_dlpack(arr) | torch.from_dlpack(arr) "
          "| torch's export (code, bits, lanes) | np.from_dlpack(torch tensor) |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- |")
    for name, code, torch_name in CASES:
        arr = decoded(code)[:16].copy()  # writable: numpy exports no read-only array
        cells = [
            attempt(arr.__dlpack__),
            attempt(lambda a=arr: np.from_dlpack(a)),
            attempt(lambda a=arr: torch.from_dlpack(a)) if torch is not None else "(no torch)",
        ]
        if torch is not None and torch_name is not None:
            t = torch.zeros(8, dtype=torch.uint8).view(getattr(torch, torch_name))
            cells.append(attempt(lambda t=t: capsule_dtype(t.__dlpack__())).removeprefix("ok "))
            cells.append(attempt(lambda t=t: np.from_dlpack(t)))
        else:
            cells += ["(no torch dtype)", ""]
        print(f"| {name} | " + " | ".join(cells) + " |")


def check_jax() -> None:
    jax: Any = importlib.import_module("jax")
    jnp: Any = importlib.import_module("jax.numpy")
    print(f"jax {jax.__version__}, numpy {np.__version__}")
    print()
    try:
        torch: Any = importlib.import_module("torch")
    except ImportError:
        torch = None
    print("| dtype | patterns | jnp.asarray keeps the bits | jax.dlpack.from_dlpack(arr) "
          "| jax.dlpack.from_dlpack(torch tensor) |")  # fmt: skip
    print("| --- | --- | --- | --- | --- |")
    for name, code, torch_name in CASES:
        arr = decoded(code)
        back = np.asarray(jnp.asarray(arr))
        same = (
            back.dtype == arr.dtype
            and back.view(np.uint8).tobytes() == arr.view(np.uint8).tobytes()
        )
        writable = arr.copy()
        dl = attempt(lambda a=writable: jax.dlpack.from_dlpack(a))
        from_torch = "(no torch)" if torch_name else "(no torch dtype)"
        if torch is not None and torch_name is not None:
            t = torch.zeros(8, dtype=torch.uint8).view(getattr(torch, torch_name))
            from_torch = attempt(lambda t=t: jax.dlpack.from_dlpack(t))
        print(f"| {name} | {arr.size} | {'yes' if same else 'NO'} | {dl} | {from_torch} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("check", choices=("dlpack", "jax"))
    args = parser.parse_args(argv)
    check_dlpack() if args.check == "dlpack" else check_jax()


if __name__ == "__main__":
    main()
