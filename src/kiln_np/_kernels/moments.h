/* The statistics kernel (moments.c) as native.c calls it. */
#ifndef KILN_NP_MOMENTS_H
#define KILN_NP_MOMENTS_H

#include <stddef.h>
#include <stdint.h>

enum { KILN_MOMENTS_F32 = 0, KILN_MOMENTS_BF16 = 1, KILN_MOMENTS_F16 = 2 };

typedef struct {
    int64_t finite, zeros, nan, posinf, neginf;
    double min, max;   /* over the finite values; +inf and -inf when there is none */
    double mean, m2;   /* of the finite values; 0.0 and 0.0 when there is none */
} KilnMoments;

/* The moments of the n elements of `kind` (host byte order) at src. */
void kiln_moments(int kind, const uint8_t *src, ptrdiff_t n, KilnMoments *out);

#endif
