/* GGML encoder of the 3-bit grid type IQ3_S: what ggml_quantize_chunk writes for it with no
 * importance matrix, in ggml's operation order (ggml.h).
 *
 * That is ggml's quantize_row_iq3_s_impl with sub-blocks of 32 over the tables
 * iq3xs_init_impl(512) builds (kiln_np._quants.encode_iq3 says what it computes): the map
 * of every level quadruple u = l0 | l1 << 3 | l2 << 6 | l3 << 9 to its grid index, and the
 * neighbour lists of the quadruples off the grid (the grid points at the three smallest
 * squared distances, by distance, then index: the order of ggml's qsort).  They are built
 * once, by the first call, under pthread_once (InitOnceExecuteOnce on Windows).
 *
 * The eight sub-blocks of a block are the lanes of the search: each trial maps every lane's
 * 32 values to levels and takes every lane's sums in ggml's element order, branch-free,
 * so the compiler vectorises them; a group of 4 whose levels are off the grid looks for
 * its best neighbour on its own (iq3_find_best_neighbour: the first least weighted
 * distance below FLT_MAX).  Where ggml aborts (GGML_ASSERT: a search that finds no
 * distance below FLT_MAX, or a final scale that is a NaN, on magnitudes whose squares
 * times squares overflow float32), the block is reported and nothing of it written. */
#include <float.h>
#include <math.h>

#include "ggml.h"
#include "ggml_grids.h"

#define SUB 32           /* values per sub-block (IQ3S_BLOCK_SIZE) */
#define LANES 8          /* sub-blocks per block */
#define KMAXQ 8          /* levels 0 .. 7 */
#define NEIGHBOURS 24733 /* the neighbour lists' total length, for the 512-point grid */
#define LONGEST 38       /* and the longest list's */

static int16_t grid_of[4096];   /* a quadruple's grid index, or -1 */
static uint16_t nb_start[4096]; /* where its neighbour list starts in nb_list */
static uint8_t nb_count[4096];  /* and its length (0 on the grid) */
static uint16_t nb_list[NEIGHBOURS];
static float nb_q[4][NEIGHBOURS + 7]; /* value i (2 l + 1) of each listed grid point */

static int quadruple(const uint8_t q[4]) { /* grid values 2 l + 1 -> u */
    return ((q[0] - 1) / 2) | (((q[1] - 1) / 2) << 3) | (((q[2] - 1) / 2) << 6) |
           (((q[3] - 1) / 2) << 9);
}

/* iq3xs_init_impl(512): the map, then per quadruple off the grid the grid points at its
 * three smallest distances, each distance's points in index order. */
static void build_tables(void) {
    for (int u = 0; u < 4096; u++) {
        grid_of[u] = -1;
    }
    for (int j = 0; j < 512; j++) {
        grid_of[quadruple(iq3s_grid[j])] = (int16_t)j;
    }
    int total = 0;
    for (int u = 0; u < 4096; u++) {
        nb_start[u] = (uint16_t)total;
        if (grid_of[u] >= 0) {
            continue;
        }
        int d2[512];
        int nearest[3] = {INT32_MAX, INT32_MAX, INT32_MAX}; /* distinct, ascending */
        for (int j = 0; j < 512; j++) {
            int d = 0;
            for (int i = 0; i < 4; i++) {
                const int diff = iq3s_grid[j][i] - (2 * ((u >> (3 * i)) & 7) + 1);
                d += diff * diff;
            }
            d2[j] = d;
            if (d < nearest[2] && d != nearest[0] && d != nearest[1]) {
                nearest[2] = d;
                for (int m = 2; m > 0 && nearest[m] < nearest[m - 1]; m--) {
                    const int t = nearest[m];
                    nearest[m] = nearest[m - 1];
                    nearest[m - 1] = t;
                }
            }
        }
        for (int m = 0; m < 3; m++) {
            for (int j = 0; j < 512; j++) { /* the bounds hold for this grid: memory safety */
                if (d2[j] == nearest[m] && total < NEIGHBOURS && total - nb_start[u] < LONGEST) {
                    for (int i = 0; i < 4; i++) {
                        nb_q[i][total] = (float)iq3s_grid[j][i];
                    }
                    nb_list[total++] = (uint16_t)j;
                }
            }
        }
        nb_count[u] = (uint8_t)(total - nb_start[u]);
    }
}

#if defined(_WIN32)
#include <windows.h>
static INIT_ONCE tables_once = INIT_ONCE_STATIC_INIT;
static BOOL CALLBACK build_tables_once(PINIT_ONCE once, PVOID arg, PVOID *context) {
    (void)once;
    (void)arg;
    (void)context;
    build_tables();
    return TRUE;
}
static void tables_ready(void) { InitOnceExecuteOnce(&tables_once, build_tables_once, NULL, NULL); }
#else
#include <pthread.h>
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;
static void tables_ready(void) { pthread_once(&tables_once, build_tables); }
#endif

/* The elements' weights in the searches: with no importance matrix, ggml's x * x. */
static ALWAYS_INLINE void weights(const float *restrict x, float *restrict w) {
    for (int i = 0; i < 256; i++) {
        w[i] = x[i] * x[i];
    }
}

/* iq3_find_best_neighbour for quadruple u off the grid: the neighbour with the least
 * sum of wa * (scale * q - xv)**2 below FLT_MAX, the first of equals (xv, wa: the group's
 * 4 values, LANES apart); -1 where none is below FLT_MAX (ggml's GGML_ASSERT fires).  The distances, each summed in ggml's order, are computed for
 * all candidates at once (vector lanes), then compared in the list's order. */
static VECTOR_CLONES int best_neighbour(int u, const float *xv, const float *wa, float scale) {
    const int start = nb_start[u], n = nb_count[u];
    const float *q0 = nb_q[0] + start, *q1 = nb_q[1] + start, *q2 = nb_q[2] + start,
                *q3 = nb_q[3] + start;
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
    return found < 0 ? -1 : nb_list[start + found];
}

/* Map lane k's values by id[k] (levels nearest_int(0.5 (id xv - 1)) in 0 .. 7, values
 * q = 2 l + 1), then, for the lanes in `lanes` (a bit mask), put each group on the grid
 * (off it: the best neighbour at scale[k], whose values replace the group's): grid index
 * gi[k][g] and on[k][g], whether the levels were on the grid; a lane whose search finds
 * no neighbour is marked in *aborted. */
static ALWAYS_INLINE void onto_grid(const float xv[SUB][LANES], const float wa[SUB][LANES],
                                    const float id[LANES], const float scale[LANES],
                                    unsigned lanes, int gi[LANES][8], int on[LANES][8],
                                    float q[SUB][LANES], unsigned *aborted) {
    int l[SUB][LANES];
    for (int j = 0; j < SUB; j++) {
        for (int k = 0; k < LANES; k++) {
            const int v = ggml_nearest_int(0.5f * (id[k] * xv[j][k] - 1.0f));
            l[j][k] = v < 0 ? 0 : v > KMAXQ - 1 ? KMAXQ - 1 : v;
            q[j][k] = (float)(2 * l[j][k] + 1);
        }
    }
    for (int k = 0; k < LANES; k++) {
        if (!(lanes >> k & 1u)) {
            continue;
        }
        for (int g = 0; g < 8; g++) {
            const int u = l[4 * g][k] | (l[4 * g + 1][k] << 3) | (l[4 * g + 2][k] << 6) |
                          (l[4 * g + 3][k] << 9);
            int index = grid_of[u];
            on[k][g] = index >= 0;
            if (index < 0) {
                index = best_neighbour(u, &xv[4 * g][k], &wa[4 * g][k], scale[k]);
                if (index < 0) {
                    *aborted |= 1u << k;
                    index = 0;
                }
                for (int i = 0; i < 4; i++) {
                    q[4 * g + i][k] = (float)iq3s_grid[index][i];
                }
            }
            gi[k][g] = index;
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

/* IQ3_S (110 bytes): f16 d, qs[64], qh[8], signs[32], scales[4]. */
static VECTOR_CLONES ptrdiff_t enc_iq3_s(const float *restrict src, uint8_t *restrict dst,
                                         ptrdiff_t blocks) {
    tables_ready();
    for (ptrdiff_t b = 0; b < blocks; b++) {
        const float *x = src + 256 * b;
        uint8_t *y = dst + 110 * b;
        float wb[256];
        weights(x, wb);
        float xv[SUB][LANES], w[SUB][LANES], wa[SUB][LANES], big[LANES] = {0};
        uint8_t signs[LANES][4] = {{0}};
        for (int j = 0; j < SUB; j++) {
            for (int k = 0; k < LANES; k++) {
                const float v = x[SUB * k + j];
                const int negative = !(v >= 0.0f);
                xv[j][k] = negative ? -v : v;
                w[j][k] = wb[SUB * k + j];
                wa[j][k] = sqrtf(w[j][k]);
                signs[k][j / 8] |= (uint8_t)(negative << (j % 8));
                big[k] = big[k] > xv[j][k] ? big[k] : xv[j][k];
            }
        }
        unsigned live = 0, aborted = 0;
        float scale[LANES], best[LANES], sumqx[LANES], sumq2[LANES], id[LANES], at[LANES];
        int gi[LANES][8] = {{0}}, on[LANES][8] = {{0}}, tgi[LANES][8], ton[LANES][8];
        float q[SUB][LANES];
        for (int k = 0; k < LANES; k++) {
            live |= (unsigned)(big[k] != 0.0f) << k;
            scale[k] = big[k] / (float)(2 * KMAXQ - 1);
            best[k] = 0.0f;
        }
        for (int is = -9; is <= 9; is++) {
            for (int k = 0; k < LANES; k++) {
                id[k] = (float)(2 * KMAXQ - 1) + (float)is * 0.2f;
                id[k] = id[k] / big[k];
                at[k] = 1.0f / id[k];
            }
            onto_grid(xv, wa, id, at, live, tgi, ton, q, &aborted);
            sums(w, xv, q, sumqx, sumq2);
            for (int k = 0; k < LANES; k++) {
                if ((live >> k & 1u) && sumq2[k] > 0.0f &&
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
            int off = 0;
            for (int g = 0; g < 8; g++) {
                off |= !on[k][g];
            }
            again |= (unsigned)((live >> k & 1u) && off && scale[k] > 0.0f) << k;
            id[k] = again >> k & 1u ? 1.0f / scale[k] : 0.0f;
        }
        if (again) {
            onto_grid(xv, wa, id, scale, again, tgi, ton, q, &aborted);
            sums(w, xv, q, sumqx, sumq2);
            for (int k = 0; k < LANES; k++) {
                if (again >> k & 1u) {
                    for (int g = 0; g < 8; g++) {
                        gi[k][g] = tgi[k][g];
                    }
                    scale[k] = sumq2[k] > 0.0f ? sumqx[k] / sumq2[k] : scale[k];
                }
            }
        }

        for (int k = 0; k < LANES; k++) { /* ggml's GGML_ASSERT(scale >= 0): a NaN */
            aborted |= (unsigned)((live >> k & 1u) && isnan(scale[k])) << k;
        }
        if (aborted) {
            return b;
        }
        memset(y, 0, 110);
        uint8_t *qs = y + 2, *qh = y + 66, *sg = y + 74, *scales = y + 106;
        float max_scale = 0.0f;
        for (int k = 0, slot = 0; k < LANES; k++) {
            if (!(live >> k & 1u)) {
                scale[k] = 0.0f; /* ggml's `continue`: qs and signs stay where they are */
                continue;
            }
            if (scale[k] < 0.0f) { /* never with weights x * x; kept as ggml has it */
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
            continue;
        }
        const float d = max_scale / 31.0f;
        ggml_put_u16(y, ggml_f32_to_f16(d * 1.033f));
        const float inv = 1.0f / d;
        for (int k = 0; k < LANES; k += 2) {
            int l1 = ggml_nearest_int(0.5f * (inv * scale[k] - 1.0f));
            int l2 = ggml_nearest_int(0.5f * (inv * scale[k + 1] - 1.0f));
            l1 = l1 < 0 ? 0 : l1 > 15 ? 15 : l1;
            l2 = l2 < 0 ? 0 : l2 > 15 ? 15 : l2;
            scales[k / 2] = (uint8_t)(l1 | (l2 << 4));
        }
    }
    return -1;
}

const GGMLEncoder kiln_ggml_enc_iq3[] = {
    {21, 256, 110, enc_iq3_s, NULL},
    {-1, 0, 0, NULL, NULL},
};
