/* The FP8 dequantization kernel: FP8 codes times float32 scales, one per block of b0 x b1
 * elements, rounded once to float32, bfloat16 or IEEE float16.
 *
 * Each value is lut[code] (the code's float32 value, exact) times its block's scale, one
 * float32 multiplication, then one rounding to the output type: to nearest even, overflow to
 * infinity, a NaN kept a NaN (bfloat16: sign | 0x7FC0, as ml_dtypes; float16: the top payload
 * bits kept, as numpy).  Where one scale covers at least TABLE_MIN elements the 256 possible
 * results of each scale are computed first and the codes looked up in that table: the same
 * function of (code, scale), so the same bits, at one byte load and one store per element
 * (for blocks at least TABLE_WIDTH columns wide, so the tables stay small).
 */
#include "fp8.h"
#include "ggml.h" /* ALWAYS_INLINE, kiln_bf16_bits */

#include <stdlib.h>
#include <string.h>

#define TABLE_MIN 512
#define TABLE_WIDTH 128

static inline uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline uint16_t to_f16(uint32_t x) {
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t a = x & 0x7fffffffu;
    if (a > 0x7f800000u) {
        uint32_t payload = (a >> 13) & 0x3ffu;
        return (uint16_t)(sign | 0x7c00u | (payload ? payload : 1u));
    }
    if (a >= 0x477ff000u) { /* 65520 and above round to infinity */
        return (uint16_t)(sign | 0x7c00u);
    }
    if (a >= 0x38800000u) { /* 2^-14 and above: a normal float16 */
        const uint32_t r = a - 0x38000000u;
        return (uint16_t)(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
    }
    if (a <= 0x33000000u) { /* 2^-25 and below: zero (2^-25 ties to the even zero) */
        return (uint16_t)sign;
    }
    const uint32_t shift = 126u - (a >> 23); /* 14 .. 24: units of 2^-24 */
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t half = 1u << (shift - 1u);
    const uint32_t rest = m & ((1u << shift) - 1u);
    uint32_t q = m >> shift;
    q += (rest > half || (rest == half && (q & 1u))) ? 1u : 0u;
    return (uint16_t)(sign | q);
}

static inline uint32_t rounded(int kind, float v) {
    const uint32_t x = bits_of(v);
    return kind == KILN_FP8_F32 ? x : kind == KILN_FP8_BF16 ? kiln_bf16_bits(x) : to_f16(x);
}

/* The 256 results of one scale. */
static void fill(int kind, const float *lut, float s, uint32_t *table) {
    for (int c = 0; c < 256; c++) {
        table[c] = rounded(kind, lut[c] * s);
    }
}

/* Columns [c0, c1) of one row through a table. */
static void looked_up(int kind, const uint8_t *restrict src, const uint32_t *restrict table,
                      void *restrict dst, ptrdiff_t c0, ptrdiff_t c1) {
    if (kind == KILN_FP8_F32) {
        uint32_t *restrict d = (uint32_t *)dst;
        for (ptrdiff_t c = c0; c < c1; c++) {
            d[c] = table[src[c]];
        }
    } else {
        uint16_t *restrict d = (uint16_t *)dst;
        for (ptrdiff_t c = c0; c < c1; c++) {
            d[c] = (uint16_t)table[src[c]];
        }
    }
}

/* Columns [c0, c1) of one row, each multiplied. */
static void multiplied(int kind, const uint8_t *restrict src, const float *restrict lut, float s,
                       void *restrict dst, ptrdiff_t c0, ptrdiff_t c1) {
    if (kind == KILN_FP8_F32) {
        float *restrict d = (float *)dst;
        for (ptrdiff_t c = c0; c < c1; c++) {
            d[c] = lut[src[c]] * s;
        }
    } else {
        uint16_t *restrict d = (uint16_t *)dst;
        for (ptrdiff_t c = c0; c < c1; c++) {
            d[c] = (uint16_t)rounded(kind, lut[src[c]] * s);
        }
    }
}

int kiln_fp8_dequant(int kind, const uint8_t *codes, const float *lut, const float *scales,
                     void *dst, ptrdiff_t cols, ptrdiff_t b0, ptrdiff_t b1, ptrdiff_t scols,
                     ptrdiff_t row0, ptrdiff_t lo, ptrdiff_t hi) {
    const size_t size = kind == KILN_FP8_F32 ? 4 : 2;
    const ptrdiff_t nblocks = cols ? (cols - 1) / b1 + 1 : 0;
    const ptrdiff_t width = b1 < cols ? b1 : cols;
    /* Tables pay for their 256 products from TABLE_MIN elements per scale, and cost at most
     * 8 bytes per column for blocks TABLE_WIDTH wide or wider. */
    const int tabled = width >= TABLE_WIDTH && b0 * width >= TABLE_MIN;
    uint32_t *tables = NULL;
    if (tabled && nblocks) {
        tables = (uint32_t *)malloc((size_t)nblocks * 256 * sizeof *tables);
        if (tables == NULL) {
            return -1;
        }
    }
    ptrdiff_t filled = -1; /* the scale row whose tables are built */
    for (ptrdiff_t r = lo; r < hi; r++) {
        const ptrdiff_t srow = (row0 + r) / b0;
        const float *s = scales + srow * scols;
        const uint8_t *src = codes + r * cols;
        char *out = (char *)dst + (size_t)(r * cols) * size;
        if (tabled && srow != filled) {
            for (ptrdiff_t j = 0; j < nblocks; j++) {
                fill(kind, lut, s[j], tables + j * 256);
            }
            filled = srow;
        }
        for (ptrdiff_t j = 0; j < nblocks; j++) {
            const ptrdiff_t c0 = j * b1;
            const ptrdiff_t c1 = c0 + b1 < cols ? c0 + b1 : cols;
            if (tabled) {
                looked_up(kind, src, tables + j * 256, out, c0, c1);
            } else {
                multiplied(kind, src, lut, s[j], out, c0, c1);
            }
        }
    }
    free(tables);
    return 0;
}
