/* GGML encoders of the symmetric k-quants (Q3_K, Q6_K): ggml's quantize_row_q3_K_ref and quantize_row_q6_K_ref,
 * in ggml's operation order (ggml.h).
 *
 * A block of 256 is 16 sub-blocks of 16.  Each sub-block gets a scale by a search whose
 * sums run element by element (ggml's order, one float32 rounding per operation): Q6_K
 * tries 19 inverse scales (make_qx_quants, rmse_type 1, weights x*x) and keeps the one
 * with the best weighted fit; here the 19 candidates are lanes of one loop, each with its
 * own sequential sums, so the compiler vectorises across candidates and no sum is
 * reordered.  Q3_K moves one quant at a time while the fit improves (make_q3_quants),
 * a sequential search kept as it is.  The 16 scales are then quantized against the
 * largest (first of equal magnitudes) and every element requantized with its sub-block's
 * quantized scale. */
#include "ggml.h"

#define GROUP_MAX_EPS 1e-15f
#define CANDIDATES 19 /* ggml's is = -9 .. 9; is = 0 (lane 9) is its first try */
#define FIRST 9

static ALWAYS_INLINE int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The element of x[0..15] of strictly largest magnitude, the first of equals
 * (ggml: if (fabsf(v) > amax) ...); *amax gets its magnitude. */
static ALWAYS_INLINE float largest16(const float *restrict x, float *restrict amax) {
    float big = 0.0f, value = 0.0f;
    for (int i = 0; i < 16; i++) {
        const float a = ggml_fabsf(x[i]);
        if (a > big) {
            big = a;
            value = x[i];
        }
    }
    *amax = big;
    return value;
}

/* (float)clamp_int(ggml_nearest_int(v), lo, hi) for |v| < 2**22, in float lanes only:
 * the same float addition rounds v, and subtracting 1.5 * 2**23 again is exact. */
static ALWAYS_INLINE float round_clamp(float v, float lo, float hi) {
    float r = (v + 12582912.0f) - 12582912.0f;
    r = r < lo ? lo : r;
    return r > hi ? hi : r;
}

/* make_qx_quants(16, 32, x, L, 1, NULL) for the 16 sub-blocks of one block at once, each
 * sub-block a lane: xt[i][j] is element i of sub-block j; scale[j] its scale, Lt[i][j] its
 * quants (0 .. 63).  Every lane keeps ggml's sequential sums; the selection among the 19
 * tries is branch-free per lane, in ggml's order (is = 0 first, then -9 .. 9). */
static ALWAYS_INLINE void qx_quants_32(const float xt[16][16], float scale[16],
                                       int8_t Lt[16][16]) {
    float mx[16], amax[16], w[16][16], wx[16][16];
    for (int j = 0; j < 16; j++) {
        mx[j] = 0.0f;
        amax[j] = 0.0f;
    }
    for (int i = 0; i < 16; i++) {
        for (int j = 0; j < 16; j++) {
            const float v = xt[i][j], a = ggml_fabsf(v);
            const int bigger = a > amax[j]; /* the first of equal magnitudes stays */
            amax[j] = bigger ? a : amax[j];
            mx[j] = bigger ? v : mx[j];
            w[i][j] = v * v;
            wx[i][j] = w[i][j] * v;
        }
    }
    /* try t is ggml's is = t - 9 after is = 0 (t = 0): 0, -9 .. -1, 1 .. 9 */
    float iscale[CANDIDATES][16], sumlx[CANDIDATES][16], suml2[CANDIDATES][16];
    for (int t = 0; t < CANDIDATES; t++) {
        const int is = t == 0 ? 0 : t <= FIRST ? t - 1 - FIRST : t - FIRST;
        const float num = -(32.0f + 0.1f * (float)is);
        for (int j = 0; j < 16; j++) {
            iscale[t][j] = num / mx[j];
            sumlx[t][j] = 0.0f;
            suml2[t][j] = 0.0f;
        }
    }
    for (int i = 0; i < 16; i++) {
        for (int t = 0; t < CANDIDATES; t++) {
            for (int j = 0; j < 16; j++) {
                /* |iscale * x| <= 32.9 where amax >= GROUP_MAX_EPS (no element exceeds max);
                 * other lanes are discarded */
                const float l = round_clamp(iscale[t][j] * xt[i][j], -32.0f, 31.0f);
                sumlx[t][j] += wx[i][j] * l;
                suml2[t][j] += (w[i][j] * l) * l;
            }
        }
    }
    float best[16], chosen[16];
    for (int j = 0; j < 16; j++) {
        scale[j] = suml2[0][j] != 0.0f ? sumlx[0][j] / suml2[0][j] : 0.0f;
        best[j] = scale[j] * sumlx[0][j];
        chosen[j] = iscale[0][j];
    }
    for (int t = 1; t < CANDIDATES; t++) {
        for (int j = 0; j < 16; j++) {
            const float slx = sumlx[t][j], sl2 = suml2[t][j], s = slx / sl2;
            const int better = (sl2 > 0.0f) & (slx * slx > best[j] * sl2);
            scale[j] = better ? s : scale[j];
            best[j] = better ? s * slx : best[j];
            chosen[j] = better ? iscale[t][j] : chosen[j];
        }
    }
    for (int j = 0; j < 16; j++) {
        const int zero = amax[j] < GROUP_MAX_EPS;
        scale[j] = zero ? 0.0f : scale[j];
        chosen[j] = zero ? 0.0f : chosen[j]; /* with the offset below: L = 0 */
    }
    for (int i = 0; i < 16; i++) {
        for (int j = 0; j < 16; j++) {
            const float l = round_clamp(chosen[j] * xt[i][j], -32.0f, 31.0f);
            Lt[i][j] = (int8_t)((int)l + (amax[j] < GROUP_MAX_EPS ? 0 : 32));
        }
    }
}

/* make_q3_quants(16, 4, x, L, true): the scale; L[i] in 0 .. 7. */
static ALWAYS_INLINE float q3_quants(const float *restrict x, int8_t *restrict L) {
    float amax;
    const float max = largest16(x, &amax);
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, 16);
        return 0.0f;
    }
    const float iscale = -4.0f / max;
    float w[16], wx[16];
    float sumlx = 0.0f, suml2 = 0.0f;
    for (int i = 0; i < 16; i++) {
        w[i] = x[i] * x[i];
        wx[i] = w[i] * x[i];
        const int l = clamp_int(ggml_nearest_int(iscale * x[i]), -4, 3);
        L[i] = (int8_t)l;
        sumlx += wx[i] * (float)l;
        suml2 += (w[i] * (float)l) * (float)l;
    }
    for (int pass = 0; pass < 5; pass++) {
        int changed = 0;
        for (int i = 0; i < 16; i++) {
            const float old = (float)L[i];
            float slx = sumlx - wx[i] * old;
            if (slx > 0.0f) {
                float sl2 = suml2 - (w[i] * old) * old;
                const int fresh = clamp_int(ggml_nearest_int((x[i] * sl2) / slx), -4, 3);
                if (fresh != L[i]) {
                    slx += wx[i] * (float)fresh;
                    sl2 += (w[i] * (float)fresh) * (float)fresh;
                    if (sl2 > 0.0f && (slx * slx) * suml2 > (sumlx * sumlx) * sl2) {
                        L[i] = (int8_t)fresh;
                        sumlx = slx;
                        suml2 = sl2;
                        changed++;
                    }
                }
            }
        }
        if (!changed) {
            break;
        }
    }
    for (int i = 0; i < 16; i++) {
        L[i] = (int8_t)(L[i] + 4);
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Of 16 scales, the first of strictly largest magnitude (a NaN never), or 0. */
static ALWAYS_INLINE float largest_scale(const float *restrict scales, float *restrict amax) {
    float big = 0.0f, value = 0.0f;
    for (int j = 0; j < 16; j++) {
        const float a = ggml_fabsf(scales[j]);
        if (a > big) {
            big = a;
            value = scales[j];
        }
    }
    *amax = big;
    return value;
}

/* ggml's second pass: with the sub-block's quantized scale d (not 0; a NaN is not),
 * L = clamp(nearest_int(x / d), lo, hi) - lo. */
static ALWAYS_INLINE void requantize(const float *restrict x, int8_t *restrict L, float d, int lo,
                                     int hi) {
    if (d == 0.0f) {
        return;
    }
    for (int i = 0; i < 16; i++) {
        L[i] = (int8_t)(clamp_int(ggml_nearest_int(x[i] / d), lo, hi) - lo);
    }
}

/* Q6_K: ql[128] (low 4 bits), qh[64] (high 2 bits), int8 scales[16], f16 d. */
static VECTOR_CLONES void enc_q6_k(const float *restrict src, uint8_t *restrict dst,
                                   ptrdiff_t blocks) {
    for (ptrdiff_t b = 0; b < blocks; b++) {
        const float *x = src + 256 * b;
        uint8_t *y = dst + 210 * b;
        float xt[16][16], scales[16];
        int8_t Lt[16][16], L[256];
        for (int i = 0; i < 16; i++) {
            for (int j = 0; j < 16; j++) {
                xt[i][j] = x[16 * j + i];
            }
        }
        qx_quants_32(xt, scales, Lt);
        float amax;
        const float max_scale = largest_scale(scales, &amax);
        if (amax < GROUP_MAX_EPS) {
            memset(y, 0, 210);
            continue;
        }
        const float iscale = -128.0f / max_scale;
        const uint16_t d_bits = ggml_f32_to_f16(1.0f / iscale);
        const float d = ggml_f16(d_bits);
        float dj[16];
        for (int j = 0; j < 16; j++) {
            const int v = ggml_nearest_int(iscale * scales[j]);
            const int8_t sc = (int8_t)(uint8_t)(v < 127 ? v : 127); /* C's int8_t store */
            y[192 + j] = (uint8_t)sc;
            dj[j] = d * (float)sc;
        }
        /* ggml's second pass: where d * scale is not 0 (a NaN is not), requantize */
        for (int i = 0; i < 16; i++) {
            for (int j = 0; j < 16; j++) {
                const int l = clamp_int(ggml_nearest_int(xt[i][j] / dj[j]), -32, 31) + 32;
                L[16 * j + i] = dj[j] != 0.0f ? (int8_t)l : Lt[i][j];
            }
        }
        for (int h = 0; h < 2; h++) {
            const int8_t *q = L + 128 * h;
            uint8_t *ql = y + 64 * h, *qh = y + 128 + 32 * h;
            for (int l = 0; l < 32; l++) {
                const int q1 = q[l], q2 = q[l + 32], q3 = q[l + 64], q4 = q[l + 96];
                ql[l] = (uint8_t)((q1 & 0xF) | ((q3 & 0xF) << 4));
                ql[l + 32] = (uint8_t)((q2 & 0xF) | ((q4 & 0xF) << 4));
                qh[l] = (uint8_t)((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
            }
        }
        ggml_put_u16(y + 208, d_bits);
    }
}

/* Q3_K: hmask[32] (bit 2 of each quant), qs[64] (bits 0-1), 6-bit scales in 12 bytes, f16 d. */
static VECTOR_CLONES void enc_q3_k(const float *restrict src, uint8_t *restrict dst,
                                   ptrdiff_t blocks) {
    for (ptrdiff_t b = 0; b < blocks; b++) {
        const float *x = src + 256 * b;
        uint8_t *y = dst + 110 * b;
        int8_t L[256];
        float scales[16];
        for (int j = 0; j < 16; j++) {
            scales[j] = q3_quants(x + 16 * j, L + 16 * j);
        }
        float amax;
        const float max_scale = largest_scale(scales, &amax);
        uint8_t *packed = y + 96;
        memset(packed, 0, 12);
        uint16_t d_bits = 0;
        int six[16]; /* the 6-bit scales, 0 .. 63; ggml reads 0 back where it wrote none */
        if (max_scale != 0.0f) {
            const float iscale = -32.0f / max_scale;
            for (int j = 0; j < 16; j++) {
                const int8_t v = (int8_t)(uint8_t)ggml_nearest_int(iscale * scales[j]);
                six[j] = clamp_int(v, -32, 31) + 32;
                packed[j & 7] |= (uint8_t)((six[j] & 0xF) << (j < 8 ? 0 : 4));
                packed[8 + j % 4] |= (uint8_t)((six[j] >> 4) << (2 * (j / 4)));
            }
            d_bits = ggml_f32_to_f16(1.0f / iscale);
        } else {
            memset(six, 0, sizeof six);
        }
        const float d = ggml_f16(d_bits);
        for (int j = 0; j < 16; j++) {
            requantize(x + 16 * j, L + 16 * j, d * (float)(six[j] - 32), -4, 3);
        }
        uint8_t *hmask = y, *qs = y + 32;
        for (int m = 0; m < 32; m++) {
            unsigned bits = 0;
            for (int k = 0; k < 8; k++) {
                bits |= (unsigned)(L[32 * k + m] > 3) << k;
            }
            hmask[m] = (uint8_t)bits;
        }
        for (int h = 0; h < 2; h++) {
            const int8_t *q = L + 128 * h;
            for (int l = 0; l < 32; l++) {
                qs[32 * h + l] = (uint8_t)((q[l] & 3) | ((q[l + 32] & 3) << 2) |
                                           ((q[l + 64] & 3) << 4) | ((q[l + 96] & 3) << 6));
            }
        }
        ggml_put_u16(y + 108, d_bits);
    }
}

const GGMLEncoder kiln_ggml_enc_k_sym[] = {
    {11, 256, 110, enc_q3_k},
    {14, 256, 210, enc_q6_k},
    {-1, 0, 0, NULL},
};
