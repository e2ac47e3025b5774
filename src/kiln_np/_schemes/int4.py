"""The int4 schemes: 4-bit integer codes packed eight to an int32, with a scale
(and a zero) per group of input columns.

- ``gptq`` (AutoGPTQ, GPTQModel): ``X.qweight`` (in/8, out), ``X.qzeros``
  (groups, out/8), ``X.scales`` (groups, out), ``X.g_idx`` (in) giving column
  ``i``'s group (with ``desc_act`` a permutation of the groups; absent, ``i //
  (in / groups)``).  ``w[o, i] = scales[g, o] * (q[i, o] - z[g, o])`` in the
  scales' dtype, ``g = g_idx[i]``; the v1 format (``checkpoint_format`` "gptq",
  the default) stores ``z - 1``, read back as ``(stored + 1) & 15``.
- ``awq`` (AutoAWQ gemm): ``X.qweight`` (in, out/8), ``X.qzeros`` (groups,
  out/8), ``X.scales`` (groups, out); the nibbles of a word hold columns 0, 2,
  4, 6, 1, 3, 5, 7; ``w[o, i] = (q - z) * scales[i // group, o]``.
- ``pack-quantized`` (compressed-tensors W4A16): ``X.weight_packed`` (out,
  ceil(in/8)) of codes offset by 8, ``X.weight_scale`` (out, groups),
  ``X.weight_shape`` (the logical (out, in)), ``X.weight_zero_point``
  (ceil(out/8), groups) packed down the rows when asymmetric.

GPTQ and AWQ store the weight as (in, out); the logical weight is nn.Linear's
(out, in), their transpose.  Without a ``quantization_config`` the two are told
apart by the shapes: ``qweight`` as wide as ``scales`` is GPTQ's, an eighth of
it AWQ's.

>>> [s.name for s in INT4_SCHEMES]
['gptq', 'awq', 'pack-quantized']
>>> GPTQ.configured({"quant_method": "gptq", "checkpoint_format": "marlin"})
False
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kiln_np._core.errors import KilnError
from kiln_np._kernels import pool
from kiln_np._kernels.int4 import AWQ_NIBBLE, int4_rows

from .scheme import Facts, Part, Plan, Scheme

__all__ = ["AWQ", "GPTQ", "INT4_SCHEMES", "PACK_QUANTIZED"]

_I32 = frozenset({"i32"})
_HALF = frozenset({"f16", "bf16"})
_NATIVE = {"f16": "float16", "bf16": "bfloat16", "f32": "float32"}


def _shape_error(name: str, scheme: str, rule: str) -> KilnError:
    return KilnError("SHAPE", f"tensor {name!r} ({scheme}): expected {rule}")


def _two_d(name: str, scheme: str, f: Facts, what: str) -> tuple[int, int]:
    if len(f.shape) != 2 or 0 in f.shape:
        raise _shape_error(name, scheme, f"{what} {f.name!r} 2-D and not empty, found {f.shape}")
    return f.shape[0], f.shape[1]


def _gptq_format(config: Mapping[str, Any]) -> object:
    return config.get("checkpoint_format", config.get("format", "gptq"))


def _gptq_configured(config: Mapping[str, Any]) -> bool:
    return _gptq_format(config) in ("gptq", "gptq_v2")


def _awq_configured(config: Mapping[str, Any]) -> bool:
    return str(config.get("version", "gemm")).lower() == "gemm"


def _bits(name: str, scheme: str, config: Mapping[str, Any]) -> None:
    bits = config.get("bits", 4)
    if bits != 4:
        raise KilnError(
            "TYPE",
            f"tensor {name!r} ({scheme}): expected bits 4 in the quantization_config, "
            f"found {bits!r} (only 4-bit codes are read)",
        )


def _gptq_shaped(facts: Mapping[str, Facts]) -> bool:
    """Whether GPTQ/AWQ parts are GPTQ's layout, qweight ``(in/8, out)`` as wide as
    ``scales`` (AWQ's ``(in, out/8)`` is narrower); parts that are not matrices
    are GPTQ's, for its plan to refuse."""
    q, s = facts["qweight"].shape, facts["scales"].shape
    return len(q) != 2 or len(s) != 2 or q[1] == s[1]


def _plan_q(name: str, facts: Mapping[str, Facts], config: Mapping[str, Any]) -> Plan:
    """Both GPTQ's and AWQ's: the layout from the config's method, or from the
    shapes when there is no config."""
    method = config.get("quant_method")
    scheme = str(method) if method else "gptq/awq"
    _bits(name, scheme, config)
    rows, cols = _two_d(name, scheme, facts["qweight"], "qweight")
    groups, out = _two_d(name, scheme, facts["scales"], "scales")
    zrows, zcols = _two_d(name, scheme, facts["qzeros"], "qzeros")
    layout = method if method in ("gptq", "awq") else ("gptq" if cols == out else "awq")
    n_in = 8 * rows if layout == "gptq" else rows
    width = cols if layout == "gptq" else 8 * cols
    if width != out:
        packing = "(in/8, out)" if layout == "gptq" else "(in, out/8)"
        raise _shape_error(
            name,
            layout,
            f"qweight {packing} with out = {out} (the width of scales {facts['scales'].shape}), "
            f"found {facts['qweight'].shape}",
        )
    if out % 8 or (zrows, zcols) != (groups, out // 8):
        raise _shape_error(
            name,
            layout,
            f"qzeros (groups, out/8) = ({groups}, {out / 8:g}), found {(zrows, zcols)}",
        )
    size = config.get("group_size")
    configured = size if isinstance(size, int) and size > 0 else 0
    group = configured or (n_in // groups if n_in % groups == 0 else 0)
    consistent = bool(group) and -(-n_in // group) == groups
    consistent = consistent and not (layout == "awq" and n_in % group)
    gidx = facts.get("g_idx")
    if not consistent and (gidx is None or configured):
        raise _shape_error(
            name,
            layout,
            f"{n_in} columns in groups of {configured or 'in / groups'} columns: scales of "
            f"{-(-n_in // group) if group else 'a divisor of ' + str(n_in)} rows, found {groups}",
        )
    if gidx is not None:
        if layout == "awq":
            raise _shape_error(name, layout, f"no g_idx for AWQ, found {gidx.name!r}")
        if gidx.shape != (n_in,):
            raise _shape_error(name, layout, f"g_idx of shape ({n_in},), found {gidx.shape}")
        values = gidx.read()
        bad = np.flatnonzero((values < 0) | (values >= groups))
        if bad.size:
            raise _shape_error(
                name,
                layout,
                f"g_idx values in [0, {groups}) (the groups of scales), found "
                f"{int(values[bad[0]])} at {int(bad[0])}",
            )
        if not consistent or not np.array_equal(values, np.arange(n_in) // group):
            group = 0  # desc_act: each column's group from g_idx
    v1 = layout == "gptq" and _gptq_format(config) != "gptq_v2"
    params = {"layout": layout, "in": n_in, "group": group, "v1": v1}
    return Plan((out, n_in), _NATIVE[facts["scales"].type], params)


def _zeros_by_nibble(words: np.ndarray, o: np.ndarray, nibble: np.ndarray) -> np.ndarray:
    """(groups, rows): nibble ``nibble[k]`` of ``words[:, o[k] // 8]``."""
    picked = words.view(np.uint32)[:, o >> 3] >> (4 * nibble).astype(np.uint32)
    return (picked & np.uint32(15)).astype(np.int32)


def _gidx(plan: Plan, arrays: Mapping[str, np.ndarray], key: str) -> np.ndarray:
    """Each column's group: the stored ``key`` when the plan found no rule for it,
    checked here, once for both kernels (the plan checked the file's; these are
    the caller's arrays): a group outside ``scales`` is TYPE, never the compiled
    kernel's ValueError or numpy's index wrapping -1 to the last group."""
    found = arrays.get(key)
    if found is not None and not plan.params["group"]:
        groups = arrays["scales"].shape[0]
        bad = np.flatnonzero((found < 0) | (found >= groups))
        if bad.size:
            i = int(bad[0])
            raise KilnError(
                "TYPE",
                f"expected {key} values in [0, {groups}) (the groups of scales), found "
                f"{int(found[i])} at {i}",
                index=i,
                expected=groups,
                found=int(found[i]),
            )
        return np.ascontiguousarray(found, np.int32)
    n_in, group = plan.params["in"], plan.params["group"]
    return (np.arange(n_in, dtype=np.int32) // np.int32(group)).astype(np.int32)


def _out(plan: Plan, r0: int, r1: int, dtype: np.dtype[Any]) -> np.ndarray:
    n_in = plan.shape[1]
    return pool.empty((r1 - r0, n_in), dtype, (r1 - r0) * n_in)


def _decode_q(
    plan: Plan, arrays: Mapping[str, np.ndarray], r0: int, r1: int, dtype: np.dtype[Any]
) -> np.ndarray:
    layout = plan.params["layout"]
    o = np.arange(r0, r1)
    nibble = (o & 7) if layout == "gptq" else np.array(AWQ_NIBBLE)[o & 7]
    zero = _zeros_by_nibble(arrays["qzeros"], o, nibble)
    if plan.params["v1"]:
        zero = (zero + 1) & 15
    scale = np.ascontiguousarray(arrays["scales"][:, r0:r1].T, np.float32)
    out = _out(plan, r0, r1, dtype)
    words = arrays["qweight"]
    gidx, group = _gidx(plan, arrays, "g_idx"), plan.params["group"]
    int4_rows(words, layout, r0, gidx, group, scale, zero.T.copy(), plan.native, out)
    return out


def _plan_packed(name: str, facts: Mapping[str, Facts], config: Mapping[str, Any]) -> Plan:
    scheme = "pack-quantized"
    shape_part = facts["shape"]
    if shape_part.shape != (2,):
        raise _shape_error(
            name, scheme, f"weight_shape of 2 elements (out, in), found shape {shape_part.shape}"
        )
    out, n_in = (int(v) for v in shape_part.read())
    if out < 1 or n_in < 1:
        raise _shape_error(name, scheme, f"a weight_shape of positive sizes, found {(out, n_in)}")
    packed = _two_d(name, scheme, facts["packed"], "weight_packed")
    if packed != (out, -(-n_in // 8)):
        raise _shape_error(
            name,
            scheme,
            f"weight_packed (out, ceil(in/8)) = {(out, -(-n_in // 8))} for weight_shape "
            f"{(out, n_in)} (4-bit codes), found {packed}",
        )
    srows, groups = _two_d(name, scheme, facts["scale"], "weight_scale")
    if srows != out or n_in % groups:
        raise _shape_error(
            name,
            scheme,
            f"weight_scale (out, groups) with out = {out} and groups dividing in = {n_in}, "
            f"found {(srows, groups)}",
        )
    group = n_in // groups
    zero = facts.get("zero")
    if zero is not None and zero.shape != (-(-out // 8), groups):
        raise _shape_error(
            name,
            scheme,
            f"weight_zero_point (ceil(out/8), groups) = {(-(-out // 8), groups)}, "
            f"found {zero.shape}",
        )
    gidx = facts.get("g_idx")
    if gidx is not None:
        values = gidx.read()
        trivial = np.arange(n_in) // group
        if values.shape != (n_in,) or not np.array_equal(values, trivial):
            raise _shape_error(
                name,
                scheme,
                f"weight_g_idx equal to column // {group} (compressed-tensors' decompressor "
                "reads no other order), found another",
            )
    return Plan((out, n_in), _NATIVE[facts["scale"].type], {"group": group, "in": n_in})


def _decode_packed(
    plan: Plan, arrays: Mapping[str, np.ndarray], r0: int, r1: int, dtype: np.dtype[Any]
) -> np.ndarray:
    scale = np.ascontiguousarray(arrays["scale"][r0:r1], np.float32)
    found = arrays.get("zero")
    if found is None:
        zero = np.full(scale.shape, 8, np.int32)  # codes are stored plus 8
    else:
        o = np.arange(r0, r1)
        picked = found.view(np.uint32)[o >> 3] >> (4 * (o & 7)).astype(np.uint32)[:, None]
        zero = (picked & np.uint32(15)).astype(np.int32)
    out = _out(plan, r0, r1, dtype)
    gidx, group = _gidx(plan, {}, "g_idx"), plan.params["group"]
    int4_rows(arrays["packed"], "rows", r0, gidx, group, scale, zero, plan.native, out)
    return out


def _packed_configured(config: Mapping[str, Any]) -> bool:
    if config.get("format") == "pack-quantized":
        return True
    groups = config.get("config_groups")
    return isinstance(groups, Mapping) and any(
        isinstance(g, Mapping) and g.get("format") == "pack-quantized" for g in groups.values()
    )


_Q_PARTS = (
    Part("qweight", ".qweight", _I32),
    Part("qzeros", ".qzeros", _I32),
    Part("scales", ".scales", _HALF),
)

GPTQ = Scheme(
    name="gptq",
    logical=".weight",
    parts=(*_Q_PARTS, Part("g_idx", ".g_idx", _I32, optional=True)),
    plan=_plan_q,
    decode=_decode_q,
    methods=frozenset({"gptq"}),
    configured=_gptq_configured,
    claims=_gptq_shaped,
    formula="scales[g_idx[i], o] * (q[i, o] - z[g, o]) in the scales' dtype, transposed; "
    "v1 z = (stored + 1) & 15",
    reference="AutoGPTQ qlinear_cuda_old.py QuantLinear.forward (torch path); GPTQModel "
    "PackableQuantLinear.dequantize_weight (v2)",
)

AWQ = Scheme(
    name="awq",
    logical=".weight",
    parts=_Q_PARTS,
    plan=_plan_q,
    decode=_decode_q,
    methods=frozenset({"awq"}),
    configured=_awq_configured,
    formula="(q[i, o] - z[i // group, o]) * scales[i // group, o] in the scales' dtype, "
    "transposed; nibbles hold columns 0, 2, 4, 6, 1, 3, 5, 7",
    reference="AutoAWQ awq/utils/packing_utils.py dequantize_gemm",
    claims=lambda facts: not _gptq_shaped(facts),
)

PACK_QUANTIZED = Scheme(
    name="pack-quantized",
    logical=".weight",
    parts=(
        Part("packed", ".weight_packed", _I32),
        Part("scale", ".weight_scale", frozenset({"f16", "bf16", "f32"})),
        Part("shape", ".weight_shape", frozenset({"i64", "i32"})),
        Part("zero", ".weight_zero_point", _I32, optional=True),
        Part("g_idx", ".weight_g_idx", _I32, optional=True),
    ),
    plan=_plan_packed,
    decode=_decode_packed,
    methods=frozenset({"compressed-tensors"}),
    configured=_packed_configured,
    formula="((u - 8) - (v - 8)) * weight_scale[o, i // group] in the scale's dtype "
    "(u the code, v the zero point's, 8 without one)",
    reference="compressed-tensors 0.20.1 PackedQuantizationCompressor.decompress",
)

INT4_SCHEMES = (GPTQ, AWQ, PACK_QUANTIZED)
