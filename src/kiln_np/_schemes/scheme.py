"""What a scheme is: the types every scheme module and the table share.

A :class:`Scheme` is data plus two functions:

- ``parts``: the tensors that make one logical weight, each a name suffix
  appended to a *base* (``model.layers.0.self_attn.q_proj``) and the Kiln
  types it may have.  The first part is the *key*: a tensor of that name
  and type starts a group.
- ``plan(name, facts, config) -> Plan``: checks the parts' types and shapes
  against each other (from headers, reading at most a small part such as a
  JSON quant state) and gives the
  logical shape, the reference's own output dtype and whatever ``decode``
  needs; a part that does not fit is a :class:`KilnError` naming the
  logical tensor and the rule broken.
- ``decode(plan, arrays, r0, r1, dtype) -> ndarray``: rows ``[r0, r1)`` of the
  logical tensor's first axis, of ``dtype`` (float32, bfloat16 or float16),
  computed from the parts' arrays (zero-copy views of the file, by role)
  exactly as the reference does: its compute dtype and its order of
  operations, its rounding at each step.  Where the reference takes an
  output dtype (DeepSeek's ``weight_dequant`` writes the default dtype,
  ModelOpt's ``dequantize`` takes ``dtype``), it is given ``dtype``;
  where it has none, its own output (``plan.native``) is rounded once, to
  nearest even, to ``dtype`` (:func:`final`).

Examples
--------
>>> Part("weight", ".weight", frozenset({"f8e4m3"})).suffix
'.weight'
>>> final(np.array([1.00390625], np.float32), "float32", np.dtype(np.float16)).tolist()
[1.00390625]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np

__all__ = ["Decode", "Facts", "Part", "Plan", "PlanRule", "Scheme", "final"]


class Part(NamedTuple):
    """One stored tensor of a scheme: its ``role`` (the key of ``decode``'s
    arrays), the ``suffix`` its name adds to the base, the Kiln short type
    names it may have (``"f8e4m3"``, ``"u8"``, ``"i32"``, ...) and whether it may
    be absent."""

    role: str
    suffix: str
    types: frozenset[str]
    optional: bool = False


class Facts(NamedTuple):
    """What the header says of one part: its name, Kiln short type name and
    shape, and ``read()``, its elements (as ``WeightTensor.numpy()`` gives
    them, read from the file into a new array, never mapped): for the small
    parts a plan must read (a bitsandbytes quant state, a compressed-tensors
    ``weight_shape``), never for the large ones."""

    name: str
    type: str
    shape: tuple[int, ...]
    read: Callable[[], np.ndarray]


class Plan(NamedTuple):
    """A checked group: the logical ``shape``, the reference's own output dtype
    (``native``, a numpy/ml_dtypes dtype name: ``"bfloat16"``) and ``params``
    for ``decode`` (block sizes, group sizes, what the config said)."""

    shape: tuple[int, ...]
    native: str
    params: Mapping[str, Any]


Decode = Callable[[Plan, Mapping[str, np.ndarray], int, int, np.dtype[Any]], np.ndarray]
"""``decode(plan, arrays, r0, r1, dtype)``: rows ``[r0, r1)`` of the logical
tensor (its first axis) as a new array of ``dtype``, shape
``(r1 - r0, *plan.shape[1:])``."""

PlanRule = Callable[[str, Mapping[str, Facts], Mapping[str, Any]], Plan]
"""``plan(logical_name, facts_by_role, quantization_config)``: the checked
:class:`Plan`, or a KilnError naming ``logical_name`` and the rule."""


class Scheme(NamedTuple):
    """One row of the table (see the module docstring).

    ``logical`` is the suffix of the logical tensor's name after the base
    (``".weight"``; ``""`` for gpt-oss, whose ``X_blocks`` and ``X_scales``
    are the parameter ``X``).  ``methods`` are the ``quant_method`` values of
    a ``config.json`` ``quantization_config`` that name this scheme, and
    ``configured(config)`` says whether such a config is this scheme (the
    same method can name several: compressed-tensors' formats).  ``formula``
    and ``reference`` are the docs' words (docs/weights.md's scheme table is
    checked against them).  ``claims(facts)``, asked only when no config names
    the scheme, says whether a complete group of parts is this scheme's (GPTQ
    and AWQ share their parts' names: the shapes tell them apart); False
    leaves the group to the next row."""

    name: str
    logical: str
    parts: tuple[Part, ...]
    plan: PlanRule
    decode: Decode
    methods: frozenset[str]
    configured: Callable[[Mapping[str, Any]], bool]
    formula: str
    reference: str
    claims: Callable[[Mapping[str, Facts]], bool] = lambda facts: True


def final(values: np.ndarray, native: str, dtype: np.dtype[Any]) -> np.ndarray:
    """The reference's result ``values`` (of its own output dtype ``native``)
    as ``dtype``: the same array when they agree, else one rounding to nearest
    even (numpy's and ml_dtypes' ``astype``; every float type here widens to
    float32 exactly, so there is one rounding, never two)."""
    if values.dtype.name != native:
        raise AssertionError(f"decode produced {values.dtype.name}, its plan says {native}")
    return values if values.dtype == dtype else values.astype(dtype)
