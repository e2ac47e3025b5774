"""kiln_np: Kiln tensor payloads <-> numpy arrays, bit for bit.

The public surface is re-exported here; see ``kiln_np._codec`` for the wire
format and ``docs/architecture.md`` for which module owns what.  The notebook
helpers and weight files are re-exported lazily (PEP 562): they load on first
use, so ``import kiln_np`` costs what the core costs.
"""

import typing as _typing

from ._codec import Payload, from_numpy, to_numpy
from ._core.errors import KilnError
from ._core.payload import PayloadInfo, byte_length, payload_info
from ._core.table import (
    DTYPES,
    Code,
    DType,
    Layout,
    code_for_dtype,
    code_range,
    dtype_for_code,
    dtype_info,
)
from ._files.payload import LazyPayload, open_payload
from ._files.saving import save_payload
from ._kernels.backend import kernel_backend
from ._kernels.nibbles import pack_nibbles, unpack_nibbles
from ._version import __version__

if _typing.TYPE_CHECKING:
    from ._convert.policy import QuantizePolicy
    from ._explore import (
        Comparison,
        Description,
        QuantizedDescription,
        ScaledDescription,
        TensorStats,
        WeightStats,
        bit_histogram,
        bit_values,
        compare,
        describe,
        plot_histograms,
    )
    from ._explore.report import report
    from ._weights.logical import LogicalTensor
    from ._weights.tensors import WeightTensor
    from ._weights.weights import Weights
    from .formats import open_weights, save_weights

_LAZY = {
    **dict.fromkeys(
        (
            "Comparison",
            "Description",
            "QuantizedDescription",
            "ScaledDescription",
            "TensorStats",
            "WeightStats",
            "bit_histogram",
            "bit_values",
            "compare",
            "describe",
            "plot_histograms",
        ),
        "._explore",
    ),
    "report": "._explore.report",
    "Weights": "._weights.weights",
    "LogicalTensor": "._weights.logical",
    "WeightTensor": "._weights.tensors",
    "QuantizePolicy": "._convert.policy",
    **dict.fromkeys(("open_weights", "save_weights"), ".formats"),
}


if not _typing.TYPE_CHECKING:  # for type checkers the imports above are the names

    def __getattr__(name: str) -> _typing.Any:
        import importlib

        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module 'kiln_np' has no attribute {name!r}")
        value = getattr(importlib.import_module(module, __name__), name)
        globals()[name] = value  # the next look-up is a plain global
        return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "DTYPES",
    "Code",
    "Comparison",
    "DType",
    "Description",
    "KilnError",
    "Layout",
    "LazyPayload",
    "LogicalTensor",
    "Payload",
    "PayloadInfo",
    "QuantizePolicy",
    "QuantizedDescription",
    "ScaledDescription",
    "TensorStats",
    "WeightStats",
    "WeightTensor",
    "Weights",
    "__version__",
    "bit_histogram",
    "bit_values",
    "byte_length",
    "code_for_dtype",
    "code_range",
    "compare",
    "describe",
    "dtype_for_code",
    "dtype_info",
    "from_numpy",
    "kernel_backend",
    "open_payload",
    "open_weights",
    "pack_nibbles",
    "payload_info",
    "plot_histograms",
    "report",
    "save_payload",
    "save_weights",
    "to_numpy",
    "unpack_nibbles",
]
