/* The FP8 dequantization kernel (fp8.c) as native.c calls it. */
#ifndef KILN_NP_FP8_H
#define KILN_NP_FP8_H

#include <stddef.h>
#include <stdint.h>

enum { KILN_FP8_F32 = 0, KILN_FP8_BF16 = 1, KILN_FP8_F16 = 2 };

/* Rows [lo, hi) of a (rows, cols) matrix of FP8 codes at `codes` (its row 0 being row `row0`
 * of the whole tensor) into the same rows of `dst` (of `kind`, host byte order): element
 * (r, c) is lut[code] * scales[(row0 + r) / b0][c / b1] in float32, rounded once to `kind`
 * (to nearest even; a NaN stays a NaN).  `scales` has `scols` columns.  Returns 0, or -1
 * when it cannot allocate its tables. */
int kiln_fp8_dequant(int kind, const uint8_t *codes, const float *lut, const float *scales,
                     void *dst, ptrdiff_t cols, ptrdiff_t b0, ptrdiff_t b1, ptrdiff_t scols,
                     ptrdiff_t row0, ptrdiff_t lo, ptrdiff_t hi);

#endif
