/* ggml's iq2xs_init_impl for the four grids, and the neighbour search over its lists
 * (ggml_quant_grid.h says what they hold). */
#include <float.h>
#include <math.h>

#include "ggml_grids.h"
#include "ggml_quant_grid.h"

static uint8_t lv_xxs[256][8], lv_xs[512][8], lv_s[1024][8], lv_1[2048][8];
static int16_t map_xxs[KILN_KMAP_SIZE], map_xs[KILN_KMAP_SIZE], map_s[KILN_KMAP_SIZE], map_1[KILN_KMAP_SIZE];
static uint32_t st_xxs[KILN_KMAP_SIZE], st_xs[KILN_KMAP_SIZE], st_s[KILN_KMAP_SIZE], st_1[KILN_KMAP_SIZE];
static uint16_t n_xxs[KILN_KMAP_SIZE], n_xs[KILN_KMAP_SIZE], n_s[KILN_KMAP_SIZE], n_1[KILN_KMAP_SIZE];
static uint16_t nb_xxs[373964], nb_xs[508542], nb_s[166432], nb_1[1333695];
static uint16_t nu_xxs[373964 + KILN_LIST_PAD], nu_xs[508542 + KILN_LIST_PAD],
    nu_s[166432 + KILN_LIST_PAD], nu_1[1333695 + KILN_LIST_PAD];

static KilnGrid grid_xxs = {256, 2, 373964, lv_xxs, map_xxs, st_xxs, n_xxs, nb_xxs, nu_xxs};
static KilnGrid grid_xs = {512, 2, 508542, lv_xs, map_xs, st_xs, n_xs, nb_xs, nu_xs};
static KilnGrid grid_s = {1024, 1, 166432, lv_s, map_s, st_s, n_s, nb_s, nu_s};
static KilnGrid grid_1 = {2048, 3, 1333695, lv_1, map_1, st_1, n_1, nb_1, nu_1};

static uint16_t packed(const uint8_t l[8]) {
    unsigned u = 0;
    for (int i = 0; i < 8; i++) {
        u |= (unsigned)l[i] << (2 * i);
    }
    return (uint16_t)u;
}

/* The squared distance of two tuples of four levels, 4 (l - l')**2 summed: a tuple of 8 is
 * a low and a high half (built once, then only read). */
static int16_t half[256][256];

static void build_half(void) {
    for (int a = 0; a < 256; a++) {
        for (int b = 0; b < 256; b++) {
            int d = 0;
            for (int i = 0; i < 4; i++) {
                const int diff = ((a >> (2 * i)) & 3) - ((b >> (2 * i)) & 3);
                d += 4 * diff * diff;
            }
            half[a][b] = (int16_t)d;
        }
    }
}

/* iq2xs_init_impl: levels from the decoding grid (bytes 8, 25, 43, 62 are levels 0 ... 3;
 * IQ1's -1, 0, 1 are 0, 1, 2), the map, and per u off the grid its neighbours: a counting
 * sort of the points by squared distance, those of the nwant smallest distances, each
 * distance's points in index order. */
static void build(KilnGrid *g, const uint8_t (*bytes)[8], int iq1) {
    static const uint8_t level_of[4] = {8, 25, 43, 62};
    uint16_t point[2048]; /* each point's u */
    int16_t d2[2048];
    for (int u = 0; u < KILN_KMAP_SIZE; u++) {
        g->kmap[u] = -1;
    }
    for (int j = 0; j < g->points; j++) {
        for (int i = 0; i < 8; i++) {
            int l = 0;
            if (iq1) {
                l = (int8_t)bytes[j][i] + 1;
            } else {
                while (l < 3 && level_of[l] != bytes[j][i]) {
                    l++;
                }
            }
            g->levels[j][i] = (uint8_t)l;
        }
        point[j] = packed(g->levels[j]);
        g->kmap[point[j]] = (int16_t)j;
    }
    uint32_t total = 0;
    for (int u = 0; u < KILN_KMAP_SIZE; u++) {
        g->start[u] = total;
        g->count[u] = 0;
        if (g->kmap[u] >= 0) {
            continue;
        }
        int hits[289] = {0}; /* 8 * 36 at most */
        const int16_t *lo = half[u & 255], *hi = half[u >> 8];
        for (int j = 0; j < g->points; j++) {
            d2[j] = (int16_t)(lo[point[j] & 255] + hi[point[j] >> 8]);
            hits[d2[j]]++;
        }
        int bound = 0, seen = 0, n = 0;
        for (; bound < 288; bound++) {
            if (hits[bound]) {
                n += hits[bound];
                if (++seen == g->nwant) {
                    break;
                }
            }
        }
        if (total + (uint32_t)n > (uint32_t)g->capacity) { /* never, for these grids */
            continue;
        }
        int at[289];
        for (int d = 0, sum = 0; d <= bound; d++) {
            at[d] = sum;
            sum += hits[d];
        }
        for (int j = 0; j < g->points; j++) {
            if (d2[j] <= bound) {
                const uint32_t c = total + (uint32_t)at[d2[j]]++;
                g->list[c] = (uint16_t)j;
                g->list_u[c] = point[j];
            }
        }
        g->count[u] = (uint16_t)n;
        total += (uint32_t)n;
    }
}

static void build_xxs(void) { build(&grid_xxs, iq2xxs_grid, 0); }
static void build_xs(void) { build(&grid_xs, iq2xs_grid, 0); }
static void build_s(void) { build(&grid_s, iq2s_grid, 0); }
static void build_1(void) { build(&grid_1, (const uint8_t(*)[8])iq1s_grid, 1); }

#if defined(_WIN32)
#include <windows.h>
typedef INIT_ONCE Once;
#define ONCE_INIT INIT_ONCE_STATIC_INIT
static BOOL CALLBACK run_once(PINIT_ONCE once, PVOID fn, PVOID *context) {
    (void)once;
    (void)context;
    ((void (*)(void))fn)();
    return TRUE;
}
static void once(Once *flag, void (*fn)(void)) { InitOnceExecuteOnce(flag, run_once, (PVOID)fn, NULL); }
#else
#include <pthread.h>
typedef pthread_once_t Once;
#define ONCE_INIT PTHREAD_ONCE_INIT
static void once(Once *flag, void (*fn)(void)) { pthread_once(flag, fn); }
#endif
static Once once_half = ONCE_INIT;
static Once once_grid[4] = {ONCE_INIT, ONCE_INIT, ONCE_INIT, ONCE_INIT};
static void (*const builders[4])(void) = {build_xxs, build_xs, build_s, build_1};
static KilnGrid *const grids[4] = {&grid_xxs, &grid_xs, &grid_s, &grid_1};

const KilnGrid *kiln_grid(int which) {
    once(&once_half, build_half);
    once(&once_grid[which], builders[which]);
    return grids[which];
}

/* iq2_find_best_neighbour's and iq1_find_best_neighbour2's search (ggml_quant_grid.h): the
 * distances of RUN candidates at a time, each summed in place order in its own lane (the
 * term of a place is a select of its four by the candidate's level there), then compared
 * in the list's order. */
#define RUN 16
VECTOR_CLONES int kiln_grid_best(const KilnGrid *g, int u, const float terms[8][4]) {
    const uint16_t *list = g->list + g->start[u], *list_u = g->list_u + g->start[u];
    const int n = g->count[u];
    float best = FLT_MAX;
    int found = -1;
    for (int c0 = 0; c0 < n; c0 += RUN) {
        float d2[RUN] = {0};
        for (int i = 0; i < 8; i++) {
            const float t0 = terms[i][0], t1 = terms[i][1], t2 = terms[i][2], t3 = terms[i][3];
            for (int k = 0; k < RUN; k++) { /* past n: the next list's (or the pad's) */
                const unsigned l = ((unsigned)list_u[c0 + k] >> (2 * i)) & 3u;
                d2[k] += l == 0 ? t0 : l == 1 ? t1 : l == 2 ? t2 : t3;
            }
        }
        const int m = n - c0 < RUN ? n - c0 : RUN;
        for (int k = 0; k < m; k++) {
            if (d2[k] < best) {
                best = d2[k];
                found = list[c0 + k];
            }
        }
    }
    return found;
}

/* The searches' weights of a block (ggml_quant_grid.h). */
void kiln_grid_weights(const float *x, const float *qw, int twice, float *w) {
    float sumx2 = 0;
    for (int i = 0; i < 256; i++) {
        sumx2 += x[i] * x[i];
    }
    const float sigma2 = twice ? 2 * sumx2 / 256 : sumx2 / 256;
    for (int i = 0; i < 256; i++) {
        w[i] = qw ? qw[i] * sqrtf(sigma2 + x[i] * x[i]) : 0.25f * sigma2 + x[i] * x[i];
    }
}

