/* GGML encoders of the 1-bit grid types IQ1_S and IQ1_M: what ggml_quantize_chunk writes
 * for them with an importance matrix (and, for IQ1_M, without one), in ggml's operation
 * order (ggml.h).
 *
 * They are ggml's quantize_row_iq1_s_impl and _iq1_m_impl (kiln_np._quants.encode_iq1
 * says what they compute), block by block, over the 2048-point grid of
 * ggml_quant_grid.h.  ggml sorts a sub-block's values with qsort and iq1_sort_helper,
 * which compares values only: the order of equal values is the C library's, and glibc's
 * merge sort (llama.cpp's builds on Linux) keeps them in place; so does the stable
 * insertion sort here.
 *
 * Every encoder returns the first block on which ggml aborts: a scale that is a NaN
 * (GGML_ASSERT(scale >= 0)), or a group whose listed neighbours' distances are all at or
 * above FLT_MAX (ggml then searches the whole grid reading values past the group, up to
 * 2047 floats: undefined, so refused). */
#include <float.h>
#include <math.h>

#include "ggml_grids.h"
#include "ggml_quant_grid.h"

#define GROUP_MAX_EPS_IQ1_M 1e-7f
#define GROUP_MAX_EPS_IQ1_S 1e-12f

static const float x_p[3] = {-1 + IQ1S_DELTA, IQ1S_DELTA, 1 + IQ1S_DELTA};
static const float x_m[3] = {-1 - IQ1S_DELTA, -IQ1S_DELTA, 1 - IQ1S_DELTA}; /* IQ1M's: equal */

/* The order ggml's qsort(pairs, n, ..., iq1_sort_helper) leaves the values x in: by value,
 * equal values (-0.0 and 0.0 too) in their order, as glibc's merge sort leaves them. */
static void sort_stable(const float *x, int n, int *idx) {
    for (int j = 0; j < n; j++) {
        int i = j;
        while (i > 0 && x[idx[i - 1]] > x[j]) {
            idx[i] = idx[i - 1];
            i--;
        }
        idx[i] = j;
    }
}

/* iq1_find_best_neighbour2 for group levels L (u off the grid): the grid index, or -1
 * (ggml goes on to a search that reads past the group: refused). */
static int iq1_neighbour(const KilnGrid *g, int u, const float *xb, const float *w, float scale, const float *xx) {
    float terms[8][4];
    for (int i = 0; i < 8; i++) {
        for (int l = 0; l < 3; l++) {
            const float diff = scale * xx[l] - xb[i];
            terms[i][l] = w[i] * diff * diff;
        }
        terms[i][3] = 0;
    }
    return kiln_grid_best(g, u, terms);
}

/* The grid indices of the groups of a sub-block with levels L, each group's values
 * xx[k]; whether all were on the grid; -1 where a search finds none. */
static int iq1_groups(const KilnGrid *g, int groups, const int8_t *L, const float *xb, const float *w, float scale,
                      const float *const *xx, uint16_t *index, int *all_on_grid) {
    *all_on_grid = 1;
    for (int k = 0; k < groups; k++) {
        const int u = kiln_grid_u(L + 8 * k);
        int grid = g->kmap[u];
        if (grid < 0) {
            *all_on_grid = 0;
            grid = iq1_neighbour(g, u, xb + 8 * k, w + 8 * k, scale, xx[k]);
            if (grid < 0) {
                return -1;
            }
        }
        index[k] = (uint16_t)grid;
    }
    return 0;
}

/* The sub-block's scale fitted again to its groups' grid points (ggml's !all_on_grid
 * branch): kept unless sumqx and sumq2 are both positive. */
static float iq1_refit(const KilnGrid *g, int groups, const uint16_t *index, const float *xb, const float *w,
                       const float *const *xx, float scale) {
    float sumqx = 0, sumq2 = 0;
    for (int k = 0; k < groups; k++) {
        const uint8_t *l = g->levels[index[k]];
        for (int j = 0; j < 8; j++) {
            const float q = xx[k][l[j]];
            sumqx += w[8 * k + j] * q * xb[8 * k + j];
            sumq2 += w[8 * k + j] * q * q;
        }
    }
    return sumqx > 0 && sumq2 > 0 ? sumqx / sumq2 : scale;
}

/* Levels of a sub-block of n from its sorted order: 0 before i1, 1 before i2, 2 after. */
static void split_levels(int n, const int *idx, int i1, int i2, int8_t *L) {
    for (int j = 0; j < n; ++j) {
        L[idx[j]] = (int8_t)(j < i1 ? 0 : j < i2 ? 1 : 2);
    }
}

/* quantize_row_iq1_s_impl, one block: 0, or -1 where ggml aborts. */
static VECTOR_CLONES int iq1_s_block(const KilnGrid *g, const float *xbl, const float *qwbl, uint8_t *y) {
    enum { block_size = 32 };
    float scales[8], weight_bl[256], sumx[block_size + 1], sumw[block_size + 1];
    int8_t L[block_size], shifts[8];
    int idx[block_size];
    uint16_t index[4], qh[8] = {0};
    float max_scale = 0;
    memset(y, 0, 50);
    kiln_grid_weights(xbl, qwbl, 1, weight_bl);
    for (int ib = 0; ib < 8; ++ib) {
        const float *xb = xbl + block_size * ib, *weight = weight_bl + block_size * ib;
        float max = ggml_fabsf(xb[0]);
        for (int i = 1; i < block_size; ++i) {
            max = max > ggml_fabsf(xb[i]) ? max : ggml_fabsf(xb[i]);
        }
        scales[ib] = 0;
        shifts[ib] = 1;
        if (max < GROUP_MAX_EPS_IQ1_S) {
            continue;
        }
        sort_stable(xb, block_size, idx);
        sumx[0] = sumw[0] = 0;
        for (int j = 0; j < block_size; ++j) {
            const int i = idx[j];
            sumx[j + 1] = sumx[j] + weight[i] * xb[i];
            sumw[j + 1] = sumw[j] + weight[i];
        }
        float best_score = -FLT_MAX, scale = max;
        int besti1 = -1, besti2 = -1, best_shift = 0;
        for (int i1 = 0; i1 <= block_size; ++i1) {
            /* every i2's scores first (vector lanes), then compared in ggml's order */
            float qx[2][block_size + 1], q2[2][block_size + 1];
            const float a = sumx[i1] - sumx[0], aw = sumw[i1] - sumw[0];
            for (int s = 0; s < 2; ++s) {
                const float *v = s == 0 ? x_p : x_m;
                for (int i2 = i1; i2 <= block_size; ++i2) {
                    qx[s][i2] = a * v[0] + (sumx[i2] - sumx[i1]) * v[1] +
                                (sumx[block_size] - sumx[i2]) * v[2];
                    q2[s][i2] = aw * v[0] * v[0] + (sumw[i2] - sumw[i1]) * v[1] * v[1] +
                                (sumw[block_size] - sumw[i2]) * v[2] * v[2];
                }
            }
            for (int i2 = i1; i2 <= block_size; ++i2) {
                for (int s = 0; s < 2; ++s) {
                    if (q2[s][i2] > 0 && qx[s][i2] * qx[s][i2] > best_score * q2[s][i2]) {
                        scale = qx[s][i2] / q2[s][i2];
                        best_score = scale * qx[s][i2];
                        besti1 = i1;
                        besti2 = i2;
                        best_shift = s == 0 ? 1 : -1;
                    }
                }
            }
        }
        if (besti1 < 0 || besti2 < 0 || best_shift == 0) {
            continue;
        }
        split_levels(block_size, idx, besti1, besti2, L);
        if (scale < 0) {
            for (int j = 0; j < block_size; ++j) {
                L[j] = (int8_t)(2 - L[j]);
            }
            scale = -scale;
            best_shift = -best_shift;
        }
        const float *xx = best_shift == 1 ? x_p : x_m;
        const float *const per_group[4] = {xx, xx, xx, xx};
        int all_on_grid;
        if (iq1_groups(g, 4, L, xb, weight, scale, per_group, index, &all_on_grid) < 0) {
            return -1;
        }
        if (!all_on_grid) {
            scale = iq1_refit(g, 4, index, xb, weight, per_group, scale);
        }
        uint16_t h = 0;
        for (int k = 0; k < 4; ++k) {
            y[2 + 4 * ib + k] = (uint8_t)(index[k] & 255);
            h |= (uint16_t)((index[k] >> 8) << 3 * k);
        }
        qh[ib] = h;
        if (!(scale >= 0)) {
            return -1;
        }
        scales[ib] = scale;
        shifts[ib] = (int8_t)best_shift;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (max_scale) {
        const float d = max_scale / 15;
        ggml_put_u16(y, ggml_f32_to_f16(d * 1.125f));
        const float id = 1 / d;
        for (int ib = 0; ib < 8; ++ib) {
            int l = kiln_grid_level(id, scales[ib], 7);
            if (shifts[ib] == -1) {
                l |= 8;
            }
            qh[ib] |= (uint16_t)(l << 12);
        }
    }
    for (int ib = 0; ib < 8; ++ib) {
        ggml_put_u16(y + 34 + 2 * ib, qh[ib]);
    }
    return 0;
}

/* quantize_row_iq1_m_impl, one block (qwbl NULL: no importance matrix): 0, or -1 where
 * ggml aborts. */
static VECTOR_CLONES int iq1_m_block(const KilnGrid *g, const float *xbl, const float *qwbl, uint8_t *y) {
    enum { block_size = 16 };
    static const uint8_t masks[4] = {0x00, 0x80, 0x08, 0x88};
    float scales[16], weight_bl[256];
    int8_t L[block_size], shifts[16];
    int idx[block_size];
    uint16_t index[2], sc[4] = {0};
    float max_scale = 0;
    uint8_t *qs = y, *qh = y + 32;
    memset(y, 0, 56);
    if (qwbl) {
        kiln_grid_weights(xbl, qwbl, 1, weight_bl);
    } else {
        for (int i = 0; i < 256; i++) {
            weight_bl[i] = xbl[i] * xbl[i];
        }
    }
    for (int ib = 0; ib < 16; ++ib) {
        const float *xb = xbl + block_size * ib, *weight = weight_bl + block_size * ib;
        float max = ggml_fabsf(xb[0]);
        for (int i = 1; i < block_size; ++i) {
            max = max > ggml_fabsf(xb[i]) ? max : ggml_fabsf(xb[i]);
        }
        scales[ib] = 0;
        shifts[ib] = 0;
        if (max < GROUP_MAX_EPS_IQ1_M) {
            continue;
        }
        sort_stable(xb, block_size, idx);
        float best_score = -FLT_MAX, scale = max;
        int besti1 = -1, besti2 = -1, best_k = -1;
        float px[2][block_size + 1], pw[2][block_size + 1];
        px[0][0] = px[1][0] = 0;
        pw[0][0] = pw[1][0] = 0;
        for (int j = 0; j < block_size; ++j) {
            const int i = idx[j];
            const int h = i < block_size / 2 ? 0 : 1;
            px[h][j + 1] = px[h][j] + weight[i] * xb[i];
            px[1 - h][j + 1] = px[1 - h][j];
            pw[h][j + 1] = pw[h][j] + weight[i];
            pw[1 - h][j + 1] = pw[1 - h][j];
        }
        const float txs[2] = {px[0][block_size], px[1][block_size]};
        const float tws[2] = {pw[0][block_size], pw[1][block_size]};
        const float p2 = x_p[2], m2 = x_m[2];
        const float cp1 = x_p[0] * x_p[0] - x_p[1] * x_p[1];
        const float cp2 = x_p[1] * x_p[1] - x_p[2] * x_p[2];
        const float cm1 = x_m[0] * x_m[0] - x_m[1] * x_m[1];
        const float cm2 = x_m[1] * x_m[1] - x_m[2] * x_m[2];
        for (int i1 = 0; i1 <= block_size; ++i1) {
            /* every i2's scores first (vector lanes), then compared in ggml's order */
            float sumqx[4][block_size + 1], sumq2[4][block_size + 1];
            for (int i2 = i1; i2 <= block_size; ++i2) {
                float qx_p[2], qx_m[2], q2_p[2], q2_m[2];
                for (int h = 0; h < 2; ++h) {
                    const float sx = px[h][i1] + px[h][i2];
                    qx_p[h] = txs[h] * p2 - sx;
                    qx_m[h] = txs[h] * m2 - sx;
                    q2_p[h] = tws[h] * p2 * p2 + pw[h][i1] * cp1 + pw[h][i2] * cp2;
                    q2_m[h] = tws[h] * m2 * m2 + pw[h][i1] * cm1 + pw[h][i2] * cm2;
                }
                sumqx[0][i2] = qx_p[0] + qx_p[1];
                sumqx[1][i2] = qx_p[0] + qx_m[1];
                sumqx[2][i2] = qx_m[0] + qx_p[1];
                sumqx[3][i2] = qx_m[0] + qx_m[1];
                sumq2[0][i2] = q2_p[0] + q2_p[1];
                sumq2[1][i2] = q2_p[0] + q2_m[1];
                sumq2[2][i2] = q2_m[0] + q2_p[1];
                sumq2[3][i2] = q2_m[0] + q2_m[1];
            }
            for (int i2 = i1; i2 <= block_size; ++i2) {
                for (int k = 0; k < 4; ++k) {
                    if (sumq2[k][i2] > 0 && sumqx[k][i2] * sumqx[k][i2] > best_score * sumq2[k][i2]) {
                        scale = sumqx[k][i2] / sumq2[k][i2];
                        best_score = scale * sumqx[k][i2];
                        besti1 = i1;
                        besti2 = i2;
                        best_k = k;
                    }
                }
            }
        }
        if (besti1 < 0 || besti2 < 0 || best_k < 0) {
            continue;
        }
        split_levels(block_size, idx, besti1, besti2, L);
        if (scale < 0) {
            for (int j = 0; j < block_size; ++j) {
                L[j] = (int8_t)(2 - L[j]);
            }
            scale = -scale;
            best_k = 3 - best_k;
        }
        const float *const per_group[2] = {best_k < 2 ? x_p : x_m, best_k % 2 == 0 ? x_p : x_m};
        int all_on_grid;
        if (iq1_groups(g, 2, L, xb, weight, scale, per_group, index, &all_on_grid) < 0) {
            return -1;
        }
        if (!all_on_grid) {
            scale = iq1_refit(g, 2, index, xb, weight, per_group, scale);
        }
        qs[2 * ib + 0] = (uint8_t)(index[0] & 255);
        qs[2 * ib + 1] = (uint8_t)(index[1] & 255);
        qh[ib] = (uint8_t)((index[0] >> 8) | ((index[1] >> 8) << 4));
        if (!(scale >= 0)) {
            return -1;
        }
        scales[ib] = scale;
        shifts[ib] = (int8_t)best_k;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (!max_scale) {
        return 0;
    }
    float d = max_scale / 15;
    const float id = 1 / d;
    float sumqx_f = 0, sumq2_f = 0;
    for (int ib = 0; ib < 16; ++ib) {
        const int l = kiln_grid_level(id, scales[ib], 7);
        sc[ib / 4] |= (uint16_t)(l << 3 * (ib % 4));
        qh[ib] |= masks[shifts[ib]];
        const float *xb = xbl + block_size * ib, *weight = weight_bl + block_size * ib;
        for (int k = 0; k < 2; ++k) {
            const float *xx = (k == 0 ? shifts[ib] < 2 : shifts[ib] % 2 == 0) ? x_p : x_m;
            const uint8_t *lv = g->levels[qs[2 * ib + k] + ((qh[ib] << (8 - 4 * k)) & 0x700)];
            for (int j = 0; j < 8; ++j) {
                const float w = weight[8 * k + j];
                const float q = xx[lv[j]] * (2 * l + 1);
                sumqx_f += w * q * xb[8 * k + j];
                sumq2_f += w * q * q;
            }
        }
    }
    if (sumq2_f > 0) {
        d = sumqx_f / sumq2_f;
    }
    const uint16_t s = ggml_f32_to_f16(d * 1.1125f);
    sc[0] |= (uint16_t)((s & 0x000f) << 12);
    sc[1] |= (uint16_t)((s & 0x00f0) << 8);
    sc[2] |= (uint16_t)((s & 0x0f00) << 4);
    sc[3] |= (uint16_t)(s & 0xf000);
    for (int i = 0; i < 4; i++) {
        ggml_put_u16(y + 48 + 2 * i, sc[i]);
    }
    return 0;
}

static VECTOR_CLONES ptrdiff_t enc_iq1_s_w(const float *restrict src, const float *restrict qw,
                                           uint8_t *restrict dst, ptrdiff_t blocks) {
    const KilnGrid *g = kiln_grid(KILN_GRID_IQ1);
    for (ptrdiff_t b = 0; b < blocks; b++) {
        if (iq1_s_block(g, src + 256 * b, qw + 256 * b, dst + 50 * b) < 0) {
            return b;
        }
    }
    return -1;
}

static VECTOR_CLONES ptrdiff_t enc_iq1_m_w(const float *restrict src, const float *restrict qw,
                                           uint8_t *restrict dst, ptrdiff_t blocks) {
    const KilnGrid *g = kiln_grid(KILN_GRID_IQ1);
    for (ptrdiff_t b = 0; b < blocks; b++) {
        if (iq1_m_block(g, src + 256 * b, qw ? qw + 256 * b : NULL, dst + 56 * b) < 0) {
            return b;
        }
    }
    return -1;
}

static VECTOR_CLONES ptrdiff_t enc_iq1_m(const float *restrict src, uint8_t *restrict dst,
                                         ptrdiff_t blocks) {
    return enc_iq1_m_w(src, NULL, dst, blocks);
}


const GGMLEncoder kiln_ggml_enc_iq1[] = {
    {19, 256, 50, NULL, enc_iq1_s_w},
    {29, 256, 56, enc_iq1_m, enc_iq1_m_w},
    {-1, 0, 0, NULL, NULL},
};
