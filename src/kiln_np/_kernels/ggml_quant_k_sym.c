/* GGML encoders of the symmetric k-quants (Q3_K, Q6_K): ggml's quantize_row_q3_K_ref and
 * quantize_row_q6_K_ref, and with an importance matrix quantize_row_q3_K_impl and
 * quantize_row_q6_K_impl, in ggml's operation order (ggml.h).
 *
 * A block of 256 is 16 sub-blocks of 16.  Each sub-block gets a scale by a search whose
 * sums run element by element (ggml's order, one float32 rounding per operation): Q6_K
 * tries 19 inverse scales (make_qx_quants, rmse_type 1, weights x*x, or the importance
 * weights qw) and keeps the one with the best weighted fit; Q3_K moves one quant at a
 * time while the fit improves (make_q3_quants), or with an importance matrix tries 19
 * inverse scales as Q6_K does (make_qx_quants with nmax 4, weights qw * sqrtf(sigma2 +
 * x * x), sigma2 twice the block's mean square: a statistic of the 256-block).  The 16
 * scales are then quantized against the largest (the first of equal magnitudes; Q3_K
 * with an importance matrix: by make_qx_quants again, weighted by each sub-block's sum
 * of weights) and every element requantized with its sub-block's quantized scale.
 *
 * The searches run on the 16 sub-blocks of a block at once, one a lane: the block is
 * transposed (xt[i][j] = element i of sub-block j), each lane keeps its own sums in
 * ggml's order and takes ggml's decisions branch-free, so the compiler vectorises across
 * sub-blocks and no sum is reordered (make_q3_quants' first pass over its quants so;
 * the passes after it, which few sub-blocks need, one sub-block at a time); the search
 * over the block's 16 scales runs its 19 tries as the lanes. */
#include "ggml.h"

#include <math.h>

#define GROUP_MAX_EPS 1e-15f
#define CANDIDATES 19 /* make_qx_quants' first try (is = 0) and is = -9 .. -1, 1 .. 9 */

static ALWAYS_INLINE int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* (float)clamp_int(ggml_nearest_int(v), lo, hi) for |v| < 2**22, in float lanes only:
 * the same float addition rounds v, and subtracting 1.5 * 2**23 again is exact. */
static ALWAYS_INLINE float round_clamp(float v, float lo, float hi) {
    float r = (v + 12582912.0f) - 12582912.0f;
    r = r < lo ? lo : r;
    return r > hi ? hi : r;
}

/* make_qx_quants' try t: ggml's is = 0 for t = 0, then is = -9 .. -1, 1 .. 9 (its order);
 * its inverse scale is this over max. */
static ALWAYS_INLINE float try_factor(int t, float nmax) {
    const int is = t == 0 ? 0 : t <= 9 ? t - 10 : t - 9;
    return -(nmax + 0.1f * (float)is);
}

/* The 256 values of x as xt[i][j] = x[16 * j + i]. */
static ALWAYS_INLINE void transpose(const float *restrict x, float xt[16][16]) {
    for (int i = 0; i < 16; i++) {
        for (int j = 0; j < 16; j++) {
            xt[i][j] = x[16 * j + i];
        }
    }
}

/* Per sub-block j: mx[j], its element of strictly largest magnitude, the first of equals
 * (ggml: if (fabsf(v) > amax) { amax = fabsf(v); max = v; } from 0), amax[j] that
 * magnitude. */
static ALWAYS_INLINE void largest(const float xt[16][16], float mx[16], float amax[16]) {
    for (int j = 0; j < 16; j++) {
        mx[j] = 0.0f;
        amax[j] = 0.0f;
    }
    for (int i = 0; i < 16; i++) {
        for (int j = 0; j < 16; j++) {
            const float v = xt[i][j], a = ggml_fabsf(v);
            const int bigger = a > amax[j];
            amax[j] = bigger ? a : amax[j];
            mx[j] = bigger ? v : mx[j];
        }
    }
}

/* The weights x * x of make_qx_quants' and make_q3_quants' rmse_type 1. */
static ALWAYS_INLINE void squares(const float xt[16][16], float w[16][16]) {
    for (int i = 0; i < 16; i++) {
        for (int j = 0; j < 16; j++) {
            w[i][j] = xt[i][j] * xt[i][j];
        }
    }
}

/* make_qx_quants(16, nmax, x, L, 1, w) for the 16 sub-blocks at once: scale[j] and the
 * quants Lt[i][j] (0 .. 2 nmax - 1; 0 for a sub-block below GROUP_MAX_EPS). */
static ALWAYS_INLINE void qx_quants(const float xt[16][16], const float w[16][16], int nmax,
                                    float scale[16], int8_t Lt[16][16]) {
    const float top = (float)nmax, lo = -top, hi = top - 1.0f;
    float mx[16], amax[16];
    largest(xt, mx, amax);
    float iscale[CANDIDATES][16], sumlx[CANDIDATES][16], suml2[CANDIDATES][16];
    for (int t = 0; t < CANDIDATES; t++) {
        const float factor = try_factor(t, top);
        for (int j = 0; j < 16; j++) {
            iscale[t][j] = factor / mx[j];
            sumlx[t][j] = 0.0f;
            suml2[t][j] = 0.0f;
        }
    }
    for (int i = 0; i < 16; i++) {
        float wx[16];
        for (int j = 0; j < 16; j++) {
            wx[j] = w[i][j] * xt[i][j];
        }
        for (int t = 0; t < CANDIDATES; t++) {
            for (int j = 0; j < 16; j++) {
                /* |iscale * x| <= nmax + 0.9 where amax >= GROUP_MAX_EPS (no element
                 * exceeds max); the other lanes are discarded */
                const float l = round_clamp(iscale[t][j] * xt[i][j], lo, hi);
                sumlx[t][j] += wx[j] * l;
                suml2[t][j] += (w[i][j] * l) * l;
            }
        }
    }
    float best[16], chosen[16];
    for (int j = 0; j < 16; j++) {
        scale[j] = suml2[0][j] != 0.0f ? sumlx[0][j] / suml2[0][j] : 0.0f; /* a NaN is not 0 */
        best[j] = scale[j] * sumlx[0][j];
        chosen[j] = iscale[0][j];
    }
    for (int t = 1; t < CANDIDATES; t++) {
        for (int j = 0; j < 16; j++) {
            const float slx = sumlx[t][j], sl2 = suml2[t][j], s = slx / sl2;
            const int better = (sl2 > 0.0f) & (slx * slx > best[j] * sl2);
            scale[j] = ggml_pick(better, s, scale[j]);
            best[j] = ggml_pick(better, s * slx, best[j]);
            chosen[j] = ggml_pick(better, iscale[t][j], chosen[j]);
        }
    }
    for (int j = 0; j < 16; j++) {
        const int live = amax[j] >= GROUP_MAX_EPS;
        scale[j] = ggml_pick(live, scale[j], 0.0f);
        chosen[j] = ggml_pick(live, chosen[j], 0.0f); /* round_clamp(0) = 0, less nmax below */
    }
    for (int i = 0; i < 16; i++) {
        for (int j = 0; j < 16; j++) {
            const int l = (int)round_clamp(chosen[j] * xt[i][j], lo, hi);
            Lt[i][j] = (int8_t)(l + (amax[j] >= GROUP_MAX_EPS ? nmax : 0));
        }
    }
}

/* make_qx_quants(16, 32, x, L, 1, w) of one row of 16 (a block's scales, which may be
 * NaN or infinite where the weights overflowed: ggml's nearest_int for any float), its
 * 19 tries as the lanes: the scale it returns, and the quants L (0 .. 63). */
static ALWAYS_INLINE float qx_quants_row(const float x[16], const float w[16], int8_t L[16]) {
    float max = 0.0f, amax = 0.0f;
    for (int i = 0; i < 16; i++) {
        const float a = ggml_fabsf(x[i]);
        if (a > amax) {
            amax = a;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, 16);
        return 0.0f;
    }
    float iscale[CANDIDATES], sumlx[CANDIDATES], suml2[CANDIDATES];
    for (int t = 0; t < CANDIDATES; t++) {
        iscale[t] = try_factor(t, 32.0f) / max;
        sumlx[t] = 0.0f;
        suml2[t] = 0.0f;
    }
    for (int i = 0; i < 16; i++) {
        const float wx = w[i] * x[i];
        for (int t = 0; t < CANDIDATES; t++) {
            const float l = (float)clamp_int(ggml_nearest_int(iscale[t] * x[i]), -32, 31);
            sumlx[t] += wx * l;
            suml2[t] += (w[i] * l) * l;
        }
    }
    float scale = suml2[0] != 0.0f ? sumlx[0] / suml2[0] : 0.0f, best = scale * sumlx[0];
    float chosen = iscale[0];
    for (int t = 1; t < CANDIDATES; t++) {
        const float s = sumlx[t] / suml2[t];
        const int better = (suml2[t] > 0.0f) & (sumlx[t] * sumlx[t] > best * suml2[t]);
        scale = ggml_pick(better, s, scale);
        best = ggml_pick(better, s * sumlx[t], best);
        chosen = ggml_pick(better, iscale[t], chosen);
    }
    for (int i = 0; i < 16; i++) {
        L[i] = (int8_t)(clamp_int(ggml_nearest_int(chosen * x[i]), -32, 31) + 32);
    }
    return scale;
}

/* One step of make_q3_quants' passes: whether quant *q of x (weights w, wx) moves, and
 * if so the move, with the sums of its sub-block; branch-free, so that it vectorises. */
static ALWAYS_INLINE int q3_move(float x, float w, float wx, int live, float *restrict q,
                                 float *restrict sumlx, float *restrict suml2) {
    const float old = *q;
    const float slx = *sumlx - wx * old;
    const float sl2 = *suml2 - (w * old) * old;
    /* any float here (slx may be 0 or tiny): ggml's nearest_int bit for bit */
    const float fresh = (float)clamp_int(ggml_nearest_int((x * sl2) / slx), -4, 3);
    const float nslx = slx + wx * fresh;
    const float nsl2 = sl2 + (w * fresh) * fresh;
    const int take = live & (slx > 0.0f) & (fresh != old) & (nsl2 > 0.0f) &
                     ((nslx * nslx) * *suml2 > (*sumlx * *sumlx) * nsl2);
    *q = take ? fresh : old;
    *sumlx = take ? nslx : *sumlx;
    *suml2 = take ? nsl2 : *suml2;
    return take;
}

/* make_q3_quants(16, 4, x, L, true) for the 16 sub-blocks at once: scale[j] and the
 * quants Lt[i][j] (0 .. 7; 0 for a sub-block below GROUP_MAX_EPS). */
static ALWAYS_INLINE void q3_quants(const float xt[16][16], float scale[16], int8_t Lt[16][16]) {
    float mx[16], amax[16], w[16][16], wx[16][16];
    largest(xt, mx, amax);
    squares(xt, w);
    for (int i = 0; i < 16; i++) {
        for (int j = 0; j < 16; j++) {
            wx[i][j] = w[i][j] * xt[i][j];
        }
    }
    float iscale[16], sumlx[16], suml2[16], q[16][16]; /* q: the quants -4 .. 3, as floats */
    int live[16];
    for (int j = 0; j < 16; j++) {
        live[j] = amax[j] >= GROUP_MAX_EPS;
        iscale[j] = live[j] ? -4.0f / mx[j] : 0.0f;
        sumlx[j] = 0.0f;
        suml2[j] = 0.0f;
    }
    for (int i = 0; i < 16; i++) {
        for (int j = 0; j < 16; j++) {
            const float l = round_clamp(iscale[j] * xt[i][j], -4.0f, 3.0f); /* |.| <= 4 */
            q[i][j] = l;
            sumlx[j] += wx[i][j] * l;
            suml2[j] += (w[i][j] * l) * l;
        }
    }
    /* ggml's first pass for every sub-block at once; the few that moved a quant go on
     * alone, as ggml's loop does (up to 5 passes, until one moves nothing) */
    int moved[16] = {0};
    for (int i = 0; i < 16; i++) {
        for (int j = 0; j < 16; j++) {
            moved[j] |= q3_move(xt[i][j], w[i][j], wx[i][j], live[j], &q[i][j], &sumlx[j],
                                &suml2[j]);
        }
    }
    for (int j = 0; j < 16; j++) {
        for (int pass = 1; pass < 5 && moved[j]; pass++) {
            moved[j] = 0;
            for (int i = 0; i < 16; i++) {
                moved[j] |= q3_move(xt[i][j], w[i][j], wx[i][j], 1, &q[i][j], &sumlx[j],
                                    &suml2[j]);
            }
        }
    }
    for (int j = 0; j < 16; j++) {
        scale[j] = live[j] && suml2[j] > 0.0f ? sumlx[j] / suml2[j] : 0.0f;
    }
    for (int i = 0; i < 16; i++) {
        for (int j = 0; j < 16; j++) {
            Lt[i][j] = (int8_t)(live[j] ? (int)q[i][j] + 4 : 0);
        }
    }
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

/* ggml's second pass into L[256] (natural order): where sub-block j's d[j] is not 0 (a
 * NaN is not), clamp(nearest_int(x / d[j]), lo, hi) - lo; elsewhere the search's Lt. */
static ALWAYS_INLINE void requantize(const float xt[16][16], const int8_t Lt[16][16],
                                     const float d[16], int lo, int hi, int8_t *restrict L) {
    for (int i = 0; i < 16; i++) {
        for (int j = 0; j < 16; j++) {
            const int l = clamp_int(ggml_nearest_int(xt[i][j] / d[j]), lo, hi) - lo;
            const int redo = -(d[j] != 0.0f);
            L[16 * j + i] = (int8_t)((l & redo) | (Lt[i][j] & ~redo));
        }
    }
}

/* Q6_K's bytes from the 16 sub-block scales and the search's quants: ql[128] (low 4
 * bits), qh[64] (high 2 bits), int8 scales[16] against the largest, f16 d. */
static ALWAYS_INLINE void q6_k_write(const float xt[16][16], const float scales[16],
                                     const int8_t Lt[16][16], uint8_t *restrict y) {
    int8_t L[256];
    float amax;
    const float max_scale = largest_scale(scales, &amax);
    if (amax < GROUP_MAX_EPS) {
        memset(y, 0, 210);
        return;
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
    requantize(xt, Lt, dj, -32, 31, L);
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

/* Q6_K: ql[128], qh[64], int8 scales[16], f16 d. */
static VECTOR_CLONES ptrdiff_t enc_q6_k(const float *restrict src, uint8_t *restrict dst,
                                        ptrdiff_t blocks) {
    for (ptrdiff_t b = 0; b < blocks; b++) {
        float xt[16][16], w[16][16], scales[16];
        int8_t Lt[16][16];
        transpose(src + 256 * b, xt);
        squares(xt, w);
        qx_quants(xt, w, 32, scales, Lt);
        q6_k_write(xt, scales, Lt, dst + 210 * b);
    }
    return -1;
}

/* Q6_K with an importance matrix: the search weighted by qw itself (ggml leaves its
 * sigma2 weighting commented out). */
static VECTOR_CLONES ptrdiff_t enc_q6_k_weighted(const float *restrict src,
                                                 const float *restrict qw,
                                                 uint8_t *restrict dst, ptrdiff_t blocks) {
    for (ptrdiff_t b = 0; b < blocks; b++) {
        float xt[16][16], w[16][16], scales[16];
        int8_t Lt[16][16];
        transpose(src + 256 * b, xt);
        transpose(qw + 256 * b, w);
        qx_quants(xt, w, 32, scales, Lt);
        q6_k_write(xt, scales, Lt, dst + 210 * b);
    }
    return -1;
}

/* Q3_K's bytes from the 6-bit scales six[j] (0 .. 63, the scale six[j] - 32 times d),
 * f16 d and the search's quants: hmask[32] (bit 2 of each quant), qs[64] (bits 0-1),
 * the scales in 12 bytes, d. */
static ALWAYS_INLINE void q3_k_write(const float xt[16][16], const int six[16], uint16_t d_bits,
                                     const int8_t Lt[16][16], uint8_t *restrict y) {
    int8_t L[256];
    uint8_t *packed = y + 96;
    memset(packed, 0, 12);
    for (int j = 0; j < 16; j++) {
        packed[j & 7] |= (uint8_t)((six[j] & 0xF) << (j < 8 ? 0 : 4));
        packed[8 + j % 4] |= (uint8_t)((six[j] >> 4) << (2 * (j / 4)));
    }
    const float d = ggml_f16(d_bits);
    float dj[16];
    for (int j = 0; j < 16; j++) {
        dj[j] = d * (float)(six[j] - 32);
    }
    requantize(xt, Lt, dj, -4, 3, L);
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

/* Q3_K: the 16 scales as 6 bits against the largest (d = max / -32). */
static VECTOR_CLONES ptrdiff_t enc_q3_k(const float *restrict src, uint8_t *restrict dst,
                                        ptrdiff_t blocks) {
    for (ptrdiff_t b = 0; b < blocks; b++) {
        float xt[16][16], scales[16];
        int8_t Lt[16][16];
        transpose(src + 256 * b, xt);
        q3_quants(xt, scales, Lt);
        float amax;
        const float max_scale = largest_scale(scales, &amax);
        uint16_t d_bits = 0;
        int six[16]; /* ggml reads 0 back where it wrote none */
        if (max_scale != 0.0f) {
            const float iscale = -32.0f / max_scale;
            for (int j = 0; j < 16; j++) {
                const int8_t v = (int8_t)(uint8_t)ggml_nearest_int(iscale * scales[j]);
                six[j] = clamp_int(v, -32, 31) + 32;
            }
            d_bits = ggml_f32_to_f16(1.0f / iscale);
        } else {
            memset(six, 0, sizeof six);
        }
        q3_k_write(xt, six, d_bits, Lt, dst + 110 * b);
    }
    return -1;
}

/* Q3_K with an importance matrix: the sub-blocks' scales by make_qx_quants weighted
 * qw * sqrtf(sigma2 + x * x), sigma2 = 2 * sum_x2 / QK_K, those scales by make_qx_quants
 * weighted by their sums. */
static ALWAYS_INLINE void q3_k_weighted(const float *restrict x, const float *restrict q,
                                        float sum_x2, uint8_t *restrict y) {
    float xt[16][16], wt[16][16], w[256], sw[16], scales[16];
    int8_t Lt[16][16], ls[16];
    const float sigma2 = 2 * sum_x2 / 256;
    for (int k = 0; k < 256; k++) {
        w[k] = q[k] * sqrtf(sigma2 + x[k] * x[k]);
    }
    transpose(x, xt);
    transpose(w, wt);
    for (int j = 0; j < 16; j++) {
        sw[j] = 0.0f;
    }
    for (int i = 0; i < 16; i++) {
        for (int j = 0; j < 16; j++) {
            sw[j] += wt[i][j];
        }
    }
    qx_quants(xt, wt, 4, scales, Lt);
    const float d = qx_quants_row(scales, sw, ls);
    int six[16];
    for (int j = 0; j < 16; j++) {
        six[j] = ls[j];
    }
    q3_k_write(xt, six, ggml_f32_to_f16(d), Lt, y);
}

static VECTOR_CLONES ptrdiff_t enc_q3_k_weighted(const float *restrict src,
                                                 const float *restrict qw,
                                                 uint8_t *restrict dst, ptrdiff_t blocks) {
    for (ptrdiff_t b = 0; b < blocks; b += 4) {
        const float *x = src + 256 * b;
        const int n = blocks - b < 4 ? (int)(blocks - b) : 4;
        /* the blocks' sums of squares side by side, each in ggml's order: their
         * additions' latencies overlap */
        float sum_x2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int k = 0; k < 256; k++) {
            for (int g = 0; g < n; g++) {
                sum_x2[g] += x[256 * g + k] * x[256 * g + k];
            }
        }
        for (int g = 0; g < n; g++) {
            q3_k_weighted(x + 256 * g, qw + 256 * (b + g), sum_x2[g], dst + 110 * (b + g));
        }
    }
    return -1;
}

const GGMLEncoder kiln_ggml_enc_k_sym[] = {
    {11, 256, 110, enc_q3_k, enc_q3_k_weighted},
    {14, 256, 210, enc_q6_k, enc_q6_k_weighted},
    {-1, 0, 0, NULL, NULL},
};
