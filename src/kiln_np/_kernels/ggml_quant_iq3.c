/* GGML encoders of the 3-bit grid types IQ3_XXS and IQ3_S: what ggml_quantize_chunk writes
 * for them, without an importance matrix and with one, in ggml's operation order (ggml.h).
 *
 * That is ggml's quantize_row_iq3_xxs_impl(256, ...) and quantize_row_iq3_s_impl with
 * sub-blocks of 32, each over the tables iq3xs_init_impl builds for its grid
 * (kiln_np._quants.encode_iq3 says what they compute): the map of every level quadruple
 * u = l0 | l1 << 3 | l2 << 6 | l3 << 9 to its grid index, and the neighbour lists of the
 * quadruples off the grid (the grid points at the two (256 points, IQ3_XXS) or three (512,
 * IQ3_S) smallest squared distances, by distance, then index: the order of ggml's qsort).
 * One builder makes both grids' tables, each once, by the first call that needs them, under
 * pthread_once (InitOnceExecuteOnce on Windows).
 *
 * The eight sub-blocks of a block are the lanes of the search: each trial maps every lane's
 * 32 values to levels and takes every lane's sums in ggml's element order, branch-free,
 * so the compiler vectorises them; a group of 4 whose levels are off the grid looks for
 * its best neighbour on its own (iq3_find_best_neighbour: the first least weighted
 * distance below FLT_MAX).  The two types' searches differ in a few constants and steps
 * (IQ3_XXS tries 31 scales, not 19; skips sub-blocks below 1e-8, not only zero ones; starts
 * with every group on the grid and maps again only those off it; keeps an even count of
 * sign bits), so one search, inlined with `xxs` a constant, serves both; an importance
 * matrix only changes the weights (qw * sqrtf(sigma2 + x * x) for x * x).  Where ggml
 * aborts (GGML_ASSERT: a search that finds no distance below FLT_MAX, or a final scale
 * that is a NaN, on weighted squares that overflow float32), the block is reported and
 * nothing of it written. */
#include <float.h>
#include <math.h>

#include "ggml.h"
#include "ggml_grids.h"

#if defined(_WIN32)
#include <windows.h>
#else
#include <pthread.h>
#endif

#define SUB 32               /* values per sub-block (IQ3S_BLOCK_SIZE) */
#define LANES 8              /* sub-blocks per block */
#define KMAXQ 8              /* levels 0 .. 7 */
#define XXS_NEIGHBOURS 18985 /* the neighbour lists' total length, for the 256-point grid */
#define XXS_LONGEST 36       /* and the longest list's */
#define S_NEIGHBOURS 24733   /* the same for the 512-point grid */
#define S_LONGEST 38
#define LONGEST 38 /* of both */

/* One grid's tables, as iq3xs_init_impl(size) builds them. */
typedef struct {
    const uint8_t (*decoded)[4]; /* the decoders' grid (ggml-common.h): each point's values */
    int size;                    /* its points */
    int nwant;                   /* how many smallest distances a neighbour list takes */
    int offset, step;            /* a decoded value's level: (value - offset) / step */
    int capacity, longest;       /* the lists' total and longest length: their bounds */
    uint16_t *list;              /* every neighbour list, one after the other */
    float *q[4];                 /* value i (2 l + 1) of each listed point, 7 spare */
    int16_t grid_of[4096];       /* a quadruple's grid index, or -1 */
    uint16_t start[4096];        /* where its neighbour list starts in list */
    uint8_t count[4096];         /* and its length (0 on the grid) */
    float value[512][4];         /* each grid point's values 2 l + 1 */
} Grid;

static uint16_t xxs_list[XXS_NEIGHBOURS], s_list[S_NEIGHBOURS];
static float xxs_q[4][XXS_NEIGHBOURS + 7], s_q[4][S_NEIGHBOURS + 7];

/* iq3xxs_grid holds 8 l + 4 (62 for level 7), iq3s_grid 2 l + 1. */
static Grid grid_xxs = {.decoded = iq3xxs_grid, .size = 256, .nwant = 2, .offset = 4,
                        .step = 8, .capacity = XXS_NEIGHBOURS, .longest = XXS_LONGEST,
                        .list = xxs_list, .q = {xxs_q[0], xxs_q[1], xxs_q[2], xxs_q[3]}};
static Grid grid_s = {.decoded = iq3s_grid, .size = 512, .nwant = 3, .offset = 1, .step = 2,
                      .capacity = S_NEIGHBOURS, .longest = S_LONGEST, .list = s_list,
                      .q = {s_q[0], s_q[1], s_q[2], s_q[3]}};

/* iq3xs_init_impl(g->size): the map, then per quadruple off the grid the grid points at its
 * nwant smallest distances, each distance's points in index order. */
static void build(Grid *g) {
    for (int u = 0; u < 4096; u++) {
        g->grid_of[u] = -1;
    }
    for (int j = 0; j < g->size; j++) {
        int u = 0;
        for (int i = 0; i < 4; i++) {
            const int l = (g->decoded[j][i] - g->offset) / g->step;
            g->value[j][i] = (float)(2 * l + 1);
            u |= l << (3 * i);
        }
        g->grid_of[u] = (int16_t)j;
    }
    const int last = g->nwant - 1;
    int total = 0;
    for (int u = 0; u < 4096; u++) {
        g->start[u] = (uint16_t)total;
        g->count[u] = 0;
        if (g->grid_of[u] >= 0) {
            continue;
        }
        int d2[512];
        int nearest[3] = {INT32_MAX, INT32_MAX, INT32_MAX}; /* distinct, ascending */
        for (int j = 0; j < g->size; j++) {
            int d = 0;
            for (int i = 0; i < 4; i++) {
                const int diff = (int)g->value[j][i] - (2 * ((u >> (3 * i)) & 7) + 1);
                d += diff * diff;
            }
            d2[j] = d;
            int seen = 0;
            for (int m = 0; m <= last; m++) {
                seen |= d == nearest[m];
            }
            if (d < nearest[last] && !seen) {
                nearest[last] = d;
                for (int m = last; m > 0 && nearest[m] < nearest[m - 1]; m--) {
                    const int t = nearest[m];
                    nearest[m] = nearest[m - 1];
                    nearest[m - 1] = t;
                }
            }
        }
        for (int m = 0; m <= last; m++) {
            for (int j = 0; j < g->size; j++) { /* the bounds hold for these grids: memory safety */
                if (d2[j] == nearest[m] && total < g->capacity &&
                    total - g->start[u] < g->longest) {
                    for (int i = 0; i < 4; i++) {
                        g->q[i][total] = g->value[j][i];
                    }
                    g->list[total++] = (uint16_t)j;
                }
            }
        }
        g->count[u] = (uint8_t)(total - g->start[u]);
    }
}

#if defined(_WIN32)
static INIT_ONCE xxs_once = INIT_ONCE_STATIC_INIT, s_once = INIT_ONCE_STATIC_INIT;
static BOOL CALLBACK build_once(PINIT_ONCE once, PVOID grid, PVOID *context) {
    (void)once;
    (void)context;
    build(grid);
    return TRUE;
}
static void ready(Grid *g) {
    InitOnceExecuteOnce(g == &grid_xxs ? &xxs_once : &s_once, build_once, g, NULL);
}
#else
static pthread_once_t xxs_once = PTHREAD_ONCE_INIT, s_once = PTHREAD_ONCE_INIT;
static void build_xxs(void) { build(&grid_xxs); }
static void build_s(void) { build(&grid_s); }
static void ready(Grid *g) {
    pthread_once(g == &grid_xxs ? &xxs_once : &s_once, g == &grid_xxs ? build_xxs : build_s);
}
#endif

/* The elements' weights in the searches: with no importance matrix (qw NULL), ggml's x * x;
 * with one, qw * sqrtf(sigma2 + x * x), sigma2 = 2 * sumx2 / 256 of the block. */
static ALWAYS_INLINE void weights(const float *restrict x, const float *restrict qw,
                                  float *restrict w) {
    if (qw == NULL) {
        for (int i = 0; i < 256; i++) {
            w[i] = x[i] * x[i];
        }
        return;
    }
    float sumx2 = 0.0f;
    for (int i = 0; i < 256; i++) {
        sumx2 += x[i] * x[i];
    }
    const float sigma2 = 2 * sumx2 / 256;
    for (int i = 0; i < 256; i++) {
        w[i] = qw[i] * sqrtf(sigma2 + x[i] * x[i]);
    }
}

/* iq3_find_best_neighbour for quadruple u off the grid: the neighbour with the least
 * sum of wa * (scale * q - xv)**2 below FLT_MAX, the first of equals (xv, wa: the group's
 * 4 values, LANES apart); -1 where none is below FLT_MAX (ggml's GGML_ASSERT fires).  The
 * distances, each summed in ggml's order, are computed for all candidates at once (vector
 * lanes), then compared in the list's order. */
static VECTOR_CLONES int best_neighbour(const Grid *g, int u, const float *xv, const float *wa,
                                        float scale) {
    const int start = g->start[u], n = g->count[u];
    const float *q0 = g->q[0] + start, *q1 = g->q[1] + start, *q2 = g->q[2] + start,
                *q3 = g->q[3] + start;
    const float x0 = xv[0], x1 = xv[LANES], x2 = xv[2 * LANES], x3 = xv[3 * LANES];
    const float w0 = wa[0], w1 = wa[LANES], w2 = wa[2 * LANES], w3 = wa[3 * LANES];
    float d2[(LONGEST + 7) & ~7];
    for (int c = 0; c < ((n + 7) & ~7); c++) { /* whole vectors: past n, unused values */
        const float e0 = scale * q0[c] - x0, e1 = scale * q1[c] - x1;
        const float e2 = scale * q2[c] - x2, e3 = scale * q3[c] - x3;
        d2[c] = (((0.0f + w0 * e0 * e0) + w1 * e1 * e1) + w2 * e2 * e2) + w3 * e3 * e3;
    }
    float best = FLT_MAX;
    int found = -1;
    for (int c = 0; c < n; c++) {
        const int better = d2[c] < best;
        best = better ? d2[c] : best;
        found = better ? c : found;
    }
    return found < 0 ? -1 : g->list[start + found];
}

/* Map lane k's values by id[k] (levels nearest_int(0.5 (id xv - 1)) in 0 .. 7, values
 * q = 2 l + 1), then put the groups of lane k that bit mask groups[k] marks on the grid
 * (off it: the best neighbour at scale[k], whose values replace the group's): grid index
 * gi[k][g] and on[k][g], whether the levels were on the grid; a lane whose search finds
 * no neighbour is marked in *aborted. */
static ALWAYS_INLINE void onto_grid(const Grid *grid, const float xv[SUB][LANES],
                                    const float wa[SUB][LANES], const float id[LANES],
                                    const float scale[LANES], const unsigned groups[LANES],
                                    int gi[LANES][8], int on[LANES][8], float q[SUB][LANES],
                                    unsigned *aborted) {
    int l[SUB][LANES];
    for (int j = 0; j < SUB; j++) {
        for (int k = 0; k < LANES; k++) {
            const int v = ggml_nearest_int(0.5f * (id[k] * xv[j][k] - 1.0f));
            l[j][k] = v < 0 ? 0 : v > KMAXQ - 1 ? KMAXQ - 1 : v;
            q[j][k] = (float)(2 * l[j][k] + 1);
        }
    }
    for (int k = 0; k < LANES; k++) {
        for (int g = 0; g < 8; g++) {
            if (!(groups[k] >> g & 1u)) {
                continue;
            }
            const int u = l[4 * g][k] | (l[4 * g + 1][k] << 3) | (l[4 * g + 2][k] << 6) |
                          (l[4 * g + 3][k] << 9);
            int index = grid->grid_of[u];
            on[k][g] = index >= 0;
            if (index < 0) {
                index = best_neighbour(grid, u, &xv[4 * g][k], &wa[4 * g][k], scale[k]);
                if (index < 0) {
                    *aborted |= 1u << k;
                    index = 0;
                }
                for (int i = 0; i < 4; i++) {
                    q[4 * g + i][k] = grid->value[index][i];
                }
            }
            gi[k][g] = index;
        }
    }
}

/* The values of grid points gi of the lanes in `lanes`, into q. */
static ALWAYS_INLINE void grid_values(const Grid *grid, const int gi[LANES][8], unsigned lanes,
                                      float q[SUB][LANES]) {
    for (int k = 0; k < LANES; k++) {
        if (!(lanes >> k & 1u)) {
            continue;
        }
        for (int g = 0; g < 8; g++) {
            for (int i = 0; i < 4; i++) {
                q[4 * g + i][k] = grid->value[gi[k][g]][i];
            }
        }
    }
}

/* sumqx, sumq2 of every lane (q: grid values), in ggml's element order. */
static ALWAYS_INLINE void sums(const float w[SUB][LANES], const float xv[SUB][LANES],
                               const float q[SUB][LANES], float sumqx[LANES],
                               float sumq2[LANES]) {
    float qx[LANES] = {0}, q2[LANES] = {0};
    for (int j = 0; j < SUB; j++) {
        for (int k = 0; k < LANES; k++) {
            qx[k] += w[j][k] * xv[j][k] * q[j][k];
            q2[k] += w[j][k] * q[j][k] * q[j][k];
        }
    }
    for (int k = 0; k < LANES; k++) {
        sumqx[k] = qx[k];
        sumq2[k] = q2[k];
    }
}

/* IQ3_XXS's signs: 7 bits per 8 values and an even count of them.  A group of 8 with an odd
 * count has the bit of its value of least w x x (the first of equals) flipped and that
 * value's magnitude negated. */
static ALWAYS_INLINE void even_signs(const float *restrict x, const float *restrict wb,
                                     float xv[SUB][LANES], uint8_t signs[LANES][4]) {
    for (int k = 0; k < LANES; k++) {
        for (int m = 0; m < 4; m++) {
            unsigned odd = signs[k][m];
            odd ^= odd >> 4;
            odd ^= odd >> 2;
            odd ^= odd >> 1;
            if (odd & 1u) {
                const float *xg = x + SUB * k + 8 * m, *wg = wb + SUB * k + 8 * m;
                int imin = 0;
                float least = wg[0] * xg[0] * xg[0];
                for (int i = 1; i < 8; i++) {
                    const float ax = wg[i] * xg[i] * xg[i];
                    if (ax < least) {
                        least = ax;
                        imin = i;
                    }
                }
                xv[8 * m + imin][k] = -xv[8 * m + imin][k];
                signs[k][m] ^= (uint8_t)(1u << imin);
            }
            signs[k][m] &= 127;
        }
    }
}

/* The search of one block (x; qw its importance weights, or NULL), its sub-blocks side by
 * side: the lanes it searches (*live: the largest magnitude not 0, IQ3_XXS: not below
 * 1e-8), each one's scale (not yet made positive), grid indices and sign bytes; returns
 * the lanes on which ggml aborts. */
static ALWAYS_INLINE unsigned search(const Grid *grid, const int xxs, const float *restrict x,
                                     const float *restrict qw, float scale[LANES],
                                     int gi[LANES][8], uint8_t signs[LANES][4],
                                     unsigned *live) {
    float wb[256];
    weights(x, qw, wb);
    float xv[SUB][LANES], w[SUB][LANES], wa[SUB][LANES], big[LANES];
    memset(signs, 0, LANES * 4);
    for (int j = 0; j < SUB; j++) {
        for (int k = 0; k < LANES; k++) {
            const float v = x[SUB * k + j];
            const int negative = !(v >= 0.0f);
            xv[j][k] = negative ? -v : v;
            w[j][k] = wb[SUB * k + j];
            wa[j][k] = sqrtf(w[j][k]);
            signs[k][j / 8] |= (uint8_t)(negative << (j % 8));
        }
    }
    if (xxs) {
        even_signs(x, wb, xv, signs);
    }
    for (int k = 0; k < LANES; k++) { /* ggml's max = xval[0]; max = MAX(max, xval[i]) */
        big[k] = xv[0][k];
    }
    for (int j = 1; j < SUB; j++) {
        for (int k = 0; k < LANES; k++) {
            big[k] = big[k] > xv[j][k] ? big[k] : xv[j][k];
        }
    }
    unsigned lanes = 0, aborted = 0, groups[LANES];
    float best[LANES], sumqx[LANES], sumq2[LANES], id[LANES], at[LANES], q[SUB][LANES];
    int on[LANES][8], tgi[LANES][8], ton[LANES][8];
    for (int k = 0; k < LANES; k++) {
        const int searched = xxs ? !(big[k] < 1e-8f) : big[k] != 0.0f;
        lanes |= (unsigned)searched << k;
        groups[k] = searched ? 0xFFu : 0u;
        scale[k] = big[k] / (float)(2 * KMAXQ - 1);
        best[k] = 0.0f;
        for (int g = 0; g < 8; g++) {
            gi[k][g] = 0; /* levels 0: grid point 0 of both grids */
            on[k][g] = xxs;
        }
    }
    const int trials = xxs ? 15 : 9;
    for (int is = -trials; is <= trials; is++) {
        for (int k = 0; k < LANES; k++) {
            id[k] = (float)(2 * KMAXQ - 1) + (float)is * 0.2f;
            id[k] = id[k] / big[k];
            at[k] = 1.0f / id[k];
        }
        onto_grid(grid, xv, wa, id, at, groups, tgi, ton, q, &aborted);
        sums(w, xv, q, sumqx, sumq2);
        for (int k = 0; k < LANES; k++) {
            if ((lanes >> k & 1u) && sumq2[k] > 0.0f &&
                sumqx[k] * sumqx[k] > best[k] * sumq2[k]) {
                scale[k] = sumqx[k] / sumq2[k];
                best[k] = scale[k] * sumqx[k];
                for (int g = 0; g < 8; g++) {
                    gi[k][g] = tgi[k][g];
                    on[k][g] = ton[k][g];
                }
            }
        }
    }
    unsigned again = 0;
    for (int k = 0; k < LANES; k++) {
        unsigned off = 0;
        for (int g = 0; g < 8; g++) {
            off |= (unsigned)!on[k][g] << g;
        }
        const int redo = (lanes >> k & 1u) && off && scale[k] > 0.0f;
        again |= (unsigned)redo << k;
        groups[k] = redo ? (xxs ? off : 0xFFu) : 0u; /* IQ3_XXS: only the groups off it */
        id[k] = redo ? 1.0f / scale[k] : 0.0f;
    }
    if (again) {
        onto_grid(grid, xv, wa, id, scale, groups, tgi, ton, q, &aborted);
        for (int k = 0; k < LANES; k++) {
            for (int g = 0; g < 8; g++) {
                gi[k][g] = groups[k] >> g & 1u ? tgi[k][g] : gi[k][g];
            }
        }
        grid_values(grid, gi, again, q);
        sums(w, xv, q, sumqx, sumq2);
        for (int k = 0; k < LANES; k++) {
            if (again >> k & 1u) {
                scale[k] = sumq2[k] > 0.0f ? sumqx[k] / sumq2[k] : scale[k];
            }
        }
    }
    for (int k = 0; k < LANES; k++) { /* ggml's GGML_ASSERT(scale >= 0): a NaN */
        aborted |= (unsigned)((lanes >> k & 1u) && isnan(scale[k])) << k;
    }
    *live = lanes;
    return aborted;
}

/* A scale's 4-bit nearest_int(0.5 (scale / d - 1)) in 0 .. 15 (inv = 1 / d). */
static ALWAYS_INLINE unsigned nibble(float inv, float scale) {
    const int l = ggml_nearest_int(0.5f * (inv * scale - 1.0f));
    return l < 0 ? 0u : l > 15 ? 15u : (unsigned)l;
}

/* IQ3_XXS (98 bytes): f16 d, 64 grid indices, per sub-block a little-endian uint32 of its
 * four 7-bit sign groups and its scale nibble in bits 28 .. 31; all zero where every
 * scale is 0. */
static ALWAYS_INLINE void put_iq3_xxs(uint8_t *restrict y, float scale[LANES],
                                      const int gi[LANES][8], uint8_t signs[LANES][4],
                                      unsigned live) {
    memset(y, 0, 98);
    uint32_t words[LANES] = {0};
    float max_scale = 0.0f;
    for (int k = 0; k < LANES; k++) {
        if (!(live >> k & 1u)) {
            scale[k] = 0.0f;
            continue;
        }
        if (scale[k] < 0.0f) { /* an xval negated for the signs' parity weighed most */
            scale[k] = -scale[k];
            for (int m = 0; m < 4; m++) {
                signs[k][m] = (uint8_t)(~signs[k][m] & 127);
            }
        }
        for (int g = 0; g < 8; g++) {
            y[2 + 8 * k + g] = (uint8_t)gi[k][g];
        }
        words[k] = (uint32_t)signs[k][0] | (uint32_t)signs[k][1] << 7 |
                   (uint32_t)signs[k][2] << 14 | (uint32_t)signs[k][3] << 21;
        max_scale = max_scale > scale[k] ? max_scale : scale[k];
    }
    if (max_scale == 0.0f) {
        memset(y, 0, 98);
        return;
    }
    const float d = max_scale / 31.0f;
    ggml_put_u16(y, ggml_f32_to_f16(d * 1.0125f));
    const float inv = 1.0f / d;
    for (int k = 0; k < LANES; k++) {
        const uint32_t word = words[k] | nibble(inv, scale[k]) << 28;
        for (int b = 0; b < 4; b++) {
            y[66 + 4 * k + b] = (uint8_t)(word >> (8 * b));
        }
    }
}

/* IQ3_S (110 bytes): f16 d, qs[64], qh[8], signs[32], scales[4]. */
static ALWAYS_INLINE void put_iq3_s(uint8_t *restrict y, float scale[LANES],
                                    const int gi[LANES][8], uint8_t signs[LANES][4],
                                    unsigned live) {
    memset(y, 0, 110);
    uint8_t *qs = y + 2, *qh = y + 66, *sg = y + 74, *scales = y + 106;
    float max_scale = 0.0f;
    for (int k = 0, slot = 0; k < LANES; k++) {
        if (!(live >> k & 1u)) {
            scale[k] = 0.0f; /* ggml's `continue`: qs and signs stay where they are */
            continue;
        }
        if (scale[k] < 0.0f) { /* never: xval and the weights are not negative */
            scale[k] = -scale[k];
            for (int m = 0; m < 4; m++) {
                signs[k][m] = (uint8_t)~signs[k][m];
            }
        }
        for (int g = 0; g < 8; g++) {
            qs[8 * slot + g] = (uint8_t)(gi[k][g] & 255);
            qh[k] |= (uint8_t)((gi[k][g] >> 8) << g);
        }
        memcpy(sg + 4 * slot, signs[k], 4);
        slot++;
        max_scale = max_scale > scale[k] ? max_scale : scale[k];
    }
    if (max_scale == 0.0f) {
        return;
    }
    const float d = max_scale / 31.0f;
    ggml_put_u16(y, ggml_f32_to_f16(d * 1.033f));
    const float inv = 1.0f / d;
    for (int k = 0; k < LANES; k += 2) {
        scales[k / 2] = (uint8_t)(nibble(inv, scale[k]) | nibble(inv, scale[k + 1]) << 4);
    }
}

/* `blocks` blocks of IQ3_XXS (xxs) or IQ3_S, with the importance weights qw (NULL: none):
 * -1, or the first block ggml aborts on. */
static ALWAYS_INLINE ptrdiff_t encode(const int xxs, const float *restrict src,
                                      const float *restrict qw, uint8_t *restrict dst,
                                      ptrdiff_t blocks) {
    Grid *grid = xxs ? &grid_xxs : &grid_s;
    ready(grid);
    for (ptrdiff_t b = 0; b < blocks; b++) {
        float scale[LANES];
        int gi[LANES][8];
        uint8_t signs[LANES][4];
        unsigned live;
        if (search(grid, xxs, src + 256 * b, qw == NULL ? NULL : qw + 256 * b, scale, gi, signs,
                   &live)) {
            return b;
        }
        if (xxs) {
            put_iq3_xxs(dst + 98 * b, scale, gi, signs, live);
        } else {
            put_iq3_s(dst + 110 * b, scale, gi, signs, live);
        }
    }
    return -1;
}

static VECTOR_CLONES ptrdiff_t enc_iq3_xxs(const float *restrict src, uint8_t *restrict dst,
                                           ptrdiff_t blocks) {
    return encode(1, src, NULL, dst, blocks);
}

static VECTOR_CLONES ptrdiff_t enc_iq3_xxs_weighted(const float *restrict src,
                                                    const float *restrict qw,
                                                    uint8_t *restrict dst, ptrdiff_t blocks) {
    return encode(1, src, qw, dst, blocks);
}

static VECTOR_CLONES ptrdiff_t enc_iq3_s(const float *restrict src, uint8_t *restrict dst,
                                         ptrdiff_t blocks) {
    return encode(0, src, NULL, dst, blocks);
}

static VECTOR_CLONES ptrdiff_t enc_iq3_s_weighted(const float *restrict src,
                                                  const float *restrict qw,
                                                  uint8_t *restrict dst, ptrdiff_t blocks) {
    return encode(0, src, qw, dst, blocks);
}

const GGMLEncoder kiln_ggml_enc_iq3[] = {
    {18, 256, 98, enc_iq3_xxs, enc_iq3_xxs_weighted},
    {21, 256, 110, enc_iq3_s, enc_iq3_s_weighted},
    {-1, 0, 0, NULL, NULL},
};
