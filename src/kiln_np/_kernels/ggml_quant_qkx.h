/* ggml's make_qkx2_quants (make_qkx3_quants with an importance matrix's weights: the
 * same arithmetic once the weights are given) over many groups at once, in ggml's
 * operation order: the scale-and-min search of Q4_1 and Q5_1 with an importance matrix
 * (ggml_quant_basic.c) and of Q2_K, Q4_K and Q5_K (ggml_quant_k_min.c).  The groups are
 * lanes, element-major (xt[i * NS + j]: element i of group j), so each loop over the
 * elements runs across the lanes at once, every lane keeping its own sums in ggml's
 * element order. */
#ifndef KILN_GGML_QUANT_QKX_H
#define KILN_GGML_QUANT_QKX_H

#include "ggml.h"

/* The loops over the lanes stay loops, for the vectoriser: fully unrolled, GCC would
 * vectorise the loop over the elements instead, as in-order sums. */
#if defined(__GNUC__) && !defined(__clang__)
#define QKX_LANES _Pragma("GCC unroll 1")
#else
#define QKX_LANES
#endif

/* MAX(0, MIN(nmax, nearest_int(v))) as ggml writes it. */
static ALWAYS_INLINE int clamp_level(float v, int nmax) {
    const int l = ggml_nearest_int(v);
    const int m = nmax < l ? nmax : l;
    return 0 > m ? 0 : m;
}

/* The group's lanes: LANE_MAX sub-blocks, as N * LANE_MAX = GROUP_ELEMENTS values. */
#define LANE_MAX 32
#define GROUP_ELEMENTS 1024

/* make_qkx2_quants (make_qkx3_quants) over the NS (<= LANE_MAX) sub-blocks of N elements at xt
 * (weights wt), lanes element-major, the candidates' factors rmin + rdelta * step + nmax.
 * Writes each sub-block's scale and the_min, and the iscale and min its levels come
 * from: clamp_level(is[j] * (x - lo[j])) (both 0 for a sub-block whose values are all
 * equal, whose levels are 0). */
static ALWAYS_INLINE void qkx2_search(const float *restrict xt, const float *restrict wt, int N,
                                      int NS, int nmax, float rmin, float rdelta, int nstep,
                                      int mad, float *restrict scale, float *restrict the_min,
                                      float *restrict is, float *restrict lo) {
    float hi[LANE_MAX], min[LANE_MAX], min0[LANE_MAX], sum_w[LANE_MAX], sum_x[LANE_MAX];
    float best[LANE_MAX], iscale[LANE_MAX], sum_l[LANE_MAX], sum_l2[LANE_MAX], sum_xl[LANE_MAX];
    float cur[LANE_MAX], det[LANE_MAX], this_scale[LANE_MAX], this_min[LANE_MAX];
    float la[GROUP_ELEMENTS];
    const float top = (float)nmax;
    QKX_LANES for (int j = 0; j < NS; j++) {
        min[j] = hi[j] = xt[j];
        sum_w[j] = wt[j];
        sum_x[j] = sum_w[j] * xt[j];
    }
    for (int i = 1; i < N; i++) {
        QKX_LANES for (int j = 0; j < NS; j++) {
            const float v = xt[i * NS + j], w = wt[i * NS + j];
            min[j] = v < min[j] ? v : min[j];
            hi[j] = v > hi[j] ? v : hi[j];
            sum_w[j] += w;
            sum_x[j] += w * v;
        }
    }
    QKX_LANES for (int j = 0; j < NS; j++) {
        min[j] = min[j] > 0 ? 0.0f : min[j];
        min0[j] = min[j];
        is[j] = top / (hi[j] - min[j]);
        scale[j] = 1 / is[j];
        lo[j] = min[j];
        best[j] = 0;
    }
    for (int i = 0; i < N; i++) {
        QKX_LANES for (int j = 0; j < NS; j++) {
            const float v = xt[i * NS + j];
            const float l = (float)clamp_level(is[j] * (v - min[j]), nmax);
            float diff = scale[j] * l + min[j] - v;
            diff = mad ? ggml_fabsf(diff) : diff * diff;
            best[j] += wt[i * NS + j] * diff;
        }
    }
    for (int step = 0; step <= nstep; step++) {
        const float factor = rmin + rdelta * (float)step + top;
        QKX_LANES for (int j = 0; j < NS; j++) {
            iscale[j] = factor / (hi[j] - min[j]);
            sum_l[j] = sum_l2[j] = sum_xl[j] = 0;
        }
        for (int i = 0; i < N; i++) {
            QKX_LANES for (int j = 0; j < NS; j++) {
                const float v = xt[i * NS + j], w = wt[i * NS + j];
                const float l = (float)clamp_level(iscale[j] * (v - min[j]), nmax);
                const float wl = w * l;
                la[i * NS + j] = l;
                sum_l[j] += wl;
                sum_l2[j] += wl * l;
                sum_xl[j] += wl * v;
            }
        }
        QKX_LANES for (int j = 0; j < NS; j++) {
            det[j] = sum_w[j] * sum_l2[j] - sum_l[j] * sum_l[j];
            const float s = (sum_w[j] * sum_xl[j] - sum_x[j] * sum_l[j]) / det[j];
            const float m = (sum_l2[j] * sum_x[j] - sum_l[j] * sum_xl[j]) / det[j];
            const int positive = m > 0;
            this_min[j] = ggml_pick(positive, 0.0f, m);
            this_scale[j] = ggml_pick(positive, sum_xl[j] / sum_l2[j], s);
            cur[j] = 0;
        }
        for (int i = 0; i < N; i++) {
            QKX_LANES for (int j = 0; j < NS; j++) {
                const float v = xt[i * NS + j];
                float diff = this_scale[j] * la[i * NS + j] + this_min[j] - v;
                diff = mad ? ggml_fabsf(diff) : diff * diff;
                cur[j] += wt[i * NS + j] * diff;
            }
        }
        QKX_LANES for (int j = 0; j < NS; j++) {
            const int better = (det[j] > 0) & (cur[j] < best[j]);
            best[j] = ggml_pick(better, cur[j], best[j]);
            scale[j] = ggml_pick(better, this_scale[j], scale[j]);
            is[j] = ggml_pick(better, iscale[j], is[j]);
            lo[j] = ggml_pick(better, min[j], lo[j]);
            min[j] = ggml_pick(better, this_min[j], min[j]);
        }
    }
    QKX_LANES for (int j = 0; j < NS; j++) {
        const int flat = hi[j] == min0[j];
        scale[j] = ggml_pick(flat, 0.0f, scale[j]);
        the_min[j] = ggml_pick(flat, -min0[j], -min[j]);
        is[j] = ggml_pick(flat, 0.0f, is[j]);
        lo[j] = ggml_pick(flat, 0.0f, lo[j]);
    }
}

#endif
