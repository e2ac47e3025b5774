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
 * floating-point flags beyond the one float32 multiply of each entry.  Rows go in
 * bands of up to BAND (AWQ: the 8 rows of one word column, 16 for the shuffles), so
 * the words a band shares are read once.  For 16-bit outputs with groups of a multiple
 * of 32 columns (or one group) on x86, the look-ups run 16 at a time as SSSE3 byte
 * shuffles of each table's two byte planes (band_shuffle); elsewhere, and for the
 * columns past the last multiple of 32, the portable scalar loop does them.  Both
 * read the same tables: the same bits. */
#include "int4.h"

#include <stdlib.h>
#include <string.h>

#include "ggml.h"

static uint32_t f32_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    return x;
}

/* The conversions below are branch-free (selects only), so the loops over a row's
 * table entries vectorize. */

/* For |x| below 2^-14 (bits ax): its significand shifted right, rounding to nearest
 * even, by the distance to a multiple of 2^-24 (126 - exponent; from 25 on every
 * such value rounds to 0), as an integer count of 2^-24 and, `in_place`, as that
 * many 2^-24 back in float32 bits.  Integers only, so the loops over a table stay
 * branch-free. */
static ALWAYS_INLINE uint32_t round_sub(uint32_t ax, int in_place) {
    const int32_t e = (int32_t)(ax >> 23);
    int32_t sh = 126 - e;
    sh = sh < 14 ? 14 : sh;
    sh = sh > 25 ? 25 : sh;
    const uint32_t mant = (ax & 0x007FFFFFu) | 0x00800000u;
    const uint32_t steps = (mant + (1u << (sh - 1)) - 1u + ((mant >> sh) & 1u)) >> sh;
    if (!in_place) {
        return steps;
    }
    const uint32_t kept = steps << sh; /* may carry to 2^24: the next exponent */
    return steps == 0 ? 0u : ((uint32_t)e << 23) + kept - 0x00800000u;
}

static ALWAYS_INLINE uint32_t subnormal_steps(uint32_t ax) { return round_sub(ax, 0); }

/* float32 bits -> IEEE float16, nearest even (numpy's astype). */
static ALWAYS_INLINE uint32_t to_f16(uint32_t x) {
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t ax = x & 0x7FFFFFFFu;
    /* a normal float16: rebias, round the 13 dropped bits */
    const uint32_t normal = (ax - 0x38000000u + 0x0FFFu + ((ax >> 13) & 1u)) >> 13;
    /* Below 2^-14: the significand rounded (nearest even) to a multiple of 2^-24, the
     * float16 subnormal step (1024 of them: the smallest normal, whose bits follow). */
    const uint32_t sub = subnormal_steps(ax);
    uint32_t r = ax >= 0x38800000u ? normal : sub;
    r = ax >= 0x477FF000u ? 0x7C00u : r; /* from 65520 (past 65504, which is odd): inf */
    r = ax > 0x7F800000u ? 0x7E00u | ((ax >> 13) & 0x03FFu) : r;
    return sign | r;
}

/* float32 bits -> the float32 bits of the nearest float16 (nearest even), the same
 * value as to_f16's, widened back, in fewer operations: the significand rounded to 11
 * bits in place, subnormals to a multiple of 2^-24, overflow to infinity, a NaN
 * quiet with its top 10 payload bits. */
static ALWAYS_INLINE uint32_t round_f16(uint32_t x) {
    const uint32_t sign = x & 0x80000000u, ax = x & 0x7FFFFFFFu;
    const uint32_t normal = (ax + 0x0FFFu + ((ax >> 13) & 1u)) & 0xFFFFE000u;
    const uint32_t sub = round_sub(ax, 1);
    uint32_t r = ax >= 0x38800000u ? normal : sub;
    r = ax >= 0x477FF000u ? 0x7F800000u : r;
    r = ax > 0x7F800000u ? 0x7FC00000u | (ax & 0x007FE000u) : r;
    return sign | r;
}

/* The tables of one row: entry 16 g + u is (u - zero[g]) * scale[g] in float32
 * (into p), rounded to the native kind, then to the output kind: one plain loop
 * over the row's entries per pair of kinds, which the compiler vectorizes. */
#define EACH_ENTRY(STORE)                         \
    for (ptrdiff_t e = 0; e < n; e++) {           \
        STORE;                                    \
    }

VECTOR_CLONES
static void fill_table(const float *restrict s, const int32_t *restrict z, ptrdiff_t groups,
                       int native, int okind, uint32_t *restrict p, void *restrict table) {
    const ptrdiff_t n = groups * 16;
    for (ptrdiff_t q = 0; q < groups; q++) {
        for (int u = 0; u < 16; u++) {
            p[16 * q + u] = f32_bits((float)(u - z[q]) * s[q]);
        }
    }
    if (native == KILN_INT4_F16) {
        if (okind == KILN_INT4_F16) {
            EACH_ENTRY(p[e] = to_f16(p[e]))
        } else if (okind == KILN_INT4_BF16) {
            EACH_ENTRY(p[e] = (uint32_t)kiln_bf16_bits(round_f16(p[e])))
        } else {
            EACH_ENTRY(p[e] = round_f16(p[e]))
        }
    } else if (native == KILN_INT4_BF16) {
        if (okind == KILN_INT4_BF16) {
            EACH_ENTRY(p[e] = (uint32_t)kiln_bf16_bits(p[e]))
        } else if (okind == KILN_INT4_F16) {
            EACH_ENTRY(p[e] = to_f16((uint32_t)kiln_bf16_bits(p[e]) << 16))
        } else {
            EACH_ENTRY(p[e] = (uint32_t)kiln_bf16_bits(p[e]) << 16)
        }
    } else if (okind == KILN_INT4_BF16) {
        EACH_ENTRY(p[e] = (uint32_t)kiln_bf16_bits(p[e]))
    } else if (okind == KILN_INT4_F16) {
        EACH_ENTRY(p[e] = to_f16(p[e]))
    }
    if (okind == KILN_INT4_F32) {
        memcpy(table, p, (size_t)n * 4);
    } else {
        uint16_t *restrict t16 = (uint16_t *)table;
        EACH_ENTRY(t16[e] = (uint16_t)p[e])
    }
}

static const int AWQ_NIBBLE[8] = {0, 4, 1, 5, 2, 6, 3, 7};

/* The code of logical element (o, i). */
static uint32_t code_at(const KilnInt4 *k, ptrdiff_t o, ptrdiff_t i) {
    if (k->layout == KILN_INT4_GPTQ) {
        return ((uint32_t)k->words[(i >> 3) * k->wcols + o] >> (4 * (i & 7))) & 15u;
    }
    if (k->layout == KILN_INT4_AWQ) {
        return ((uint32_t)k->words[i * k->wcols + (o >> 3)] >> (4 * AWQ_NIBBLE[o & 7])) & 15u;
    }
    return ((uint32_t)k->words[o * k->wcols + (i >> 3)] >> (4 * (i & 7))) & 15u;
}

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
/* The shuffle path's AWQ bands: 2 word columns (within an aligned 4, whose words one
 * load brings); 16 rows written at a time measured faster than 32 or 8. */
#define AWQ_BAND 16
#define MAX_BAND 16
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

/* The 16-bit outputs of a band, 32 columns (4 words) at a time, where a word run's
 * 32 columns share a table (groups of a multiple of 32 columns, or one group) and the
 * layout keeps a row's words apart by a fixed stride (GPTQ's wcols, the rows
 * layout's 1).  On x86 with SSSE3 a table of 16 entries is two 16-byte planes (low
 * and high bytes) and the look-up of 16 codes one byte shuffle per plane: the same
 * table, the same bits as the scalar loop.  Returns the columns done (a multiple of
 * 32), 0 where this path does not apply. */
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_SHUFFLE_PATH 1

/* The 32 outputs of words w[0], w[stride], w[2 stride], w[3 stride] (already in v)
 * through the planes at p. */
__attribute__((target("ssse3"))) static inline void shuffle32(uint16_t *restrict d, __m128i v,
                                                               const uint8_t *p) {
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i tlo = _mm_loadu_si128((const __m128i *)p);
    const __m128i thi = _mm_loadu_si128((const __m128i *)(p + 16));
    const __m128i lo = _mm_and_si128(v, mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), mask);
    const __m128i c0 = _mm_unpacklo_epi8(lo, hi), c1 = _mm_unpackhi_epi8(lo, hi);
    const __m128i l0 = _mm_shuffle_epi8(tlo, c0), h0 = _mm_shuffle_epi8(thi, c0);
    const __m128i l1 = _mm_shuffle_epi8(tlo, c1), h1 = _mm_shuffle_epi8(thi, c1);
    _mm_storeu_si128((__m128i *)d, _mm_unpacklo_epi8(l0, h0));
    _mm_storeu_si128((__m128i *)(d + 8), _mm_unpackhi_epi8(l0, h0));
    _mm_storeu_si128((__m128i *)(d + 16), _mm_unpacklo_epi8(l1, h1));
    _mm_storeu_si128((__m128i *)(d + 24), _mm_unpackhi_epi8(l1, h1));
}

__attribute__((target("ssse3"))) static ptrdiff_t band_shuffle(
    const KilnInt4 *k, const uint16_t *restrict tab, uint8_t *restrict planes, ptrdiff_t b0,
    ptrdiff_t nb) {
    const ptrdiff_t in = k->in, groups = k->groups, done = in / 32 * 32;
    const ptrdiff_t group = k->group < in ? k->group : in; /* a multiple of 32, or all */
    for (ptrdiff_t e = 0; e < nb * groups; e++) { /* each table as its two byte planes */
        for (int u = 0; u < 16; u++) {
            planes[32 * e + u] = (uint8_t)(tab[16 * e + u] & 0xFFu);
            planes[32 * e + 16 + u] = (uint8_t)(tab[16 * e + u] >> 8);
        }
    }
    uint16_t *out = (uint16_t *)k->out;
    if (k->layout == KILN_INT4_GPTQ) { /* a band's words of one word row are adjacent */
        const ptrdiff_t s = k->wcols;
        for (ptrdiff_t i = 0; i < done; i += 32) {
            const int32_t *w = k->words + (i >> 3) * s + k->r0 + b0;
            const uint8_t *p = planes + 32 * (i / group);
            ptrdiff_t b = 0;
            for (; b + 4 <= nb; b += 4) { /* 4 rows' 4 words: a 4 x 4 transpose */
                const __m128i r0 = _mm_loadu_si128((const __m128i *)(w + b));
                const __m128i r1 = _mm_loadu_si128((const __m128i *)(w + s + b));
                const __m128i r2 = _mm_loadu_si128((const __m128i *)(w + 2 * s + b));
                const __m128i r3 = _mm_loadu_si128((const __m128i *)(w + 3 * s + b));
                const __m128i t0 = _mm_unpacklo_epi32(r0, r1), t1 = _mm_unpackhi_epi32(r0, r1);
                const __m128i t2 = _mm_unpacklo_epi32(r2, r3), t3 = _mm_unpackhi_epi32(r2, r3);
                uint16_t *d = out + (b0 + b) * in + i;
                const uint8_t *q = p + 32 * b * groups;
                shuffle32(d, _mm_unpacklo_epi64(t0, t2), q);
                shuffle32(d + in, _mm_unpackhi_epi64(t0, t2), q + 32 * groups);
                shuffle32(d + 2 * in, _mm_unpacklo_epi64(t1, t3), q + 64 * groups);
                shuffle32(d + 3 * in, _mm_unpackhi_epi64(t1, t3), q + 96 * groups);
            }
            for (; b < nb; b++) {
                const __m128i v = _mm_set_epi32(w[3 * s + b], w[2 * s + b], w[s + b], w[b]);
                shuffle32(out + (b0 + b) * in + i, v, p + 32 * b * groups);
            }
        }
    } else if (k->layout == KILN_INT4_AWQ) {
        /* A band is within 4 adjacent word columns (32 rows, aligned): a row i of
         * qweight gives their 4 words in one load, and 4 rows' loads transposed give
         * each column 4 consecutive words (of which the band uses its 2). */
        const ptrdiff_t s = k->wcols, o0 = k->r0 + b0, cb = (o0 >> 5) << 2;
        const int whole = cb + 4 <= s; /* else the last columns of a row, one by one */
        const __m128i m0f = _mm_set1_epi8(0x0F);
        const __m128i bytes_by_position =
            _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        for (ptrdiff_t i = 0; i < done; i += 16) {
            __m128i v[4][4]; /* [column - cb][4 words of rows i + 4 q ...] */
            for (int q = 0; q < 4; q++) {
                const int32_t *x = k->words + (i + 4 * q) * s + cb;
                if (whole) {
                    const __m128i r0 = _mm_loadu_si128((const __m128i *)x);
                    const __m128i r1 = _mm_loadu_si128((const __m128i *)(x + s));
                    const __m128i r2 = _mm_loadu_si128((const __m128i *)(x + 2 * s));
                    const __m128i r3 = _mm_loadu_si128((const __m128i *)(x + 3 * s));
                    const __m128i t0 = _mm_unpacklo_epi32(r0, r1);
                    const __m128i t1 = _mm_unpackhi_epi32(r0, r1);
                    const __m128i t2 = _mm_unpacklo_epi32(r2, r3);
                    const __m128i t3 = _mm_unpackhi_epi32(r2, r3);
                    v[0][q] = _mm_unpacklo_epi64(t0, t2);
                    v[1][q] = _mm_unpackhi_epi64(t0, t2);
                    v[2][q] = _mm_unpacklo_epi64(t1, t3);
                    v[3][q] = _mm_unpackhi_epi64(t1, t3);
                } else {
                    for (ptrdiff_t j = 0; j < 4; j++) {
                        v[j][q] = cb + j < s ? _mm_set_epi32(x[3 * s + j], x[2 * s + j],
                                                             x[s + j], x[j])
                                             : _mm_setzero_si128();
                    }
                }
            }
            const uint8_t *p = planes + 32 * (i / group);
            for (ptrdiff_t j = ((o0 >> 3) - cb); j <= ((o0 + nb - 1) >> 3) - cb; j++) {
                /* The 8 nibbles of the column's 16 words as 8 vectors of 16 codes in
                 * i order: each word's bytes grouped by position (a shuffle), then a
                 * 4 x 4 transpose of the 32-bit lanes; low nibbles are the even
                 * positions, high nibbles the odd. */
                __m128i nib[8];
                for (int half = 0; half < 2; half++) {
                    __m128i y[4];
                    for (int q = 0; q < 4; q++) {
                        const __m128i x = half ? _mm_srli_epi16(v[j][q], 4) : v[j][q];
                        y[q] = _mm_shuffle_epi8(_mm_and_si128(x, m0f), bytes_by_position);
                    }
                    const __m128i t0 = _mm_unpacklo_epi32(y[0], y[1]);
                    const __m128i t1 = _mm_unpackhi_epi32(y[0], y[1]);
                    const __m128i t2 = _mm_unpacklo_epi32(y[2], y[3]);
                    const __m128i t3 = _mm_unpackhi_epi32(y[2], y[3]);
                    nib[half] = _mm_unpacklo_epi64(t0, t2);
                    nib[2 + half] = _mm_unpackhi_epi64(t0, t2);
                    nib[4 + half] = _mm_unpacklo_epi64(t1, t3);
                    nib[6 + half] = _mm_unpackhi_epi64(t1, t3);
                }
                const ptrdiff_t first = 8 * (cb + j) - o0; /* the column's rows in the band */
                const ptrdiff_t from = first > 0 ? first : 0;
                const ptrdiff_t to = first + 8 < nb ? first + 8 : nb;
                for (ptrdiff_t b = from; b < to; b++) {
                    const __m128i c = nib[AWQ_NIBBLE[(o0 + b) & 7]];
                    const uint8_t *q = p + 32 * b * groups;
                    const __m128i tlo = _mm_loadu_si128((const __m128i *)q);
                    const __m128i thi = _mm_loadu_si128((const __m128i *)(q + 16));
                    const __m128i l = _mm_shuffle_epi8(tlo, c), h = _mm_shuffle_epi8(thi, c);
                    uint16_t *d = out + (b0 + b) * in + i;
                    _mm_storeu_si128((__m128i *)d, _mm_unpacklo_epi8(l, h));
                    _mm_storeu_si128((__m128i *)(d + 8), _mm_unpackhi_epi8(l, h));
                }
            }
        }
    } else {
        for (ptrdiff_t b = 0; b < nb; b++) {
            const int32_t *w = k->words + (k->r0 + b0 + b) * k->wcols;
            for (ptrdiff_t i = 0; i < done; i += 32) {
                const __m128i v = _mm_loadu_si128((const __m128i *)(w + (i >> 3)));
                shuffle32(out + (b0 + b) * in + i, v, planes + 32 * (b * groups + i / group));
            }
        }
    }
    return done;
}
#endif

static int shuffle_path(const KilnInt4 *k) {
#ifdef HAVE_SHUFFLE_PATH
    const int runs = k->group > 0 && (k->group % 32 == 0 || k->group >= k->in);
    return runs && k->okind != KILN_INT4_F32 && __builtin_cpu_supports("ssse3");
#else
    (void)k;
    return 0;
#endif
}

int kiln_int4_rows(const KilnInt4 *k, ptrdiff_t lo, ptrdiff_t hi) {
    const ptrdiff_t groups = k->groups > 0 ? k->groups : 1, in = k->in, group = k->group;
    const int uniform = group > 0 && (group % 8 == 0 || group >= in);
    const size_t size = k->okind == KILN_INT4_F32 ? 4 : 2;
    uint32_t *scratch = malloc((size_t)groups * 16 * 4);
    void *tables = malloc((size_t)groups * 16 * MAX_BAND * size);
    uint8_t *planes = malloc((size_t)groups * 32 * MAX_BAND);
    if (scratch == NULL || tables == NULL || planes == NULL) {
        free(scratch);
        free(tables);
        free(planes);
        return -1;
    }
    const int32_t *g = k->gidx;
    const int shuffle = shuffle_path(k);
    for (ptrdiff_t b0 = lo; b0 < hi;) {
        ptrdiff_t nb = hi - b0 < BAND ? hi - b0 : BAND;
        if (k->layout == KILN_INT4_AWQ) { /* one word column, or 4 for the shuffles */
            const ptrdiff_t span = shuffle ? AWQ_BAND : 8;
            const ptrdiff_t left = span - ((k->r0 + b0) & (span - 1));
            nb = hi - b0 < left ? hi - b0 : left;
        }
        for (ptrdiff_t b = 0; b < nb; b++) {
            const ptrdiff_t row = b0 + b;
            fill_table(k->scale + row * groups, k->zero + row * groups, groups, k->native,
                       k->okind, scratch, (uint8_t *)tables + (size_t)(b * groups * 16) * size);
        }
        if (size == 4) {
            BAND_LOOP(uint32_t, word_u32);
        } else if (shuffle) {
#ifdef HAVE_SHUFFLE_PATH
            const ptrdiff_t done = band_shuffle(k, (const uint16_t *)tables, planes, b0, nb);
            if (done < in) { /* the last columns, as the scalar loop does them */
                for (ptrdiff_t b = 0; b < nb; b++) {
                    const ptrdiff_t o = k->r0 + b0 + b;
                    const uint16_t *t = (const uint16_t *)tables + b * groups * 16;
                    uint16_t *d = (uint16_t *)k->out + (b0 + b) * in;
                    for (ptrdiff_t i = done; i < in; i++) {
                        d[i] = t[(ptrdiff_t)g[i] * 16 + code_at(k, o, i)];
                    }
                }
            }
#endif
        } else {
            BAND_LOOP(uint16_t, word_u16);
        }
        b0 += nb;
    }
    free(scratch);
    free(tables);
    free(planes);
    return 0;
}
