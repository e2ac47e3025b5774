"""kiln_np: Kiln tensor payloads <-> numpy arrays, bit for bit.

The public surface is re-exported here; see ``kiln_np._codec`` for the wire
format.
"""

from ._codec import Payload, from_numpy, to_numpy
from ._errors import KilnError
from ._explore import Description, bit_histogram, bit_values, describe
from ._files import LazyPayload, PayloadInfo, open_payload, write_payload
from ._nibbles import pack_nibbles, unpack_nibbles
from ._table import (
    DTYPES,
    Code,
    DType,
    Layout,
    byte_length,
    code_for_dtype,
    code_kind,
    dtype_for_code,
    dtype_info,
)

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
    "__version__",
    "bit_histogram",
    "bit_values",
    "byte_length",
    "code_for_dtype",
    "code_kind",
    "describe",
    "dtype_for_code",
    "dtype_info",
    "from_numpy",
    "open_payload",
    "pack_nibbles",
    "to_numpy",
    "unpack_nibbles",
    "write_payload",
]
