"""Error figures of two tensors compared value by value, their aggregates per layer and
per role, and the saturation of a block-scaled (MX, NVFP4) tensor.

The figures come from five numbers of a comparison, :class:`ErrorSums`: over the
``counted`` places where both sides are finite, the float64 sums of ``a*a``, ``b*b``,
``a*b`` and ``(a - b)**2`` (A is the reference):

- ``rmse = sqrt(dd / counted)``;
- ``rel_rmse = sqrt(dd / aa)``, the RMSE over the RMS of A;
- ``snr_db = 10 * log10(aa / dd)``;
- ``cosine = ab / (sqrt(aa) * sqrt(bb))``, clipped to [-1, 1].

Edge cases, defined: identical values (``dd == 0``) have ``rmse`` and ``rel_rmse``
0, ``snr_db`` ``inf`` and ``cosine`` 1, whatever A holds (all zero included).  A all
zero against a B that is not: ``rel_rmse`` ``inf``, ``snr_db`` ``-inf``, ``cosine``
NaN (a zero vector has no direction); B all zero against an A that is not: ``cosine``
NaN.  No place counted (an empty tensor, or NaN or infinite on a side everywhere):
all four NaN.  Squares of values beyond about 1e154 in magnitude (f64 tensors only)
overflow the float64 sums to ``inf``.

A per-layer or per-role aggregate (:class:`GroupMetrics`) pools its tensors as one
vector: the sums added, the four figures computed from them; maxima are the largest,
saturation counts added.  The groups are the heatmap's grid
(:func:`~kiln_np._explore.layers.layer_role`): a layer is ``<stack>.<index>``, a role
``<stack>.*.<role>`` (the experts of a mixture-of-experts layer fold into one role);
tensors with no layer index are in neither.

Saturation (:func:`saturated`) counts the elements whose code is at the element
format's largest magnitude (``+-6`` for e2m1), read from the stored codes of an MX or
NVFP4 tensor: the NVFP4 schemes (ModelOpt, compressed-tensors), gpt-oss's MXFP4, and
GGUF's ``MXFP4`` and ``NVFP4`` blocks, whose scales are a power of two or an
f8e4m3 number.  It is ``None`` for everything else, the other GGML block types
included: their scale maps each block's largest value to the top code, so the count
would only count blocks.

>>> s = ErrorSums(2, aa=16.0, bb=4.0, ab=4.0, dd=2.0)
>>> s.rmse, round(s.rel_rmse, 4), round(s.snr_db, 3), s.cosine
(1.0, 0.3536, 9.031, 0.5)
>>> ErrorSums(3, 0.0, 0.0, 0.0, 0.0).snr_db, ErrorSums(3, 0.0, 1.0, 0.0, 1.0).rel_rmse
(inf, inf)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from functools import cache
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

from kiln_np._core.table import Code
from kiln_np._quants.blocks import BLOCKS
from kiln_np._weights.logical import LogicalTensor
from kiln_np._weights.tensors import WeightTensor
from kiln_np.mx.kinds import ELEMENTS

from .layers import layer_role

__all__ = [
    "METRICS",
    "ErrorSums",
    "GroupMetrics",
    "group_metrics",
    "json_number",
    "saturated",
    "sort_key",
]

METRICS: Mapping[str, bool] = MappingProxyType(
    {
        "rmse": True,
        "rel_rmse": True,
        "snr_db": False,
        "cosine": False,
        "max_abs": True,
        "max_rel": True,
        "saturated": True,
        "mismatches": True,
    }
)
"""The figures a result sorts by, each with whether larger is worse (SNR and cosine:
smaller is worse)."""

_READ = 1 << 22
"""Bytes of stored codes counted at a time."""


class ErrorSums(NamedTuple):
    """The sums behind the error figures (see the module's docstring)."""

    counted: int
    aa: float
    bb: float
    ab: float
    dd: float

    def pooled(self, other: ErrorSums) -> ErrorSums:
        """These places and ``other``'s, as one set.

        >>> ErrorSums(1, 1.0, 4.0, 2.0, 1.0).pooled(ErrorSums(1, 0.0, 1.0, 0.0, 1.0)).bb
        5.0
        """
        return ErrorSums(
            self.counted + other.counted,
            self.aa + other.aa,
            self.bb + other.bb,
            self.ab + other.ab,
            self.dd + other.dd,
        )

    @property
    def rmse(self) -> float:
        """``sqrt(dd / counted)``; NaN when no place is counted.

        >>> ErrorSums(4, 1.0, 1.0, 1.0, 1.0).rmse
        0.5
        """
        return math.sqrt(self.dd / self.counted) if self.counted else math.nan

    @property
    def rel_rmse(self) -> float:
        """``sqrt(dd / aa)``: 0.0 for identical values, ``inf`` for A all zero.

        >>> ErrorSums(1, 4.0, 1.0, 2.0, 1.0).rel_rmse
        0.5
        """
        if not self.counted:
            return math.nan
        if self.dd == 0:
            return 0.0
        return math.sqrt(self.dd / self.aa) if self.aa else math.inf

    @property
    def snr_db(self) -> float:
        """``10 * log10(aa / dd)``: ``inf`` for identical values, ``-inf`` for A all zero.

        >>> ErrorSums(1, 100.0, 81.0, 90.0, 1.0).snr_db
        20.0
        """
        if not self.counted:
            return math.nan
        if self.dd == 0:
            return math.inf
        return 10 * math.log10(self.aa / self.dd) if self.aa else -math.inf

    @property
    def cosine(self) -> float:
        """``ab / (sqrt(aa) * sqrt(bb))`` in [-1, 1]: 1.0 for identical values, NaN
        when one side is all zero and the other is not.

        >>> ErrorSums(1, 1.0, 4.0, -2.0, 9.0).cosine
        -1.0
        """
        if not self.counted:
            return math.nan
        if self.dd == 0:
            return 1.0
        if not self.aa or not self.bb:
            return math.nan
        return min(1.0, max(-1.0, self.ab / (math.sqrt(self.aa) * math.sqrt(self.bb))))


def json_number(value: float | None) -> float | str | None:
    """A float for strict JSON: ``inf``, ``-inf`` and NaN as the strings ``'inf'``,
    ``'-inf'`` and ``'nan'``.

    >>> json_number(math.inf), json_number(0.5), json_number(None)
    ('inf', 0.5, None)
    """
    if value is None or math.isfinite(value):
        return value
    return str(value)


def sort_key(metric: str, value: float | None) -> tuple[int, float]:
    """The key that puts the worst ``value`` of ``metric`` first (:data:`METRICS`),
    NaN before every number (an undefined figure is suspect) and ``None`` last.

    >>> sorted([0.5, None, 0.9, math.nan], key=lambda v: sort_key("cosine", v))
    [nan, 0.5, 0.9, None]
    """
    if value is None:
        return (2, 0.0)
    if math.isnan(value):
        return (0, 0.0)
    return (1, -value if METRICS[metric] else value)


@dataclass(frozen=True)
class GroupMetrics:
    """The pooled error figures of the tensors of one layer or one role.

    Attributes
    ----------
    name : str
        ``'model.layers.3'`` for a layer, ``'model.layers.*.self_attn.q_proj'`` for a
        role.
    stack : str
        The names' common prefix before the layer index.
    layer : int or None
        The layer index (a layer's group), else None.
    role : str or None
        The role (a role's group), else None.
    tensors : int
        Tensors whose values were compared.
    mismatches : int
        Differing places, over them all.
    rmse, rel_rmse, snr_db, cosine : float
        Of their places pooled (the module's definitions).
    max_abs, max_rel : float or None
        The largest of the tensors'; None when no place differs.
    saturated : int or None
        The sum of the tensors' saturation counts (both sides'), None when no tensor
        has one.
    """

    name: str
    stack: str
    layer: int | None
    role: str | None
    tensors: int
    mismatches: int
    rmse: float
    rel_rmse: float
    snr_db: float
    cosine: float
    max_abs: float | None
    max_rel: float | None
    saturated: int | None

    def to_record(self) -> dict[str, Any]:
        """A JSON-ready dict (strict JSON: ``'inf'``, ``'-inf'``, ``'nan'`` as strings).

        >>> g = GroupMetrics("h.0", "h", 0, None, 1, 0, 0.0, 0.0, math.inf, 1.0, None, None, None)
        >>> g.to_record()["snr_db"]
        'inf'
        """
        record = asdict(self)
        for key in ("rmse", "rel_rmse", "snr_db", "cosine", "max_abs", "max_rel"):
            record[key] = json_number(record[key])
        return record


class _Pool:
    """One group's tensors, pooled."""

    def __init__(self) -> None:
        self.tensors = self.mismatches = 0
        self.sums = ErrorSums(0, 0.0, 0.0, 0.0, 0.0)
        self.max_abs: float | None = None
        self.max_rel: float | None = None
        self.saturated: int | None = None

    def add(self, t: Any) -> None:
        self.tensors += 1
        self.mismatches += t.mismatches
        self.sums = self.sums.pooled(t.sums)
        if t.max_abs is not None:
            self.max_abs = t.max_abs if self.max_abs is None else max(self.max_abs, t.max_abs)
        if t.max_rel is not None:
            self.max_rel = t.max_rel if self.max_rel is None else max(self.max_rel, t.max_rel)
        for count in (t.saturated_a, t.saturated_b):
            if count is not None:
                self.saturated = count + (self.saturated or 0)

    def result(self, name: str, stack: str, layer: int | None, role: str | None) -> GroupMetrics:
        s = self.sums
        return GroupMetrics(
            name, stack, layer, role, self.tensors, self.mismatches, s.rmse, s.rel_rmse,
            s.snr_db, s.cosine, self.max_abs, self.max_rel, self.saturated,
        )  # fmt: skip


def group_metrics(tensors: Iterable[Any]) -> tuple[list[GroupMetrics], list[GroupMetrics]]:
    """The aggregates ``(by layer, by role)`` of the compared tensors among
    ``tensors`` (items with ``name``, ``sums``, ``mismatches``, ``max_abs``,
    ``max_rel``, ``saturated_a`` and ``saturated_b``: a
    :class:`~kiln_np._explore.comparison.TensorComparison`), tensors without
    ``sums`` (values not read) or without a layer index left out.  Layers come by
    stack, then index; roles by stack, in the order they first occur.

    >>> from types import SimpleNamespace as T
    >>> def t(name, dd):
    ...     return T(name=name, sums=ErrorSums(2, 2.0, 2.0, 2.0, dd), mismatches=1,
    ...              max_abs=1.0, max_rel=0.5, saturated_a=None, saturated_b=None)
    >>> layers, roles = group_metrics([t("h.1.q.weight", 2.0), t("h.0.q.weight", 0.0)])
    >>> [(g.name, g.rmse) for g in layers], [(g.name, g.tensors, g.rmse) for g in roles]
    ([('h.0', 0.0), ('h.1', 1.0)], [('h.*.q', 2, 0.7071067811865476)])
    """
    layers: dict[tuple[str, int], _Pool] = {}
    roles: dict[tuple[str, str], _Pool] = {}
    for t in tensors:
        where = layer_role(t.name)
        if t.sums is None or where is None:
            continue
        stack, layer, role = where
        layers.setdefault((stack, layer), _Pool()).add(t)
        roles.setdefault((stack, role), _Pool()).add(t)
    stacks = list(dict.fromkeys(stack for stack, _ in roles))
    by_layer = [
        layers[key].result(f"{key[0]}.{key[1]}", key[0], key[1], None)
        for key in sorted(layers, key=lambda k: (stacks.index(k[0]), k[1]))
    ]
    by_role = [
        pool.result(f"{stack}.*.{role}", stack, None, role) for (stack, role), pool in roles.items()
    ]
    by_role.sort(key=lambda g: stacks.index(g.stack))
    return by_layer, by_role


@cache
def _top_nibbles() -> np.ndarray:
    """By byte: how many of its two e2m1 codes are at the largest magnitude (from
    :mod:`kiln_np.mx`'s values of the codes)."""
    kind = ELEMENTS[Code.E2M1]
    values = np.abs(kind.values[: kind.codes])
    top = values == values[np.isfinite(values)].max()
    nibbles = np.arange(256)
    counts: np.ndarray = top[nibbles & 0xF].astype(np.int64) + top[nibbles >> 4]
    counts.flags.writeable = False
    return counts


def _count_top(codes: np.ndarray) -> int:
    """The e2m1 codes at the largest magnitude in packed bytes (any shape), a bounded
    run of bytes at a time."""
    flat = codes.reshape(-1)
    table = _top_nibbles()
    total = 0
    for lo in range(0, flat.size, _READ):
        total += int(np.bincount(flat[lo : lo + _READ], minlength=256) @ table)
    return total


_SCHEMES: Mapping[str, str] = MappingProxyType(
    {"nvfp4-modelopt": "weight", "nvfp4-ct": "weight_packed", "mxfp4-gpt-oss": "blocks"}
)
"""The quantization schemes (:mod:`kiln_np._schemes`) of e2m1 codes with MX or NVFP4
block scales, each with the role of its part that holds the packed codes."""

_GGML = ("MXFP4", "NVFP4")
"""The GGML block types of e2m1 codes with MX or NVFP4 scales: each block is its
scale bytes, then its packed codes."""


def saturated(t: WeightTensor) -> int | None:
    """How many elements of ``t`` hold a code at the element format's largest
    magnitude, for an MX or NVFP4 block-scaled tensor; None for any other
    (the module's docstring says which).

    >>> from kiln_np._core.payload import payload_info
    >>> from kiln_np._core.table import Layout
    >>> block = bytes([127]) + bytes([0x77, 0x70] + [0] * 14)  # codes 7, 7, 0, 7 ...
    >>> t = WeightTensor("w", payload_info(0x4727, (1,), Layout("ggml.mxfp4", 17)),
    ...                  None, "MXFP4", data=memoryview(block))
    >>> saturated(t)
    3
    """
    if isinstance(t, LogicalTensor):
        role = _SCHEMES.get(t.scheme)
        return None if role is None else _count_top(t.parts[role].numpy())
    if t.layout is None:
        return None
    for name in _GGML:
        block = BLOCKS[name]
        if t.code == block.code and t.layout.name == block.layout_name:
            rows = np.frombuffer(t.payload().data, np.uint8).reshape(-1, block.bytes)
            header = block.bytes - block.elements // 2
            return sum(
                _count_top(np.ascontiguousarray(rows[lo : lo + _READ // block.bytes, header:]))
                for lo in range(0, rows.shape[0], _READ // block.bytes)
            )
    return None
