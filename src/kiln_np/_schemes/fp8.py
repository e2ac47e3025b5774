"""The FP8 E4M3 schemes: DeepSeek-style block scales and compressed-tensors / ModelOpt scales.

``fp8-block`` (DeepSeek-V3/R1, Kimi K2, Qwen3-FP8; ``quant_method: fp8``): ``X.weight``
F8_E4M3 ``(R, C)`` and ``X.weight_scale_inv`` F32 ``(ceil(R / b0), ceil(C / b1))``, one
scale per block of ``weight_block_size = [b0, b1]`` (``[128, 128]`` without a config; the
last block of a row or column may be partial).  The reference, DeepSeek-V3
``inference/kernel.py`` ``weight_dequant``, computes each value as the FP8 value in float32
times its block's scale (one float32 rounding) and stores it in the default dtype: ``dtype``
here, one more rounding to nearest even for bfloat16 and float16.

``fp8-scaled`` (compressed-tensors ``float-quantized``, strategy tensor, channel or block):
``X.weight`` F8_E4M3 ``(R, C)`` and ``X.weight_scale`` F32, BF16 or
F16 of shape ``()`` or ``(1,)`` (per tensor), ``(R, 1)`` (per row) or, with a config's
``block_structure``, ``(ceil(R / b0), ceil(C / b1))``.  compressed-tensors 0.20.1's
decompressor (``quantization.lifecycle.forward_helpers._dequantize``) casts the FP8 values
to the scale's dtype and multiplies in that dtype (torch computes it in float32 and rounds
once), so its output dtype is the scale's (its ``dtype`` argument is not passed on for these
strategies); other dtypes are that output rounded once.

``fp8-modelopt`` (NVIDIA ModelOpt FP8, ``quant_method: modelopt``, ``quant_algo: FP8``): the
same names, an F32 ``X.weight_scale`` per tensor (``()``, ``(1,)``) or per row.  ModelOpt's
``FP8QTensor.dequantize(dtype)`` computes ``weight.to(dtype) * scale.to(dtype)``: the scale is
rounded to ``dtype`` before the product.  Without a config the names and types are
compressed-tensors' (``fp8-scaled``, listed first); the two agree for float32 output and for
scales that ``dtype`` holds exactly.

Both decode through :func:`kiln_np._kernels.fp8.dequantize`.

>>> facts = {"weight": Facts("w.weight", "f8e4m3", (2, 3), list),
...          "scale": Facts("w.weight_scale_inv", "f32", (1, 1), list)}
>>> plan = FP8_BLOCK.plan("w.weight", facts, {})
>>> plan.shape, plan.native, plan.params["block"]
((2, 3), 'float32', (128, 128))
>>> arrays = {"weight": np.array([[0x38, 0x40, 0xC8]], np.uint8).repeat(2, 0),
...           "scale": np.array([[0.5]], np.float32)}
>>> FP8_BLOCK.decode(plan, arrays, 1, 2, np.dtype(np.float32)).tolist()
[[0.5, 1.0, -2.0]]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

from kiln_np._core.errors import KilnError
from kiln_np._kernels import fp8

from .scheme import Facts, Part, Plan, Scheme, final

__all__ = ["FP8_BLOCK", "FP8_MODELOPT", "FP8_SCALED"]

DEFAULT_BLOCK = (128, 128)
"""DeepSeek's block when no config says otherwise."""


def _bad(
    kind: Literal["TYPE", "SHAPE"], name: str, rule: str, expected: str, found: object
) -> KilnError:
    return KilnError(kind, f"{name}: {rule}: expected {expected}, found {found}")


def _matrix(name: str, scheme: str, weight: Facts) -> tuple[int, int]:
    if weight.type != "f8e4m3":
        raise _bad("TYPE", name, f"{scheme} weight {weight.name}", "f8e4m3", weight.type)
    if len(weight.shape) != 2:
        raise _bad("SHAPE", name, f"{scheme} weight {weight.name}", "2 dimensions", weight.shape)
    rows, cols = weight.shape
    return rows, cols


MAX_BLOCK = 2**31 - 1
"""The largest side of a block a config may give (a C ``int``, as the producers'
kernels take it; DeepSeek's is 128): a larger one would pass the shape rule
(one scale) and fail in the kernel."""


def _block(name: str, where: str, value: object) -> tuple[int, int]:
    if isinstance(value, list | tuple) and len(value) == 2:
        b0, b1 = value
        if type(b0) is int and type(b1) is int and 0 < b0 <= MAX_BLOCK and 0 < b1 <= MAX_BLOCK:
            return b0, b1
    shown = repr(value) if len(repr(value)) <= 200 else repr(value)[:200] + "..."
    raise _bad("TYPE", name, where, f"two integers from 1 to {MAX_BLOCK}", shown)


def _blocks(rows: int, cols: int, block: tuple[int, int]) -> tuple[int, int]:
    return -(-rows // block[0]), -(-cols // block[1])


def _plan_block(name: str, facts: Mapping[str, Facts], config: Mapping[str, Any]) -> Plan:
    rows, cols = _matrix(name, "fp8-block", facts["weight"])
    block = DEFAULT_BLOCK
    if "weight_block_size" in config:
        block = _block(name, "quantization_config weight_block_size", config["weight_block_size"])
    scale = facts["scale"]
    if scale.type != "f32":
        raise _bad("TYPE", name, f"fp8-block scale {scale.name}", "f32", scale.type)
    want = _blocks(rows, cols, block)
    if scale.shape != want:
        rule = f"fp8-block scale {scale.name}, one per {block[0]}x{block[1]} block of {rows}x{cols}"
        raise _bad("SHAPE", name, rule, str(want), scale.shape)
    return Plan((rows, cols), "float32", {"block": block})


def _decode(
    plan: Plan, arrays: Mapping[str, np.ndarray], r0: int, r1: int, dtype: np.dtype[Any]
) -> np.ndarray:
    rows, cols = plan.shape
    block: tuple[int, int] = plan.params["block"]
    codes = np.ascontiguousarray(arrays["weight"].view(np.uint8).reshape(rows, cols)[r0:r1])
    scales = np.ascontiguousarray(arrays["scale"], np.float32)
    scales = scales.reshape(_blocks(rows, cols, block))
    if plan.native == "float32":  # the product itself, rounded once to dtype
        return fp8.dequantize(codes, scales, block, dtype, row0=r0)
    native = fp8.dequantize(codes, scales, block, arrays["scale"].dtype, row0=r0)
    with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN are values here
        return final(native, plan.native, dtype)


def _plan_modelopt(name: str, facts: Mapping[str, Facts], config: Mapping[str, Any]) -> Plan:
    plan = _plan_scaled(name, facts, {})  # per tensor or per row: ModelOpt's FP8 layouts
    return Plan(plan.shape, "float32", plan.params)


def _decode_modelopt(
    plan: Plan, arrays: Mapping[str, np.ndarray], r0: int, r1: int, dtype: np.dtype[Any]
) -> np.ndarray:
    """ModelOpt's ``weight.to(dtype) * scale.to(dtype)``: the scale rounded to ``dtype``
    first, the product (exact in float32) rounded once to ``dtype``."""
    rows, cols = plan.shape
    block: tuple[int, int] = plan.params["block"]
    codes = np.ascontiguousarray(arrays["weight"].view(np.uint8).reshape(rows, cols)[r0:r1])
    with np.errstate(over="ignore"):  # a scale past the dtype's range is its infinity
        scales = np.asarray(arrays["scale"], np.float32).astype(dtype).astype(np.float32)
    return fp8.dequantize(codes, scales.reshape(_blocks(rows, cols, block)), block, dtype, row0=r0)


def _structures(name: str, config: Mapping[str, Any]) -> list[tuple[int, int]]:
    """The weights' ``block_structure`` of each config group of strategy ``block``."""
    found = []
    groups = config.get("config_groups")
    for key, group in (groups if isinstance(groups, dict) else {}).items():
        weights = group.get("weights") if isinstance(group, dict) else None
        if isinstance(weights, dict) and weights.get("strategy") == "block":
            where = f"quantization_config config_groups.{key}.weights.block_structure"
            found.append(_block(name, where, weights.get("block_structure")))
    return found


def _plan_scaled(name: str, facts: Mapping[str, Facts], config: Mapping[str, Any]) -> Plan:
    rows, cols = _matrix(name, "fp8-scaled", facts["weight"])
    scale = facts["scale"]
    native = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}.get(scale.type)
    if native is None:
        raise _bad("TYPE", name, f"fp8-scaled scale {scale.name}", "f32, bf16 or f16", scale.type)
    structures = _structures(name, config)
    if scale.shape in ((), (1,), (1, 1)):
        block = (max(rows, 1), max(cols, 1))
    elif scale.shape in ((rows, 1), (rows,)):
        block = (1, max(cols, 1))
    else:
        fits = [b for b in structures if _blocks(rows, cols, b) == scale.shape]
        if not fits:
            shown = ", ".join(str(_blocks(rows, cols, b)) for b in structures)
            blocks = shown or "one per block of a config's block_structure"
            expected = f"(), (1,), ({rows}, 1) or {blocks}"
            rule = f"fp8-scaled scale {scale.name} of a {rows}x{cols} weight"
            raise _bad("SHAPE", name, rule, expected, scale.shape)
        block = fits[0]
    return Plan((rows, cols), native, {"block": block})


def _fp8_block_config(config: Mapping[str, Any]) -> bool:
    return config.get("quant_method") == "fp8"


def _fp8_scaled_config(config: Mapping[str, Any]) -> bool:
    groups = config.get("config_groups")
    formats = {config.get("format")}
    if isinstance(groups, dict):
        formats |= {g.get("format") for g in groups.values() if isinstance(g, dict)}
    return "float-quantized" in formats


def _fp8_modelopt_config(config: Mapping[str, Any]) -> bool:
    return config.get("quant_algo") == "FP8"


FP8_BLOCK = Scheme(
    name="fp8-block",
    logical=".weight",
    parts=(
        Part("weight", ".weight", frozenset({"f8e4m3"})),
        Part("scale", ".weight_scale_inv", frozenset({"f32"})),
    ),
    plan=_plan_block,
    decode=_decode,
    methods=frozenset({"fp8"}),
    configured=_fp8_block_config,
    formula="dtype(f32(weight) * weight_scale_inv[r // b0, c // b1]): f32 product, one RNE",
    reference="DeepSeek-V3 inference/kernel.py weight_dequant (torch re-implementation)",
)

FP8_SCALED = Scheme(
    name="fp8-scaled",
    logical=".weight",
    parts=(
        Part("weight", ".weight", frozenset({"f8e4m3"})),
        Part("scale", ".weight_scale", frozenset({"f32", "bf16", "f16"})),
    ),
    plan=_plan_scaled,
    decode=_decode,
    methods=frozenset({"compressed-tensors"}),
    configured=_fp8_scaled_config,
    formula="s.dtype(f32(weight) * f32(weight_scale)) (per tensor, row or block), then dtype",
    reference="compressed-tensors 0.20.1 FloatQuantizationCompressor.decompress",
)

FP8_MODELOPT = Scheme(
    name="fp8-modelopt",
    logical=".weight",
    parts=(
        Part("weight", ".weight", frozenset({"f8e4m3"})),
        Part("scale", ".weight_scale", frozenset({"f32"})),
    ),
    plan=_plan_modelopt,
    decode=_decode_modelopt,
    methods=frozenset({"modelopt"}),
    configured=_fp8_modelopt_config,
    formula="dtype(f32(weight) * f32(dtype(weight_scale))): the scale rounded first",
    reference="NVIDIA ModelOpt qtensor/fp8_tensor.py FP8QTensor.dequantize (torch re-impl.)",
)
