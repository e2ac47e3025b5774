/* The tables ggml's iq2xs_init_impl builds for the 2-bit and 1-bit grid types, and the
 * pieces their encoders share (ggml_quant_grid.c; used by ggml_quant_iq2.c and
 * ggml_quant_iq1.c, as kiln_np._quants.neighbours serves encode_iq2 and encode_iq1).
 *
 * Per grid (IQ2_XXS's 256 points, IQ2_XS's 512, IQ2_S's 1024, IQ1_S and IQ1_M's 2048):
 * each point's 8 levels, the map of every packed level tuple u = sum(l[i] << 2 i)
 * (u < 43692: no level above 2 is packed) to its grid index, and the neighbour lists of
 * the tuples off the grid: the grid points at the nwant smallest squared distances
 * (nwant 2, 2, 1, 3), by distance, then index (the order of ggml's qsort, a total
 * order).  kiln_grid builds a grid's tables once, on first use, under pthread_once
 * (InitOnceExecuteOnce on Windows). */
#ifndef KILN_NP_GGML_QUANT_GRID_H
#define KILN_NP_GGML_QUANT_GRID_H

#include "ggml.h"

#define KILN_KMAP_SIZE 43692

typedef struct {
    int points, nwant, capacity; /* capacity: the neighbour lists' total, for this grid */
    uint8_t (*levels)[8];        /* each point's levels */
    int16_t *kmap;               /* u -> grid index, or -1 */
    uint32_t *start;             /* u -> its neighbour list in list */
    uint16_t *count;             /* u -> its length */
    uint16_t *list;
    uint16_t *list_u; /* each listed point's u (with KILN_LIST_PAD more at the end) */
} KilnGrid;

#define KILN_LIST_PAD 16 /* kiln_grid_best reads whole runs of candidates */

enum { KILN_GRID_IQ2_XXS, KILN_GRID_IQ2_XS, KILN_GRID_IQ2_S, KILN_GRID_IQ1 };

/* The tables of grid `which` (KILN_GRID_*), built by the first call. */
const KilnGrid *kiln_grid(int which);

/* The neighbour of u (off the grid) of least distance, the first of equals below FLT_MAX
 * (a NaN never), or -1 (where ggml's GGML_ASSERT(grid_index >= 0) fails): the distance
 * of a candidate is ggml's d2 = 0; d2 += w * diff * diff over its 8 places, terms[i][l]
 * being that term for level l at place i (computed by the caller as ggml does), summed
 * here in place order: the same float32 operations as ggml's loop, fewer of them. */
int kiln_grid_best(const KilnGrid *g, int u, const float terms[8][4]);

/* A block's 256 weights: qw * sqrtf(sigma2 + x * x) with sigma2 = sumx2 / 256 (twice:
 * 2 * sumx2 / 256); qw NULL (IQ2_S with no importance matrix): 0.25f * sigma2 + x * x. */
void kiln_grid_weights(const float *x, const float *qw, int twice, float *w);

/* ggml's u of the 8 levels L (its uint16_t u |= L[i] << 2 i), for levels 0 ... 2. */
static inline int kiln_grid_u(const int8_t *L) {
    int u = 0;
    for (int i = 0; i < 8; i++) {
        u |= L[i] << (2 * i);
    }
    return u;
}

/* MAX(0, MIN(top, nearest_int(0.5f * (id * x - 1)))): a level, or a 4- or 3-bit scale. */
static inline int kiln_grid_level(float id, float x, int top) {
    const int l = ggml_nearest_int(0.5f * (id * x - 1));
    return l < 0 ? 0 : l > top ? top : l;
}

#endif
