/* The bitsandbytes 4-bit decode kernel (bnb.c) as native.c calls it. */
#ifndef KILN_NP_BNB_H
#define KILN_NP_BNB_H

#include <stddef.h>
#include <stdint.h>

enum { KILN_BNB_F32 = 0, KILN_BNB_BF16 = 1, KILN_BNB_F16 = 2 };

/* Elements [lo, hi) of the 4-bit codes (element 2k the high nibble of byte k), each
 * lut[code] * scales[i / blocksize] in float32 (one rounding), then rounded once to
 * nearest even to `kind` (a NaN to the canonical quiet NaN of its sign), written to
 * out[0 .. hi - lo) in host byte order. */
void kiln_bnb4(int kind, const uint8_t *codes, const float *lut, const float *scales,
               uint8_t *out, ptrdiff_t blocksize, ptrdiff_t lo, ptrdiff_t hi);

#endif
