/* GGML's one-scale block types: the compiled decoders (see ggml.h).
 *
 * Each follows ggml's dequantize_row_* (ggml-quants.c) operation for operation: the
 * integer level converted to float exactly, then one float32 multiply by the scale
 * (and one add of Q4_1's and Q5_1's m), so the bits are ggml's.  The loops over a
 * block's elements have constant trip counts and no branches, so the compiler
 * vectorizes them; the 16-entry tables are read per element by index. */
#include "ggml.h"

/* ggml's kvalues_iq4nl (ggml-common.h): IQ4_NL's and IQ4_XS's levels.  The same numbers
 * as kiln_np._quants.basic.KVALUES_IQ4NL (tests/quants/test_ggml_basic.py checks). */
static const float KVALUES_IQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                        1,    13,   25,  38,  53,  69,  89,  113};

/* ggml's kvalues_fp4 (ggml-common.h): E2M1 doubled, MXFP4's and NVFP4's levels. */
static const float KVALUES_FP4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* ggml_e8m0_to_fp32_half (ggml-impl.h): 2**(x - 128); 0xFF is 2**127, not NaN. */
static inline float e8m0_half(uint8_t x) {
    return ggml_bits_f32(x < 2 ? 0x00200000u << x : (uint32_t)(x - 1) << 23);
}

/* ggml_ue4m3_to_fp32 (ggml-impl.h): half the unsigned E4M3 value, the sign bit ignored
 * except that 0x7F (and 0) is 0.  (1 + m/8) * 2**(e - 8) and m * 2**-10 are exact. */
static inline float ue4m3_half(uint8_t x) {
    const uint32_t exp = (x >> 3) & 0xFu, man = x & 7u;
    if (x == 0 || x == 0x7F) {
        return 0.0f;
    }
    if (exp == 0) {
        return (float)man * 0.0009765625f;
    }
    return ggml_bits_f32(((exp + 119u) << 23) | (man << 20));
}

/* block_q4_0: f16 d, qs[16]; y[j] = ((qs[j] & 15) - 8) * d, y[j + 16] = ((qs[j] >> 4) - 8) * d. */
VECTOR_CLONES static void q4_0(const uint8_t *restrict s, float *restrict y, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++, s += 18, y += 32) {
        const float d = ggml_f16_at(s);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((s[2 + j] & 0x0F) - 8) * d;
            y[j + 16] = (float)((s[2 + j] >> 4) - 8) * d;
        }
    }
}

/* block_q4_1: f16 d, f16 m, qs[16]; y = q * d + m (two roundings). */
VECTOR_CLONES static void q4_1(const uint8_t *restrict s, float *restrict y, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++, s += 20, y += 32) {
        const float d = ggml_f16_at(s), m = ggml_f16_at(s + 2);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(s[4 + j] & 0x0F) * d + m;
            y[j + 16] = (float)(s[4 + j] >> 4) * d + m;
        }
    }
}

/* block_q5_0: f16 d, u32 qh, qs[16]; element e's 5th bit is bit e of qh; y = (q - 16) * d. */
VECTOR_CLONES static void q5_0(const uint8_t *restrict s, float *restrict y, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++, s += 22, y += 32) {
        const float d = ggml_f16_at(s);
        const uint32_t qh = ggml_u32(s + 2);
        for (int j = 0; j < 16; j++) {
            const int x0 = (int)((s[6 + j] & 0x0Fu) | (((qh >> j) << 4) & 0x10u)) - 16;
            const int x1 = (int)((s[6 + j] >> 4) | ((qh >> (j + 12)) & 0x10u)) - 16;
            y[j] = (float)x0 * d;
            y[j + 16] = (float)x1 * d;
        }
    }
}

/* block_q5_1: f16 d, f16 m, u32 qh, qs[16]; y = q * d + m. */
VECTOR_CLONES static void q5_1(const uint8_t *restrict s, float *restrict y, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++, s += 24, y += 32) {
        const float d = ggml_f16_at(s), m = ggml_f16_at(s + 2);
        const uint32_t qh = ggml_u32(s + 4);
        for (int j = 0; j < 16; j++) {
            const uint32_t x0 = (s[8 + j] & 0x0Fu) | (((qh >> j) << 4) & 0x10u);
            const uint32_t x1 = (s[8 + j] >> 4) | ((qh >> (j + 12)) & 0x10u);
            y[j] = (float)(int)x0 * d + m;
            y[j + 16] = (float)(int)x1 * d + m;
        }
    }
}

/* block_q8_0 (34 bytes: f16 d, int8 qs[32]) and block_q8_1 (36: f16 d, f16 s, int8 qs[32],
 * s = d * sum(qs) is no value); y = qs * d. */
static ALWAYS_INLINE void q8(const uint8_t *restrict s, float *restrict y, ptrdiff_t n,
                             int block_bytes) {
    for (ptrdiff_t i = 0; i < n; i++, s += block_bytes, y += 32) {
        const float d = ggml_f16_at(s);
        const uint8_t *qs = s + block_bytes - 32;
        for (int j = 0; j < 32; j++) {
            y[j] = (float)(int8_t)qs[j] * d;
        }
    }
}

VECTOR_CLONES static void q8_0(const uint8_t *restrict s, float *restrict y, ptrdiff_t n) {
    q8(s, y, n, 34);
}

VECTOR_CLONES static void q8_1(const uint8_t *restrict s, float *restrict y, ptrdiff_t n) {
    q8(s, y, n, 36);
}

/* block_q1_0: f16 d, qs[16]; element j is d if bit j % 8 of qs[j / 8] is set, else -d.
 * -d is d with its sign bit flipped (a NaN's too), done on the bits so that it vectorizes. */
VECTOR_CLONES static void q1_0(const uint8_t *restrict s, float *restrict y, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++, s += 18, y += 128) {
        const float d = ggml_f16_at(s);
        uint32_t d_bits, bits[128];
        memcpy(&d_bits, &d, sizeof d_bits);
        for (int j = 0; j < 128; j++) {
            bits[j] = d_bits ^ ((~(uint32_t)s[2 + j / 8] >> (j % 8)) << 31);
        }
        memcpy(y, bits, sizeof bits);
    }
}

/* block_q2_0: f16 d, qs[16]; element j is bits 2 * (j % 4) of qs[j / 4]; y = (q - 1) * d. */
VECTOR_CLONES static void q2_0(const uint8_t *restrict s, float *restrict y, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++, s += 18, y += 64) {
        const float d = ggml_f16_at(s);
        for (int j = 0; j < 64; j++) {
            y[j] = (float)((int)((s[2 + j / 4] >> (2 * (j % 4))) & 3) - 1) * d;
        }
    }
}

/* A TQ1_0 base-3 digit: ((uint8_t)(q * 3**n) * 3) >> 8, as float, minus 1. */
static ALWAYS_INLINE float trit(uint8_t q, unsigned pow3) {
    const uint8_t shifted = (uint8_t)(q * pow3);
    return (float)((int)((shifted * 3u) >> 8) - 1);
}

/* block_tq1_0: qs[48], qh[4], f16 d; digit n of qs[m] by n then m over qs[0:32] (160
 * values) and qs[32:48] (80), then digits 0..3 of qh[0:4] (16); y = (t - 1) * d. */
VECTOR_CLONES static void tq1_0(const uint8_t *restrict s, float *restrict y, ptrdiff_t n) {
    static const unsigned POW3[5] = {1, 3, 9, 27, 81};
    for (ptrdiff_t i = 0; i < n; i++, s += 54, y += 256) {
        const float d = ggml_f16_at(s + 52);
        float *o = y;
        for (int k = 0; k < 5; k++, o += 32) {
            for (int m = 0; m < 32; m++) {
                o[m] = trit(s[m], POW3[k]) * d;
            }
        }
        for (int k = 0; k < 5; k++, o += 16) {
            for (int m = 0; m < 16; m++) {
                o[m] = trit(s[32 + m], POW3[k]) * d;
            }
        }
        for (int k = 0; k < 4; k++, o += 4) {
            for (int m = 0; m < 4; m++) {
                o[m] = trit(s[48 + m], POW3[k]) * d;
            }
        }
    }
}

/* block_tq2_0: qs[64], f16 d; element 128h + 32l + m is bits 2l of qs[32h + m]; (q - 1) * d. */
VECTOR_CLONES static void tq2_0(const uint8_t *restrict s, float *restrict y, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++, s += 66, y += 256) {
        const float d = ggml_f16_at(s + 64);
        for (int h = 0; h < 2; h++) {
            for (int l = 0; l < 4; l++) {
                for (int m = 0; m < 32; m++) {
                    const int q = (s[32 * h + m] >> (2 * l)) & 3;
                    y[128 * h + 32 * l + m] = (float)(q - 1) * d;
                }
            }
        }
    }
}

/* 16 values of Q4_0's nibble order (byte j: low nibble at j, high at j + 16) from qs[16],
 * each table[q] * d: ggml's (float)kvalues[q] * d (or d * kvalues[q], the same bits). */
static ALWAYS_INLINE void table_32(const uint8_t *restrict qs, const float *restrict table,
                                   float d, float *restrict y) {
    float scaled[16];
    for (int k = 0; k < 16; k++) {
        scaled[k] = table[k] * d;
    }
    for (int j = 0; j < 16; j++) {
        y[j] = scaled[qs[j] & 0x0F];
        y[j + 16] = scaled[qs[j] >> 4];
    }
}

/* block_mxfp4: E8M0 e, qs[16]; y = kvalues_fp4[q] * e8m0_half(e). */
static void mxfp4(const uint8_t *restrict s, float *restrict y, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++, s += 17, y += 32) {
        table_32(s + 1, KVALUES_FP4, e8m0_half(s[0]), y);
    }
}

/* block_nvfp4: UE4M3 d[4], qs[32]; sub-block k (16 elements): nibbles of qs[8k:8k+8] in
 * Q4_0's order, y = kvalues_fp4[q] * ue4m3_half(d[k]). */
static void nvfp4(const uint8_t *restrict s, float *restrict y, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++, s += 36, y += 64) {
        for (int k = 0; k < 4; k++) {
            const float d = ue4m3_half(s[k]);
            const uint8_t *qs = s + 4 + 8 * k;
            float scaled[16];
            for (int v = 0; v < 16; v++) {
                scaled[v] = KVALUES_FP4[v] * d;
            }
            for (int j = 0; j < 8; j++) {
                y[16 * k + j] = scaled[qs[j] & 0x0F];
                y[16 * k + j + 8] = scaled[qs[j] >> 4];
            }
        }
    }
}

/* block_iq4_nl: f16 d, qs[16]; y = d * kvalues_iq4nl[q]. */
static void iq4_nl(const uint8_t *restrict s, float *restrict y, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++, s += 18, y += 32) {
        table_32(s + 2, KVALUES_IQ4NL, ggml_f16_at(s), y);
    }
}

/* block_iq4_xs: f16 d, u16 scales_h, scales_l[4], qs[128]; sub-block ib (32 elements):
 * ls = nibble ib of scales_l | bits 2ib of scales_h << 4, dl = d * (ls - 32), then
 * IQ4_NL's nibbles of qs[16ib:16ib+16] times dl. */
static void iq4_xs(const uint8_t *restrict s, float *restrict y, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++, s += 136, y += 256) {
        const float d = ggml_f16_at(s);
        const unsigned scales_h = ggml_u16(s + 2);
        for (int ib = 0; ib < 8; ib++) {
            const int ls = ((s[4 + ib / 2] >> 4 * (ib % 2)) & 0xF) | (((scales_h >> 2 * ib) & 3) << 4);
            table_32(s + 8 + 16 * ib, KVALUES_IQ4NL, d * (float)(ls - 32), y + 32 * ib);
        }
    }
}

const GGMLDecoder kiln_ggml_basic[] = {
    {2, 32, 18, q4_0},     {3, 32, 20, q4_1},    {6, 32, 22, q5_0},   {7, 32, 24, q5_1},
    {8, 32, 34, q8_0},     {9, 32, 36, q8_1},    {34, 256, 54, tq1_0}, {35, 256, 66, tq2_0},
    {39, 32, 17, mxfp4},   {40, 64, 36, nvfp4},  {20, 32, 18, iq4_nl}, {23, 256, 136, iq4_xs},
    {41, 128, 18, q1_0},   {42, 64, 18, q2_0},   {-1, 0, 0, NULL},
};
