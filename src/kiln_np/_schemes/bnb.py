"""bitsandbytes 4-bit weights (NF4, FP4), as transformers saves them.

A ``Linear4bit`` weight ``X.weight`` of logical shape ``S`` (``n`` elements)
is stored as (``bitsandbytes.nn.Linear4bit._save_to_state_dict``, writing
``QuantState.as_dict(packed=True)`` after ``weight.``):

==========================================  =====  =============================
part                                        type   shape
==========================================  =====  =============================
``X.weight``                                U8     ``(ceil(n / 2), 1)``: two codes a
                                                   byte, the **high** nibble first
``X.weight.absmax``                         F32    ``(ceil(n / blocksize),)``, or
                                            U8     the same count of 8-bit codes
                                                   when double-quantized
``X.weight.quant_map``                      F32    ``(16,)``: the code table
``X.weight.quant_state.bitsandbytes__nf4``  U8     JSON (``__fp4`` for FP4)
``X.weight.nested_absmax``                  F32    ``(ceil(blocks / nested_blocksize),)``
``X.weight.nested_quant_map``               F32    ``(256,)``
==========================================  =====  =============================

The last two are present exactly when the weight is double-quantized.  The
JSON object has ``quant_type`` (the suffix's ``nf4`` or ``fp4``),
``blocksize`` (32, 64, ..., 4096), ``dtype`` (``float32``, ``bfloat16``,
``float16``), ``shape`` (``S``) and, double-quantized, ``nested_blocksize``
(a positive integer), ``nested_dtype`` (``float32``) and ``nested_offset`` (a
number; ``NaN`` and ``Infinity`` as Python's ``json`` writes them).

Decoding (bitsandbytes 0.50 ``functional.dequantize_4bit`` and its default
kernel ``backends/default/ops.py`` ``_dequantize_4bit_compute``), element
``i`` of the flattened weight, block ``b = i // blocksize`` (the last block
may be partial):

- ``absmax[b]``: the F32 part; double-quantized, ``nested_quant_map[code] *
  nested_absmax[b // nested_blocksize] + float32(nested_offset)``, two float32
  operations, each rounded;
- ``table[nibble_i] * absmax[b]`` in float32 (one rounding), rounded once to
  nearest even to ``dtype``, the reference's output dtype; any other dtype is
  one more rounding of that (:func:`~.scheme.final`).

``table`` is bitsandbytes' ``get_4bit_type``: the NF4 quantiles, or the FP4
values ``[0, 0.0625, 8, 12, 4, 6, 2, 3]`` and their negatives over 12 in
float32 (code 8 is +0.0, as ``get_4bit_type`` makes it).  bitsandbytes
decodes with its own table and ignores ``quant_map``; a ``quant_map`` other
than that table is refused rather than silently ignored.

Where bitsandbytes' CPU kernels depart from that definition on some machines,
this follows the definition (and bitsandbytes' default kernel, CUDA's
arithmetic and its own quantizer): its AVX512 kernel reads ``absmax`` per row
when a row is a multiple of 16 elements but not of ``blocksize``, its
AVX512-BF16 conversion flushes bfloat16 results below 2**-126 to zero, its
scalar kernel has -0.0 for FP4 code 8; NaN bits differ from kernel to kernel
(here: float32 keeps the product's NaN, bfloat16 and float16 write the quiet
NaN of its sign, :mod:`kiln_np._kernels.bnb`).

>>> FP4[[2, 3, 8]].tolist()
[0.6666666865348816, 1.0, 0.0]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from kiln_np._core.errors import ErrorKind, KilnError
from kiln_np._core.jsontext import parse_json
from kiln_np._core.table import check_shape, spec_dtype
from kiln_np._kernels.bnb import decode_4bit

from .scheme import Facts, Part, Plan, Scheme, final

__all__ = ["BNB_FP4", "BNB_NF4", "FP4", "NF4"]

NF4 = np.array(
    [
        -1.0,
        -0.6961928009986877,
        -0.5250730514526367,
        -0.39491748809814453,
        -0.28444138169288635,
        -0.18477343022823334,
        -0.09105003625154495,
        0.0,
        0.07958029955625534,
        0.16093020141124725,
        0.24611230194568634,
        0.33791524171829224,
        0.44070982933044434,
        0.5626170039176941,
        0.7229568362236023,
        1.0,
    ],
    np.float32,
)
"""bitsandbytes' NF4 table (``get_4bit_type("nf4")``): code -> value in [-1, 1]."""

FP4 = np.array(
    [0, 0.0625, 8, 12, 4, 6, 2, 3, 0, -0.0625, -8, -12, -4, -6, -2, -3], np.float32
) / np.float32(12)
"""bitsandbytes' FP4 table (``get_4bit_type("fp4")``): code -> value / 12, in float32."""

_TABLES = {"nf4": NF4, "fp4": FP4}
_BLOCKSIZES = (32, 64, 128, 256, 512, 1024, 2048, 4096)
_SPECS = {"float32": "<f4", "bfloat16": "ml_dtypes.bfloat16", "float16": "<f2"}
_DTYPES = tuple(_SPECS)
_STATE_MAX = 4096
"""Most bytes of a JSON quant state read (bitsandbytes writes under 200)."""
_NESTED_MAX = 2**31 - 1
"""The largest nested_blocksize (bitsandbytes passes it to its kernels as an int)."""
_FLOAT_MAX = int(np.finfo(np.float64).max)
"""An integer nested_offset past this is no float (``float(offset)`` overflows)."""
_KEYS = ("quant_type", "blocksize", "dtype", "shape")
_NESTED_KEYS = ("nested_blocksize", "nested_dtype", "nested_offset")


def _fail(kind: ErrorKind, where: str, rule: str, **found: Any) -> KilnError:
    return KilnError(kind, f"{where}: {rule}", **found)


def _parts(kind: str) -> tuple[Part, ...]:
    f32, u8 = frozenset({"f32"}), frozenset({"u8"})
    return (
        Part("quant_state", f".weight.quant_state.bitsandbytes__{kind}", u8),
        Part("weight", ".weight", u8),
        Part("absmax", ".weight.absmax", frozenset({"f32", "u8"})),
        Part("quant_map", ".weight.quant_map", f32),
        Part("nested_absmax", ".weight.nested_absmax", f32, optional=True),
        Part("nested_quant_map", ".weight.nested_quant_map", f32, optional=True),
    )


def _read_state(where: str, facts: Facts) -> dict[str, Any]:
    """The quant state part's JSON object, read only when small and 1-D."""
    if len(facts.shape) != 1 or not 0 < facts.shape[0] <= _STATE_MAX:
        raise _fail(
            "SHAPE",
            where,
            f"expected the quant state {facts.name!r} as 1 to {_STATE_MAX} bytes of JSON (U8 of "
            f"shape (k,)), found shape {facts.shape}",
            shape=facts.shape,
        )
    raw = bytes(np.asarray(facts.read(), np.uint8))
    # the package's one strict parser: nesting capped (never a RecursionError),
    # duplicate keys refused, NaN and Infinity read as Python's json writes them
    state = parse_json(raw, f"{where}: quant state {facts.name!r}: ", serde=False, constants=True)
    if not isinstance(state, dict):
        found = type(state).__name__
        raise _fail("TYPE", where, f"expected the quant state as a JSON object, found {found}")
    return state


def _int(where: str, state: Mapping[str, Any], key: str) -> int:
    value = state[key]
    if type(value) is not int:
        raise _fail("TYPE", where, f"expected quant state {key} as an integer, found {value!r}")
    return value


def _check_keys(where: str, state: Mapping[str, Any], nested: bool) -> None:
    wanted = _KEYS + _NESTED_KEYS if nested else _KEYS
    missing = [key for key in wanted if key not in state]
    extra = sorted(key for key in state if key not in wanted)
    if missing or extra:
        why = "double-quantized" if nested else "without nested_absmax, nested_quant_map"
        raise _fail(
            "TYPE",
            where,
            f"expected quant state keys {list(wanted)} ({why}), found {sorted(state)}"
            + (f": missing {missing}" if missing else "")
            + (f": unexpected {extra}" if extra else ""),
        )


def _check_part(where: str, facts: Facts, types: tuple[str, ...], shape: tuple[int, ...]) -> None:
    if facts.type not in types:
        raise _fail(
            "TYPE",
            where,
            f"expected {facts.name!r} of type {' or '.join(types)}, found {facts.type}",
            found=facts.type,
        )
    if facts.shape != shape:
        raise _fail(
            "SHAPE",
            where,
            f"expected {facts.name!r} of shape {shape}, found {facts.shape}",
            shape=facts.shape,
            expected=shape,
            found=facts.shape,
        )


def _check_table(where: str, facts: Facts, kind: str) -> None:
    """bitsandbytes decodes with its own table: a stored one that differs is refused."""
    table = _TABLES[kind]
    found = np.asarray(facts.read(), np.float32).reshape(16)
    bad = np.flatnonzero(found.view(np.uint32) != table.view(np.uint32))
    if bad.size:
        i = int(bad[0])
        raise _fail(
            "TYPE",
            where,
            f"expected {facts.name!r} to be bitsandbytes' {kind} table (its dequantize_4bit "
            f"decodes with that table, not this part), found {float(found[i])!r} for "
            f"{float(table[i])!r} at element {i}",
            index=i,
        )


def _check_shape(where: str, shape: object) -> tuple[int, ...]:
    if not isinstance(shape, list) or not shape or any(type(d) is not int or d < 0 for d in shape):
        raise _fail(
            "SHAPE",
            where,
            f"expected quant state shape as a non-empty list of non-negative integers, "
            f"found {shape!r}",
        )
    return check_shape(tuple(shape), f"{where}: quant state shape: ")


def _plan_nested(
    where: str, state: Mapping[str, Any], facts: Mapping[str, Facts], blocks: int
) -> dict[str, Any]:
    """Check the double-quant keys and parts; the plan's nested params."""
    nested_blocksize = _int(where, state, "nested_blocksize")
    if not 1 <= nested_blocksize <= _NESTED_MAX:
        raise _fail(
            "SHAPE",
            where,
            f"expected a positive nested_blocksize of at most {_NESTED_MAX} (a C int, as "
            f"bitsandbytes' kernels take it), found {nested_blocksize}",
            found=nested_blocksize,
        )
    if state["nested_dtype"] != "float32":
        raise _fail(
            "TYPE", where, f"expected nested_dtype 'float32', found {state['nested_dtype']!r}"
        )
    offset = state["nested_offset"]
    if type(offset) not in (int, float) or (type(offset) is int and abs(offset) > _FLOAT_MAX):
        shown = (
            repr(offset)
            if type(offset) is not int
            else f"an integer of {len(str(abs(offset)))} digits, past a float's range"
        )
        raise _fail("TYPE", where, f"expected nested_offset as a number, found {shown}")
    _check_part(where, facts["nested_absmax"], ("f32",), (-(-blocks // nested_blocksize),))
    _check_part(where, facts["nested_quant_map"], ("f32",), (256,))
    # bitsandbytes' QuantState.from_dict: torch.tensor(float(offset)), a float32 scalar.
    return {"nested_blocksize": nested_blocksize, "offset": np.float32(float(offset))}


def _plan(kind: str, name: str, facts: Mapping[str, Facts]) -> Plan:
    where = f"{name} (bnb-{kind})"
    state = _read_state(where, facts["quant_state"])
    nested = "nested_absmax" in facts
    if nested != ("nested_quant_map" in facts):
        have, lack = ("nested_absmax", "nested_quant_map")[:: 1 if nested else -1]
        raise _fail(
            "TYPE",
            where,
            f"expected nested_absmax and nested_quant_map together (double quant), found "
            f"{have} without {lack}",
        )
    _check_keys(where, state, nested)
    quant_type = state["quant_type"]
    if not isinstance(quant_type, str) or quant_type not in _TABLES:
        raise _fail("TYPE", where, f"expected quant_type 'nf4' or 'fp4', found {quant_type!r}")
    if quant_type != kind:
        raise _fail(
            "TYPE",
            where,
            f"expected quant_type {kind!r} (the part is ...bitsandbytes__{kind}), "
            f"found {quant_type!r}",
        )
    blocksize = _int(where, state, "blocksize")
    if blocksize not in _BLOCKSIZES:
        raise _fail(
            "SHAPE",
            where,
            f"expected blocksize one of {list(_BLOCKSIZES)}, found {blocksize}",
            found=blocksize,
        )
    dtype = state["dtype"]
    if dtype not in _DTYPES:
        raise _fail("TYPE", where, f"expected dtype one of {list(_DTYPES)}, found {dtype!r}")
    shape = _check_shape(where, state["shape"])
    count = math.prod(shape)
    packed = (count + 1) // 2
    weight = facts["weight"]
    _check_part(where, weight, ("u8",), weight.shape)
    if weight.shape != (packed, 1):
        raise _fail(
            "LENGTH",
            where,
            f"expected {weight.name!r} of shape ({packed}, 1): shape {shape} has {count} "
            f"elements, two a byte; found {weight.shape}",
            expected=packed,
            found=math.prod(weight.shape),
        )
    blocks = -(-count // blocksize)
    _check_part(where, facts["absmax"], ("u8",) if nested else ("f32",), (blocks,))
    _check_part(where, facts["quant_map"], ("f32",), (16,))
    _check_table(where, facts["quant_map"], kind)
    params: dict[str, Any] = {"kind": kind, "blocksize": blocksize, "count": count}
    params.update(_plan_nested(where, state, facts, blocks) if nested else {})
    return Plan(shape, dtype, params)


def _scales(plan: Plan, arrays: Mapping[str, np.ndarray], b0: int, b1: int) -> np.ndarray:
    """absmax of blocks ``[b0, b1)`` as float32 (double quant decoded as bitsandbytes does)."""
    p = plan.params
    if "offset" not in p:
        absmax: np.ndarray = arrays["absmax"][b0:b1]
        return absmax
    codes = arrays["absmax"][b0:b1]
    step = p["nested_blocksize"]
    nested = arrays["nested_absmax"][np.arange(b0, b1) // step]
    scales: np.ndarray = arrays["nested_quant_map"][codes] * nested
    scales += p["offset"]
    return scales


def decode(
    plan: Plan, arrays: Mapping[str, np.ndarray], r0: int, r1: int, dtype: np.dtype[Any]
) -> np.ndarray:
    """Rows ``[r0, r1)`` of a planned bnb-nf4 / bnb-fp4 weight as ``dtype``
    (module docstring: the formula and its roundings).

    Whole blocks around the rows are decoded (so every product has its
    block's absmax at hand), then the rows are cut out: at most two blocks
    of extra work."""
    p = plan.params
    row = math.prod(plan.shape[1:])
    e0, e1, size = r0 * row, r1 * row, p["blocksize"]
    b0, b1 = e0 // size, -(-e1 // size)
    start = b0 * size  # even: every blocksize is
    codes = arrays["weight"].reshape(-1)[start // 2 : (min(b1 * size, p["count"]) + 1) // 2]
    with np.errstate(over="ignore", invalid="ignore"):  # inf x 0, overflow: values
        scales = _scales(plan, arrays, b0, b1)
        native = decode_4bit(
            codes,
            _TABLES[p["kind"]],
            scales,
            size,
            e0 - start,
            e1 - start,
            spec_dtype(_SPECS[plan.native]),
        )
        out = final(native, plan.native, dtype)
    return out.reshape(r1 - r0, *plan.shape[1:])


def _configured(kind: str) -> Callable[[Mapping[str, Any]], bool]:
    def configured(config: Mapping[str, Any]) -> bool:
        four_bit = config.get("load_in_4bit", config.get("_load_in_4bit"))
        # transformers' BitsAndBytesConfig defaults bnb_4bit_quant_type to "fp4"
        return four_bit is True and config.get("bnb_4bit_quant_type", "fp4") == kind

    return configured


def _scheme(kind: str) -> Scheme:
    return Scheme(
        name=f"bnb-{kind}",
        logical=".weight",
        parts=_parts(kind),
        plan=lambda name, facts, _config: _plan(kind, name, facts),
        decode=decode,
        methods=frozenset({"bitsandbytes"}),
        configured=_configured(kind),
        formula=(
            f"{kind} table[code] (high nibble first) x absmax[i // blocksize] in float32 "
            "(double quant: absmax = nested_quant_map[code] x nested_absmax[b // "
            "nested_blocksize] + nested_offset, float32), rounded once to the quant state's "
            "dtype"
        ),
        reference=(
            "bitsandbytes 0.50 functional.dequantize_4bit (default kernel _dequantize_4bit_compute)"
        ),
    )


BNB_NF4 = _scheme("nf4")
BNB_FP4 = _scheme("fp4")
