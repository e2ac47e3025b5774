# Private stub of the optional C extension kiln_np._kernels (src/kiln_np/_kernels.c).
# The functions take any C-contiguous buffer; kiln_np passes flat uint8 arrays.
import numpy as np

def unpack(src: np.ndarray | bytes, dst: np.ndarray, lo: int, hi: int, /) -> None: ...
def pack(src: np.ndarray, dst: np.ndarray, lo: int, hi: int, /) -> int: ...
def first_above(src: np.ndarray, limit: int, lo: int, hi: int, /) -> int: ...
def mxfp4_to_float32(
    values: np.ndarray,
    scales: np.ndarray,
    out: np.ndarray,
    block: int,
    packed: int,
    lo: int,
    hi: int,
    /,
) -> None: ...
def repack(
    ggml: np.ndarray,
    values: np.ndarray,
    scales: np.ndarray,
    block_bytes: int,
    to_kiln: int,
    lo: int,
    hi: int,
    /,
) -> None: ...

# Block-scaled pair counts (kiln_np._explore.scaled): slabs [lo, hi) of (P, n, q) codes.
def scaled_pairs(
    codes: np.ndarray,
    scales: np.ndarray,
    flags: np.ndarray,
    joint: np.ndarray,
    n: int,
    q: int,
    block: int,
    lo: int,
    hi: int,
    /,
) -> tuple[int, int, int]: ...

# ONNX 2- and 6-bit elements (kiln_np.onnx._subbyte): ranges start on a group of four.
def unpack2(src: np.ndarray, dst: np.ndarray, lo: int, hi: int, /) -> None: ...
def pack2(src: np.ndarray, dst: np.ndarray, lo: int, hi: int, /) -> None: ...
def unpack6(src: np.ndarray, dst: np.ndarray, lo: int, hi: int, /) -> None: ...
def pack6(src: np.ndarray, dst: np.ndarray, lo: int, hi: int, /) -> None: ...

# GGML block decoders (kiln_np._quants.decode): blocks [lo, hi) of one GGML type.
def ggml_to_float32(
    type_id: int, src: np.ndarray | memoryview, dst: np.ndarray, lo: int, hi: int, /
) -> None: ...
def ggml_to_bfloat16(
    type_id: int, src: np.ndarray | memoryview, dst: np.ndarray, lo: int, hi: int, /
) -> None: ...
def float32_to_bfloat16(src: np.ndarray, dst: np.ndarray, lo: int, hi: int, /) -> None: ...
def ggml_types() -> tuple[tuple[int, int, int], ...]: ...
def ggml_from_float32(
    type_id: int, src: np.ndarray, dst: np.ndarray | memoryview, lo: int, hi: int, /
) -> int: ...
def ggml_from_float32_weighted(
    type_id: int,
    src: np.ndarray,
    qw: np.ndarray,
    dst: np.ndarray | memoryview,
    lo: int,
    hi: int,
    /,
) -> int: ...
def ggml_quant_types() -> tuple[tuple[int, int, int, int, int], ...]: ...

# The statistics kernel (kiln_np._kernels.moments): elements [lo, hi) of kind 0 float32,
# 1 bfloat16, 2 float16 -> (finite, min, max, mean, m2, zeros, nan, posinf, neginf).
def moments(
    kind: int, src: np.ndarray | memoryview, lo: int, hi: int, /
) -> tuple[int, float, float, float, float, int, int, int, int]: ...

# The differences kernel (kiln_np._kernels.differences): elements [lo, hi) of a (kind_a)
# against b (kind_b), kinds as moments' -> (differ, first, nan_bits, signed_zeros,
# nonfinite, aa, bb, ab, dd, max_abs, max_abs_at, max_rel, max_rel_at).
def differences(
    kind_a: int, a: np.ndarray, kind_b: int, b: np.ndarray, lo: int, hi: int, /
) -> tuple[int, int, int, int, int, float, float, float, float, float, int, float, int]: ...

# The e2m1 scaled decode (kiln_np._kernels.fp4): blocks [lo, hi) of block elements, code
# value * table[scales[k]] * post in float32, rounded into out of kind 0 f32, 1 bf16,
# 2 f16; code 8 is -0.0 when minus_zero, else +0.0 (ModelOpt's table).
def fp4_scaled(
    kind: int,
    packed: np.ndarray,
    scales: np.ndarray,
    table: np.ndarray,
    out: np.ndarray,
    block: int,
    post: float,
    minus_zero: int,
    lo: int,
    hi: int,
    /,
) -> None: ...

# The FP8 kernel (kiln_np._kernels.fp8): rows [lo, hi) of FP8 codes times block scales,
# rounded to kind 0 float32, 1 bfloat16, 2 float16, into dst.
def fp8_dequant(
    kind: int,
    codes: np.ndarray,
    lut: np.ndarray,
    scales: np.ndarray,
    dst: np.ndarray,
    cols: int,
    b0: int,
    b1: int,
    scols: int,
    row0: int,
    lo: int,
    hi: int,
    /,
) -> None: ...

# bitsandbytes 4-bit decode (kiln_np._kernels.bnb): elements [lo, hi) to out[i - off].
def bnb4(
    kind: int,
    codes: np.ndarray,
    lut: np.ndarray,
    scales: np.ndarray,
    out: np.ndarray,
    blocksize: int,
    off: int,
    lo: int,
    hi: int,
    /,
) -> None: ...

# The int4 dequantize kernel (kiln_np._kernels.int4): rows [lo, hi) of out.
def int4_rows(
    words: np.ndarray,
    layout: int,
    wcols: int,
    r0: int,
    gidx: np.ndarray,
    group: int,
    scale: np.ndarray,
    zero: np.ndarray,
    native: int,
    out: np.ndarray,
    okind: int,
    lo: int,
    hi: int,
    /,
) -> None: ...
