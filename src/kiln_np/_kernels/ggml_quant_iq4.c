/* GGML encoders of the non-linear 4-bit types IQ4_NL and IQ4_XS: what ggml_quantize_chunk
 * writes for them without and with an importance matrix, in ggml's operation order (ggml.h).
 *
 * Both are ggml's quantize_row_iq4_nl_impl with seven scale trials either side (what
 * quantize_iq4_nl and quantize_iq4_xs pass; quantize_row_iq4_nl_ref passes none and
 * writes other bytes), for sub-blocks of 32, with weights x * x, or with an importance
 * matrix qw * sqrtf(sigma2 + x * x), sigma2 the block's own x * x summed in order times
 * 2 / its size (kiln_np._quants.encode_iq4 says what it computes).  The scale search,
 * 16 passes over a sub-block, is the whole cost: it runs on eight sub-blocks at once,
 * one per lane (the eight of an IQ4_XS block, or eight IQ4_NL blocks), each lane's sums
 * in ggml's element order.
 *
 * ggml's best_index_int8 (binary search, then x - lo < hi - x) is the number of
 * midpoints of neighbouring levels that x is not below: the same index for every
 * float32, a NaN included (15), checked over all 2**32 of them; its level is -127
 * plus the steps up to it, exact in float32. */
#include "ggml.h"

#include <math.h>

#define LANES 8
#define SUB 32
#define NTRY 7
#define GROUP_MAX_EPS 1e-15f

/* kvalues_iq4nl */
#define V0 -127
#define V1 -104
#define V2 -83
#define V3 -65
#define V4 -49
#define V5 -35
#define V6 -22
#define V7 -10
#define V8 1
#define V9 13
#define V10 25
#define V11 38
#define V12 53
#define V13 69
#define V14 89
#define V15 113

#define MID(a, b) ((float)((a) + (b)) * 0.5f)
static const float mids[15] = {MID(V0, V1),   MID(V1, V2),   MID(V2, V3),   MID(V3, V4),
                               MID(V4, V5),   MID(V5, V6),   MID(V6, V7),   MID(V7, V8),
                               MID(V8, V9),   MID(V9, V10),  MID(V10, V11), MID(V11, V12),
                               MID(V12, V13), MID(V13, V14), MID(V14, V15)};
static const float steps[15] = {V1 - V0,   V2 - V1,   V3 - V2,   V4 - V3,  V5 - V4,
                                V6 - V5,   V7 - V6,   V8 - V7,   V9 - V8,  V10 - V9,
                                V11 - V10, V12 - V11, V13 - V12, V14 - V13, V15 - V14};

/* best_index_int8(16, kvalues_iq4nl, al) */
static ALWAYS_INLINE int level_index(float al) {
    int index = 0;
    for (int m = 0; m < 15; m++) {
        index += !(al < mids[m]);
    }
    return index;
}

/* kvalues_iq4nl[best_index_int8(16, kvalues_iq4nl, al)], as float */
static ALWAYS_INLINE float level(float al) {
    float q = (float)V0;
    for (int m = 0; m < 15; m++) {
        q += al < mids[m] ? 0.0f : steps[m];
    }
    return q;
}

/* One pass of the search: sumqx, sumq2 of each lane's sub-block mapped by id[k]. */
static ALWAYS_INLINE void sums(const float xt[SUB][LANES], const float w[SUB][LANES],
                               const float id[LANES], float sumqx[LANES], float sumq2[LANES]) {
    float qx[LANES] = {0}, q2[LANES] = {0};
    for (int j = 0; j < SUB; j++) {
        for (int k = 0; k < LANES; k++) {
            const float x = xt[j][k];
            const float q = level(id[k] * x);
            const float wq = w[j][k] * q;
            qx[k] += wq * x;
            q2[k] += wq * q;
        }
    }
    for (int k = 0; k < LANES; k++) {
        sumqx[k] = qx[k];
        sumq2[k] = q2[k];
    }
}

/* The weights x * x of the LANES sub-blocks xt[.][k], as ggml takes them without an
 * importance matrix. */
static ALWAYS_INLINE void squares(const float xt[SUB][LANES], float w[SUB][LANES]) {
    for (int j = 0; j < SUB; j++) {
        for (int k = 0; k < LANES; k++) {
            w[j][k] = xt[j][k] * xt[j][k];
        }
    }
}

/* The scale quantize_row_iq4_nl_impl's search (ntry 7, weights w) gives each of the
 * LANES sub-blocks xt[.][k]. */
static ALWAYS_INLINE void search(const float xt[SUB][LANES], const float w[SUB][LANES],
                                 float scale[LANES]) {
    float amax[LANES] = {0}, big[LANES] = {0};
    for (int j = 0; j < SUB; j++) {
        for (int k = 0; k < LANES; k++) {
            const float x = xt[j][k];
            const float a = ggml_fabsf(x);
            big[k] = a > amax[k] ? x : big[k];
            amax[k] = a > amax[k] ? a : amax[k];
        }
    }
    float id[LANES], sumqx[LANES], sumq2[LANES], d[LANES], best[LANES];
    for (int k = 0; k < LANES; k++) {
        big[k] = amax[k] < GROUP_MAX_EPS ? 1.0f : big[k]; /* skipped: no 1 / 0 */
        id[k] = 1.0f / (-big[k] / (float)V0);
    }
    sums(xt, w, id, sumqx, sumq2);
    for (int k = 0; k < LANES; k++) {
        d[k] = sumq2[k] > 0.0f ? sumqx[k] / sumq2[k] : 0.0f;
        best[k] = d[k] * sumqx[k];
    }
    for (int itry = -NTRY; itry <= NTRY; itry++) {
        for (int k = 0; k < LANES; k++) {
            id[k] = (float)(itry + V0) / big[k];
        }
        sums(xt, w, id, sumqx, sumq2);
        for (int k = 0; k < LANES; k++) {
            const float dk = sumqx[k] / sumq2[k];
            const int better = sumq2[k] > 0.0f && sumqx[k] * sumqx[k] > best[k] * sumq2[k];
            best[k] = better ? dk * sumqx[k] : best[k];
            d[k] = better ? dk : d[k];
        }
    }
    for (int k = 0; k < LANES; k++) {
        scale[k] = amax[k] < GROUP_MAX_EPS ? 0.0f : d[k];
    }
}

/* C's d ? 1 / d : 0 (a NaN is true) */
static ALWAYS_INLINE float inverse(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }

/* qs: per 32 levels, the first 16 in the low nibbles, the next 16 in the high ones. */
static ALWAYS_INLINE void put_nibbles(uint8_t *restrict qs, const uint8_t *restrict levels,
                                      int count) {
    for (int i = 0; i < count / 32; i++) {
        for (int j = 0; j < 16; j++) {
            qs[16 * i + j] = (uint8_t)(levels[32 * i + j] | (levels[32 * i + 16 + j] << 4));
        }
    }
}

/* The n <= LANES runs of 32 floats at src (IQ4_NL blocks, an IQ4_XS block's sub-blocks,
 * or their weights) as lanes, xt[j][k] = element j of run k; the other lanes zeros. */
static ALWAYS_INLINE void lanes_of(const float *restrict src, int n, float xt[SUB][LANES]) {
    for (int j = 0; j < SUB; j++) {
        for (int k = 0; k < LANES; k++) {
            xt[j][k] = k < n ? src[SUB * k + j] : 0.0f;
        }
    }
}

/* ggml's importance weights qw * sqrtf(sigma2 + x * x) of the LANES sub-blocks xt[.][k]
 * (weights qt[.][k]), sigma2[k] each lane's. */
static ALWAYS_INLINE void importance(const float xt[SUB][LANES], const float qt[SUB][LANES],
                                     const float sigma2[LANES], float w[SUB][LANES]) {
    for (int j = 0; j < SUB; j++) {
        for (int k = 0; k < LANES; k++) {
            w[j][k] = qt[j][k] * sqrtf(sigma2[k] + xt[j][k] * xt[j][k]);
        }
    }
}

/* IQ4_NL (18 bytes) of n <= LANES blocks xt searched with weights w: f16 d, the
 * searched scale; 16 bytes of level nibbles. */
static ALWAYS_INLINE void iq4_nl_lanes(const float *restrict src, const float xt[SUB][LANES],
                                       const float w[SUB][LANES], int n, uint8_t *restrict dst) {
    float scale[LANES];
    search(xt, w, scale);
    for (int k = 0; k < n; k++) {
        const float *x = src + SUB * k;
        uint8_t *y = dst + 18 * k;
        const float id = inverse(scale[k]);
        uint8_t levels[SUB];
        for (int j = 0; j < SUB; j++) {
            levels[j] = (uint8_t)level_index(id * x[j]);
        }
        ggml_put_u16(y, ggml_f32_to_f16(scale[k]));
        put_nibbles(y + 2, levels, SUB);
    }
}

static VECTOR_CLONES ptrdiff_t enc_iq4_nl(const float *restrict src, uint8_t *restrict dst,
                                          ptrdiff_t blocks) {
    for (ptrdiff_t i0 = 0; i0 < blocks; i0 += LANES) {
        const int n = blocks - i0 < LANES ? (int)(blocks - i0) : LANES;
        float xt[SUB][LANES], w[SUB][LANES];
        lanes_of(src + SUB * i0, n, xt);
        squares(xt, w);
        iq4_nl_lanes(src + SUB * i0, xt, w, n, dst + 18 * i0);
    }
    return -1;
}

static VECTOR_CLONES ptrdiff_t enc_iq4_nl_w(const float *restrict src, const float *restrict qw,
                                            uint8_t *restrict dst, ptrdiff_t blocks) {
    for (ptrdiff_t i0 = 0; i0 < blocks; i0 += LANES) {
        const int n = blocks - i0 < LANES ? (int)(blocks - i0) : LANES;
        float xt[SUB][LANES], qt[SUB][LANES], w[SUB][LANES];
        float sigma2[LANES] = {0}; /* each block's x * x in order, times 2 / 32 */
        lanes_of(src + SUB * i0, n, xt);
        lanes_of(qw + SUB * i0, n, qt);
        for (int j = 0; j < SUB; j++) {
            for (int k = 0; k < LANES; k++) {
                sigma2[k] += xt[j][k] * xt[j][k];
            }
        }
        for (int k = 0; k < LANES; k++) {
            sigma2[k] *= 2.f / SUB;
        }
        importance(xt, qt, sigma2, w);
        iq4_nl_lanes(src + SUB * i0, xt, w, n, dst + 18 * i0);
    }
    return -1;
}

/* IQ4_XS (136 bytes) of the block x, its sub-blocks xt searched with weights w: f16
 * d = -max_scale / 32, u16 scales_h (2 high bits of each sub-block's l + 32), 4 bytes
 * scales_l (its low nibbles), 128 bytes of level nibbles for x / (d * l). */
static ALWAYS_INLINE void iq4_xs_block(const float *restrict x, const float xt[SUB][LANES],
                                       const float w[SUB][LANES], uint8_t *restrict y) {
    float scale[LANES];
    search(xt, w, scale);
    float amax = 0.0f, max_scale = 0.0f;
    for (int k = 0; k < LANES; k++) {
        const float a = ggml_fabsf(scale[k]);
        if (a > amax) {
            amax = a;
            max_scale = scale[k];
        }
    }
    const float d = -max_scale / 32.0f;
    const float id = inverse(d);
    uint16_t scales_h = 0;
    uint8_t levels[256];
    for (int k = 0; k < LANES; k++) {
        int l = ggml_nearest_int(id * scale[k]);
        l = l < -32 ? -32 : l > 31 ? 31 : l;
        const float idl = inverse(d * (float)l);
        for (int j = 0; j < SUB; j++) {
            levels[SUB * k + j] = (uint8_t)level_index(idl * x[SUB * k + j]);
        }
        const unsigned biased = (unsigned)(l + 32);
        if (k % 2 == 0) {
            y[4 + k / 2] = (uint8_t)(biased & 0xFu);
        } else {
            y[4 + k / 2] |= (uint8_t)((biased & 0xFu) << 4);
        }
        scales_h |= (uint16_t)((biased >> 4) << (2 * k));
    }
    ggml_put_u16(y, ggml_f32_to_f16(d));
    ggml_put_u16(y + 2, scales_h);
    put_nibbles(y + 8, levels, 256);
}

static VECTOR_CLONES ptrdiff_t enc_iq4_xs(const float *restrict src, uint8_t *restrict dst,
                                          ptrdiff_t blocks) {
    for (ptrdiff_t i = 0; i < blocks; i++) {
        float xt[SUB][LANES], w[SUB][LANES];
        lanes_of(src + 256 * i, LANES, xt); /* the block's 8 sub-blocks */
        squares(xt, w);
        iq4_xs_block(src + 256 * i, xt, w, dst + 136 * i);
    }
    return -1;
}

static VECTOR_CLONES ptrdiff_t enc_iq4_xs_w(const float *restrict src, const float *restrict qw,
                                            uint8_t *restrict dst, ptrdiff_t blocks) {
    for (ptrdiff_t i = 0; i < blocks; i++) {
        const float *x = src + 256 * i;
        float xt[SUB][LANES], qt[SUB][LANES], w[SUB][LANES], sigma2[LANES];
        float s = 0.0f; /* the block's x * x in order, times 2 / 256 */
        for (int j = 0; j < 256; j++) {
            s += x[j] * x[j];
        }
        s *= 2.f / 256;
        for (int k = 0; k < LANES; k++) {
            sigma2[k] = s;
        }
        lanes_of(x, LANES, xt);
        lanes_of(qw + 256 * i, LANES, qt);
        importance(xt, qt, sigma2, w);
        iq4_xs_block(x, xt, w, dst + 136 * i);
    }
    return -1;
}

const GGMLEncoder kiln_ggml_enc_iq4[] = {
    {20, 32, 18, enc_iq4_nl, enc_iq4_nl_w},
    {23, 256, 136, enc_iq4_xs, enc_iq4_xs_w},
    {-1, 0, 0, NULL},
};
