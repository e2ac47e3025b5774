"""kiln_np: Kiln tensor payloads <-> numpy arrays, bit for bit.

The public surface is re-exported here; see ``kiln_np._codec`` for the wire
format and ``docs/architecture.md`` for which module owns what.
"""

from ._codec import Payload, from_numpy, to_numpy
from ._errors import KilnError
from ._explore import Description, ScaledDescription, bit_histogram, bit_values, describe
from ._files import LazyPayload, open_payload, write_payload
from ._nibbles import kernel_backend, pack_nibbles, unpack_nibbles
from ._payload import PayloadInfo, byte_length, payload_info
from ._table import (
    DTYPES,
    Code,
    DType,
    Layout,
    code_for_dtype,
    code_range,
    dtype_for_code,
    dtype_info,
)
from ._weights import Weights, WeightTensor, open_weights, save_weights

__version__ = "0.1.0"

__all__ = [
    "DTYPES",
    "Code",
    "DType",
    "Description",
    "KilnError",
    "Layout",
    "LazyPayload",
    "Payload",
    "PayloadInfo",
    "ScaledDescription",
    "WeightTensor",
    "Weights",
    "__version__",
    "bit_histogram",
    "bit_values",
    "byte_length",
    "code_for_dtype",
    "code_range",
    "describe",
    "dtype_for_code",
    "dtype_info",
    "from_numpy",
    "kernel_backend",
    "open_payload",
    "open_weights",
    "pack_nibbles",
    "payload_info",
    "save_weights",
    "to_numpy",
    "unpack_nibbles",
    "write_payload",
]
