/* The e2m1 scaled decode behind kiln_np._kernels.fp4 (see fp4.h).
 *
 * Plain float32, one rounding per operation (setup.py builds with -ffp-contract=off).
 * An e2m1 code's value is built from its bits, never looked up, so the loops have no
 * gather and vectorize: magnitude m = code & 7 (exponent bits 2-1, mantissa bit 0)
 * placed at float32 bit 22 with 126 added to the exponent field is 2**(e - 1) * (1 +
 * mantissa / 2), the value of every m >= 2; m = 1 (0.5) and m = 0 (0) are masked in
 * (no branch: the codes are random data), and the sign bit is or-ed in.  No code value
 * is subnormal (x86 multiplies those slowly); only a subnormal scale would be. */
#include "fp4.h"

#include <string.h>

#include "ggml.h" /* VECTOR_CLONES, ALWAYS_INLINE */

static ALWAYS_INLINE float from_bits(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static ALWAYS_INLINE uint32_t to_bits(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return bits;
}

/* a where `yes` (0 or 1), else b: a mask, not a branch (the codes are random data). */
static ALWAYS_INLINE uint32_t pick(uint32_t yes, uint32_t a, uint32_t b) {
    return b ^ ((a ^ b) & (0u - yes));
}

/* `zero_sign` is 0x80000000 where code 8 is -0.0, 0 where it is +0.0 (ModelOpt's table). */
static ALWAYS_INLINE float e2m1(uint32_t code, uint32_t zero_sign) {
    const uint32_t m = code & 7u;
    const uint32_t nonzero = 0u - ((m + 7u) >> 3);          /* m != 0: all ones */
    const uint32_t one = 1u - (((m ^ 1u) + 7u) >> 3);        /* m == 1 */
    const uint32_t bits = ((m - one) << 22) + (126u << 23); /* m == 1: 0.5 */
    const uint32_t sign = ((code & 8u) << 28) & (nonzero | zero_sign);
    return from_bits((bits & nonzero) | sign);
}

/* kiln_bf16_bits (ggml.h), written here again: GCC 12 vectorizes the pair loop below
 * with this one and not through the header's (bench_fp4.py: 2.5x np.copy against 6.5x,
 * measured side by side), for a reason not found. */
static ALWAYS_INLINE uint16_t to_bf16(float f) {
    const uint32_t x = to_bits(f);
    const uint32_t rounded = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16;
    const uint32_t nan = ((x >> 16) & 0x8000u) | 0x7FC0u;
    return (uint16_t)pick((int32_t)(x & 0x7FFFFFFFu) > 0x7F800000, nan, rounded);
}

/* Round to nearest even: normal results by integer rebias and rounding, subnormal
 * ones by a float32 addition that leaves the rounded bits in the low mantissa. */
static ALWAYS_INLINE uint16_t to_f16(float f) {
    const uint32_t x = to_bits(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t a = x & 0x7FFFFFFFu;
    const int32_t sa = (int32_t)a;
    const uint32_t payload = (a >> 13) & 0x3FFu;
    const uint32_t nan = 0x7C00u | pick(payload == 0, 1u, payload);
    const uint32_t special = pick(sa > 0x7F800000, nan, 0x7C00u);
    const uint32_t small = to_bits(from_bits(a) + 0.5f) - 0x3F000000u;
    const uint32_t normal = (a + 0xC8000FFFu + ((a >> 13) & 1u)) >> 13;
    const uint32_t h = pick(sa >= 0x47800000, special, pick(sa < 0x38800000, small, normal));
    return (uint16_t)(sign | h);
}

/* Two adjacent 16-bit results as one 32-bit store, the even element first in memory:
 * the loops then store contiguously, with no interleaving shuffle. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define PAIR16(even, odd) (((uint32_t)(even) << 16) | (uint32_t)(odd))
#define PAIR32(even, odd) (((uint64_t)(even) << 32) | (uint64_t)(odd))
#else
#define PAIR16(even, odd) ((uint32_t)(even) | ((uint32_t)(odd) << 16))
#define PAIR32(even, odd) ((uint64_t)(even) | ((uint64_t)(odd) << 32))
#endif

/* Eight bytes (16 elements) of one block: the float32 products first, a loop of eight
 * lanes (one AVX2 register), then their rounding and pairing, another. */
static ALWAYS_INLINE void chunk_out(int kind, const uint8_t *restrict b, float scale, float post,
                                    uint32_t zero_sign, uint8_t *restrict out) {
    uint32_t w[8];
    float lo[8], hi[8];
    for (int j = 0; j < 8; j++) {
        w[j] = b[j];
    }
    for (int j = 0; j < 8; j++) {
        lo[j] = (e2m1(w[j] & 0x0Fu, zero_sign) * scale) * post;
        hi[j] = (e2m1(w[j] >> 4, zero_sign) * scale) * post;
    }
    if (kind == KILN_FP4_F32) {
        uint64_t pairs[8];
        for (int j = 0; j < 8; j++) {
            pairs[j] = PAIR32(to_bits(lo[j]), to_bits(hi[j]));
        }
        memcpy(out, pairs, sizeof pairs);
    } else {
        uint32_t pairs[8];
        if (kind == KILN_FP4_BF16) {
            for (int j = 0; j < 8; j++) {
                pairs[j] = PAIR16(to_bf16(lo[j]), to_bf16(hi[j]));
            }
        } else {
            for (int j = 0; j < 8; j++) {
                pairs[j] = PAIR16(to_f16(lo[j]), to_f16(hi[j]));
            }
        }
        memcpy(out, pairs, sizeof pairs);
    }
}

/* Blocks of `chunks` eight-byte chunks each. */
static ALWAYS_INLINE void blocks_out(int kind, const uint8_t *restrict p, const uint8_t *restrict s,
                                     const float *restrict table, float post, uint32_t zero_sign,
                                     ptrdiff_t blocks, ptrdiff_t chunks, uint8_t *restrict o) {
    const ptrdiff_t step = kind == KILN_FP4_F32 ? 64 : 32; /* output bytes a chunk */
    for (ptrdiff_t k = 0; k < blocks; k++) {
        for (ptrdiff_t c = 0; c < chunks; c++) {
            const ptrdiff_t at = k * chunks + c;
            chunk_out(kind, p + 8 * at, table[s[k]], post, zero_sign, o + step * at);
        }
    }
}

#define KIND_LOOP(kind, suffix)                                                              \
    VECTOR_CLONES                                                                            \
    static void loop_##suffix(const uint8_t *restrict p, const uint8_t *restrict s,           \
                              const float *restrict table, float post, uint32_t zero_sign,   \
                              ptrdiff_t blocks, ptrdiff_t chunks, uint8_t *restrict o) {     \
        blocks_out(kind, p, s, table, post, zero_sign, blocks, chunks, o);                   \
    }

KIND_LOOP(KILN_FP4_F32, f32)
KIND_LOOP(KILN_FP4_BF16, bf16)
KIND_LOOP(KILN_FP4_F16, f16)

void kiln_fp4_scaled(int kind, const uint8_t *packed, const uint8_t *scales, const float *table,
                     float post,
                     int minus_zero, ptrdiff_t blocks, ptrdiff_t block, void *out) {
    uint8_t *o = (uint8_t *)out;
    const uint32_t zero_sign = minus_zero ? 0x80000000u : 0u;
    if (kind == KILN_FP4_F32) {
        loop_f32(packed, scales, table, post, zero_sign, blocks, block / 16, o);
    } else if (kind == KILN_FP4_BF16) {
        loop_bf16(packed, scales, table, post, zero_sign, blocks, block / 16, o);
    } else {
        loop_f16(packed, scales, table, post, zero_sign, blocks, block / 16, o);
    }
}
