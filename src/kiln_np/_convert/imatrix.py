"""An importance matrix in a conversion: what ``llama-quantize --imatrix`` does
with one once it is read (``kiln_np.gguf.read_imatrix`` reads the files into an
:class:`Imatrix`).

``tools/quantize/quantize.cpp`` and ``src/llama-quant.cpp`` of llama-cpp-python
0.3.36's ``vendor/llama.cpp``:

- ``--include-weights`` / ``--exclude-weights`` keep the entries whose names
  contain one of the substrings / drop those (:func:`entry_kept`); when none is
  kept, llama-quantize quantizes as without ``--imatrix`` (no key written, and
  the mixes' rules see no imatrix);
- every weight kept must be finite (:func:`check_finite`: "imatrix contains
  non-finite value", before any tensor);
- a tensor is quantized with the entry of its name in the input (under
  ``--prune-layers``, ``remap_imatrix``'s name: the layer number the input gave
  it) when the entry holds exactly ``row length x experts`` values
  (``ne[0] * ne[2]``); expert ``e``'s rows take values ``[e * row, (e + 1) * row)``
  (``imatrix + (row / nrows_per_expert) * n_per_row``), and the quantizer's
  chunks never cross an expert (:func:`tensor_weights`);
- the file records it in four keys, ``--override-kv`` entries added after the
  user's (:func:`imatrix_keys`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import NamedTuple

import numpy as np

from kiln_np._core.checks import set_module, show_value
from kiln_np._core.errors import KilnError

__all__ = [
    "KEY_CHUNKS",
    "KEY_DATASET",
    "KEY_ENTRIES",
    "KEY_FILE",
    "Imatrix",
    "ImatrixEntry",
    "check_finite",
    "checked_imatrix",
    "entry_kept",
    "imatrix_keys",
    "kept_entries",
    "substrings",
    "tensor_weights",
]

KEY_FILE = "quantize.imatrix.file"
KEY_DATASET = "quantize.imatrix.dataset"
KEY_ENTRIES = "quantize.imatrix.entries_count"
KEY_CHUNKS = "quantize.imatrix.chunks_count"
_VALUE_BYTES = 127  # llama_model_kv_override.val_str holds 128 bytes with its NUL


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
    """An importance matrix as :func:`~kiln_np.gguf.read_imatrix` found it.

    Attributes
    ----------
    path : str
        The file, as given: what ``quantize.imatrix.file`` records of a file
        quantized with it (``llama-quantize`` records its ``--imatrix`` argument
        as typed).
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


def substrings(value: object, what: str) -> tuple[str, ...]:
    """``include``/``exclude`` (``--include-weights``/``--exclude-weights``) as a
    tuple of substrings: a str is one; TYPE naming ``what`` for anything else.

    >>> substrings("attn", "include"), substrings(["a", "b"], "exclude")
    (('attn',), ('a', 'b'))
    """
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


def entry_kept(name: str, include: tuple[str, ...], exclude: tuple[str, ...]) -> bool:
    """``prepare_imatrix``: a name that contains an excluded substring is dropped;
    with ``include``, only a name that contains an included one is kept.

    >>> entry_kept("blk.0.attn_v.weight", ("attn",), ()), entry_kept("x", (), ("x",))
    (True, False)
    """
    if exclude:
        return not any(p in name for p in exclude)
    return not include or any(p in name for p in include)


def check_finite(entry: ImatrixEntry, where: str) -> None:
    """TYPE naming the entry (after ``where``) for its first NaN or infinite weight.

    >>> check_finite(ImatrixEntry("w", np.ones((1, 2), np.float32), (1,)), "")
    """
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


def checked_imatrix(value: object, where: str) -> Imatrix:
    """``value`` when it is an :class:`Imatrix` whose parts are what
    ``read_imatrix`` gives (an imatrix may be built by hand); TYPE naming
    ``where`` otherwise, and for a non-finite weight.

    >>> m = Imatrix("m.gguf", "gguf", ("a.txt",), 1, 512, {}, 0)
    >>> checked_imatrix(m, "imatrix").path
    'm.gguf'
    """
    if not isinstance(value, Imatrix):
        raise KilnError(
            "TYPE",
            f"{where}: expected a path or a kiln_np.gguf.Imatrix (read_imatrix's), found "
            f"{show_value(value)}",
        )
    fields = (
        ("path", isinstance(value.path, str), "a str"),
        ("datasets", _texts(value.datasets), "a tuple of str"),
        ("chunk_count", _count(value.chunk_count), "an int of 0 to 2**31-1"),
        ("entries", isinstance(value.entries, Mapping), "a mapping of names to ImatrixEntry"),
    )
    for field, good, what in fields:
        if not good:
            raise KilnError(
                "TYPE",
                f"{where}: Imatrix.{field}: expected {what}, found "
                f"{show_value(getattr(value, field))}",
            )
    for name, entry in value.entries.items():
        weights = getattr(entry, "weights", None)
        good = (
            isinstance(entry, ImatrixEntry)
            and entry.name == name
            and isinstance(weights, np.ndarray)
            and weights.dtype == np.float32
            and weights.ndim == 2
            and weights.size > 0
        )
        if not good:
            found = (
                f"weights of {weights.dtype} shape {weights.shape}"
                if isinstance(entry, ImatrixEntry) and isinstance(weights, np.ndarray)
                else show_value(entry)
            )
            raise KilnError(
                "TYPE",
                f"{where}: entry {show_value(name)}: expected an ImatrixEntry of that name "
                f"whose weights are float32 of shape (experts, row length), found {found}",
            )
        check_finite(entry, f"{where}: ")
    return value


def _texts(value: object) -> bool:
    return isinstance(value, tuple) and all(isinstance(d, str) for d in value)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31


def kept_entries(imatrix: Imatrix, include: tuple[str, ...], exclude: tuple[str, ...]) -> Imatrix:
    """``imatrix`` with only the entries ``include``/``exclude`` keep (the same
    ``imatrix`` when they keep all).

    >>> e = ImatrixEntry("blk.0.attn_v.weight", np.ones((1, 32), np.float32), (1,))
    >>> m = Imatrix("m.gguf", "gguf", (), 1, 512, {e.name: e}, 1)
    >>> len(kept_entries(m, (), ("attn",)).entries), kept_entries(m, ("v",), ()) is m
    (0, True)
    """
    kept = {n: e for n, e in imatrix.entries.items() if entry_kept(n, include, exclude)}
    if len(kept) == len(imatrix.entries):
        return imatrix
    return imatrix._replace(entries=MappingProxyType(kept))


def _cut(text: str) -> str:
    """``strncpy(val_str, text, 127)``: at most 127 bytes (a character cut in two
    keeps its first bytes, as surrogate escapes that are written back as those
    bytes)."""
    return text.encode("utf-8", "surrogateescape")[:_VALUE_BYTES].decode("utf-8", "surrogateescape")


def imatrix_keys(imatrix: Imatrix) -> tuple[tuple[str, str, object], ...]:
    """The ``quantize.imatrix.*`` keys llama-quantize writes for ``imatrix`` (its
    entries kept), as ``(key, GGUF type, value)`` in order: ``file`` (the path as
    given, cut to 127 bytes), ``dataset`` (the first, cut to 127 bytes; none
    without one), ``entries_count``, ``chunks_count`` (only above 0); the counts
    ``uint32``.  None at all when no entry is kept.

    >>> e = ImatrixEntry("w", np.ones((1, 32), np.float32), (1,))
    >>> for key in imatrix_keys(Imatrix("m.gguf", "gguf", ("a.txt",), 0, 512, {"w": e}, 1)):
    ...     print(key)
    ('quantize.imatrix.file', 'string', 'm.gguf')
    ('quantize.imatrix.dataset', 'string', 'a.txt')
    ('quantize.imatrix.entries_count', 'uint32', 1)
    """
    if not imatrix.entries:
        return ()
    keys: list[tuple[str, str, object]] = [(KEY_FILE, "string", _cut(imatrix.path))]
    if imatrix.datasets:
        keys.append((KEY_DATASET, "string", _cut(imatrix.datasets[0])))
    keys.append((KEY_ENTRIES, "uint32", len(imatrix.entries)))
    if imatrix.chunk_count > 0:
        keys.append((KEY_CHUNKS, "uint32", imatrix.chunk_count))
    return tuple(keys)


def tensor_weights(entry: ImatrixEntry, name: str, shape: tuple[int, ...]) -> np.ndarray | None:
    """The importance weights of tensor ``name`` of element shape ``shape`` (rows
    last; a 3-D tensor's experts first), one C-contiguous float32 row per expert:
    ``entry``'s values cut by the row length; None when ``entry`` does not hold
    ``row length x experts`` values (llama-quantize quantizes such a token
    embedding without weights, and refuses any other tensor before).

    Raises
    ------
    KilnError
        TYPE for a tensor of 4 dims whose first is above 1 (llama.cpp reads
        experts from one dim only).

    >>> e = ImatrixEntry("w", np.arange(8, dtype=np.float32).reshape(2, 4), (1, 1))
    >>> tensor_weights(e, "w", (2, 3, 4)).tolist()
    [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]]
    >>> tensor_weights(e, "w", (3, 4)) is None
    True
    """
    row = shape[-1]
    experts = shape[-3] if len(shape) >= 3 else 1
    if entry.weights.size != row * experts:
        return None
    if math.prod(shape[:-2]) != experts:
        raise KilnError(
            "TYPE",
            f"tensor {name!r}: expected at most 3 dims (or a first of 1) to quantize with an "
            f"importance matrix (llama.cpp reads experts from the third), found shape {shape}",
            shape=shape,
        )
    return np.ascontiguousarray(entry.weights.reshape(experts, row), np.float32)
