/* The GGML block decoders' and encoders' shared pieces (kiln_np._kernels.native,
 * ggml_*.c decode, ggml_quant_*.c encode).
 *
 * Each ggml_*.c file decodes one family of GGML block types and lists them in a
 * table of GGMLDecoder rows ending with type_id -1; native.c looks a type up by
 * its GGML type id and runs the decoder over a range of whole blocks, GIL
 * released.  A decoder writes block_elements float32 values per block,
 * computed with ggml's dequantize_row_* operations in ggml's order: plain
 * float32 arithmetic (setup.py compiles with -ffp-contract=off, so no fused
 * multiply-add), so the bits are ggml's.  Fields are read byte by byte,
 * little-endian, whatever the host's byte order.
 *
 * The encoders (GGMLEncoder rows, the same way) write block_bytes per block of
 * block_elements finite float32 values (native.c refuses NaN and infinity before
 * they see them; an encoder reports the first block ggml aborts on), the bytes
 * ggml_quantize_chunk writes with no importance matrix: ggml's quantize_row_*_ref
 * operations in ggml's order, with the conversions below standing for C's (and
 * x86-64's) own; their weighted variants those it writes with quant_weights
 * (ggml's quantize_row_*_impl).
 */
#ifndef KILN_NP_GGML_H
#define KILN_NP_GGML_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(_MSC_VER) && !defined(__clang__)
#define restrict __restrict
#endif

/* On x86-64 Linux the loops are also compiled for AVX2 and the dynamic loader
 * picks the variant the CPU supports (an ifunc): the wheel stays portable (the
 * default variant is plain SSE2) and a recent CPU moves 32 bytes per step. */
#if defined(__x86_64__) && defined(__linux__) && defined(__has_attribute) && \
    !defined(KILN_NP_BASELINE) /* -DKILN_NP_BASELINE: the default variant only (tests) */
#if __has_attribute(target_clones)
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef VECTOR_CLONES
#define VECTOR_CLONES
#endif
#if defined(__GNUC__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif

typedef void (*ggml_decode_fn)(const uint8_t *restrict src, float *restrict dst, ptrdiff_t blocks);

typedef struct {
    int type_id;        /* enum ggml_type */
    int block_elements; /* float32 values written per block */
    int block_bytes;    /* bytes read per block */
    ggml_decode_fn decode;
} GGMLDecoder;

extern const GGMLDecoder kiln_ggml_basic[];
extern const GGMLDecoder kiln_ggml_k[];
extern const GGMLDecoder kiln_ggml_iq[];

/* Encode `blocks` finite blocks: -1, or the first block on which ggml aborts (a
 * GGML_ASSERT of an i-quant's search, on values too large for its arithmetic), the
 * blocks before it written and no more meant. */
typedef ptrdiff_t (*ggml_encode_fn)(const float *restrict src, uint8_t *restrict dst,
                                    ptrdiff_t blocks);

/* With an importance matrix: qw holds the `blocks` blocks' weights, block b's at
 * qw + b * block_elements (the caller never lets a run cross the end of a row). */
typedef ptrdiff_t (*ggml_encode_weighted_fn)(const float *restrict src, const float *restrict qw,
                                             uint8_t *restrict dst, ptrdiff_t blocks);

/* With an importance matrix, for the types whose weights also take the row's mean square
 * (Q4_0 ... Q5_1: ggml's sigma2, the row's x*x summed in order over n_per_row values, then
 * / n_per_row): sigma2 is that of the row the `blocks` blocks lie in, which the caller
 * computes once per row (a run of blocks need not hold the whole row). */
typedef ptrdiff_t (*ggml_encode_row_weighted_fn)(const float *restrict src,
                                                 const float *restrict qw, float sigma2,
                                                 uint8_t *restrict dst, ptrdiff_t blocks);

typedef struct {
    int type_id;        /* enum ggml_type */
    int block_elements; /* float32 values read per block */
    int block_bytes;    /* bytes written per block */
    /* NULL where ggml quantizes the type only with an importance matrix (IQ2_XXS, IQ2_XS,
     * IQ1_S: ggml_quantize_requires_imatrix) */
    ggml_encode_fn encode;
    /* ggml_quantize_chunk's bytes with quant_weights; NULL where the type has no
     * compiled weighted path (kiln_np._quants.quantize says which types ignore them) */
    ggml_encode_weighted_fn encode_weighted;
    /* the same for a type whose weights take its row's sigma2 (then encode_weighted is
     * NULL); NULL for every other type */
    ggml_encode_row_weighted_fn encode_row_weighted;
} GGMLEncoder;

extern const GGMLEncoder kiln_ggml_enc_basic[]; /* ggml_quant_basic.c */
extern const GGMLEncoder kiln_ggml_enc_fp4[];   /* ggml_quant_fp4.c */
extern const GGMLEncoder kiln_ggml_enc_iq1[];   /* ggml_quant_iq1.c */
extern const GGMLEncoder kiln_ggml_enc_iq2[];   /* ggml_quant_iq2.c */
extern const GGMLEncoder kiln_ggml_enc_iq3[];   /* ggml_quant_iq3.c */
extern const GGMLEncoder kiln_ggml_enc_iq4[];   /* ggml_quant_iq4.c */
extern const GGMLEncoder kiln_ggml_enc_k_min[]; /* ggml_quant_k_min.c */
extern const GGMLEncoder kiln_ggml_enc_k_sym[]; /* ggml_quant_k_sym.c */

static inline uint16_t ggml_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static inline uint32_t ggml_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline float ggml_bits_f32(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* IEEE binary16 -> float32 as ggml's portable conversion gives it: exact, a NaN keeps
 * its sign and payload and comes back quiet (ggml multiplies by a power of two). */
static inline float ggml_f16(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1Fu;
    const uint32_t man = h & 0x3FFu;
    if (exp == 0x1F) {
        return ggml_bits_f32(sign | 0x7F800000u | (man << 13) | (man ? 0x400000u : 0u));
    }
    if (exp == 0) { /* zero or subnormal: man * 2**-24, exact */
        const float tiny = (float)man * 5.9604644775390625e-8f;
        return sign ? -tiny : tiny;
    }
    return ggml_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

/* The little-endian f16 at p, as float32. */
static inline float ggml_f16_at(const uint8_t *p) { return ggml_f16(ggml_u16(p)); }

static inline uint32_t ggml_f32_bits(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return bits;
}

/* fabsf, inline (so that loops vectorise): -0.0 gives +0.0, as ggml's MAX(amax, fabsf(v)) needs. */
/* float32 bits -> bfloat16 bits, to nearest even; a NaN to the quiet NaN 0x7fc0 of its
 * sign: ml_dtypes' astype (ggml's own GGML_FP32_TO_BF16 keeps a NaN's top payload bits
 * instead).  Selects only, so the loops over it vectorize.  Every kernel writing bf16
 * rounds with it. */
static ALWAYS_INLINE uint16_t kiln_bf16_bits(uint32_t x) {
    const uint32_t nan = ((x >> 16) & 0x8000u) | 0x7FC0u;
    const uint32_t r = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16;
    /* A mask, not a branch, from a signed comparison (the masked bits fit): x86-64's
     * vectors compare signed only. */
    const uint32_t is_nan = 0u - (uint32_t)((int32_t)(x & 0x7FFFFFFFu) > 0x7F800000);
    return (uint16_t)(r ^ ((nan ^ r) & is_nan));
}

static inline float ggml_fabsf(float x) { return ggml_bits_f32(ggml_f32_bits(x) & 0x7FFFFFFFu); }

/* a where take (0 or 1), else b, as a select of bits: loops of these vectorise, where GCC
 * turns `x[j] = c ? a : x[j]` into a branch or a conditional store (not for SSE2). */
static inline float ggml_pick(int take, float a, float b) {
    const uint32_t m = 0u - (uint32_t)take;
    return ggml_bits_f32((ggml_f32_bits(a) & m) | (ggml_f32_bits(b) & ~m));
}

static inline void ggml_put_u16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* GGML_FP32_TO_FP16: to nearest even, overflow to infinity, a NaN to 0x7e00 with its
 * sign (integer arithmetic; the same bits as ggml's portable float trick). */
static inline uint16_t ggml_f32_to_f16(float f) {
    const uint32_t x = ggml_f32_bits(f);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    const uint32_t a = x & 0x7FFFFFFFu;
    if (a > 0x7F800000u) {
        return sign | 0x7E00u;
    }
    if (a >= 0x477FF000u) { /* 65520 and up round to infinity */
        return sign | 0x7C00u;
    }
    if (a >= 0x38800000u) { /* a normal f16: rebias, round 13 bits off to even */
        const uint32_t r = a - 0x38000000u;
        return sign | (uint16_t)((r + 0x0FFFu + ((r >> 13) & 1u)) >> 13);
    }
    /* subnormal or zero: |f| * 2**24 (exact) rounded to an integer, to even */
    const float m = (ggml_bits_f32(a) * 16777216.0f + 8388608.0f) - 8388608.0f;
    return sign | (uint16_t)m;
}

/* C's float -> int32 conversion as x86-64 makes it (cvttss2si): truncation, and
 * INT32_MIN (the "integer indefinite") for a NaN or a value outside int32, which C
 * leaves undefined and which ggml reaches when a block's scale over- or underflows. */
static inline int32_t ggml_c_int(float x) {
    return (x > -2147483904.0f && x < 2147483648.0f) ? (int32_t)x : INT32_MIN;
}

/* C's roundf (halves away from zero), inline so that loops using it vectorise. */
static inline float ggml_roundf(float x) {
    if (!(x > -8388608.0f && x < 8388608.0f)) { /* an integer already, infinite or NaN */
        return x;
    }
    const float t = (float)(int32_t)x;
    const float r = x - t; /* exact */
    return r >= 0.5f ? t + 1.0f : r <= -0.5f ? t - 1.0f : t;
}

/* ggml's nearest_int: to nearest, halves to even, for |x| <= 4194303; outside, the
 * trick's bits (0 for a NaN, -2**22 for an infinity), as ggml's release builds give. */
static inline int ggml_nearest_int(float x) {
    const float v = x + 12582912.0f;
    return (int)(ggml_f32_bits(v) & 0x007FFFFFu) - 0x00400000;
}

#endif
