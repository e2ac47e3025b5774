/* GGML encoders of the 2-bit grid types IQ2_XXS, IQ2_XS and IQ2_S: what ggml_quantize_chunk
 * writes for them with an importance matrix (and, for IQ2_S, without one), in ggml's
 * operation order (ggml.h).
 *
 * They are ggml's quantize_row_iq2_xxs_impl, _iq2_xs_impl and _iq2_s_impl
 * (kiln_np._quants.encode_iq2 says what they compute), block by block, over the tables
 * of ggml_quant_grid.h.  A group of 8 off the grid looks for its neighbour
 * (iq2_find_best_neighbour) with the terms w * diff * diff (diff = scale * (2 l + 1) -
 * xval) of each place and level computed once.
 *
 * Every encoder returns the first block on which ggml aborts: a neighbour search that
 * finds no distance below FLT_MAX (GGML_ASSERT), a level tuple off the grid at the end
 * (GGML_ABORT), or a scale that is a NaN (GGML_ASSERT(scale >= 0)). */
#include <float.h>
#include <math.h>

#include "ggml_quant_grid.h"

#define GROUP_MAX_EPS 1e-15f
#define GROUP_MAX_EPS_IQ2_S 1e-8f

/* iq2_find_best_neighbour's terms: q = 2 l + 1, diff = scale * q - xval. */
static ALWAYS_INLINE void iq2_terms(const float *xval, const float *waux, float scale,
                                    float terms[8][4]) {
    for (int i = 0; i < 8; i++) {
        for (int l = 0; l < 4; l++) {
            const float diff = scale * (float)(2 * l + 1) - xval[i];
            terms[i][l] = waux[i] * diff * diff;
        }
    }
}

/* The group's levels moved to its best neighbour at scale (iq2_find_best_neighbour): 0, or
 * -1 where none is found (ggml aborts). */
static int iq2_snap(const KilnGrid *g, int u, const float *xval, const float *waux, float scale,
                    int8_t *L) {
    float terms[8][4];
    iq2_terms(xval, waux, scale, terms);
    const int j = kiln_grid_best(g, u, terms);
    if (j < 0) {
        return -1;
    }
    for (int i = 0; i < 8; i++) {
        L[i] = (int8_t)g->levels[j][i];
    }
    return 0;
}

/* A group of 8 placed at id (levels 0 .. top), then moved to its best neighbour at scale
 * where it is off the grid: 1 on the grid, 0 moved, -1 where no neighbour is found (ggml
 * aborts). */
static int iq2_place(const KilnGrid *g, float id, float scale, int top, const float *xval,
                     const float *waux, int8_t *L) {
    for (int i = 0; i < 8; ++i) {
        L[i] = (int8_t)kiln_grid_level(id, xval[i], top);
    }
    const int u = kiln_grid_u(L);
    return g->kmap[u] >= 0 ? 1 : iq2_snap(g, u, xval, waux, scale, L);
}

/* ggml's u of 8 int8_t levels (as its `uint16_t u |= L << 2 i` computes it) -> grid index,
 * or -1 off the grid (and past the map, which ggml reads out of bounds). */
static int grid_index(const KilnGrid *g, const int8_t *L) {
    unsigned u = 0;
    for (int i = 0; i < 8; i++) {
        u |= (unsigned)(int)L[i] << (2 * i);
    }
    u &= 0xFFFFu;
    return u < KILN_KMAP_SIZE ? g->kmap[u] : -1;
}

/* xval = |x| with the signs of groups of 8 (bit i set for x[i] < 0); with parity (7 sign
 * bits stored), an odd count flips back the first value of least w * x * x. */
static void group_signs(const float *x, const float *w, int groups, int parity, float *xval,
                        uint8_t *signs) {
    for (int k = 0; k < groups; k++) {
        int nflip = 0;
        uint8_t s = 0;
        for (int i = 0; i < 8; i++) {
            if (x[8 * k + i] >= 0) {
                xval[8 * k + i] = x[8 * k + i];
            } else {
                xval[8 * k + i] = -x[8 * k + i];
                ++nflip;
                s |= (uint8_t)(1 << i);
            }
        }
        if (parity && nflip % 2) {
            int imin = 0;
            float min = w[8 * k] * x[8 * k] * x[8 * k];
            for (int i = 1; i < 8; i++) {
                const float ax = w[8 * k + i] * x[8 * k + i] * x[8 * k + i];
                if (ax < min) {
                    min = ax;
                    imin = i;
                }
            }
            xval[8 * k + imin] = -xval[8 * k + imin];
            s ^= (uint8_t)(1 << imin);
        }
        signs[k] = parity ? s & 127 : s;
    }
}

/* ggml's make_qp_quants (only IQ2_XXS calls it here: n 32, nmax 4). */
static float make_qp_quants(int n, int nmax, const float *x, uint8_t *L, const float *qw) {
    float max = 0;
    for (int i = 0; i < n; ++i) {
        max = max > x[i] ? max : x[i];
    }
    if (max < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = nmax / max;
    for (int i = 0; i < n; ++i) {
        L[i] = (uint8_t)ggml_nearest_int(iscale * x[i]);
    }
    float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; ++i) {
        const float diff = x[i] - scale * L[i];
        best_mse += qw[i] * diff * diff;
    }
    for (int is = -4; is <= 4; ++is) {
        if (is == 0) {
            continue;
        }
        const float iscale_is = (0.1f * is + nmax) / max;
        const float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; ++i) {
            int l = ggml_nearest_int(iscale_is * x[i]);
            l = l < nmax ? l : nmax;
            const float diff = x[i] - scale_is * l;
            mse += qw[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = ggml_nearest_int(iscale * x[i]);
        l = l < nmax ? l : nmax;
        L[i] = (uint8_t)l;
        sumlx += qw[i] * x[i] * l;
        suml2 += qw[i] * l * l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = qw[i];
            float slx = sumlx - w * x[i] * L[i];
            float sl2 = suml2 - w * L[i] * L[i];
            if (slx > 0 && sl2 > 0) {
                int new_l = ggml_nearest_int(x[i] * sl2 / slx);
                new_l = new_l < nmax ? new_l : nmax;
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) {
            break;
        }
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* sumqx, sumq2 of q = 2 L + 1 over n values, in order. */
static ALWAYS_INLINE void fit(int n, const float *w, const float *xval, const int8_t *L,
                              float *sumqx, float *sumq2) {
    float qx = 0, q2 = 0;
    for (int i = 0; i < n; i++) {
        const float q = 2 * L[i] + 1;
        qx += w[i] * xval[i] * q;
        q2 += w[i] * q * q;
    }
    *sumqx = qx;
    *sumq2 = q2;
}

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}


/* quantize_row_iq2_xxs_impl, one block: 0, or -1 where ggml aborts. */
static int iq2_xxs_block(const KilnGrid *g, const float *xbl, const float *qwbl, uint8_t *y) {
    enum { kMaxQ = 3 };
    float scales[8], weight_bl[256], xval[32], waux[32];
    int8_t L[32], Laux[32];
    uint8_t block_signs[4];
    uint32_t q2[16] = {0};
    float max_scale = 0;
    kiln_grid_weights(xbl, qwbl, 0, weight_bl);
    for (int ib = 0; ib < 8; ++ib) {
        const float *xb = xbl + 32 * ib, *weight = weight_bl + 32 * ib;
        for (int i = 0; i < 32; ++i) {
            waux[i] = sqrtf(weight[i]);
        }
        group_signs(xb, weight, 4, 1, xval, block_signs);
        float max = xval[0];
        for (int i = 1; i < 32; ++i) {
            max = max > xval[i] ? max : xval[i];
        }
        if (max < GROUP_MAX_EPS) {
            scales[ib] = 0;
            continue;
        }
        float scale = make_qp_quants(32, kMaxQ + 1, xval, (uint8_t *)L, weight);
        const float eff_max = scale * kMaxQ;
        if (eff_max <= 0) {
            scales[ib] = 0;
            continue;
        }
        float best = 0;
        for (int is = -6; is <= 6; ++is) {
            const float id = (2 * kMaxQ - 1 + is * 0.1f) / eff_max;
            const float this_scale = 1 / id;
            for (int k = 0; k < 4; ++k) {
                if (iq2_place(g, id, this_scale, kMaxQ - 1, xval + 8 * k, waux + 8 * k,
                              Laux + 8 * k) < 0) {
                    return -1;
                }
            }
            float sumqx, sumq2;
            fit(32, weight, xval, Laux, &sumqx, &sumq2);
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                scale = sumqx / sumq2;
                best = scale * sumqx;
                memcpy(L, Laux, 32);
            }
        }
        if (scale > 0) {
            const float id = 1 / scale;
            for (int k = 0; k < 4; ++k) {
                if (iq2_place(g, id, scale, kMaxQ - 1, xval + 8 * k, waux + 8 * k, L + 8 * k) < 0) {
                    return -1;
                }
            }
            float sumqx, sumq2;
            fit(32, weight, xval, L, &sumqx, &sumq2);
            if (sumq2 > 0) {
                scale = sumqx / sumq2;
            }
        }
        if (scale < 0) {
            scale = -scale;
            for (int k = 0; k < 4; ++k) {
                block_signs[k] = (uint8_t)(~block_signs[k] & 127);
            }
        }
        for (int k = 0; k < 4; ++k) {
            const int grid = grid_index(g, L + 8 * k);
            if (grid < 0) {
                return -1; /* GGML_ABORT: a point off the grid */
            }
            q2[2 * ib + 0] |= (uint32_t)grid << 8 * k;
            q2[2 * ib + 1] |= (uint32_t)block_signs[k] << 7 * k;
        }
        if (!(scale >= 0)) {
            return -1;
        }
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    memset(y, 0, 66);
    if (!max_scale) {
        return 0;
    }
    const float d = max_scale / 31;
    ggml_put_u16(y, ggml_f32_to_f16(d));
    const float id = 1 / d;
    for (int ib = 0; ib < 8; ++ib) {
        q2[2 * ib + 1] |= (uint32_t)kiln_grid_level(id, scales[ib], 15) << 28;
    }
    for (int i = 0; i < 16; i++) {
        put_u32(y + 2 + 4 * i, q2[i]);
    }
    return 0;
}

/* quantize_row_iq2_xs_impl and quantize_row_iq2_s_impl, one block, sub-blocks of 16:
 * 0, or -1 where ggml aborts.  The two differ in the weights without an importance
 * matrix (IQ2_S only), the signs (IQ2_XS keeps 7 bits), GROUP_MAX_EPS, and the layout. */
static int iq2_16_block(const KilnGrid *g, const float *xbl, const float *qwbl, int is_s,
                        uint8_t *y) {
    enum { kMaxQ = 3 };
    float scales[16], weight_bl[256], xval[16], waux[16];
    int8_t L[16], Laux[16];
    int is_on_grid[2], is_on_grid_aux[2];
    uint8_t block_signs[2];
    uint16_t q2[32] = {0};
    float max_scale = 0;
    memset(y, 0, is_s ? 82 : 74);
    kiln_grid_weights(xbl, qwbl, is_s, weight_bl);
    for (int ib = 0; ib < 16; ++ib) {
        const float *xb = xbl + 16 * ib, *weight = weight_bl + 16 * ib;
        for (int i = 0; i < 16; ++i) {
            waux[i] = sqrtf(weight[i]);
        }
        group_signs(xb, weight, 2, !is_s, xval, block_signs);
        float max = xval[0];
        for (int i = 1; i < 16; ++i) {
            max = max > xval[i] ? max : xval[i];
        }
        memset(L, 0, 16);
        if (max < (is_s ? GROUP_MAX_EPS_IQ2_S : GROUP_MAX_EPS)) {
            scales[ib] = 0;
            continue;
        }
        float best = 0;
        float scale = max / (2 * kMaxQ - 1);
        is_on_grid[0] = is_on_grid[1] = 1;
        for (int is = -9; is <= 9; ++is) {
            const float id = (2 * kMaxQ - 1 + is * 0.1f) / max;
            const float this_scale = 1 / id;
            for (int k = 0; k < 2; ++k) {
                const int on = iq2_place(g, id, this_scale, kMaxQ - 1, xval + 8 * k, waux + 8 * k,
                                         Laux + 8 * k);
                if (on < 0) {
                    return -1;
                }
                is_on_grid_aux[k] = on;
            }
            float sumqx, sumq2;
            fit(16, weight, xval, Laux, &sumqx, &sumq2);
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                scale = sumqx / sumq2;
                best = scale * sumqx;
                memcpy(L, Laux, 16);
                is_on_grid[0] = is_on_grid_aux[0];
                is_on_grid[1] = is_on_grid_aux[1];
            }
        }
        if ((!is_on_grid[0] || !is_on_grid[1]) && scale > 0) {
            const float id = 1 / scale;
            for (int k = 0; k < 2; ++k) {
                if (!is_on_grid[k] && iq2_place(g, id, scale, kMaxQ - 1, xval + 8 * k,
                                                waux + 8 * k, L + 8 * k) < 0) {
                    return -1;
                }
            }
            float sumqx, sumq2;
            fit(16, weight, xval, L, &sumqx, &sumq2);
            if (sumq2 > 0) {
                scale = sumqx / sumq2;
            }
        }
        if (scale < 0) {
            scale = -scale;
            for (int k = 0; k < 2; ++k) {
                block_signs[k] = (uint8_t)(is_s ? ~block_signs[k] : ~block_signs[k] & 127);
            }
        }
        for (int k = 0; k < 2; ++k) {
            const int grid = grid_index(g, L + 8 * k);
            if (grid < 0) {
                return -1; /* GGML_ABORT: a point off the grid */
            }
            const int i8 = 2 * ib + k;
            if (is_s) {
                y[2 + i8] = (uint8_t)(grid & 255);
                y[66 + i8 / 4] |= (uint8_t)((grid >> 8) << 2 * (i8 % 4));
                y[34 + i8] = block_signs[k];
            } else {
                q2[i8] = (uint16_t)(grid | (block_signs[k] << 9));
            }
        }
        if (!(scale >= 0)) {
            return -1;
        }
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (!max_scale) {
        return 0; /* IQ2_XS: all zero; IQ2_S keeps its indices and signs */
    }
    const float d = max_scale / 31;
    ggml_put_u16(y, ggml_f32_to_f16(is_s ? d * 0.9875f : d));
    const float id = 1 / d;
    uint8_t *sc = y + (is_s ? 74 : 66);
    for (int ib = 0; ib < 16; ++ib) {
        const int l = kiln_grid_level(id, scales[ib], 15);
        sc[ib / 2] |= (uint8_t)(ib % 2 ? l << 4 : l);
    }
    if (!is_s) {
        for (int i = 0; i < 32; i++) {
            ggml_put_u16(y + 2 + 2 * i, q2[i]);
        }
    }
    return 0;
}

static VECTOR_CLONES ptrdiff_t enc_iq2_xxs_w(const float *restrict src, const float *restrict qw,
                                             uint8_t *restrict dst, ptrdiff_t blocks) {
    const KilnGrid *g = kiln_grid(KILN_GRID_IQ2_XXS);
    for (ptrdiff_t b = 0; b < blocks; b++) {
        if (iq2_xxs_block(g, src + 256 * b, qw + 256 * b, dst + 66 * b) < 0) {
            return b;
        }
    }
    return -1;
}

static VECTOR_CLONES ptrdiff_t enc_iq2_xs_w(const float *restrict src, const float *restrict qw,
                                            uint8_t *restrict dst, ptrdiff_t blocks) {
    const KilnGrid *g = kiln_grid(KILN_GRID_IQ2_XS);
    for (ptrdiff_t b = 0; b < blocks; b++) {
        if (iq2_16_block(g, src + 256 * b, qw + 256 * b, 0, dst + 74 * b) < 0) {
            return b;
        }
    }
    return -1;
}

static VECTOR_CLONES ptrdiff_t enc_iq2_s_w(const float *restrict src, const float *restrict qw,
                                           uint8_t *restrict dst, ptrdiff_t blocks) {
    const KilnGrid *g = kiln_grid(KILN_GRID_IQ2_S);
    for (ptrdiff_t b = 0; b < blocks; b++) {
        if (iq2_16_block(g, src + 256 * b, qw ? qw + 256 * b : NULL, 1, dst + 82 * b) < 0) {
            return b;
        }
    }
    return -1;
}

static VECTOR_CLONES ptrdiff_t enc_iq2_s(const float *restrict src, uint8_t *restrict dst,
                                         ptrdiff_t blocks) {
    return enc_iq2_s_w(src, NULL, dst, blocks);
}


const GGMLEncoder kiln_ggml_enc_iq2[] = {
    {16, 256, 66, NULL, enc_iq2_xxs_w},
    {17, 256, 74, NULL, enc_iq2_xs_w},
    {22, 256, 82, enc_iq2_s, enc_iq2_s_w},
    {-1, 0, 0, NULL, NULL},
};
