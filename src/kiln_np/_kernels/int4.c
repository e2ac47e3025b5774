/* The int4 dequantize kernel behind kiln_np._kernels.int4: GPTQ, AWQ (gemm) and
 * compressed-tensors pack-quantized codes, eight 4-bit codes to an int32 word, to
 * float32, bfloat16 or float16 rows of the logical (out, in) weight.
 *
 * Every reference computes (code - zero) * scale in the scales' dtype, which torch
 * does as a float32 product (exact: a 5-bit integer times an 8- or 11-bit
 * significand) rounded once to that dtype.  A row's 16 possible values per group
 * are worked out first, in plain float32 with the rounding done here bit by bit
 * (round to nearest even, subnormals and overflow to infinity included), then the
 * row is a table look-up per code: the rounding code runs once per 16 table
 * entries, never per element, and the bits do not depend on the compiler's
 * floating-point flags beyond the one float32 multiply and add of each entry. */
#include "int4.h"

#include <stdlib.h>
#include <string.h>

#include "ggml.h"

static uint32_t f32_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    return x;
}

static float bits_f32(uint32_t x) {
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

/* The conversions below are branch-free (selects only), so the loops over a row's
 * table entries vectorize. */

/* float32 bits -> bfloat16, nearest even; a NaN keeps its sign and top payload, made
 * quiet. */
static ALWAYS_INLINE uint32_t to_bf16(uint32_t x) {
    const uint32_t nan = (x >> 16) | 0x0040u;
    const uint32_t r = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16;
    return (x & 0x7FFFFFFFu) > 0x7F800000u ? nan : r;
}

/* float32 bits -> IEEE float16, nearest even (numpy's astype). */
static ALWAYS_INLINE uint32_t to_f16(uint32_t x) {
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t ax = x & 0x7FFFFFFFu;
    /* a normal float16: rebias, round the 13 dropped bits */
    const uint32_t normal = (ax - 0x38000000u + 0x0FFFu + ((ax >> 13) & 1u)) >> 13;
    /* Below 2^-14: 0.5 + |f| is rounded (nearest even) to a multiple of 2^-24, the
     * float16 subnormal step, which its bits above 0.5's count (1024: the smallest
     * normal, whose bits follow on). */
    const uint32_t sub = f32_bits(bits_f32(ax) + 0.5f) - 0x3F000000u;
    uint32_t r = ax >= 0x38800000u ? normal : sub;
    r = ax >= 0x477FF000u ? 0x7C00u : r; /* from 65520 (past 65504, which is odd): inf */
    r = ax > 0x7F800000u ? 0x7E00u | ((ax >> 13) & 0x03FFu) : r;
    return sign | r;
}

/* IEEE float16 bits -> float32 bits, exact. */
static ALWAYS_INLINE uint32_t from_f16(uint32_t h) {
    const uint32_t sign = (h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x03FFu;
    const uint32_t sub = f32_bits((float)m * 5.9604644775390625e-8f); /* m * 2^-24 */
    const uint32_t normal = ((e + 112u) << 23) | (m << 13);
    const uint32_t special = 0x7F800000u | (m << 13);
    return sign | (e == 0 ? sub : e == 31 ? special : normal);
}

/* Entries [0, n) of a table: the float32 bits of the products p, rounded to the
 * native kind, then to the output kind. */
VECTOR_CLONES
static void round_entries(uint32_t *restrict p, ptrdiff_t n, int native, int okind) {
    if (native == KILN_INT4_F16) {
        for (ptrdiff_t e = 0; e < n; e++) {
            const uint32_t h = to_f16(p[e]);
            p[e] = okind == KILN_INT4_F16 ? h : from_f16(h);
        }
    } else if (native == KILN_INT4_BF16) {
        for (ptrdiff_t e = 0; e < n; e++) {
            const uint32_t b = to_bf16(p[e]);
            p[e] = okind == KILN_INT4_BF16 ? b : b << 16;
        }
    }
    if (okind == native || okind == KILN_INT4_F32) {
        return;
    }
    if (okind == KILN_INT4_BF16) {
        for (ptrdiff_t e = 0; e < n; e++) {
            p[e] = to_bf16(p[e]);
        }
    } else {
        for (ptrdiff_t e = 0; e < n; e++) {
            p[e] = to_f16(p[e]);
        }
    }
}

/* The table of one row: entry 16 g + u is (u - zero[g]) * scale[g], rounded. */
VECTOR_CLONES
static void fill_table(const float *restrict s, const int32_t *restrict z, ptrdiff_t groups,
                       int native, int okind, uint32_t *restrict p, void *restrict table) {
    for (ptrdiff_t q = 0; q < groups; q++) {
        for (int u = 0; u < 16; u++) {
            p[q * 16 + u] = f32_bits((float)(u - z[q]) * s[q]);
        }
    }
    round_entries(p, groups * 16, native, okind);
    if (okind == KILN_INT4_F32) {
        memcpy(table, p, (size_t)groups * 16 * 4);
    } else {
        uint16_t *t = (uint16_t *)table;
        for (ptrdiff_t e = 0; e < groups * 16; e++) {
            t[e] = (uint16_t)p[e];
        }
    }
}

static const int AWQ_NIBBLE[8] = {0, 4, 1, 5, 2, 6, 3, 7};

/* The 8 codes of word x, looked up in the 16-entry table t, to d[0, 8).  Where the
 * byte order allows, four 16-bit (two 32-bit) results go in one 64-bit store: a core
 * stores fewer values a cycle than it loads. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define PACKED_STORES 0
#else
#define PACKED_STORES 1
#endif

static ALWAYS_INLINE void word_u16(uint16_t *restrict d, const uint16_t *restrict t, uint32_t x) {
#if PACKED_STORES
    const uint64_t a = (uint64_t)t[x & 15u] | (uint64_t)t[(x >> 4) & 15u] << 16 |
                       (uint64_t)t[(x >> 8) & 15u] << 32 | (uint64_t)t[(x >> 12) & 15u] << 48;
    const uint64_t b = (uint64_t)t[(x >> 16) & 15u] | (uint64_t)t[(x >> 20) & 15u] << 16 |
                       (uint64_t)t[(x >> 24) & 15u] << 32 | (uint64_t)t[x >> 28] << 48;
    memcpy(d, &a, sizeof a);
    memcpy(d + 4, &b, sizeof b);
#else
    for (int j = 0; j < 8; j++) {
        d[j] = t[(x >> (4 * j)) & 15u];
    }
#endif
}

static ALWAYS_INLINE void word_u32(uint32_t *restrict d, const uint32_t *restrict t, uint32_t x) {
#if PACKED_STORES
    for (int j = 0; j < 8; j += 2) {
        const uint64_t a =
            (uint64_t)t[(x >> (4 * j)) & 15u] | (uint64_t)t[(x >> (4 * j + 4)) & 15u] << 32;
        memcpy(d + j, &a, sizeof a);
    }
#else
    for (int j = 0; j < 8; j++) {
        d[j] = t[(x >> (4 * j)) & 15u];
    }
#endif
}

/* Rows [b0, b0 + nb) (a band: BAND rows at most, AWQ's within one word column) from
 * their tables; T is the output element type, WORD its 8-code store.  With `group`
 * (uniform: each word's 8 columns in one group) the table of a word is found once;
 * else each column's from gidx. */
#define BAND 16
#define BAND_LOOP(T, WORD)                                                               \
    do {                                                                                 \
        const T *restrict tab = (const T *)tables;                                       \
        T *restrict dst = (T *)k->out;                                                   \
        const ptrdiff_t span = groups * 16;                                              \
        if (k->layout == KILN_INT4_GPTQ) {                                               \
            for (ptrdiff_t kw = 0; kw < in / 8; kw++) {                                  \
                const int32_t *w = k->words + kw * k->wcols + k->r0 + b0;                \
                const int32_t *gk = g + 8 * kw;                                          \
                const ptrdiff_t tq = uniform ? (8 * kw / group) * 16 : 0;                \
                for (ptrdiff_t b = 0; b < nb; b++) {                                     \
                    const uint32_t x = (uint32_t)w[b];                                   \
                    T *restrict d = dst + (b0 + b) * in + 8 * kw;                        \
                    const T *restrict t = tab + b * span;                                \
                    if (uniform) {                                                       \
                        WORD(d, t + tq, x);                                              \
                    } else {                                                             \
                        for (int j = 0; j < 8; j++) {                                    \
                            d[j] = t[(ptrdiff_t)gk[j] * 16 + ((x >> (4 * j)) & 15u)];    \
                        }                                                                \
                    }                                                                    \
                }                                                                        \
            }                                                                            \
        } else if (k->layout == KILN_INT4_AWQ) {                                         \
            const ptrdiff_t o0 = k->r0 + b0;                                             \
            const int32_t *w = k->words + (o0 >> 3);                                     \
            int shift[8];                                                                \
            for (ptrdiff_t b = 0; b < nb; b++) {                                         \
                shift[b] = 4 * AWQ_NIBBLE[(o0 + b) & 7];                                 \
            }                                                                            \
            for (ptrdiff_t i = 0; i < in; i++) {                                         \
                const uint32_t x = (uint32_t)w[i * k->wcols];                            \
                const ptrdiff_t gi = (ptrdiff_t)g[i] * 16;                               \
                for (ptrdiff_t b = 0; b < nb; b++) {                                     \
                    dst[(b0 + b) * in + i] = tab[b * span + gi + ((x >> shift[b]) & 15u)]; \
                }                                                                        \
            }                                                                            \
        } else {                                                                         \
            for (ptrdiff_t b = 0; b < nb; b++) {                                         \
                const int32_t *w = k->words + (k->r0 + b0 + b) * k->wcols;               \
                T *restrict d = dst + (b0 + b) * in;                                     \
                const T *restrict t = tab + b * span;                                    \
                ptrdiff_t i = 0;                                                         \
                if (uniform) {                                                           \
                    for (; i + 8 <= in; i += 8) {                                        \
                        WORD(d + i, t + (i / group) * 16, (uint32_t)w[i >> 3]);          \
                    }                                                                    \
                }                                                                        \
                for (; i < in; i++) {                                                    \
                    const uint32_t x = (uint32_t)w[i >> 3];                              \
                    d[i] = t[(ptrdiff_t)g[i] * 16 + ((x >> (4 * (i & 7))) & 15u)];       \
                }                                                                        \
            }                                                                            \
        }                                                                                \
    } while (0)

int kiln_int4_rows(const KilnInt4 *k, ptrdiff_t lo, ptrdiff_t hi) {
    const ptrdiff_t groups = k->groups > 0 ? k->groups : 1, in = k->in, group = k->group;
    const int uniform = group > 0 && (group % 8 == 0 || group >= in);
    const size_t size = k->okind == KILN_INT4_F32 ? 4 : 2;
    uint32_t *scratch = malloc((size_t)groups * 16 * 4);
    void *tables = malloc((size_t)groups * 16 * BAND * size);
    if (scratch == NULL || tables == NULL) {
        free(scratch);
        free(tables);
        return -1;
    }
    const int32_t *g = k->gidx;
    for (ptrdiff_t b0 = lo; b0 < hi;) {
        ptrdiff_t nb = hi - b0 < BAND ? hi - b0 : BAND;
        if (k->layout == KILN_INT4_AWQ) { /* the rows of one word column */
            const ptrdiff_t left = 8 - ((k->r0 + b0) & 7);
            nb = nb < left ? nb : left;
        }
        for (ptrdiff_t b = 0; b < nb; b++) {
            const ptrdiff_t row = b0 + b;
            fill_table(k->scale + row * groups, k->zero + row * groups, groups, k->native,
                       k->okind, scratch, (uint8_t *)tables + (size_t)b * groups * 16 * size);
        }
        if (size == 4) {
            BAND_LOOP(uint32_t, word_u32);
        } else {
            BAND_LOOP(uint16_t, word_u16);
        }
        b0 += nb;
    }
    free(scratch);
    free(tables);
    return 0;
}
