/* GGML encoders of the k-quants with a scale and a min per sub-block (Q2_K, Q4_K, Q5_K):
 * ggml's quantize_row_q{2,4,5}_K_ref, and with an importance matrix its
 * quantize_row_q{2,4,5}_K_impl, in ggml's operation order (ggml.h).
 *
 * Every sub-block (16 values for Q2_K, 32 for Q4_K and Q5_K) gets its scale and min
 * from ggml's make_qkx2_quants (make_qkx3_quants with an importance matrix: the same
 * arithmetic once the weights are given, other constants): a first guess from its
 * range, then nstep + 1 candidate scales fitted by weighted least squares, each kept if
 * its weighted error is smaller (and the next candidate's levels use the min the best
 * one so far left).  Sub-blocks are independent, so the blocks of a group (two of Q2_K,
 * four of Q4_K or Q5_K: 32 sub-blocks) are transposed to element-major lanes,
 * xt[i * NS + j] = element i of sub-block j, and each loop over the elements i runs
 * across the NS = 32 lanes at once (the compiler vectorises the lane loops, and four
 * AVX2 vectors of independent sums hide the latency of each sum's additions), every
 * lane keeping its own sums in ggml's element order.  Instead of copying the levels of
 * every better candidate, a lane remembers the iscale and min that made them, and its
 * levels are computed from those once at the end, bit for bit the same.  A run's last
 * group, if short, is filled with blocks of zeros that are searched and not written.
 *
 * Without an importance matrix the block's scales and mins are quantized against the
 * largest of each.  With one, the weights are qw * sqrtf(sigma2 + x * x), sigma2 the
 * block's mean square (twice it for Q4_K and Q5_K: a statistic of the 256-block, never
 * of the row), and the scales and mins are quantized by make_qp_quants, weighted by
 * each sub-block's sum of weights: a short scalar search per block. */
#include "ggml.h"
#include "ggml_quant_qkx.h"

#include <math.h>

#define GROUP_MAX_EPS 1e-15f

/* The loops over the sub-blocks (lanes) stay loops, for the vectoriser: fully unrolled
 * (32 lanes), GCC would vectorise the loop over the elements instead, as in-order sums. */
#if defined(__GNUC__) && !defined(__clang__)
#define LANES _Pragma("GCC unroll 1")
#else
#define LANES
#endif

/* ggml's make_qp_quants(n, nmax, x, L, w): the n non-negative values x (a block's scales
 * or mins) as levels L (at most nmax; uint8_t, as ggml stores them, whose wrap ggml's
 * later passes read back) of the scale it returns, the fit weighted by w.  Nine trial
 * scales, then up to five passes moving one level at a time while the fit improves. */
static float qp_quants(int n, int nmax, const float *restrict x, uint8_t *restrict L,
                       const float *restrict w) {
    float max = 0;
    for (int i = 0; i < n; i++) {
        max = max > x[i] ? max : x[i];
    }
    if (max < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = (float)nmax / max;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)ggml_nearest_int(iscale * x[i]);
    }
    const float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; i++) {
        const float diff = x[i] - scale * (float)L[i];
        best_mse += w[i] * diff * diff;
    }
    for (int is = -4; is <= 4; is++) {
        if (is == 0) {
            continue;
        }
        const float iscale_is = (0.1f * (float)is + (float)nmax) / max;
        const float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; i++) {
            const int l = ggml_nearest_int(iscale_is * x[i]);
            const float diff = x[i] - scale_is * (float)(nmax < l ? nmax : l);
            mse += w[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = ggml_nearest_int(iscale * x[i]);
        l = nmax < l ? nmax : l;
        L[i] = (uint8_t)l;
        sumlx += w[i] * x[i] * (float)l;
        suml2 += w[i] * (float)l * (float)l;
    }
    for (int pass = 0; pass < 5; pass++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float slx = sumlx - w[i] * x[i] * (float)L[i];
            float sl2 = suml2 - w[i] * (float)L[i] * (float)L[i];
            if (slx > 0 && sl2 > 0) {
                int l = ggml_nearest_int(x[i] * sl2 / slx);
                l = nmax < l ? nmax : l;
                if (l != L[i]) {
                    slx += w[i] * x[i] * (float)l;
                    sl2 += w[i] * (float)l * (float)l;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)l;
                        sumlx = slx;
                        suml2 = sl2;
                        changed = 1;
                    }
                }
            }
        }
        if (!changed) {
            break;
        }
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* The NS sub-blocks of N values at x (one block), element-major, into lanes of xt that
 * are `stride` wide. */
static ALWAYS_INLINE void transpose(const float *restrict x, float *restrict xt, int N, int NS,
                                    int stride) {
    LANES for (int j = 0; j < NS; j++) {
        for (int i = 0; i < N; i++) {
            xt[i * stride + j] = x[N * j + i];
        }
    }
}

/* A run's next group of G blocks from x (qw: their weights, or NULL) with n of them
 * left: x itself, or the n blocks copied into pad and followed by blocks of zeros. */
static ALWAYS_INLINE const float *group_of(const float *restrict x, ptrdiff_t n, int G,
                                          float *restrict pad) {
    if (n >= G) {
        return x;
    }
    memcpy(pad, x, (size_t)n * 256 * sizeof(float));
    memset(pad + n * 256, 0, (size_t)(G - n) * 256 * sizeof(float));
    return pad;
}

/* The sums of squares of G blocks at x, each in ggml's order; the blocks' sums side by
 * side, so that their additions' latencies overlap. */
static ALWAYS_INLINE void sums_of_squares(const float *restrict x, int G, float *restrict sum) {
    for (int g = 0; g < G; g++) {
        sum[g] = 0;
    }
    for (int k = 0; k < 256; k++) {
        for (int g = 0; g < G; g++) {
            sum[g] += x[256 * g + k] * x[256 * g + k];
        }
    }
}

/* With an importance matrix: a block's values and ggml's weights into NS lanes of the
 * group (`stride` wide) from xt, wt, and each sub-block's sum of weights into sw:
 * w = qw * sqrtf(sigma2 + x * x); sums in ggml's order. */
static ALWAYS_INLINE void weigh(const float *restrict x, const float *restrict qw, float sigma2,
                                int N, int NS, int stride, float *restrict xt,
                                float *restrict wt, float *restrict sw) {
    float w[256];
    for (int k = 0; k < 256; k++) {
        w[k] = qw[k] * sqrtf(sigma2 + x[k] * x[k]);
    }
    transpose(x, xt, N, NS, stride);
    transpose(w, wt, N, NS, stride);
    LANES for (int j = 0; j < NS; j++) {
        sw[j] = 0;
    }
    for (int i = 0; i < N; i++) {
        LANES for (int j = 0; j < NS; j++) {
            sw[j] += wt[i * stride + j];
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
            const int redo = -(d[j] != 0);
            L[i * NS + j] = (uint8_t)((again & redo) | (found & ~redo));
        }
    }
}

/* Q2_K: scales[16] (4-bit scale | 4-bit min << 4), qs[64], d, dmin.  Two blocks a group:
 * block g's sub-block k is lane 16 g + k.  With an importance matrix (qw not NULL):
 * quantize_row_q2_K_impl. */
static ALWAYS_INLINE void q2_k_group(const float *restrict src, const float *restrict qw,
                                     ptrdiff_t n, uint8_t *restrict dst) {
    float xt[GROUP_ELEMENTS], wt[GROUP_ELEMENTS], sw[32], scale[32], the_min[32], is[32];
    float lo[32], d[32], dm[32], pad[2 * 256], wpad[2 * 256];
    uint8_t L[GROUP_ELEMENTS], sc[32];
    uint16_t d_bits[2], dmin_bits[2];
    const float *x = group_of(src, n, 2, pad);
    if (qw) {
        const float *w = group_of(qw, n, 2, wpad);
        float sum_x2[2];
        sums_of_squares(x, 2, sum_x2);
        for (int g = 0; g < 2; g++) { /* sigma2 = sumx2 / QK_K */
            weigh(x + 256 * g, w + 256 * g, sum_x2[g] / 256, 16, 16, 32, xt + 16 * g,
                  wt + 16 * g, sw + 16 * g);
        }
        qkx2_search(xt, wt, 16, 32, 3, -0.9f, 0.05f, 36, 0, scale, the_min, is, lo);
        for (int g = 0; g < 2; g++) {
            uint8_t ls[16], lm[16];
            const float dg = qp_quants(16, 15, scale + 16 * g, ls, sw + 16 * g);
            const float mg = qp_quants(16, 15, the_min + 16 * g, lm, sw + 16 * g);
            for (int j = 0; j < 16; j++) {
                sc[16 * g + j] = (uint8_t)(ls[j] | (lm[j] << 4));
            }
            d_bits[g] = ggml_f32_to_f16(dg);
            dmin_bits[g] = ggml_f32_to_f16(mg);
        }
    } else {
        for (int g = 0; g < 2; g++) {
            transpose(x + 256 * g, xt + 16 * g, 16, 16, 32);
        }
        for (int k = 0; k < GROUP_ELEMENTS / 2; k++) {
            wt[k] = ggml_fabsf(xt[k]);
        }
        qkx2_search(xt, wt, 16, 32, 3, -0.5f, 0.1f, 15, 1, scale, the_min, is, lo);
        for (int g = 0; g < 2; g++) {
            const float *sg = scale + 16 * g, *mg = the_min + 16 * g;
            uint8_t *scg = sc + 16 * g;
            float max_scale = 0, max_min = 0;
            for (int j = 0; j < 16; j++) {
                max_scale = sg[j] > max_scale ? sg[j] : max_scale;
                max_min = mg[j] > max_min ? mg[j] : max_min;
            }
            d_bits[g] = dmin_bits[g] = 0;
            if (max_scale > 0) {
                const float iscale = 15.f / max_scale;
                for (int j = 0; j < 16; j++) {
                    scg[j] = (uint8_t)ggml_nearest_int(iscale * sg[j]);
                }
                d_bits[g] = ggml_f32_to_f16(max_scale / 15.f);
            } else {
                memset(scg, 0, 16);
            }
            if (max_min > 0) {
                const float iscale = 15.f / max_min;
                for (int j = 0; j < 16; j++) {
                    scg[j] = (uint8_t)(scg[j] | ((unsigned)ggml_nearest_int(iscale * mg[j]) << 4));
                }
                dmin_bits[g] = ggml_f32_to_f16(max_min / 15.f);
            }
        }
    }
    for (int g = 0; g < 2; g++) {
        const float df = ggml_f16(d_bits[g]), dminf = ggml_f16(dmin_bits[g]);
        for (int j = 0; j < 16; j++) {
            d[16 * g + j] = df * (float)(sc[16 * g + j] & 0xF);
            dm[16 * g + j] = dminf * (float)(sc[16 * g + j] >> 4);
        }
    }
    final_levels(xt, d, dm, is, lo, 16, 32, 3, L);
    for (int g = 0; g < n && g < 2; g++) {
        uint8_t *y = dst + 84 * g;
        memcpy(y, sc + 16 * g, 16);
        /* qs[32 h + l] packs elements 128 h + 32 m + l (m = 0..3) at bits 2 m; element
         * e is in lane 16 g + e / 16 at row e % 16. */
        for (int h = 0; h < 2; h++) {
            for (int l = 0; l < 32; l++) {
                unsigned q = 0;
                for (int m = 0; m < 4; m++) {
                    const int e = 128 * h + 32 * m + l;
                    q |= (unsigned)L[(e % 16) * 32 + 16 * g + e / 16] << (2 * m);
                }
                y[16 + 32 * h + l] = (uint8_t)q;
            }
        }
        ggml_put_u16(y + 80, d_bits[g]);
        ggml_put_u16(y + 82, dmin_bits[g]);
    }
}

static VECTOR_CLONES ptrdiff_t enc_q2_k(const float *restrict src, uint8_t *restrict dst,
                                        ptrdiff_t blocks) {
    for (ptrdiff_t b = 0; b < blocks; b += 2) {
        q2_k_group(src + 256 * b, NULL, blocks - b, dst + 84 * b);
    }
    return -1;
}

static VECTOR_CLONES ptrdiff_t enc_q2_k_weighted(const float *restrict src,
                                                 const float *restrict qw,
                                                 uint8_t *restrict dst, ptrdiff_t blocks) {
    for (ptrdiff_t b = 0; b < blocks; b += 2) {
        q2_k_group(src + 256 * b, qw + 256 * b, blocks - b, dst + 84 * b);
    }
    return -1;
}

/* Q4_K (nmax 15) and Q5_K (31): d, dmin, the 6-bit scales and mins packed in 12 bytes as
 * get_scale_min_k4 reads them, then the quants (see below).  Four blocks a group: block
 * g's sub-block k is lane 8 g + k.  Without an importance matrix the search's weights
 * are av_x + |x| and the scales and mins are taken against the largest of each; with
 * one (qw not NULL), quantize_row_q{4,5}_K_impl: make_qp_quants, Q5_K capping its levels
 * at 63 and Q4_K storing them as they come.  Either way the requantization reads the
 * scales and mins back from the bytes. */
static ALWAYS_INLINE void k6_group(const float *restrict src, const float *restrict qw,
                                   ptrdiff_t n, int nmax, int block_bytes,
                                   uint8_t *restrict dst) {
    float xt[GROUP_ELEMENTS], wt[GROUP_ELEMENTS], sw[32], scale[32], the_min[32], is[32];
    float lo[32], d[32], dm[32], pad[4 * 256], wpad[4 * 256];
    uint8_t L[GROUP_ELEMENTS], ls[32], lm[32];
    uint16_t d_bits[4], dmin_bits[4];
    const float *x = group_of(src, n, 4, pad);
    if (qw) {
        const float *w = group_of(qw, n, 4, wpad);
        float sum_x2[4];
        sums_of_squares(x, 4, sum_x2);
        for (int g = 0; g < 4; g++) { /* sigma2 = 2 * sum_x2 / QK_K */
            weigh(x + 256 * g, w + 256 * g, 2 * sum_x2[g] / 256, 32, 8, 32, xt + 8 * g,
                  wt + 8 * g, sw + 8 * g);
        }
        qkx2_search(xt, wt, 32, 32, nmax, -0.9f, 0.05f, 36, 0, scale, the_min, is, lo);
        for (int g = 0; g < 4; g++) {
            const float dg = qp_quants(8, 63, scale + 8 * g, ls + 8 * g, sw + 8 * g);
            const float mg = qp_quants(8, 63, the_min + 8 * g, lm + 8 * g, sw + 8 * g);
            d_bits[g] = ggml_f32_to_f16(dg);
            dmin_bits[g] = ggml_f32_to_f16(mg);
        }
        for (int j = 0; nmax == 31 && j < 32; j++) {
            ls[j] = 63 < ls[j] ? 63 : ls[j];
            lm[j] = 63 < lm[j] ? 63 : lm[j];
        }
    } else {
        float sum_x2[32];
        for (int g = 0; g < 4; g++) {
            transpose(x + 256 * g, xt + 8 * g, 32, 8, 32);
        }
        LANES for (int j = 0; j < 32; j++) {
            sum_x2[j] = 0;
        }
        for (int i = 0; i < 32; i++) {
            LANES for (int j = 0; j < 32; j++) {
                sum_x2[j] += xt[i * 32 + j] * xt[i * 32 + j];
            }
        }
        for (int j = 0; j < 32; j++) {
            sum_x2[j] = sqrtf(sum_x2[j] / 32);
        }
        for (int i = 0; i < 32; i++) {
            LANES for (int j = 0; j < 32; j++) {
                wt[i * 32 + j] = sum_x2[j] + ggml_fabsf(xt[i * 32 + j]);
            }
        }
        const float rmin = nmax == 15 ? -1.f : -0.5f;
        qkx2_search(xt, wt, 32, 32, nmax, rmin, 0.1f, nmax == 15 ? 20 : 15, 0, scale, the_min,
                    is, lo);
        for (int g = 0; g < 4; g++) {
            const float *sg = scale + 8 * g, *mg = the_min + 8 * g;
            float max_scale = 0, max_min = 0;
            for (int j = 0; j < 8; j++) {
                max_scale = sg[j] > max_scale ? sg[j] : max_scale;
                max_min = mg[j] > max_min ? mg[j] : max_min;
            }
            const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
            const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
            for (int j = 0; j < 8; j++) {
                const uint8_t s = (uint8_t)ggml_nearest_int(inv_scale * sg[j]);
                const uint8_t m = (uint8_t)ggml_nearest_int(inv_min * mg[j]);
                ls[8 * g + j] = 63 < s ? 63 : s;
                lm[8 * g + j] = 63 < m ? 63 : m;
            }
            d_bits[g] = ggml_f32_to_f16(max_scale / 63.f);
            dmin_bits[g] = ggml_f32_to_f16(max_min / 63.f);
        }
    }
    uint8_t head[4][16];
    for (int g = 0; g < 4; g++) {
        const uint8_t *lsg = ls + 8 * g, *lmg = lm + 8 * g;
        uint8_t *q = head[g] + 4;
        ggml_put_u16(head[g], d_bits[g]);
        ggml_put_u16(head[g] + 2, dmin_bits[g]);
        for (int j = 0; j < 4; j++) {
            q[j] = (uint8_t)(lsg[j] | ((lsg[j + 4] >> 4) << 6));
            q[4 + j] = (uint8_t)(lmg[j] | ((lmg[j + 4] >> 4) << 6));
            q[8 + j] = (uint8_t)((lsg[j + 4] & 0xF) | ((lmg[j + 4] & 0xF) << 4));
        }
        const float df = ggml_f16(d_bits[g]), dminf = ggml_f16(dmin_bits[g]);
        for (int j = 0; j < 8; j++) {
            const int s = j < 4 ? q[j] & 63 : (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
            const int m = j < 4 ? q[j + 4] & 63 : (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
            d[8 * g + j] = df * (float)s;
            dm[8 * g + j] = dminf * (float)m;
        }
    }
    final_levels(xt, d, dm, is, lo, 32, 32, nmax, L);
    for (int g = 0; g < n && g < 4; g++) {
        /* element 32 k + l of block g is in lane 8 g + k at row l */
        const uint8_t *Lg = L + 8 * g;
        uint8_t *y = dst + block_bytes * g;
        memcpy(y, head[g], 16);
        if (nmax == 15) { /* qs[32 k + l] = L[64 k + l] | L[64 k + 32 + l] << 4 */
            for (int k = 0; k < 4; k++) {
                for (int l = 0; l < 32; l++) {
                    y[16 + 32 * k + l] =
                        (uint8_t)(Lg[l * 32 + 2 * k] | (Lg[l * 32 + 2 * k + 1] << 4));
                }
            }
        } else { /* qh[32], then qs[128] as Q4_K's low 4 bits; the fifth bit of
                  * L[64 k + l] at bit 2 k of qh[l], of L[64 k + 32 + l] at 2 k + 1 */
            for (int l = 0; l < 32; l++) {
                unsigned high = 0;
                for (int k = 0; k < 8; k++) {
                    high |= (unsigned)(Lg[l * 32 + k] >> 4) << k;
                }
                y[16 + l] = (uint8_t)high;
            }
            for (int k = 0; k < 4; k++) {
                for (int l = 0; l < 32; l++) {
                    const int lo4 = Lg[l * 32 + 2 * k] & 0xF, hi4 = Lg[l * 32 + 2 * k + 1] & 0xF;
                    y[48 + 32 * k + l] = (uint8_t)(lo4 | (hi4 << 4));
                }
            }
        }
    }
}

static VECTOR_CLONES ptrdiff_t enc_q4_k(const float *restrict src, uint8_t *restrict dst,
                                        ptrdiff_t blocks) {
    for (ptrdiff_t b = 0; b < blocks; b += 4) {
        k6_group(src + 256 * b, NULL, blocks - b, 15, 144, dst + 144 * b);
    }
    return -1;
}

static VECTOR_CLONES ptrdiff_t enc_q4_k_weighted(const float *restrict src,
                                                 const float *restrict qw,
                                                 uint8_t *restrict dst, ptrdiff_t blocks) {
    for (ptrdiff_t b = 0; b < blocks; b += 4) {
        k6_group(src + 256 * b, qw + 256 * b, blocks - b, 15, 144, dst + 144 * b);
    }
    return -1;
}

static VECTOR_CLONES ptrdiff_t enc_q5_k(const float *restrict src, uint8_t *restrict dst,
                                        ptrdiff_t blocks) {
    for (ptrdiff_t b = 0; b < blocks; b += 4) {
        k6_group(src + 256 * b, NULL, blocks - b, 31, 176, dst + 176 * b);
    }
    return -1;
}

static VECTOR_CLONES ptrdiff_t enc_q5_k_weighted(const float *restrict src,
                                                 const float *restrict qw,
                                                 uint8_t *restrict dst, ptrdiff_t blocks) {
    for (ptrdiff_t b = 0; b < blocks; b += 4) {
        k6_group(src + 256 * b, qw + 256 * b, blocks - b, 31, 176, dst + 176 * b);
    }
    return -1;
}

const GGMLEncoder kiln_ggml_enc_k_min[] = {
    {10, 256, 84, enc_q2_k, enc_q2_k_weighted},
    {12, 256, 144, enc_q4_k, enc_q4_k_weighted},
    {13, 256, 176, enc_q5_k, enc_q5_k_weighted},
    {-1, 0, 0, NULL, NULL},
};
