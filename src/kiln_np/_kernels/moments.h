/* The statistics kernel (moments.c) as native.c calls it, and the float elements it
 * reads (which the differences kernel, differences.c, reads too). */
#ifndef KILN_NP_MOMENTS_H
#define KILN_NP_MOMENTS_H

#include <stddef.h>
#include <stdint.h>

#include "ggml.h"

enum { KILN_MOMENTS_F32 = 0, KILN_MOMENTS_BF16 = 1, KILN_MOMENTS_F16 = 2 };

typedef struct {
    int64_t finite, zeros, nan, posinf, neginf;
    double min, max;   /* over the finite values; +inf and -inf when there is none */
    double mean, m2;   /* of the finite values; 0.0 and 0.0 when there is none */
} KilnMoments;

/* The moments of the n elements of `kind` (host byte order) at src. */
void kiln_moments(int kind, const uint8_t *src, ptrdiff_t n, KilnMoments *out);

/* Element i of kind at p, as float32 (exact for all three kinds; a NaN keeps its sign
 * and payload bits). */
static ALWAYS_INLINE float kiln_float_at(const uint8_t *restrict p, ptrdiff_t i, int kind) {
    if (kind == KILN_MOMENTS_F32) {
        uint32_t u;
        memcpy(&u, p + 4 * i, 4);
        return ggml_bits_f32(u);
    }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    if (kind == KILN_MOMENTS_BF16) {
        return ggml_bits_f32((uint32_t)h << 16);
    }
    /* IEEE half: a normal rebiased; a subnormal m * 2**-24 as 2**-14 * (1 + m/1024) -
     * 2**-14 (exact, and no float32 subnormal, which is slow on some CPUs); an infinity
     * or a NaN rebiased twice, to the exponent field all ones.  Masks, not branches, so
     * that the loops vectorize. */
    const uint32_t em = h & 0x7FFFu, shifted = em << 13;
    const uint32_t big = shifted + 0x38000000u + ((0u - (em >= 0x7C00u)) & 0x38000000u);
    const float sub = ggml_bits_f32(shifted + 0x38800000u) - 6.103515625e-05f;
    const uint32_t small = 0u - (em < 0x400u);
    const uint32_t mag = (ggml_f32_bits(sub) & small) | (big & ~small);
    return ggml_bits_f32(mag | ((uint32_t)(h & 0x8000u) << 16));
}

/* The sum of the `lanes` (a power of two, at least 2; at most 16) partial sums at s,
 * added pairwise: the halves, then halving again (the order the numpy twins add them
 * in).  Inlined with a constant `lanes`, the loops unroll as before. */
static ALWAYS_INLINE double kiln_lanes_sum(int lanes, const double *s) {
    double t[8];
    for (int j = 0; j < lanes / 2; j++) {
        t[j] = s[j] + s[j + lanes / 2];
    }
    for (int w = lanes / 4; w >= 1; w /= 2) {
        for (int j = 0; j < w; j++) {
            t[j] += t[j + w];
        }
    }
    return t[0];
}

#endif
