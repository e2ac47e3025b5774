/* GGML's i-quant block types: the compiled decoders (see ggml.h).
 *
 * Each group of 8 values is a grid entry (two 4-value entries for IQ3) times a
 * sub-block scale db, negated where the group's sign bit is set; IQ1_S and IQ1_M
 * add a delta instead: dl * (grid[j] + delta).  ggml's build turns its
 * `* (bit ? -1.f : 1.f)` into a negation, which flips a NaN's sign too, so the
 * sign is flipped here as a bit (as in kiln_np._quants.iquants).  The grids are
 * ggml_grids.h, generated from ggml-common.h. */
#include "ggml.h"
#include "ggml_grids.h"

static ALWAYS_INLINE uint32_t f32_bits(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return bits;
}

/* y[j] = db * grid[j], its sign flipped where bit j of signs is set. */
static ALWAYS_INLINE void signed8(float *restrict y, float db, const uint8_t *restrict grid,
                                  unsigned signs) {
    for (int j = 0; j < 8; j++) {
        const uint32_t flip = (signs & kmask_iq2xs[j]) ? 0x80000000u : 0u;
        y[j] = ggml_bits_f32(f32_bits(db * (float)grid[j]) ^ flip);
    }
}

/* The same from two 4-value entries (IQ3). */
static ALWAYS_INLINE void signed4x2(float *restrict y, float db, const uint8_t *restrict lo,
                                    const uint8_t *restrict hi, unsigned signs) {
    uint8_t grid[8];
    memcpy(grid, lo, 4);
    memcpy(grid + 4, hi, 4);
    signed8(y, db, grid, signs);
}

/* y[j] = dl * (grid[j] + delta) (IQ1). */
static ALWAYS_INLINE void shifted8(float *restrict y, float dl, const int8_t *restrict grid,
                                   float delta) {
    for (int j = 0; j < 8; j++) {
        y[j] = dl * ((float)grid[j] + delta);
    }
}

/* ggml: d * (0.5f + ls) * factor, left to right. */
static ALWAYS_INLINE float quarter_scale(float d, unsigned ls, float factor) {
    return d * (0.5f + (float)ls) * factor;
}

/* block_iq2_xxs: f16 d, 8 x (4 grid indices, uint32 w): w's top 4 bits ls, its four
 * 7-bit fields the groups' sign indices. */
VECTOR_CLONES static void iq2_xxs(const uint8_t *restrict s, float *restrict y, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++, s += 66) {
        const float d = ggml_f16_at(s);
        for (int ib = 0; ib < 8; ib++, y += 32) {
            const uint8_t *q = s + 2 + 8 * ib;
            const uint32_t w = ggml_u32(q + 4);
            const float db = quarter_scale(d, w >> 28, 0.25f);
            for (int l = 0; l < 4; l++) {
                signed8(y + 8 * l, db, iq2xxs_grid[q[l]], ksigns_iq2xs[(w >> (7 * l)) & 127]);
            }
        }
    }
}

/* block_iq2_xs: f16 d, uint16 qs[32] (9-bit grid index, 7-bit sign index), scales[8]
 * (4-bit ls per 16 values). */
VECTOR_CLONES static void iq2_xs(const uint8_t *restrict s, float *restrict y, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++, s += 74) {
        const float d = ggml_f16_at(s);
        for (int ib = 0; ib < 8; ib++, y += 32) {
            const unsigned sc = s[66 + ib];
            const float db[2] = {quarter_scale(d, sc & 15, 0.25f), quarter_scale(d, sc >> 4, 0.25f)};
            for (int l = 0; l < 4; l++) {
                const unsigned q = ggml_u16(s + 2 + 2 * (4 * ib + l));
                signed8(y + 8 * l, db[l / 2], iq2xs_grid[q & 511], ksigns_iq2xs[q >> 9]);
            }
        }
    }
}

/* block_iq2_s: f16 d, qs[32] (index low 8 bits), signs[32], qh[8] (2 high index bits
 * per group), scales[8] (as IQ2_XS). */
VECTOR_CLONES static void iq2_s(const uint8_t *restrict s, float *restrict y, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++, s += 82) {
        const float d = ggml_f16_at(s);
        for (int ib = 0; ib < 8; ib++, y += 32) {
            const unsigned sc = s[74 + ib];
            const unsigned qh = s[66 + ib];
            const float db[2] = {quarter_scale(d, sc & 15, 0.25f), quarter_scale(d, sc >> 4, 0.25f)};
            for (int l = 0; l < 4; l++) {
                const unsigned index = s[2 + 4 * ib + l] | (((qh >> (2 * l)) & 3) << 8);
                signed8(y + 8 * l, db[l / 2], iq2s_grid[index], s[34 + 4 * ib + l]);
            }
        }
    }
}

/* block_iq3_xxs: f16 d, qs[64] (grid indices), 8 x uint32 w (top 4 bits ls, four 7-bit
 * sign indices); db = d * (0.5f + ls) * 0.5f. */
VECTOR_CLONES static void iq3_xxs(const uint8_t *restrict s, float *restrict y, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++, s += 98) {
        const float d = ggml_f16_at(s);
        for (int ib = 0; ib < 8; ib++, y += 32) {
            const uint8_t *q = s + 2 + 8 * ib;
            const uint32_t w = ggml_u32(s + 66 + 4 * ib);
            const float db = quarter_scale(d, w >> 28, 0.5f);
            for (int l = 0; l < 4; l++) {
                signed4x2(y + 8 * l, db, iq3xxs_grid[q[2 * l]], iq3xxs_grid[q[2 * l + 1]],
                          ksigns_iq2xs[(w >> (7 * l)) & 127]);
            }
        }
    }
}

/* block_iq3_s: f16 d, qs[64] (index low 8 bits), qh[8] (bit m of qh[k]: index bit 8 of
 * sub-block k's m-th index), signs[32], scales[4] (4-bit ls per 32 values);
 * db = d * (1 + 2*ls). */
VECTOR_CLONES static void iq3_s(const uint8_t *restrict s, float *restrict y, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++, s += 110) {
        const float d = ggml_f16_at(s);
        for (int ib = 0; ib < 8; ib++, y += 32) {
            const uint8_t *q = s + 2 + 8 * ib;
            const unsigned qh = s[66 + ib];
            const unsigned ls = (s[106 + ib / 2] >> (4 * (ib % 2))) & 15;
            const float db = d * (float)(int)(1 + 2 * ls);
            for (int l = 0; l < 4; l++) {
                const unsigned lo = q[2 * l] | (((qh >> (2 * l)) & 1) << 8);
                const unsigned hi = q[2 * l + 1] | (((qh >> (2 * l + 1)) & 1) << 8);
                signed4x2(y + 8 * l, db, iq3s_grid[lo], iq3s_grid[hi], s[74 + 4 * ib + l]);
            }
        }
    }
}

/* block_iq1_s: f16 d, qs[32] (index low 8 bits), uint16 qh[8]: per 32 values 4 x 3 high
 * index bits, a 3-bit ls (dl = d * (2*ls + 1)) and the delta's sign (bit 15). */
VECTOR_CLONES static void iq1_s(const uint8_t *restrict s, float *restrict y, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++, s += 50) {
        const float d = ggml_f16_at(s);
        for (int ib = 0; ib < 8; ib++, y += 32) {
            const unsigned qh = ggml_u16(s + 34 + 2 * ib);
            const float dl = d * (float)(int)(2 * ((qh >> 12) & 7) + 1);
            const float delta = (qh & 0x8000) ? -IQ1S_DELTA : IQ1S_DELTA;
            for (int l = 0; l < 4; l++) {
                const unsigned index = s[2 + 4 * ib + l] | (((qh >> (3 * l)) & 7) << 8);
                shifted8(y + 8 * l, dl, iq1s_grid[index], delta);
            }
        }
    }
}

/* block_iq1_m: qs[32] (index low 8 bits), qh[16] (a nibble per 8 values: 3 high index
 * bits, the delta's sign), uint16 scales[4]: four 3-bit ls each (dl = d * (2*ls + 1) per
 * 16 values) and, in their top nibbles, the f16 d.  ggml uses IQ1S_DELTA here. */
VECTOR_CLONES static void iq1_m(const uint8_t *restrict s, float *restrict y, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++, s += 56) {
        unsigned sc[4];
        for (int k = 0; k < 4; k++) {
            sc[k] = ggml_u16(s + 48 + 2 * k);
        }
        const float d = ggml_f16((uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) |
                                            ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000)));
        for (int g = 0; g < 32; g++, y += 8) {
            const unsigned ls = (sc[g / 8] >> (3 * ((g / 2) % 4))) & 7;
            const float dl = d * (float)(int)(2 * ls + 1);
            const unsigned nibble = (s[32 + g / 2] >> (4 * (g % 2))) & 15;
            const float delta = (nibble & 8) ? -IQ1S_DELTA : IQ1S_DELTA;
            shifted8(y, dl, iq1s_grid[s[g] | ((nibble & 7) << 8)], delta);
        }
    }
}

const GGMLDecoder kiln_ggml_iq[] = {
    {16, 256, 66, iq2_xxs}, {17, 256, 74, iq2_xs}, {18, 256, 98, iq3_xxs}, {19, 256, 50, iq1_s},
    {21, 256, 110, iq3_s},  {22, 256, 82, iq2_s},  {29, 256, 56, iq1_m},   {-1, 0, 0, NULL},
};
