/* The int4 dequantize kernel behind kiln_np._kernels.int4: GPTQ, AWQ (gemm) and
 * compressed-tensors pack-quantized codes, eight 4-bit codes to an int32 word, to
 * float32, bfloat16 or float16 rows of the logical (out, in) weight.
 *
 * Every reference computes (code - zero) * scale in the scales' dtype, which torch
 * does as a float32 product (exact: a 5-bit integer times an 8- or 11-bit
 * significand) rounded once to that dtype.  A row's 16 possible values per group
 * are worked out first, in plain float32 with the rounding done here bit by bit
 * (round to nearest even, subnormals and overflow to infinity included), then the
 * row is a table look-up per code: the rounding code runs once per 16 table
 * entries, never per element, and the bits do not depend on the compiler's
 * floating-point flags beyond the one float32 multiply and add of each entry. */
#include "int4.h"

#include <stdlib.h>
#include <string.h>

#include "ggml.h"

static uint32_t f32_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    return x;
}

static float bits_f32(uint32_t x) {
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

/* float32 -> bfloat16, nearest even; a NaN keeps its sign and top payload, made quiet. */
static uint16_t f32_to_bf16(float f) {
    const uint32_t x = f32_bits(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) {
        return (uint16_t)((x >> 16) | 0x0040u);
    }
    return (uint16_t)((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

/* float32 -> IEEE float16, nearest even (numpy's astype). */
static uint16_t f32_to_f16(float f) {
    const uint32_t x = f32_bits(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t ax = x & 0x7FFFFFFFu;
    if (ax > 0x7F800000u) { /* NaN: the top payload bits, made quiet */
        return (uint16_t)(sign | 0x7E00u | ((ax >> 13) & 0x03FFu));
    }
    if (ax >= 0x477FF000u) { /* from 65520 (half way past 65504, which is odd): inf */
        return (uint16_t)(sign | 0x7C00u);
    }
    if (ax >= 0x38800000u) { /* a normal float16: rebias, round the 13 dropped bits */
        const uint32_t r = ax - 0x38000000u + 0x0FFFu + ((ax >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    /* Below 2^-14: 0.5 + |f| is rounded (nearest even) to a multiple of 2^-24, the
     * float16 subnormal step, which its bits above 0.5's count (1024: the smallest
     * normal, whose bits follow on). */
    const float t = bits_f32(ax) + 0.5f;
    return (uint16_t)(sign | (f32_bits(t) - 0x3F000000u));
}

static float f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x03FFu;
    if (e == 0) { /* zero or subnormal: m * 2^-24, exact */
        const float v = (float)m * 5.9604644775390625e-8f;
        return bits_f32(f32_bits(v) | sign);
    }
    if (e == 31) {
        return bits_f32(sign | 0x7F800000u | (m << 13));
    }
    return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

/* The reference's value of (code - zero) * scale, in the output kind's bits. */
static uint32_t entry(int code, int32_t zero, float scale, int native, int okind) {
    const float p = (float)(code - zero) * scale;
    float v;
    if (native == KILN_INT4_F16) {
        const uint16_t h = f32_to_f16(p);
        if (okind == KILN_INT4_F16) {
            return h;
        }
        v = f16_to_f32(h);
    } else if (native == KILN_INT4_BF16) {
        const uint16_t b = f32_to_bf16(p);
        if (okind == KILN_INT4_BF16) {
            return b;
        }
        v = bits_f32((uint32_t)b << 16);
    } else {
        v = p;
    }
    if (okind == KILN_INT4_F32) {
        return f32_bits(v);
    }
    return okind == KILN_INT4_BF16 ? f32_to_bf16(v) : f32_to_f16(v);
}

static const int AWQ_NIBBLE[8] = {0, 4, 1, 5, 2, 6, 3, 7};

/* One output row from its table: T is the output element type. */
#define ROW_LOOP(T)                                                                      \
    do {                                                                                 \
        T *restrict d = (T *)k->out + row * in;                                          \
        const T *restrict t = (const T *)lut;                                            \
        if (k->layout == KILN_INT4_AWQ) {                                                \
            const int32_t *w = k->words + (o >> 3);                                      \
            const int shift = 4 * AWQ_NIBBLE[o & 7];                                     \
            for (ptrdiff_t i = 0; i < in; i++) {                                         \
                const uint32_t u = ((uint32_t)w[i * k->wcols] >> shift) & 15u;           \
                d[i] = t[(ptrdiff_t)g[i] * 16 + u];                                      \
            }                                                                            \
        } else {                                                                         \
            const int gptq = k->layout == KILN_INT4_GPTQ;                                \
            const int32_t *w = gptq ? k->words + o : k->words + o * k->wcols;            \
            const ptrdiff_t step = gptq ? k->wcols : 1;                                  \
            ptrdiff_t i = 0;                                                             \
            for (; i + 8 <= in; i += 8) {                                                \
                const uint32_t x = (uint32_t)w[(i >> 3) * step];                         \
                for (int j = 0; j < 8; j++) {                                            \
                    d[i + j] = t[(ptrdiff_t)g[i + j] * 16 + ((x >> (4 * j)) & 15u)];     \
                }                                                                        \
            }                                                                            \
            if (i < in) {                                                                \
                const uint32_t x = (uint32_t)w[(i >> 3) * step];                         \
                for (int j = 0; i + j < in; j++) {                                       \
                    d[i + j] = t[(ptrdiff_t)g[i + j] * 16 + ((x >> (4 * j)) & 15u)];     \
                }                                                                        \
            }                                                                            \
        }                                                                                \
    } while (0)

int kiln_int4_rows(const KilnInt4 *k, ptrdiff_t lo, ptrdiff_t hi) {
    const size_t size = k->okind == KILN_INT4_F32 ? 4 : 2;
    void *lut = malloc((size_t)(k->groups > 0 ? k->groups : 1) * 16 * size);
    if (lut == NULL) {
        return -1;
    }
    const ptrdiff_t in = k->in;
    const int32_t *g = k->gidx;
    for (ptrdiff_t row = lo; row < hi; row++) {
        const ptrdiff_t o = k->r0 + row;
        const float *s = k->scale + row * k->groups;
        const int32_t *z = k->zero + row * k->groups;
        for (ptrdiff_t q = 0; q < k->groups; q++) {
            for (int u = 0; u < 16; u++) {
                const uint32_t e = entry(u, z[q], s[q], k->native, k->okind);
                if (size == 4) {
                    ((uint32_t *)lut)[q * 16 + u] = e;
                } else {
                    ((uint16_t *)lut)[q * 16 + u] = (uint16_t)e;
                }
            }
        }
        if (size == 4) {
            ROW_LOOP(uint32_t);
        } else {
            ROW_LOOP(uint16_t);
        }
    }
    free(lut);
    return 0;
}
