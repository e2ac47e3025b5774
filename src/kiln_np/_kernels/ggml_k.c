/* GGML's k-quant block types: the compiled decoders (see ggml.h).
 *
 * A block is a 256-element super-block of 8 or 16 sub-blocks, each with its own
 * scale (and min).  Each decoder first works out the sub-block scales in float32
 * as ggml does (d * sc, dmin * m), then runs one fixed-length loop per sub-block
 * (16 or 32 elements) that the compiler turns into vector code.  The layouts are
 * tabled in kiln_np/_quants/kquants.py. */
#include "ggml.h"

/* Q4_K / Q5_K: the 8 six-bit scales and 8 mins packed in 12 bytes (ggml's
 * get_scale_min_k4).  Sub-blocks 0-3: the low 6 bits of bytes 0-3 (scales) and 4-7
 * (mins); sub-blocks 4-7: the nibbles of bytes 8-11 (scale low, min high) with the
 * two high bits of bytes 0-3 (scales) and 4-7 (mins) on top. */
static ALWAYS_INLINE void scale_min_k4(const uint8_t *restrict p, uint8_t sc[8], uint8_t m[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = p[j] & 63;
        m[j] = p[j + 4] & 63;
        sc[j + 4] = (uint8_t)((p[j + 8] & 0xF) | ((p[j] >> 6) << 4));
        m[j + 4] = (uint8_t)((p[j + 8] >> 4) | ((p[j + 4] >> 6) << 4));
    }
}

/* Q3_K: the 16 six-bit scales packed in 12 bytes, minus 32 as ggml uses them.  Scale
 * j's low 4 bits are nibble j / 8 of byte j % 8, its high 2 bits are bits 2 * (j / 4)
 * and up of byte 8 + j % 4. */
static ALWAYS_INLINE void q3_k_scales(const uint8_t *restrict p, int sc[16]) {
    for (int j = 0; j < 16; j++) {
        const int low = (p[j % 8] >> (4 * (j / 8))) & 0xF;
        const int high = (p[8 + j % 4] >> (2 * (j / 4))) & 3;
        sc[j] = (low | (high << 4)) - 32;
    }
}

/* The arithmetic on a sub-block's quants q, one rounding per operation as ggml's:
 * Q2_K's y = dl * q - ml, Q3_K and Q6_K's y = dl * q (16 elements), Q4_K and Q5_K's
 * y = d1 * q - m1 (32).  The quants come as int32 so that the conversion to float
 * and the arithmetic run a full vector at a time. */
static ALWAYS_INLINE void affine_16(float dl, float ml, const int32_t *restrict q,
                                    float *restrict y) {
    for (int l = 0; l < 16; l++) {
        y[l] = dl * (float)q[l] - ml;
    }
}

static ALWAYS_INLINE void scale_16(float dl, const int32_t *restrict q, float *restrict y) {
    for (int l = 0; l < 16; l++) {
        y[l] = dl * (float)q[l];
    }
}

static ALWAYS_INLINE void affine_32(float d1, float m1, const int32_t *restrict q,
                                    float *restrict y) {
    for (int l = 0; l < 32; l++) {
        y[l] = d1 * (float)q[l] - m1;
    }
}

/* block_q2_K: scales[16] (scale | min << 4), qs[64], f16 d at 80, dmin at 82.
 * dl = d * scale; ml = dmin * min; y = dl * q - ml.  Elements 128 * half + 32 * j
 * + (0 ... 31) are bits 2j of qs[32 * half + (0 ... 31)], sub-blocks 8 * half + 2 * j
 * and the next. */
VECTOR_CLONES
static void q2_k(const uint8_t *restrict s, float *restrict y, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++, s += 84, y += 256) {
        const float d = ggml_f16_at(s + 80), min = ggml_f16_at(s + 82);
        for (int g = 0; g < 8; g++) { /* g = 4 * half + j */
            const uint8_t *restrict qs = s + 16 + 32 * (g / 4);
            const int shift = 2 * (g % 4);
            int32_t q[32];
            for (int l = 0; l < 32; l++) {
                q[l] = (qs[l] >> shift) & 3;
            }
            for (int h = 0; h < 2; h++) {
                const uint8_t sc = s[2 * g + h];
                affine_16(d * (float)(sc & 0xF), min * (float)(sc >> 4), q + 16 * h,
                          y + 32 * g + 16 * h);
            }
        }
    }
}

/* block_q3_K: hmask[32], qs[64] at 32, scales[12] at 96, f16 d at 108.
 * dl = d * (scale - 32); y = dl * (q - (high bit ? 0 : 4)).  Elements 128 * half
 * + 32 * j + (0 ... 31): bits 2j of qs[32 * half + (0 ... 31)], high bit 4 * half + j
 * of hmask[0 ... 31]; sub-blocks 8 * half + 2 * j and the next. */
VECTOR_CLONES
static void q3_k(const uint8_t *restrict s, float *restrict y, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++, s += 110, y += 256) {
        const float d = ggml_f16_at(s + 108);
        int sc[16];
        q3_k_scales(s + 96, sc);
        for (int g = 0; g < 8; g++) { /* g = 4 * half + j, the high bit's number */
            const uint8_t *restrict qs = s + 32 + 32 * (g / 4);
            const int shift = 2 * (g % 4);
            int32_t q[32];
            for (int l = 0; l < 32; l++) {
                q[l] = (((qs[l] >> shift) & 3) | (((s[l] >> g) & 1) << 2)) - 4;
            }
            scale_16(d * (float)sc[2 * g], q, y + 32 * g);
            scale_16(d * (float)sc[2 * g + 1], q + 16, y + 32 * g + 16);
        }
    }
}

/* block_q4_K: f16 d, dmin, scales[12] at 4, qs[128] at 16.  Sub-block 2 * c + h is
 * nibble h of qs[32 * c + l]. */
VECTOR_CLONES
static void q4_k(const uint8_t *restrict s, float *restrict y, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++, s += 144, y += 256) {
        const float d = ggml_f16_at(s), min = ggml_f16_at(s + 2);
        uint8_t sc[8], m[8];
        scale_min_k4(s + 4, sc, m);
        for (int sb = 0; sb < 8; sb++) {
            const uint8_t *restrict qs = s + 16 + 32 * (sb / 2);
            const int shift = 4 * (sb % 2);
            int32_t q[32];
            for (int l = 0; l < 32; l++) {
                q[l] = (qs[l] >> shift) & 0xF;
            }
            affine_32(d * (float)sc[sb], min * (float)m[sb], q, y + 32 * sb);
        }
    }
}

/* block_q5_K: f16 d, dmin, scales[12] at 4, qh[32] at 16, qs[128] at 48.  Sub-block
 * 2 * c + h: nibble h of qs[32 * c + l], plus 16 where bit 2 * c + h of qh[l] is set. */
VECTOR_CLONES
static void q5_k(const uint8_t *restrict s, float *restrict y, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++, s += 176, y += 256) {
        const float d = ggml_f16_at(s), min = ggml_f16_at(s + 2);
        uint8_t sc[8], m[8];
        scale_min_k4(s + 4, sc, m);
        const uint8_t *restrict qh = s + 16;
        for (int sb = 0; sb < 8; sb++) {
            const uint8_t *restrict qs = s + 48 + 32 * (sb / 2);
            const int shift = 4 * (sb % 2);
            int32_t q[32];
            for (int l = 0; l < 32; l++) {
                q[l] = ((qs[l] >> shift) & 0xF) | (((qh[l] >> sb) & 1) << 4);
            }
            affine_32(d * (float)sc[sb], min * (float)m[sb], q, y + 32 * sb);
        }
    }
}

/* block_q6_K: ql[128], qh[64] at 128, int8 scales[16] at 192, f16 d at 208.
 * y = d * sc * q, i.e. (d * sc) * q, with q = (low 4 bits | high 2 bits << 4) - 32.
 * Elements 128 * half + 32 * k + (0 ... 31): nibble k / 2 of ql[64 * half + 32 * (k % 2)
 * + (0 ... 31)], bits 2k of qh[32 * half + (0 ... 31)]; sub-blocks 8 * half + 2 * k and
 * the next. */
VECTOR_CLONES
static void q6_k(const uint8_t *restrict s, float *restrict y, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++, s += 210, y += 256) {
        const float d = ggml_f16_at(s + 208);
        for (int g = 0; g < 8; g++) { /* g = 4 * half + k */
            const int half = g / 4, k = g % 4;
            const uint8_t *restrict ql = s + 64 * half + 32 * (k % 2);
            const uint8_t *restrict qh = s + 128 + 32 * half;
            const int lshift = 4 * (k / 2), hshift = 2 * k;
            int32_t q[32];
            for (int l = 0; l < 32; l++) {
                q[l] = (((ql[l] >> lshift) & 0xF) | (((qh[l] >> hshift) & 3) << 4)) - 32;
            }
            const int8_t *restrict sc = (const int8_t *)s + 192 + 2 * g;
            scale_16(d * (float)sc[0], q, y + 32 * g);
            scale_16(d * (float)sc[1], q + 16, y + 32 * g + 16);
        }
    }
}

/* block_q8_K: float32 d, int8 qs[256] at 4, int16 bsums[16] (not read); y = d * qs. */
VECTOR_CLONES
static void q8_k(const uint8_t *restrict s, float *restrict y, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++, s += 292, y += 256) {
        const float d = ggml_bits_f32(ggml_u32(s));
        for (int j = 0; j < 256; j++) {
            y[j] = d * (float)(int8_t)s[4 + j];
        }
    }
}

const GGMLDecoder kiln_ggml_k[] = {
    {10, 256, 84, q2_k},  {11, 256, 110, q3_k}, {12, 256, 144, q4_k},
    {13, 256, 176, q5_k}, {14, 256, 210, q6_k}, {15, 256, 292, q8_k},
    {-1, 0, 0, NULL},
};
