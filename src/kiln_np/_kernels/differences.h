/* The differences kernel (differences.c) as native.c calls it. */
#ifndef KILN_NP_DIFFERENCES_H
#define KILN_NP_DIFFERENCES_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int64_t differ;       /* places whose values differ (NaN equals NaN, -0 equals +0) */
    int64_t first;        /* the first of them, -1 for none */
    int64_t nan_bits;     /* places NaN on both sides with different float32 bits */
    int64_t signed_zeros; /* places zero on both sides with different signs */
    int64_t nonfinite;    /* places left out of the sums: a side NaN or infinite */
    double aa, bb, ab, dd; /* over the other places: sums of a*a, b*b, a*b, (a-b)^2 */
    double max_abs, max_rel; /* over the differing places; 0.0 when none differ */
    int64_t max_abs_at, max_rel_at; /* the first place of each maximum, -1 for none */
} KilnDifferences;

/* a[i] against b[i] for the n elements of kind_a at a and kind_b at b (the kinds of
 * moments.h, host byte order). */
void kiln_differences(int kind_a, const uint8_t *a, int kind_b, const uint8_t *b, ptrdiff_t n,
                      KilnDifferences *out);

#endif
