"""The e2m1 (FP4) schemes: NVFP4 as ModelOpt and compressed-tensors store it, and
gpt-oss's MXFP4.

Each packs two e2m1 codes a byte, the even element in the low nibble, and scales
a block of them; they differ in the block, the scale's type and the order of
the arithmetic, each given here as its reference computes it:

``nvfp4-modelopt`` (NVIDIA ModelOpt's HF export, ``quant_method`` ``modelopt``,
``quant_algo`` ``NVFP4``; NVFP4QTensor.dequantize, nvfp4_tensor.py)
    ``X.weight`` U8 (..., C/2), ``X.weight_scale`` F8_E4M3 (..., C/16),
    ``X.weight_scale_2`` F32 scalar: ``dtype(e2m1 * (float32(weight_scale) *
    weight_scale_2))``, every product in float32, one rounding to the output
    dtype; ModelOpt's table has +0.0 for code 8 (the others, -0.0).
    ``X.input_scale`` is an activation's and passes through.
``nvfp4-ct`` (compressed-tensors 0.20.1 ``nvfp4-pack-quantized``;
NVFP4PackedCompressor.decompress)
    ``X.weight_packed`` U8 (R, C/2), ``X.weight_scale`` F8_E4M3 (R, C/16),
    ``X.weight_global_scale`` F32 (1,), the reciprocal of a tensor scale:
    ``bfloat16(e2m1 * (float32(weight_scale) / weight_global_scale))``, always
    bfloat16 (the decompressor's), rounded again to another output dtype.
``mxfp4-gpt-oss`` (gpt-oss's HF layout, ``quant_method`` ``mxfp4``;
gpt_oss/torch/weights.py, Checkpoint._get_mxfp4_tensor)
    ``X_blocks`` U8 (..., G, 16), ``X_scales`` U8 (..., G), e8m0 with bias
    127; logical ``X`` (..., G * 32), not transposed:
    ``bfloat16(ldexp(e2m1, scale - 127))``, exact in bfloat16 or an infinity
    (scale byte 255 doubles 0.5 to 2**127 and makes 1.0 and more infinite).

>>> import numpy as np
>>> facts = {
...     "blocks": Facts("w_blocks", "u8", (1, 1, 16), lambda: np.zeros(0)),
...     "scales": Facts("w_scales", "u8", (1, 1), lambda: np.zeros(0)),
... }
>>> plan = MXFP4_GPT_OSS.plan("w", facts, {"quant_method": "mxfp4"})
>>> plan.shape, plan.native
((1, 32), 'bfloat16')
>>> arrays = {"blocks": np.full((1, 1, 16), 0x21, np.uint8), "scales": np.array([[128]], np.uint8)}
>>> MXFP4_GPT_OSS.decode(plan, arrays, 0, 1, np.dtype(np.float32))[0, :2].tolist()
[1.0, 2.0]
"""

from __future__ import annotations

from collections.abc import Mapping
from math import prod
from typing import Any

import numpy as np

from kiln_np._core.errors import KilnError
from kiln_np._core.table import as_dtype
from kiln_np._kernels import fp4, pool

from .scheme import Facts, Part, Plan, Scheme, final

__all__ = ["MXFP4_GPT_OSS", "NVFP4_CT", "NVFP4_MODELOPT", "SCHEMES"]

NVFP4_GROUP = 16
"""Elements an NVFP4 block scale covers (ModelOpt's ``block_sizes[-1]``,
compressed-tensors' ``group_size``)."""

MX_BLOCK_BYTES = 16
"""Bytes of one gpt-oss MXFP4 block: 32 e2m1 codes (gpt-oss's ``BYTES_PER_BLOCK``)."""

_F32 = np.dtype(np.float32)

_MX_SCALE = np.ldexp(np.float32(1.0), np.arange(256) - 128).astype(np.float32)
"""``2**(e - 128)`` for every e8m0 byte, exact in float32 (``e`` 0 and 1 subnormal):
with :func:`fp4.scaled_into`'s ``post`` 2.0 the product is ``v * 2**(e - 127)``,
exact until the final doubling, which is where 255 overflows as ldexp does."""

_CODES = np.arange(256, dtype=np.uint8)


def _e4m3_table() -> np.ndarray:
    """Every FP8 E4M3 code as float32 (exact; 0x7f and 0xff NaN)."""
    return _CODES.view(as_dtype("float8_e4m3fn")).astype(_F32)


def _bad(name: str, rule: str, expected: object, found: object, kind: str = "SHAPE") -> KilnError:
    return KilnError(
        "TYPE" if kind == "TYPE" else "SHAPE",
        f"{name}: {rule}: expected {expected}, found {found}",
        expected=expected,
        found=found,
    )


def _types(name: str, facts: Mapping[str, Facts], parts: tuple[Part, ...]) -> None:
    for part in parts:
        fact = facts[part.role]
        if fact.type not in part.types:
            allowed = " or ".join(sorted(part.types))
            raise _bad(name, f"{fact.name} has the wrong type", allowed, fact.type, "TYPE")


def _one(name: str, fact: Facts) -> None:
    """A per-tensor scale: one element (shape ``()`` or ``(1,)``)."""
    if prod(fact.shape) != 1 or len(fact.shape) > 1:
        raise _bad(name, f"{fact.name} is one scale for the tensor", "shape () or (1,)", fact.shape)


def _nvfp4_shape(name: str, packed: Facts, scale: Facts, group: int) -> tuple[int, ...]:
    """The logical shape of packed (..., C/2) codes with (..., C/group) block scales."""
    if not packed.shape:
        raise _bad(name, f"{packed.name} holds packed rows", "at least 1 dimension", "a scalar")
    columns = 2 * packed.shape[-1]
    if columns % group:
        rule = f"{packed.name}'s {columns} columns are not a whole number of {group}-element blocks"
        raise _bad(name, rule, f"a multiple of {group}", columns)
    want = (*packed.shape[:-1], columns // group)
    if scale.shape != want:
        rule = f"{scale.name} is one scale per {group} columns of {packed.name}"
        raise _bad(name, rule, want, scale.shape)
    return (*packed.shape[:-1], columns)


def _rows(plan: Plan, r0: int, r1: int, dtype: np.dtype[Any]) -> np.ndarray:
    shape = (r1 - r0, *plan.shape[1:])
    return pool.empty(shape, dtype, prod(shape))


# --- ModelOpt ----------------------------------------------------------------------------

_MODELOPT_PARTS = (
    Part("weight", ".weight", frozenset({"u8"})),
    Part("weight_scale", ".weight_scale", frozenset({"f8e4m3"})),
    Part("weight_scale_2", ".weight_scale_2", frozenset({"f32"})),
)


def _modelopt_group(name: str, config: Mapping[str, Any]) -> int:
    """The block size a ModelOpt config gives (its own ``group_size``, or the
    compressed-tensors-style ``config_groups``' weights'), which must be 16."""
    sizes = [config["group_size"]] if "group_size" in config else []
    groups = config.get("config_groups")
    if isinstance(groups, Mapping):
        for group in groups.values():
            weights = group.get("weights") if isinstance(group, Mapping) else None
            if isinstance(weights, Mapping) and "group_size" in weights:
                sizes.append(weights["group_size"])
    for size in sizes:
        if size != NVFP4_GROUP:
            raise _bad(name, "an NVFP4 group_size is 16", NVFP4_GROUP, repr(size), "TYPE")
    return NVFP4_GROUP


def _modelopt_plan(name: str, facts: Mapping[str, Facts], config: Mapping[str, Any]) -> Plan:
    _types(name, facts, _MODELOPT_PARTS)
    group = _modelopt_group(name, config)
    shape = _nvfp4_shape(name, facts["weight"], facts["weight_scale"], group)
    _one(name, facts["weight_scale_2"])
    return Plan(shape, "float32", {"group": group})


def _modelopt_decode(
    plan: Plan, arrays: Mapping[str, np.ndarray], r0: int, r1: int, dtype: np.dtype[Any]
) -> np.ndarray:
    # NVFP4QTensor.dequantize: per_block_scale = scale.to(float32) * double_scale, then
    # (LUT values, float32) * per_block_scale, then .to(dtype): one rounding at the end.
    # (per code: the same float32 product as per block)
    scale_2 = arrays["weight_scale_2"].reshape(()).astype(_F32)
    with np.errstate(all="ignore"):
        table = _e4m3_table() * scale_2
    out = _rows(plan, r0, r1, dtype)
    packed = np.ascontiguousarray(arrays["weight"][r0:r1])
    scales = np.ascontiguousarray(arrays["weight_scale"][r0:r1])
    # ModelOpt's e2m1_values has +0.0 for code 8 (-0.0 only from a negative scale)
    fp4.scaled_into(packed, scales, table, out, plan.params["group"], 1.0, minus_zero=False)
    return out


def _modelopt_configured(config: Mapping[str, Any]) -> bool:
    return config.get("quant_algo") == "NVFP4"


NVFP4_MODELOPT = Scheme(
    name="nvfp4-modelopt",
    logical=".weight",
    parts=_MODELOPT_PARTS,
    plan=_modelopt_plan,
    decode=_modelopt_decode,
    methods=frozenset({"modelopt"}),
    configured=_modelopt_configured,
    formula="dtype(e2m1 * (f32(weight_scale) * weight_scale_2)), products in f32",
    reference=(
        "NVIDIA TensorRT-Model-Optimizer, modelopt/torch/quantization/qtensor/"
        "nvfp4_tensor.py, NVFP4QTensor.dequantize (commit 5a4242f)"
    ),
)


# --- compressed-tensors ------------------------------------------------------------------

_CT_PARTS = (
    Part("weight_packed", ".weight_packed", frozenset({"u8"})),
    Part("weight_scale", ".weight_scale", frozenset({"f8e4m3"})),
    Part("weight_global_scale", ".weight_global_scale", frozenset({"f32"})),
)

CT_FORMAT = "nvfp4-pack-quantized"


def _ct_plan(name: str, facts: Mapping[str, Facts], config: Mapping[str, Any]) -> Plan:
    _types(name, facts, _CT_PARTS)
    packed = facts["weight_packed"]
    if len(packed.shape) != 2:
        rule = f"{packed.name} is a matrix (the decompressor unpacks m, n = its shape)"
        raise _bad(name, rule, "2 dimensions", len(packed.shape))
    shape = _nvfp4_shape(name, packed, facts["weight_scale"], NVFP4_GROUP)
    _one(name, facts["weight_global_scale"])
    return Plan(shape, "bfloat16", {})


def _ct_decode(
    plan: Plan, arrays: Mapping[str, np.ndarray], r0: int, r1: int, dtype: np.dtype[Any]
) -> np.ndarray:
    # decompress: unpack_fp4_from_uint8 (bfloat16), scale.to(bfloat16) (exact from
    # E4M3), _dequantize: scale / global_scale (float32, the global scale's type),
    # codes * scale (float32), .to(bfloat16).
    # (per code: the same float32 quotient as per block)
    global_scale = arrays["weight_global_scale"].reshape(()).astype(_F32)
    with np.errstate(all="ignore"):
        table = _e4m3_table() / global_scale
    out = _rows(plan, r0, r1, as_dtype("bfloat16"))
    packed = np.ascontiguousarray(arrays["weight_packed"][r0:r1])
    scales = np.ascontiguousarray(arrays["weight_scale"][r0:r1])
    fp4.scaled_into(packed, scales, table, out, NVFP4_GROUP, 1.0)
    with np.errstate(over="ignore"):  # bfloat16 beyond float16's range: infinities
        return final(out, plan.native, dtype)


def _ct_configured(config: Mapping[str, Any]) -> bool:
    if config.get("format") == CT_FORMAT:
        return True
    groups = config.get("config_groups")
    return isinstance(groups, Mapping) and any(
        isinstance(group, Mapping) and group.get("format") == CT_FORMAT for group in groups.values()
    )


NVFP4_CT = Scheme(
    name="nvfp4-ct",
    logical=".weight",
    parts=_CT_PARTS,
    plan=_ct_plan,
    decode=_ct_decode,
    methods=frozenset({"compressed-tensors"}),
    configured=_ct_configured,
    formula="bf16(e2m1 * (f32(weight_scale) / weight_global_scale)), in f32; then dtype",
    reference=(
        "compressed-tensors 0.20.1, compressors/nvfp4/base.py, NVFP4PackedCompressor.decompress"
    ),
)


# --- gpt-oss MXFP4 -----------------------------------------------------------------------

_GPT_OSS_PARTS = (
    Part("blocks", "_blocks", frozenset({"u8"})),
    Part("scales", "_scales", frozenset({"u8"})),
)


def _gpt_oss_plan(name: str, facts: Mapping[str, Facts], config: Mapping[str, Any]) -> Plan:
    _types(name, facts, _GPT_OSS_PARTS)
    blocks, scales = facts["blocks"], facts["scales"]
    if len(blocks.shape) < 2 or blocks.shape[-1] != MX_BLOCK_BYTES:
        rule = f"{blocks.name} holds blocks of {MX_BLOCK_BYTES} bytes (32 e2m1 codes)"
        raise _bad(name, rule, f"shape (..., G, {MX_BLOCK_BYTES})", blocks.shape)
    if scales.shape != blocks.shape[:-1]:
        rule = f"{scales.name} is one e8m0 byte per block of {blocks.name}"
        raise _bad(name, rule, blocks.shape[:-1], scales.shape)
    *prefix, groups, width = blocks.shape
    return Plan((*prefix, groups * width * 2), "bfloat16", {})


def _gpt_oss_decode(
    plan: Plan, arrays: Mapping[str, np.ndarray], r0: int, r1: int, dtype: np.dtype[Any]
) -> np.ndarray:
    # ldexp(bfloat16 LUT value, e - 127) is exact in bfloat16 or infinite, so rounding
    # it to dtype is rounding the float32 product: the kernel writes dtype directly.
    if len(plan.shape) > 1:
        return _mx_blocks(arrays["blocks"][r0:r1], arrays["scales"][r0:r1], dtype)
    # (G, 16) blocks: the rows are elements; decode the whole blocks holding them, cut
    block = 2 * MX_BLOCK_BYTES
    b0, b1 = r0 // block, -(-r1 // block)
    out = _mx_blocks(arrays["blocks"][b0:b1], arrays["scales"][b0:b1], dtype)
    return out.reshape(-1)[r0 - b0 * block : r1 - b0 * block]


def _mx_blocks(blocks: np.ndarray, scales: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """(..., G, 16) blocks and (..., G) scales as (..., G * 32) values."""
    shape = (*scales.shape[:-1], scales.shape[-1] * 2 * MX_BLOCK_BYTES)
    out = pool.empty(shape, dtype, prod(shape))
    packed = np.ascontiguousarray(blocks)
    codes = np.ascontiguousarray(scales)
    fp4.scaled_into(packed, codes, _MX_SCALE, out, 2 * MX_BLOCK_BYTES, 2.0)
    return out


MXFP4_GPT_OSS = Scheme(
    name="mxfp4-gpt-oss",
    logical="",
    parts=_GPT_OSS_PARTS,
    plan=_gpt_oss_plan,
    decode=_gpt_oss_decode,
    methods=frozenset({"mxfp4"}),
    configured=lambda config: True,
    formula="bf16(ldexp(e2m1, scales - 127)), exact or infinite; then dtype",
    reference=(
        "openai/gpt-oss, gpt_oss/torch/weights.py, Checkpoint._get_mxfp4_tensor (commit 7b58334)"
    ),
)

SCHEMES = (NVFP4_MODELOPT, NVFP4_CT, MXFP4_GPT_OSS)
"""This module's rows of the table, in its order."""
