"""Importance matrices (``llama-imatrix``'s files) read into the weights
``llama-quantize --imatrix`` quantizes with.

An importance matrix holds, per weight tensor, the mean square of the
activations that multiplied each column of it while ``llama-imatrix`` ran the
model over calibration text: one float32 per column (GGUF's ``ne[0]``, a row's
length), and one vector per expert of a 3-D expert tensor.  A file is read whole
(it is small: a few floats per column of the model) and checked before anything
is allocated from a count it claims.  Two formats, told apart by their first
bytes (``GGUF``, or anything else: llama.cpp tries GGUF first, then the legacy
format):

**GGUF** (what ``llama-imatrix`` writes by default).  The keys
``imatrix.datasets`` (array of string: the calibration files), ``imatrix.chunk_count``
and ``imatrix.chunk_size`` (uint32: chunks read, tokens per chunk), all three
required (``llama-quantize``: "missing imatrix metadata"); per entry ``NAME``
two F32 tensors: ``NAME.in_sum2`` (``ne = [row length, experts]``: the sums of
squared activations) and ``NAME.counts`` (``ne = [1, experts]``: the tokens each
expert saw).  Other tensors are ignored; one of the pair without the other is
an error.  The weights are ``common_imatrix_load`` then ``load_imatrix``
(``tools/quantize/quantize.cpp``)::

    count[e]   = (float) lround(counts[e])        # half away from zero, as int64
    row length = in_sum2 elements / counts elements   # the tensors' shapes are not read
    w[e][i]    = count[e] > 0 ? in_sum2[e][i] / count[e] : 1     # float32 division

**Legacy** (``llama-imatrix --output-format dat``), little-endian::

    int32 n_entries (>= 1)
    n_entries x { int32 name length, the name's bytes, int32 ncall, int32 nval (>= 1),
                  nval x float32 values }
    optional: int32 chunk count, then optional: int32 dataset length, the dataset's bytes

``values`` were written as ``sums / count * ncall``, so the weights are
``values / (float) ncall`` where ``ncall > 0``, else the values as they are.  The
file says nothing of experts: an expert tensor's entry is one vector of experts x
row length, which ``llama-quantize`` cuts by the tensor's row length.
``chunk_size`` is 0.

**What kiln_np refuses** (:class:`~kiln_np.KilnError` naming the file and the
entry), where llama.cpp fails too: a file with no entry (GGUF: no tensor), a GGUF
without one of the three keys, ``chunk_count`` or ``chunk_size`` not uint32
(llama.cpp aborts), a sums tensor without its counts or the other way round,
either not F32, a tensor name of 64 bytes or more, a legacy file cut short, a
legacy ``nval`` below 1, and after ``include``/``exclude`` a weight that is NaN or
infinite (``llama-quantize``: "imatrix contains non-finite value", before any
tensor).  Where llama.cpp reads on and kiln_np does not, because the file is not
one ``llama-imatrix`` writes and reading it as llama.cpp does would mean
undefined behaviour or silently dropped data: counts that are negative, NaN,
infinite or past ``lround``'s range (llama.cpp turns them into weights of 1), no
counts at all (llama.cpp divides by zero), sums that are not a whole number of
rows per count (llama.cpp leaves the rest zero), ``imatrix.datasets`` not an array
of strings (llama.cpp drops it), ``chunk_count`` or ``chunk_size`` above 2**31-1
(llama.cpp reads them as int32), a NUL inside an entry's name (llama.cpp cuts the
name there), a legacy name length, ``ncall`` or chunk count below 0, a legacy name
twice (llama.cpp keeps the later), and bytes after the legacy trailer (llama.cpp
ignores them).  A dataset name is cut at a NUL, as llama.cpp cuts it.

``include`` and ``exclude`` are ``--include-weights`` and ``--exclude-weights``:
substrings of entry names (an entry is kept when a name contains any of
``include``, dropped when it contains any of ``exclude``), not both at once.
When none is kept ``llama-quantize`` quantizes as without ``--imatrix``.
"""

from __future__ import annotations

import io
import mmap
import os
import struct
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import NamedTuple

import numpy as np

from kiln_np._convert.plan import OptionsError
from kiln_np._core.checks import check_path, set_module, show_value
from kiln_np._core.errors import KilnError
from kiln_np._files.io import open_regular_raw
from kiln_np._weights.mapped import MappedFile

from ._reader import GGUFTensorInfo, read_gguf
from ._types import MAGIC, MAX_NAME_BYTES
from ._values import GGUFMetadata, malformed, truncated

__all__ = ["Imatrix", "ImatrixEntry", "read_imatrix"]

DATASETS_KEY = "imatrix.datasets"
CHUNK_COUNT_KEY = "imatrix.chunk_count"
CHUNK_SIZE_KEY = "imatrix.chunk_size"
_SUMS, _COUNTS = ".in_sum2", ".counts"
_MAX_INT32 = 2**31 - 1
_LROUND_LIMIT = 2.0**63  # lround's int64 holds less: llama.cpp's result is undefined past it
_I32 = struct.Struct("<i")
_MIN_ENTRY = 16  # a legacy entry's name length, ncall, nval and one value


@set_module("kiln_np.gguf")
class ImatrixEntry(NamedTuple):
    """One tensor's importance weights, as ``llama-quantize`` quantizes with them.

    Attributes
    ----------
    name : str
        The weight tensor's name in the model (``blk.0.attn_q.weight``).
    weights : numpy.ndarray
        float32, read-only, one row per expert: shape ``(experts, row length)``;
        ``(1, row length)`` for a 2-D tensor, and for every entry of a legacy
        file (which does not say how many experts: its one row holds them all).
    counts : tuple of int
        GGUF: per expert, the tokens it saw, rounded as ``lround`` rounds (an
        expert with 0 has weights of 1); legacy: ``(ncall,)``.
    """

    name: str
    weights: np.ndarray
    counts: tuple[int, ...]


@set_module("kiln_np.gguf")
class Imatrix(NamedTuple):
    """An importance matrix as :func:`read_imatrix` found it.

    Attributes
    ----------
    path : str
        The file, as given.
    format : str
        ``"gguf"`` or ``"dat"`` (the legacy format).
    datasets : tuple of str
        The calibration files it was computed on (a legacy file has at most one).
    chunk_count : int
        The chunks of text it was computed on (0 when a legacy file does not say).
    chunk_size : int
        Tokens per chunk (0 for a legacy file).
    entries : Mapping of str to ImatrixEntry
        Read-only, in name order: the entries ``include``/``exclude`` kept.
    loaded : int
        The entries of the file, before ``include``/``exclude``.
    """

    path: str
    format: str
    datasets: tuple[str, ...]
    chunk_count: int
    chunk_size: int
    entries: Mapping[str, ImatrixEntry]
    loaded: int


@set_module("kiln_np.gguf")
def read_imatrix(
    path: str | os.PathLike[str],
    *,
    include: str | Iterable[str] = (),
    exclude: str | Iterable[str] = (),
) -> Imatrix:
    """Read an importance matrix (GGUF or legacy ``.dat``) into the float32 weights
    ``llama-quantize --imatrix`` hands its quantizer, bit for bit.

    Parameters
    ----------
    path : str or os.PathLike
        A file ``llama-imatrix`` wrote: GGUF (it starts ``GGUF``) or legacy.
    include, exclude : str or iterable of str
        ``llama-quantize``'s ``--include-weights`` and ``--exclude-weights``: keep
        only the entries whose names contain one of ``include``, or drop those
        whose names contain one of ``exclude``; not both.

    Returns
    -------
    Imatrix
        The datasets, chunk count and size, and the weights of each entry kept.

    Raises
    ------
    KilnError
        TYPE for a file ``llama-quantize`` refuses or one ``llama-imatrix`` does not
        write (the module docstring lists them), for a non-finite weight among the
        entries kept, and (as ``OptionsError``) for ``include`` with ``exclude``;
        LENGTH for a file cut short or with bytes after its end; SHAPE for sums
        that are not whole rows per count.  Each names the file and the entry.
    FileNotFoundError
        When the file does not exist.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> from kiln_np.gguf import save_gguf
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     p = os.path.join(tmp, "imatrix.gguf")
    ...     _ = save_gguf(p, {
    ...         "blk.0.ffn_up_exps.weight.in_sum2": np.array([[6, 8], [5, 5]], np.float32),
    ...         "blk.0.ffn_up_exps.weight.counts": np.array([[2], [0]], np.float32),
    ...     }, {"imatrix.datasets": ["wiki.txt"], "imatrix.chunk_count": np.uint32(1),
    ...         "imatrix.chunk_size": np.uint32(512)})
    ...     imatrix = read_imatrix(p)
    >>> imatrix.format, imatrix.datasets, imatrix.chunk_count, imatrix.chunk_size
    ('gguf', ('wiki.txt',), 1, 512)
    >>> entry = imatrix.entries["blk.0.ffn_up_exps.weight"]
    >>> entry.weights.tolist(), entry.counts  # expert 1 saw no token: weights of 1
    ([[3.0, 4.0], [1.0, 1.0]], (2, 0))
    """
    include_, exclude_ = _patterns(include, "include"), _patterns(exclude, "exclude")
    if include_ and exclude_:
        raise OptionsError(
            "expected include or exclude, not both (llama-quantize refuses "
            "--include-weights with --exclude-weights)",
            "--include-weights and --exclude-weights cannot be used together",
        )
    given = os.fspath(check_path(path))
    real = os.path.realpath(given)
    where = f"{real!r}: "
    with open_regular_raw(real) as f:
        head = os.pread(f.fileno(), len(MAGIC), 0)
        fields = _read_gguf_imatrix(real, where) if head == MAGIC else _read_legacy(f, where)
    fmt, datasets, chunk_count, chunk_size, entries = fields
    kept = [e for e in entries if _kept(e.name, include_, exclude_)]
    for entry in kept:
        _check_finite(entry, where)
    return Imatrix(
        given,
        fmt,
        datasets,
        chunk_count,
        chunk_size,
        MappingProxyType({e.name: e for e in kept}),
        len(entries),
    )


def _patterns(value: object, what: str) -> tuple[str, ...]:
    """``include``/``exclude`` as a tuple of substrings (a str is one)."""
    if isinstance(value, str):
        return (value,)
    items = tuple(value) if isinstance(value, Iterable) else (value,)
    if not all(isinstance(item, str) for item in items):
        bad = next(item for item in items if not isinstance(item, str))
        raise KilnError(
            "TYPE",
            f"expected {what} to be a str or an iterable of str (substrings of entry "
            f"names), found {show_value(bad)}",
        )
    return items


def _kept(name: str, include: tuple[str, ...], exclude: tuple[str, ...]) -> bool:
    """``prepare_imatrix``: a name that contains an excluded substring is dropped;
    with ``include``, only a name that contains an included one is kept."""
    if exclude:
        return not any(p in name for p in exclude)
    return not include or any(p in name for p in include)


def _check_finite(entry: ImatrixEntry, where: str) -> None:
    bad = np.flatnonzero(~np.isfinite(entry.weights))
    if bad.size:
        index = int(bad[0])
        value = float(entry.weights.flat[index])
        raise KilnError(
            "TYPE",
            f"{where}entry {entry.name!r}: expected finite weights (llama-quantize refuses "
            f"an imatrix with a non-finite value), found {value} at element {index}",
            index=index,
        )


def _frozen(weights: np.ndarray) -> np.ndarray:
    weights.flags.writeable = False
    return weights


# -- GGUF -------------------------------------------------------------------------------

_Fields = tuple[str, tuple[str, ...], int, int, list[ImatrixEntry]]


def _read_gguf_imatrix(path: str, where: str) -> _Fields:
    gguf = read_gguf(path)
    if not gguf.tensors:
        raise malformed(
            where,
            "expected an imatrix with at least one tensor, found none (llama.cpp: no data)",
            expected=1,
            found=0,
        )
    meta = gguf.metadata
    for key in (DATASETS_KEY, CHUNK_COUNT_KEY, CHUNK_SIZE_KEY):
        if key not in meta:
            raise malformed(
                where,
                f"key {key!r}: expected the keys {DATASETS_KEY!r}, {CHUNK_COUNT_KEY!r} and "
                f"{CHUNK_SIZE_KEY!r}, found no such key (llama-quantize: missing imatrix "
                "metadata)",
                expected=key,
            )
    datasets = tuple(_cut(d) for d in _typed(meta, DATASETS_KEY, "array[string]", where))
    chunk_count = _int32(meta, CHUNK_COUNT_KEY, where)
    chunk_size = _int32(meta, CHUNK_SIZE_KEY, where)
    pairs: dict[str, list[GGUFTensorInfo | None]] = {}
    for t in gguf.tensors:
        raw = t.name.encode("utf-8", "surrogateescape")
        if len(raw) > MAX_NAME_BYTES:
            raise malformed(
                where,
                f"tensor {t.name!r}: expected a name of at most {MAX_NAME_BYTES} bytes "
                f"(llama.cpp's GGML_MAX_NAME), found {len(raw)}",
                expected=MAX_NAME_BYTES,
                found=len(raw),
            )
        for slot, suffix in enumerate((_SUMS, _COUNTS)):
            if t.name.endswith(suffix):
                pairs.setdefault(t.name[: -len(suffix)], [None, None])[slot] = t
    files: dict[str, MappedFile] = {}
    try:
        entries = [
            _gguf_entry(name, sums, counts, files, where)
            for name, (sums, counts) in sorted(pairs.items())
        ]
    finally:
        for file in files.values():
            file.close()
    return "gguf", datasets, chunk_count, chunk_size, entries


def _typed(meta: GGUFMetadata, key: str, kind: str, where: str) -> list[str]:
    found = meta.types[key]
    if found != kind:
        raise malformed(
            where,
            f"key {key!r}: expected GGUF type {kind}, found {found}",
            expected=kind,
            found=found,
        )
    value: list[str] = meta[key]
    return value


def _int32(meta: GGUFMetadata, key: str, where: str) -> int:
    """A uint32 key llama.cpp reads into an int32 (``gguf_get_val_u32`` aborts on
    another type)."""
    found = meta.types[key]
    value = meta[key]
    if found != "uint32" or value > _MAX_INT32:
        raise malformed(
            where,
            f"key {key!r}: expected a uint32 of at most 2**31-1 (llama.cpp reads it as "
            f"int32), found {show_value(value)} (GGUF {found})",
            expected="uint32",
            found=value,
        )
    return int(value)


def _cut(text: str) -> str:
    """A dataset name as llama.cpp keeps it: a C string, cut at a NUL."""
    return text.split("\0", 1)[0]


def _gguf_entry(
    name: str,
    sums: GGUFTensorInfo | None,
    counts: GGUFTensorInfo | None,
    files: dict[str, MappedFile],
    where: str,
) -> ImatrixEntry:
    what = f"{where}entry {name!r}: "
    if sums is None or counts is None:
        found = f"{name}{_SUMS if counts is None else _COUNTS}"
        raise malformed(
            what,
            f"expected the tensors {name + _SUMS!r} and {name + _COUNTS!r}, found only "
            f"{found!r} (llama.cpp: mismatched sums and counts)",
            expected=(name + _SUMS, name + _COUNTS),
            found=found,
        )
    if "\0" in name:
        raise malformed(
            what,
            "expected a name without a NUL byte (llama.cpp would cut it there), found one",
        )
    for t in (sums, counts):
        if t.ggml.name != "F32":
            raise malformed(
                what,
                f"tensor {t.name!r}: expected F32 (llama.cpp: sums and counts must be F32), "
                f"found {t.ggml.name}",
                expected="F32",
                found=t.ggml.name,
            )
    values, tokens = _f32(sums, files), _f32(counts, files)
    if tokens.size == 0 or values.size % tokens.size:
        raise KilnError(
            "SHAPE",
            f"{what}expected {values.size} sums to be whole rows, one per count, found "
            f"{tokens.size} counts",
            shape=(values.size, tokens.size),
        )
    bad = np.flatnonzero(~(np.isfinite(tokens) & (tokens >= 0) & (tokens < _LROUND_LIMIT)))
    if bad.size:
        index = int(bad[0])
        raise malformed(
            what,
            f"tensor {counts.name!r}: expected counts that are finite, not negative and "
            f"below 2**63 (lround's range), found {float(tokens[index])} at element {index}",
            expected="a count in [0, 2**63)",
            found=float(tokens[index]),
        )
    # lround of a count >= 0: half away from zero, exact in float64 for every float32.
    rounded = np.floor(tokens.astype(np.float64) + 0.5).astype(np.int64)
    count = rounded.astype(np.float32)[:, None]
    rows = values.reshape(tokens.size, values.size // tokens.size)
    weights = np.ones_like(rows)
    np.divide(rows, count, out=weights, where=count > 0)
    return ImatrixEntry(name, _frozen(weights), tuple(int(c) for c in rounded))


def _f32(t: GGUFTensorInfo, files: dict[str, MappedFile]) -> np.ndarray:
    """The F32 tensor's values, copied out of its file (mapped once per file)."""
    file = files.get(t.path)
    if file is None:
        file = files[t.path] = MappedFile.open(t.path)
    view = file.view(t.offset, t.info.byte_length)
    try:
        return np.frombuffer(view, "<f4").astype(np.float32)
    finally:
        view.release()


# -- legacy -----------------------------------------------------------------------------


def _read_legacy(f: io.FileIO, where: str) -> _Fields:
    size = os.fstat(f.fileno()).st_size
    if size < _I32.size:
        raise truncated(where, "legacy imatrix entry count", 0, _I32.size, size)
    with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        return _Legacy(mm, size, where).parse()


class _Legacy:
    """Bounds-checked reads of a mapped legacy imatrix; ``where`` names the file."""

    def __init__(self, buf: mmap.mmap, size: int, where: str) -> None:
        self.buf, self.size, self.where = buf, size, where

    def int32(self, pos: int, what: str, minimum: int = 0) -> int:
        """The int32 at ``pos``, at least ``minimum``."""
        if pos + 4 > self.size:
            raise truncated(self.where, what, pos, 4, self.size)
        value: int = _I32.unpack_from(self.buf, pos)[0]
        if value < minimum:
            raise malformed(
                self.where,
                f"{what}: expected at least {minimum}, found {value}",
                expected=minimum,
                found=value,
            )
        return value

    def need(self, pos: int, n: int, what: str) -> None:
        if n > self.size - pos:
            raise truncated(self.where, what, pos, n, self.size)

    def text(self, pos: int, length: int) -> bytes:
        return bytes(self.buf[pos : pos + length])

    def parse(self) -> _Fields:
        n = self.int32(0, "legacy imatrix entry count", 1)
        self.need(4, n * _MIN_ENTRY, f"{n} entries of at least {_MIN_ENTRY} bytes each")
        entries: dict[str, ImatrixEntry] = {}
        pos = 4
        for i in range(n):
            entry, pos = self.entry(i, pos, entries)
            entries[entry.name] = entry
        chunk_count, datasets = self.trailer(pos)
        return "dat", datasets, chunk_count, 0, list(entries.values())

    def entry(self, i: int, pos: int, seen: Mapping[str, ImatrixEntry]) -> tuple[ImatrixEntry, int]:
        length = self.int32(pos, f"entry {i} name length")
        self.need(pos + 4, length, f"entry {i} name of {length} bytes")
        raw = self.text(pos + 4, length)
        name = raw.decode("utf-8", "surrogateescape")
        what = f"entry {i} ({name!r})"
        if b"\0" in raw:
            raise malformed(
                self.where,
                f"{what}: expected a name without a NUL byte (llama.cpp would cut it "
                "there), found one",
            )
        if name in seen:
            raise malformed(
                self.where,
                f"{what}: expected unique entry names, found it twice",
                expected="unique names",
                found=name,
            )
        pos += 4 + length
        ncall = self.int32(pos, f"{what} ncall")
        nval = self.int32(pos + 4, f"{what} value count", 1)
        pos += 8
        self.need(pos, 4 * nval, f"{what}: {nval} float32 values")
        values = np.frombuffer(self.buf, "<f4", nval, pos).astype(np.float32)
        weights = values / np.float32(ncall) if ncall > 0 else values
        return ImatrixEntry(name, _frozen(weights[None, :]), (ncall,)), pos + 4 * nval

    def trailer(self, pos: int) -> tuple[int, tuple[str, ...]]:
        """The optional chunk count and dataset after the entries: nothing, the count
        alone, or both (a dataset of 0 bytes is none); nothing may follow."""
        if pos == self.size:
            return 0, ()
        chunks = self.int32(pos, "legacy imatrix chunk count")
        if pos + 4 == self.size:
            return chunks, ()
        length = self.int32(pos + 4, "legacy imatrix dataset length")
        pos += 8
        self.need(pos, length, f"legacy imatrix dataset of {length} bytes")
        dataset = _cut(self.text(pos, length).decode("utf-8", "surrogateescape"))
        more = self.size - pos - length
        if more:
            raise KilnError(
                "LENGTH",
                f"{self.where}expected the legacy imatrix to end after its dataset, at byte "
                f"{pos + length}, found {more} more byte{'s' * (more > 1)}",
                expected=pos + length,
                found=self.size,
            )
        return chunks, (dataset,) if length else ()
