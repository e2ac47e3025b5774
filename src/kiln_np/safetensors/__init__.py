"""safetensors files <-> Kiln payloads: a strict, lazy reader and a streaming writer.

The format (as the safetensors crate reads it)
----------------------------------------------
A file is:

1. ``N``, a little-endian uint64: the header's byte count.  It MUST be at
   most 100,000,000 (:data:`MAX_HEADER_BYTES`) and at most the rest of the
   file.
2. The header: ``N`` bytes of UTF-8 JSON, an object (writers pad it with
   spaces to a multiple of 8 bytes, so the data is 8-byte aligned).  Each key
   but ``__metadata__`` is a tensor name (unique) mapped to ``{"dtype":
   NAME, "shape": [dims], "data_offsets": [begin, end]}``; ``__metadata__``,
   when present, maps str to str.
3. The data: every tensor's bytes, little-endian, C order.  Offsets count
   from the end of the header.  Sorted by offset, the tensors MUST tile the
   data exactly: the first begins at 0, each begins where the one before
   ends, the last ends at the end of the file; each spans exactly the bytes
   its dtype and shape need.

What :func:`open_safetensors` checks (the crate's ``validate``, plus what a
serde parser gives it for free), each a :class:`~kiln_np.KilnError` naming the
file and the tensor: the header size (TYPE past 100 MB, LENGTH past the end
of the file); UTF-8 and JSON as strictly as serde_json reads it (no ``NaN``
or ``Infinity``, no number past binary64, no escape of half a surrogate
pair, nesting at most 127 levels), an object, unique keys, values that cost
at most 16 times the header (plus 64 MiB) as Python objects (TYPE); an index
at most 100 MB (:data:`MAX_INDEX_BYTES`, TYPE); ``__metadata__`` str to str
(TYPE); each entry's dtype (TYPE), shape (SHAPE), offsets two integers
(TYPE); offsets contiguous and in order (TYPE); each tensor's span equal to
its byte length (LENGTH); the data section exactly the file's remainder
(LENGTH); an odd F4 count (TYPE: its last byte would be half a tensor).
Opening reads the header and nothing else; tensors map the file when their
payload is asked for.

Types
-----
:data:`DTYPES` maps each safetensors dtype to a Kiln code.  F4 is Kiln e2m1
with the same shape: safetensors counts F4 elements and packs two per byte,
the earlier element in the low nibble, exactly Kiln's packed payload (torch's
``float4_e2m1fn_x2`` writes it so).  F8_E4M3FNUZ, F8_E5M2FNUZ and C64 have
no Kiln code: they travel as opaque payloads under the codes and layouts of
kiln_np's one registry of foreign element types (the ones the ONNX bridge
uses for the same types), one block per element.  F6_E2M3 and F6_E3M2 are
refused (:data:`REFUSED`): safetensors does not document how 6-bit elements
are packed into bytes.

Sharded checkpoints
-------------------
Hugging Face writes ``model-00001-of-00003.safetensors`` ... and
``model.safetensors.index.json``: ``{"metadata": {"total_size": N},
"weight_map": {tensor name: shard file}}``.  :func:`open_safetensors` on the
index opens every shard's header (shard-number order) and checks the index
against them: each shard file named must exist (``FileNotFoundError``) and
stay inside the index's directory (no absolute path, no ``..``); every tensor
a shard holds must be listed for that shard, every listed tensor must be in
its shard (TYPE otherwise).

Modules
-------
``_types`` (the dtype table and the format's constants), ``_reader`` and
``_writer``, which both build on ``_types`` and never on each other, and
``_format``: the format's row (``FORMAT``) and ``save_safetensors``, a
conversion planned and executed into it.
"""

from ._format import save_safetensors
from ._reader import open_safetensors
from ._types import (
    DTYPES,
    MAX_HEADER_BYTES,
    MAX_INDEX_BYTES,
    REFUSED,
    SafetensorsDType,
    safetensors_dtype,
)

__all__ = [
    "DTYPES",
    "MAX_HEADER_BYTES",
    "MAX_INDEX_BYTES",
    "REFUSED",
    "SafetensorsDType",
    "open_safetensors",
    "safetensors_dtype",
    "save_safetensors",
]
