/* GGML encoders of the k-quants with a scale and a min per sub-block (Q2_K, Q4_K, Q5_K):
 * ggml's quantize_row_q{2,4,5}_K_ref, in ggml's operation order (ggml.h).
 *
 * Every sub-block (16 values for Q2_K, 32 for Q4_K and Q5_K) gets its scale and min
 * from ggml's make_qkx2_quants: a first guess from its range, then nstep + 1 candidate
 * scales fitted by weighted least squares, each kept if its weighted error is smaller
 * (and the next candidate's levels use the min the best one so far left).  The block's
 * sub-blocks are independent, so a block is first transposed to element-major lanes,
 * xt[i * NS + j] = x[N * j + i], and each loop over the elements i runs across the NS
 * sub-blocks j at once (8 or 16 lanes: the compiler vectorises the lane loops), every
 * lane keeping its own sums in ggml's element order.  Instead of copying the levels of
 * every better candidate, a lane remembers the iscale and min that made them, and its
 * levels are computed from those once at the end, bit for bit the same. */
#include "ggml.h"

#include <math.h>

/* The loops over the sub-blocks (lanes) stay loops, for the vectoriser: fully unrolled
 * (8 lanes), GCC would vectorise the loop over the elements instead, as in-order sums. */
#if defined(__GNUC__) && !defined(__clang__)
#define LANES _Pragma("GCC unroll 1")
#else
#define LANES
#endif

/* MAX(0, MIN(nmax, nearest_int(v))) as ggml writes it. */
static ALWAYS_INLINE int clamp_level(float v, int nmax) {
    const int l = ggml_nearest_int(v);
    const int m = nmax < l ? nmax : l;
    return 0 > m ? 0 : m;
}

/* make_qkx2_quants over the NS sub-blocks of N elements at xt (weights wt), lanes
 * element-major.  Writes each sub-block's scale and the_min, and the iscale and min
 * its levels come from: clamp_level(is[j] * (x - lo[j])) (both 0 for a sub-block
 * whose values are all equal, whose levels are 0). */
static ALWAYS_INLINE void qkx2_search(const float *restrict xt, const float *restrict wt, int N,
                                      int NS, int nmax, float rmin, int nstep, int mad,
                                      float *restrict scale, float *restrict the_min,
                                      float *restrict is, float *restrict lo) {
    float hi[16], min[16], min0[16], sum_w[16], sum_x[16], best[16];
    float iscale[16], sum_l[16], sum_l2[16], sum_xl[16], cur[16];
    float det[16], this_scale[16], this_min[16];
    float la[32 * 16];
    const float top = (float)nmax;
    LANES for (int j = 0; j < NS; j++) {
        min[j] = hi[j] = xt[j];
        sum_w[j] = wt[j];
        sum_x[j] = sum_w[j] * xt[j];
    }
    for (int i = 1; i < N; i++) {
        LANES for (int j = 0; j < NS; j++) {
            const float v = xt[i * NS + j], w = wt[i * NS + j];
            min[j] = v < min[j] ? v : min[j];
            hi[j] = v > hi[j] ? v : hi[j];
            sum_w[j] += w;
            sum_x[j] += w * v;
        }
    }
    LANES for (int j = 0; j < NS; j++) {
        min[j] = min[j] > 0 ? 0.0f : min[j];
        min0[j] = min[j];
        is[j] = top / (hi[j] - min[j]);
        scale[j] = 1 / is[j];
        lo[j] = min[j];
        best[j] = 0;
    }
    for (int i = 0; i < N; i++) {
        LANES for (int j = 0; j < NS; j++) {
            const float v = xt[i * NS + j];
            const float l = (float)clamp_level(is[j] * (v - min[j]), nmax);
            float diff = scale[j] * l + min[j] - v;
            diff = mad ? ggml_fabsf(diff) : diff * diff;
            best[j] += wt[i * NS + j] * diff;
        }
    }
    for (int step = 0; step <= nstep; step++) {
        const float factor = rmin + 0.1f * (float)step + top;
        LANES for (int j = 0; j < NS; j++) {
            iscale[j] = factor / (hi[j] - min[j]);
            sum_l[j] = sum_l2[j] = sum_xl[j] = 0;
        }
        for (int i = 0; i < N; i++) {
            LANES for (int j = 0; j < NS; j++) {
                const float v = xt[i * NS + j], w = wt[i * NS + j];
                const float l = (float)clamp_level(iscale[j] * (v - min[j]), nmax);
                const float wl = w * l;
                la[i * NS + j] = l;
                sum_l[j] += wl;
                sum_l2[j] += wl * l;
                sum_xl[j] += wl * v;
            }
        }
        LANES for (int j = 0; j < NS; j++) {
            det[j] = sum_w[j] * sum_l2[j] - sum_l[j] * sum_l[j];
            const float s = (sum_w[j] * sum_xl[j] - sum_x[j] * sum_l[j]) / det[j];
            const float m = (sum_l2[j] * sum_x[j] - sum_l[j] * sum_xl[j]) / det[j];
            this_min[j] = m > 0 ? 0.0f : m;
            this_scale[j] = m > 0 ? sum_xl[j] / sum_l2[j] : s;
            cur[j] = 0;
        }
        for (int i = 0; i < N; i++) {
            LANES for (int j = 0; j < NS; j++) {
                const float v = xt[i * NS + j];
                float diff = this_scale[j] * la[i * NS + j] + this_min[j] - v;
                diff = mad ? ggml_fabsf(diff) : diff * diff;
                cur[j] += wt[i * NS + j] * diff;
            }
        }
        LANES for (int j = 0; j < NS; j++) {
            const int better = det[j] > 0 && cur[j] < best[j];
            best[j] = better ? cur[j] : best[j];
            scale[j] = better ? this_scale[j] : scale[j];
            is[j] = better ? iscale[j] : is[j];
            lo[j] = better ? min[j] : lo[j];
            min[j] = better ? this_min[j] : min[j];
        }
    }
    LANES for (int j = 0; j < NS; j++) {
        const int flat = hi[j] == min0[j];
        scale[j] = flat ? 0.0f : scale[j];
        the_min[j] = flat ? -min0[j] : -min[j];
        is[j] = flat ? 0.0f : is[j];
        lo[j] = flat ? 0.0f : lo[j];
    }
}

/* The block's NS x N values at x, element-major, into xt. */
static ALWAYS_INLINE void transpose(const float *restrict x, float *restrict xt, int N, int NS) {
    LANES for (int j = 0; j < NS; j++) {
        for (int i = 0; i < N; i++) {
            xt[i * NS + j] = x[N * j + i];
        }
    }
}

/* The levels, element-major: ggml's requantization with d and dm where d is not
 * zero, the search's levels elsewhere. */
static ALWAYS_INLINE void final_levels(const float *restrict xt, const float *restrict d,
                                       const float *restrict dm, const float *restrict is,
                                       const float *restrict lo, int N, int NS, int nmax,
                                       uint8_t *restrict L) {
    for (int i = 0; i < N; i++) {
        LANES for (int j = 0; j < NS; j++) {
            const float v = xt[i * NS + j];
            const int again = clamp_level((v + dm[j]) / d[j], nmax);
            const int found = clamp_level(is[j] * (v - lo[j]), nmax);
            L[i * NS + j] = (uint8_t)(d[j] != 0 ? again : found);
        }
    }
}

/* Q2_K: scales[16] (4-bit scale | 4-bit min << 4), qs[64], d, dmin. */
static VECTOR_CLONES ptrdiff_t enc_q2_k(const float *restrict src, uint8_t *restrict dst,
                                   ptrdiff_t blocks) {
    float xt[256], wt[256], scale[16], the_min[16], is[16], lo[16], d[16], dm[16];
    uint8_t L[256], sc[16];
    for (ptrdiff_t b = 0; b < blocks; b++) {
        uint8_t *y = dst + 84 * b;
        transpose(src + 256 * b, xt, 16, 16);
        for (int k = 0; k < 256; k++) {
            wt[k] = ggml_fabsf(xt[k]);
        }
        qkx2_search(xt, wt, 16, 16, 3, -0.5f, 15, 1, scale, the_min, is, lo);
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; j++) {
            max_scale = scale[j] > max_scale ? scale[j] : max_scale;
            max_min = the_min[j] > max_min ? the_min[j] : max_min;
        }
        uint16_t d_bits = 0, dmin_bits = 0;
        if (max_scale > 0) {
            const float iscale = 15.f / max_scale;
            for (int j = 0; j < 16; j++) {
                sc[j] = (uint8_t)ggml_nearest_int(iscale * scale[j]);
            }
            d_bits = ggml_f32_to_f16(max_scale / 15.f);
        } else {
            memset(sc, 0, sizeof sc);
        }
        if (max_min > 0) {
            const float iscale = 15.f / max_min;
            for (int j = 0; j < 16; j++) {
                sc[j] = (uint8_t)(sc[j] | ((unsigned)ggml_nearest_int(iscale * the_min[j]) << 4));
            }
            dmin_bits = ggml_f32_to_f16(max_min / 15.f);
        }
        const float df = ggml_f16(d_bits), dminf = ggml_f16(dmin_bits);
        for (int j = 0; j < 16; j++) {
            d[j] = df * (float)(sc[j] & 0xF);
            dm[j] = dminf * (float)(sc[j] >> 4);
        }
        final_levels(xt, d, dm, is, lo, 16, 16, 3, L);
        memcpy(y, sc, 16);
        /* qs[32 h + l] packs elements 128 h + 32 m + l (m = 0..3) at bits 2 m; element e
         * is L[(e % 16) * 16 + e / 16]. */
        for (int h = 0; h < 2; h++) {
            for (int l = 0; l < 32; l++) {
                unsigned q = 0;
                for (int m = 0; m < 4; m++) {
                    const int e = 128 * h + 32 * m + l;
                    q |= (unsigned)L[(e % 16) * 16 + e / 16] << (2 * m);
                }
                y[16 + 32 * h + l] = (uint8_t)q;
            }
        }
        ggml_put_u16(y + 80, d_bits);
        ggml_put_u16(y + 82, dmin_bits);
    }
    return -1;
}

/* Q4_K and Q5_K's common part: the search with ggml's weights (av_x + |x|), the 6-bit
 * scales and mins packed as get_scale_min_k4 reads them, d and dmin; the levels,
 * element-major, into L. */
static ALWAYS_INLINE void k6_block(const float *restrict x, uint8_t *restrict head, int nmax,
                                   float rmin, int nstep, uint8_t *restrict L) {
    float xt[256], wt[256], scale[8], the_min[8], is[8], lo[8], d[8], dm[8], sum_x2[8];
    uint8_t ls[8], lm[8];
    transpose(x, xt, 32, 8);
    for (int j = 0; j < 8; j++) {
        sum_x2[j] = 0;
    }
    for (int i = 0; i < 32; i++) {
        for (int j = 0; j < 8; j++) {
            sum_x2[j] += xt[i * 8 + j] * xt[i * 8 + j];
        }
    }
    for (int j = 0; j < 8; j++) {
        sum_x2[j] = sqrtf(sum_x2[j] / 32);
    }
    for (int i = 0; i < 32; i++) {
        for (int j = 0; j < 8; j++) {
            wt[i * 8 + j] = sum_x2[j] + ggml_fabsf(xt[i * 8 + j]);
        }
    }
    qkx2_search(xt, wt, 32, 8, nmax, rmin, nstep, 0, scale, the_min, is, lo);
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        max_scale = scale[j] > max_scale ? scale[j] : max_scale;
        max_min = the_min[j] > max_min ? the_min[j] : max_min;
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < 8; j++) {
        const uint8_t s = (uint8_t)ggml_nearest_int(inv_scale * scale[j]);
        const uint8_t m = (uint8_t)ggml_nearest_int(inv_min * the_min[j]);
        ls[j] = 63 < s ? 63 : s;
        lm[j] = 63 < m ? 63 : m;
    }
    const uint16_t d_bits = ggml_f32_to_f16(max_scale / 63.f);
    const uint16_t dmin_bits = ggml_f32_to_f16(max_min / 63.f);
    ggml_put_u16(head, d_bits);
    ggml_put_u16(head + 2, dmin_bits);
    for (int j = 0; j < 4; j++) {
        head[4 + j] = (uint8_t)(ls[j] | ((ls[j + 4] >> 4) << 6));
        head[8 + j] = (uint8_t)(lm[j] | ((lm[j + 4] >> 4) << 6));
        head[12 + j] = (uint8_t)((ls[j + 4] & 0xF) | ((lm[j + 4] & 0xF) << 4));
    }
    const float df = ggml_f16(d_bits), dminf = ggml_f16(dmin_bits);
    for (int j = 0; j < 8; j++) {
        d[j] = df * (float)ls[j];
        dm[j] = dminf * (float)lm[j];
    }
    final_levels(xt, d, dm, is, lo, 32, 8, nmax, L);
}

/* Q4_K: d, dmin, scales[12], qs[128] (qs[32 k + l] = L[64 k + l] | L[64 k + 32 + l] << 4). */
static VECTOR_CLONES ptrdiff_t enc_q4_k(const float *restrict src, uint8_t *restrict dst,
                                   ptrdiff_t blocks) {
    uint8_t L[256];
    for (ptrdiff_t b = 0; b < blocks; b++) {
        uint8_t *y = dst + 144 * b;
        k6_block(src + 256 * b, y, 15, -1.f, 20, L);
        for (int k = 0; k < 4; k++) {
            for (int l = 0; l < 32; l++) {
                y[16 + 32 * k + l] = (uint8_t)(L[l * 8 + 2 * k] | (L[l * 8 + 2 * k + 1] << 4));
            }
        }
    }
    return -1;
}

/* Q5_K: d, dmin, scales[12], qh[32], qs[128]: the low 4 bits as Q4_K's, the fifth of
 * L[64 k + l] at bit 2 k of qh[l], of L[64 k + 32 + l] at bit 2 k + 1. */
static VECTOR_CLONES ptrdiff_t enc_q5_k(const float *restrict src, uint8_t *restrict dst,
                                   ptrdiff_t blocks) {
    uint8_t L[256];
    for (ptrdiff_t b = 0; b < blocks; b++) {
        uint8_t *y = dst + 176 * b;
        k6_block(src + 256 * b, y, 31, -0.5f, 15, L);
        for (int l = 0; l < 32; l++) {
            unsigned high = 0;
            for (int k = 0; k < 8; k++) {
                high |= (unsigned)(L[l * 8 + k] >> 4) << k;
            }
            y[16 + l] = (uint8_t)high;
        }
        for (int k = 0; k < 4; k++) {
            for (int l = 0; l < 32; l++) {
                const int lo4 = L[l * 8 + 2 * k] & 0xF, hi4 = L[l * 8 + 2 * k + 1] & 0xF;
                y[48 + 32 * k + l] = (uint8_t)(lo4 | (hi4 << 4));
            }
        }
    }
    return -1;
}

const GGMLEncoder kiln_ggml_enc_k_min[] = {
    {10, 256, 84, enc_q2_k},
    {12, 256, 144, enc_q4_k},
    {13, 256, 176, enc_q5_k},
    {-1, 0, 0, NULL},
};
