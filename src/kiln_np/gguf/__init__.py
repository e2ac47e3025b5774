"""GGUF files (llama.cpp's weight format) <-> Kiln payloads, lazily and strictly.

A GGUF file is read without reading tensor data: :func:`read_gguf` parses the
header into checked descriptions (:class:`GGUFTensorInfo`, each with a
:class:`~kiln_np.PayloadInfo` and the tensor's absolute offset in its file),
and :func:`save_gguf` streams tensors into a new file (crash-safely: a
temporary sibling renamed into place).  ``kiln_np.open_weights`` and
``kiln_np.save_weights`` use both.

The format (GGUF versions 2 and 3)
----------------------------------
All integers are little-endian.  A big-endian GGUF (its version field reads
byte-swapped, ``0x03000000``) is refused with TYPE.  A file is:

1. **Header**, 24 bytes: the magic ``b"GGUF"`` (``47 47 55 46``); ``version``,
   uint32, 2 or 3 (version 1 used 32-bit counts and is refused); the tensor
   count, uint64; the metadata key/value count, uint64.
2. **Metadata**: that many key/values, each a *string* key, a uint32 value
   type and the value.  A *string* is a uint64 byte count then that many bytes
   of UTF-8 (no terminator).  Value types (:class:`ValueType`): 0 uint8,
   1 int8, 2 uint16, 3 int16, 4 uint32, 5 int32, 6 float32, 7 bool (one byte,
   0 or 1: any other byte is TYPE), 8 string, 9 array, 10 uint64, 11 int64,
   12 float64.  An *array* is a uint32 item type, a uint64 item count, then the
   items back to back (strings with their own counts); arrays may hold arrays,
   to a depth of at most 4.  Keys are unique.
3. **Tensor infos**, one per tensor: the name (a string, unique), ``n_dims``
   (uint32, at most 4), ``n_dims`` uint64 dims ``ne[0..n_dims-1]``, the GGML
   type (uint32: a key of :data:`TYPES`, or an unknown type id, below), and the
   data offset (uint64), relative to the start of the data section.
4. **Padding** to a multiple of the alignment, then the **data section**.  The
   alignment is the ``general.alignment`` key (a uint32 power of two, at most
   65536 here: see ``MAX_ALIGNMENT`` in ``_types``) or 32.
   Each tensor's offset is a multiple of the alignment; writers pad each
   tensor to the alignment (llama.cpp also requires the tensors to follow one
   another in tensor-info order; kiln_np reads any order without overlap).

**Dims order.** ``ne[0]`` is the innermost, fastest-varying axis, so the Kiln
shape (C order) is the dims **reversed**, for every type.  A quantized type
packs ``ne[0]`` in blocks of ``block_elements`` elements (``block_bytes``
bytes each): its Kiln payload is opaque (code ``0x4700 + type id``, layout
``ggml.<type name in lower case>``), and its Kiln shape counts blocks, so the
innermost dimension is divided by ``block_elements``.  An F32 tensor with
``ne = [4096, 32000]`` is Kiln ``f32`` shape ``(32000, 4096)``; a Q4_0 tensor
with those dims is Kiln code ``0x4702`` shape ``(32000, 128)`` of 18-byte
blocks.  ``n_dims == 0`` is a scalar, Kiln shape ``()``.

**Unknown type ids.** A type id :data:`TYPES` does not list (a fork's private
id such as 142, a type newer than kiln_np, or one GGML removed: 4, 5, 31-33,
36-38, which older llama.cpp wrote and forks may reuse) does not stop the file
from opening.  Its size per element is unknown, so its bytes are taken from the
layout of the file: from its offset to the **next larger offset of any tensor
in the same file, or to the end of the file**, whichever comes first, so the
alignment padding after it is included (in a file llama.cpp reads, ggml's size is
a prefix of them);
none when a dim is 0 (``ggml_nbytes`` is 0), and at least one byte otherwise
(LENGTH).  Its Kiln form is opaque code ``0x4700 + type id`` (TYPE for an id
above 14591, whose code would pass 32767), shape ``(byte length,)`` of 1-byte
blocks, ``Layout("ggml.type<id>[<ne>]", 1)``: the layout names the type id and
keeps the dims as the file lists them (``ggml.type142[4096,32000]``), so a
writer puts back the same type id, dims and bytes.  :attr:`GGMLType.known` is
False for its row (``name`` ``"type<id>"``, 0 elements and bytes per block).

**What a reader checks** (all :class:`~kiln_np.KilnError`, naming the file and
the key or tensor, before anything is allocated from a claimed size): the
magic and version (TYPE); every count, string and array against the bytes the
file holds (LENGTH); value type ids (TYPE) and GGML type ids up to 14591
(TYPE); array depth (TYPE); bool bytes (TYPE); duplicate keys and tensor names
(TYPE); ``n_dims`` above 4, dims whose product passes 2**63-1, an innermost dim
that is not a whole number of blocks (SHAPE); offsets off the alignment or
overlapping another tensor (TYPE: sorted by offset, then end, so an empty
tensor at another's offset is none; an unknown type's bytes overlap any
non-empty tensor at its own offset); data past the end of the file, and an
unknown type's tensor with elements and no byte left (LENGTH).

Metadata values
---------------
:class:`GGUFMetadata` gives each key's value as a Python value that keeps its
GGUF type, parsed only when the key is read (a 150,000-entry token list costs
one pass over its byte counts at open): numbers are numpy scalars of their
exact type (``numpy.float32``, ``numpy.uint32``...), so a float keeps its bits
(a signalling NaN ``0x7f800001`` stays one; a Python float would quiet it);
bool is ``bool``; a string is ``str`` (bytes that are not UTF-8 come back as
lone surrogates, ``errors="surrogateescape"``, and are written back as the
same bytes); an array of numbers or bools is a read-only 1-D numpy array of
that type; an array of strings is a ``list`` of ``str``; an array of arrays
a :class:`GGUFArrays`, a read-only sequence of those decoded when indexed
(opening costs nothing per item; :func:`save_gguf` writes it back as its
bytes).  :attr:`GGUFMetadata.types` spells each key's type
(``"uint32"``, ``"array[string]"``, ``"array[array[int32]]"``; an array whose
arrays differ in type is ``"array[array]"``): :func:`save_gguf` takes that
mapping back as ``metadata_types``, which settles the one thing values cannot
say, the item type of an empty list.

Splits
------
llama.cpp's ``gguf-split`` writes ``NAME-00001-of-00003.gguf`` ...; each split
holds ``split.no`` (0-based), ``split.count`` and ``split.tensors.count``.
Reading the first split reads them all (each must exist beside it, agree on
the count, and together hold ``split.tensors.count`` distinct tensors); the
metadata is the first split's.  Each split is aligned by its own
``general.alignment`` (32 without it), and the splits of a set must agree
(TYPE otherwise).  :func:`save_gguf` with ``max_shard_size`` writes splits the
same way (gguf-py's key types: uint16, uint16, int32), ``general.alignment`` in
every split.  A ``--keep-split`` quantization (``QuantizePolicy(keep_split=True)``)
writes them as ``llama-quantize`` does instead: every key in the first split,
only the three split keys in the others, and no ``kiln_np.split.set_id``.

Modules
-------
``_types`` (the GGML type table and the format's constants), ``_values``
(metadata value types: the checked scan, the lazy mapping, the encoder),
``_reader`` and ``_writer``, which both build on those two and never on each
other; ``_format``, the format's row (``FORMAT``) and ``save_gguf``, a conversion
planned and executed into it; ``_dequantize`` and ``_quantize``, the GGML types' numbers both ways
(``dequantize``: ggml's ``dequantize_row_*``; ``quantize``: the bytes
``ggml_quantize_chunk`` writes with no importance matrix), on
``kiln_np._quants``; ``_imatrix``, ``read_imatrix``: ``llama-imatrix``'s files (GGUF,
read with ``_reader``, or the legacy ``.dat``) as the weights ``llama-quantize
--imatrix`` quantizes with.  ``kiln_np.gguf`` needs nothing but numpy.
"""

from ._dequantize import dequantize
from ._format import save_gguf
from ._imatrix import Imatrix, ImatrixEntry, read_imatrix
from ._quantize import quantize
from ._reader import GGUFFile, GGUFTensorInfo, open_gguf, read_gguf
from ._types import TYPES, GGMLType, ggml_type_for_code
from ._values import GGUFArrays, GGUFMetadata, ValueType

__all__ = [
    "TYPES",
    "GGMLType",
    "GGUFArrays",
    "GGUFFile",
    "GGUFMetadata",
    "GGUFTensorInfo",
    "Imatrix",
    "ImatrixEntry",
    "ValueType",
    "dequantize",
    "ggml_type_for_code",
    "open_gguf",
    "quantize",
    "read_gguf",
    "read_imatrix",
    "save_gguf",
]
