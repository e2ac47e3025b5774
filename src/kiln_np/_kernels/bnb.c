/* bitsandbytes 4-bit (NF4, FP4) decode: table value times block scale, one rounding
 * to the output type (kiln_np._kernels.bnb drives it; its numpy twin gives the same
 * bits).  Plain float32 arithmetic: setup.py compiles with -ffp-contract=off. */
#include "bnb.h"

#include <string.h>

#include "ggml.h"

/* To nearest even; a NaN to 0x7fc0 with its sign (ml_dtypes' bits for a quiet NaN). */
static inline uint16_t bnb_f32_to_bf16(float f) { return kiln_bf16_bits(ggml_f32_bits(f)); }

/* One loop per output type: the type is fixed inside it, so nothing branches per element.
 * A block's 16 possible outputs are computed first (the same product and rounding as
 * element by element, so the same bits); each byte is then two lookups. */
#define BNB_LOOP(NAME, T, CONVERT)                                                         \
    static void NAME(const uint8_t *restrict codes, const float *restrict lut,            \
                     const float *restrict scales, T *restrict out, ptrdiff_t blocksize,   \
                     ptrdiff_t lo, ptrdiff_t hi) {                                         \
        T t[16];                                                                           \
        for (ptrdiff_t k = lo / blocksize; k * blocksize < hi; k++) {                      \
            const ptrdiff_t i0 = k * blocksize > lo ? k * blocksize : lo;                  \
            const ptrdiff_t i1 = (k + 1) * blocksize < hi ? (k + 1) * blocksize : hi;      \
            const float s = scales[k];                                                     \
            for (int c = 0; c < 16; c++) {                                                 \
                const float v = lut[c] * s;                                                \
                t[c] = CONVERT(v);                                                         \
            }                                                                              \
            ptrdiff_t i = i0;                                                              \
            if (i & 1) { /* a range that starts on a low nibble */                         \
                out[i - lo] = t[codes[i >> 1] & 15];                                       \
                i++;                                                                       \
            }                                                                              \
            for (; i + 2 <= i1; i += 2) {                                                  \
                const uint8_t b = codes[i >> 1];                                           \
                out[i - lo] = t[b >> 4];                                                   \
                out[i + 1 - lo] = t[b & 15];                                               \
            }                                                                              \
            if (i < i1) {                                                                  \
                out[i - lo] = t[codes[i >> 1] >> 4];                                       \
            }                                                                              \
        }                                                                                  \
    }

#define BNB_SAME(v) (v)
BNB_LOOP(bnb4_f32, float, BNB_SAME)
BNB_LOOP(bnb4_bf16, uint16_t, bnb_f32_to_bf16)
BNB_LOOP(bnb4_f16, uint16_t, ggml_f32_to_f16)

void kiln_bnb4(int kind, const uint8_t *codes, const float *lut, const float *scales,
               uint8_t *out, ptrdiff_t blocksize, ptrdiff_t lo, ptrdiff_t hi) {
    if (kind == KILN_BNB_F32) {
        bnb4_f32(codes, lut, scales, (float *)(void *)out, blocksize, lo, hi);
    } else if (kind == KILN_BNB_BF16) {
        bnb4_bf16(codes, lut, scales, (uint16_t *)(void *)out, blocksize, lo, hi);
    } else {
        bnb4_f16(codes, lut, scales, (uint16_t *)(void *)out, blocksize, lo, hi);
    }
}
