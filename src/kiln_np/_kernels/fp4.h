/* The e2m1 scaled-decode kernel (fp4.c) as native.c calls it. */
#ifndef KILN_NP_FP4_H
#define KILN_NP_FP4_H

#include <stddef.h>
#include <stdint.h>

enum { KILN_FP4_F32 = 0, KILN_FP4_BF16 = 1, KILN_FP4_F16 = 2 };

/* Blocks [0, blocks) of `block` elements (a multiple of 16): element i of block k is
 * the e2m1 code in nibble i of packed (two a byte, the even element in the low
 * nibble), its value v (code 8 is -0.0 when minus_zero, else +0.0), the block's scale
 * table[scales[k]] (one byte a block, a 256-entry float32 table), and
 * out[k * block + i] = round((v * scale) * post) in float32, each product rounded
 * once, then rounded to nearest even to `kind` (host byte order).  A NaN stays a
 * NaN: bfloat16 sign | 0x7fc0, float16 sign | 0x7c00 | the top ten payload bits
 * (0x7c01 when they are zero), as ml_dtypes and numpy convert. */
void kiln_fp4_scaled(int kind, const uint8_t *packed, const uint8_t *scales, const float *table,
                     float post, int minus_zero, ptrdiff_t blocks, ptrdiff_t block, void *out);

#endif
