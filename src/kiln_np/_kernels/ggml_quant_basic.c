/* GGML encoders of the types with one scale a block (Q4_0 ... Q8_0, Q1_0, Q2_0) and
 * the ternary TQ1_0, TQ2_0: ggml's quantize_row_*_ref, in its operation order (ggml.h).
 *
 * Fast and exact: the loops run over a block's independent elements, so the compiler
 * vectorises them.  A block's largest |x| (and Q4_1's min and max) come from integer
 * max/min over the floats' bits, which order as the floats do (no NaN reaches an
 * encoder); ggml's scalar loops keep the *first* element among equal ones (the sign of
 * a zero, Q4_0's sign of the largest), found here by an index reduction.  Where
 * id = 1/d is finite, every x*id is bounded by the block's largest (|x*id| <= 127.0001
 * for Q8_0 and so on), so a plain float -> int conversion and a branch-free roundf are
 * C's; a block whose 1/d overflows (or Q4_1's max - min) takes the exact scalar
 * conversions of ggml.h (x86-64's results on infinities and NaNs).
 * Q1_0's scale is a sequential sum: eight blocks are summed side by side.
 *
 * With an importance matrix, Q4_0 ... Q5_1 are ggml's quantize_row_q*_impl: a search per
 * block (make_qx_quants for Q4_0 and Q5_0, make_qkx3_quants for Q4_1 and Q5_1) with the
 * weights qw * sqrtf(sigma2 + x*x), sigma2 the mean square of the block's whole row,
 * which native.c's driver computes once per row (kiln_np._quants.encode_basic says what
 * the searches compute).  Eight blocks run side by side, one a lane.
 */
#include <float.h>
#include <math.h>

#include "ggml.h"
#include "ggml_quant_qkx.h"

/* The float32 bits of x as an int32 key that orders as the floats do (-0.0 below +0.0);
 * its own inverse. */
static ALWAYS_INLINE int32_t order_key(float x) {
    const int32_t s = (int32_t)ggml_f32_bits(x);
    return s >= 0 ? s : s ^ 0x7FFFFFFF;
}

static ALWAYS_INLINE float from_key(int32_t k) {
    return ggml_bits_f32((uint32_t)(k >= 0 ? k : k ^ 0x7FFFFFFF));
}

/* max |x[j]|, j < n: as bits, |x| orders as its bits do. */
static ALWAYS_INLINE float absmax(const float *x, int n) {
    uint32_t m = 0;
    for (int j = 0; j < n; j++) {
        const uint32_t b = ggml_f32_bits(x[j]) & 0x7FFFFFFFu;
        m = m > b ? m : b;
    }
    return ggml_bits_f32(m);
}

/* C's roundf of a float with |v| < 2**31, as an int, branch-free. */
static ALWAYS_INLINE int32_t round_small(float v) {
    const int32_t t = (int32_t)v;
    const float r = v - (float)t; /* exact */
    return t + (r >= 0.5f) - (r <= -0.5f);
}

static ALWAYS_INLINE int finite_f32(float v) { return ggml_fabsf(v) <= FLT_MAX; }

/* Eight bytes, each 0 or 1, as the bits of one byte (the first the least significant):
 * their little-endian word times 0x0102040810204080 gathers bit 8b into bit 56 + b
 * without carries. */
static ALWAYS_INLINE uint8_t gather_bits(const uint8_t *bit) {
    uint64_t w = 0;
    for (int b = 0; b < 8; b++) {
        w |= (uint64_t)bit[b] << (8 * b);
    }
    return (uint8_t)((w * 0x0102040810204080u) >> 56);
}

/* One quant of Q4_0 ... Q5_1: MIN(top, (int8_t)v) as a byte (top 255: (uint8_t)v).
 * fast: v is known to lie in (-1, 128), where C's conversion is (int32_t)v. */
static ALWAYS_INLINE int32_t small_q(float v, int top, int fast) {
    const int32_t t = fast ? (int32_t)v : (int8_t)ggml_c_int(v);
    return (uint8_t)(t < top ? t : top);
}

/* The 32 quants of a block, v = x*id + add (offset: (x - min)*id + add), as ggml packs
 * them: nib[j] = q[j] | q[j + 16] << 4 (five bits: the low nibbles, and qh's bit j
 * is bit 4 of q[j], little-endian). */
static ALWAYS_INLINE void quants32(const float *x, float min, float id, float add, int top,
                                   int offset, int five, int fast, uint8_t *nib,
                                   uint8_t *qh) {
    uint8_t b[16], bit[32];
    for (int j = 0; j < 16; j++) {
        const float x0 = offset ? x[j] - min : x[j];
        const float x1 = offset ? x[j + 16] - min : x[j + 16];
        const int32_t a = small_q(x0 * id + add, top, fast);
        const int32_t c = small_q(x1 * id + add, top, fast);
        b[j] = (uint8_t)((five ? a & 0x0F : a) | (c << 4));
        bit[j] = (uint8_t)((a >> 4) & 1);
        bit[j + 16] = (uint8_t)((c >> 4) & 1);
    }
    memcpy(nib, b, 16);
    if (five) {
        for (int k = 0; k < 4; k++) {
            qh[k] = gather_bits(bit + 8 * k);
        }
    }
}

/* Q4_0 / Q5_0: d = max / -divisor (max the first element of largest magnitude),
 * q = MIN(top, (int8_t)(x*id + divisor + 0.5f)). */
static ALWAYS_INLINE void centred(const float *x, uint8_t *y, float divisor, int top,
                                  int five) {
    /* ggml's `if (amax < fabsf(v)) { amax = fabsf(v); max = v; }`: max is the first
     * element of largest magnitude (+0.0 when all are zero).  Only its sign is left to
     * find (2j + sign, least first); meanwhile the divisions run on |max|, as
     * max / -divisor and 1/d are -(|max| / divisor) and -(1/(|max| / divisor)) for a
     * positive max, +() for a negative one. */
    const float am = absmax(x, 32);
    const uint32_t am_bits = ggml_f32_bits(am);
    int first = 64;
    for (int j = 0; j < 32; j++) {
        const uint32_t u = ggml_f32_bits(x[j]);
        const int c = (u & 0x7FFFFFFFu) == am_bits ? (int)(2 * j + (u >> 31)) : 64;
        first = first < c ? first : c;
    }
    const float da = am / divisor;
    const float ia = 1.0f / da;
    const int negative = (first & 1) && am_bits != 0;
    const float d = negative ? da : -da;
    const float id = d != 0.0f ? (negative ? ia : -ia) : 0.0f;
    const float add = divisor + 0.5f;
    ggml_put_u16(y, ggml_f32_to_f16(d));
    uint8_t *nib = y + (five ? 6 : 2);
    if (finite_f32(id)) { /* x*id + add in [0.49, 16.51] (Q4_0), [0.49, 32.51] (Q5_0) */
        quants32(x, 0.0f, id, add, top, 0, five, 1, nib, y + 2);
    } else {
        quants32(x, 0.0f, id, add, top, 0, five, 0, nib, y + 2);
    }
}

/* Q4_1 / Q5_1: d = (max - min) / levels, m = min (the first element equal to the
 * least), q = MIN(top, (int8_t)((x - min)*id + 0.5f)). */
static ALWAYS_INLINE void offset(const float *x, uint8_t *y, float levels, int top, int five) {
    int32_t lo = INT32_MAX, hi = INT32_MIN;
    for (int j = 0; j < 32; j++) {
        const int32_t k = order_key(x[j]);
        lo = lo < k ? lo : k;
        hi = hi > k ? hi : k;
    }
    float min = from_key(lo);
    const float max = from_key(hi);
    if (min == 0.0f) { /* ggml keeps the first zero, whatever its sign */
        int j = 0;
        while (x[j] != 0.0f) {
            j++;
        }
        min = x[j];
    }
    /* when max == min both are the block's first element, and max - min is +0.0 */
    const float range = max == min ? 0.0f : max - min;
    const float d = range / levels;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    ggml_put_u16(y, ggml_f32_to_f16(d));
    ggml_put_u16(y + 2, ggml_f32_to_f16(min));
    uint8_t *nib = y + (five ? 8 : 4);
    if (finite_f32(range) && finite_f32(id)) { /* (x - min)*id + 0.5f in [0.5, levels + .51] */
        quants32(x, min, id, 0.5f, top, 1, five, 1, nib, y + 4);
    } else {
        quants32(x, min, id, 0.5f, top, 1, five, 0, nib, y + 4);
    }
}

/* Q4_0: d = max / -8, 16 bytes q[j] | q[j+16] << 4. */
static VECTOR_CLONES ptrdiff_t enc_q4_0(const float *restrict src, uint8_t *restrict dst,
                                   ptrdiff_t blocks) {
    for (ptrdiff_t i = 0; i < blocks; i++) {
        centred(src + 32 * i, dst + 18 * i, 8.0f, 15, 0);
    }
    return -1;
}

/* Q4_1: d = (max - min) / 15, m, 16 bytes of nibbles. */
static VECTOR_CLONES ptrdiff_t enc_q4_1(const float *restrict src, uint8_t *restrict dst,
                                   ptrdiff_t blocks) {
    for (ptrdiff_t i = 0; i < blocks; i++) {
        offset(src + 32 * i, dst + 20 * i, 15.0f, 15, 0);
    }
    return -1;
}

/* Q5_0: d = max / -16, qh (the fifth bits), the low nibbles. */
static VECTOR_CLONES ptrdiff_t enc_q5_0(const float *restrict src, uint8_t *restrict dst,
                                   ptrdiff_t blocks) {
    for (ptrdiff_t i = 0; i < blocks; i++) {
        centred(src + 32 * i, dst + 22 * i, 16.0f, 31, 1);
    }
    return -1;
}

/* Q5_1: d = (max - min) / 31, m, qh, the low nibbles; q = (uint8_t)((x - min)*id + 0.5f). */
static VECTOR_CLONES ptrdiff_t enc_q5_1(const float *restrict src, uint8_t *restrict dst,
                                   ptrdiff_t blocks) {
    for (ptrdiff_t i = 0; i < blocks; i++) {
        offset(src + 32 * i, dst + 24 * i, 31.0f, 255, 1);
    }
    return -1;
}

/* Q8_0: d = max |x| / 127, q = roundf(x / d) as int8. */
static VECTOR_CLONES ptrdiff_t enc_q8_0(const float *restrict src, uint8_t *restrict dst,
                                   ptrdiff_t blocks) {
    for (ptrdiff_t i = 0; i < blocks; i++) {
        const float *x = src + 32 * i;
        uint8_t *y = dst + 34 * i;
        const float d = absmax(x, 32) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        ggml_put_u16(y, ggml_f32_to_f16(d));
        if (finite_f32(id)) { /* |x*id| <= 127.0001 */
            for (int j = 0; j < 32; j++) {
                y[2 + j] = (uint8_t)round_small(x[j] * id);
            }
        } else {
            for (int j = 0; j < 32; j++) {
                y[2 + j] = (uint8_t)ggml_c_int(ggml_roundf(x[j] * id));
            }
        }
    }
    return -1;
}

/* Q1_0: d = (sum of |x| in order) / 128, bit j set when x[j] >= 0 (-0.0 too). */
static ALWAYS_INLINE void q1_0_bits(const float *x, uint8_t *y) {
    uint8_t bit[128];
    for (int j = 0; j < 128; j++) {
        bit[j] = x[j] >= 0.0f;
    }
    for (int k = 0; k < 16; k++) {
        y[k] = gather_bits(bit + 8 * k);
    }
}

static VECTOR_CLONES ptrdiff_t enc_q1_0(const float *restrict src, uint8_t *restrict dst,
                                   ptrdiff_t blocks) {
    ptrdiff_t i = 0;
    for (; i + 8 <= blocks; i += 8) { /* eight sequential sums side by side */
        float sum[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
        const float *x = src + 128 * i;
        for (int j = 0; j < 128; j++) {
            for (int b = 0; b < 8; b++) {
                sum[b] += ggml_fabsf(x[128 * b + j]);
            }
        }
        for (int b = 0; b < 8; b++) {
            ggml_put_u16(dst + 18 * (i + b), ggml_f32_to_f16(sum[b] / 128.0f));
            q1_0_bits(x + 128 * b, dst + 18 * (i + b) + 2);
        }
    }
    for (; i < blocks; i++) {
        const float *x = src + 128 * i;
        float sum = 0.0f;
        for (int j = 0; j < 128; j++) {
            sum += ggml_fabsf(x[j]);
        }
        ggml_put_u16(dst + 18 * i, ggml_f32_to_f16(sum / 128.0f));
        q1_0_bits(x, dst + 18 * i + 2);
    }
    return -1;
}

/* Q2_0: d = max |x|, q = clamp((int)roundf(x / d) + 1, 0, 3), four a byte from the low bits. */
static VECTOR_CLONES ptrdiff_t enc_q2_0(const float *restrict src, uint8_t *restrict dst,
                                   ptrdiff_t blocks) {
    for (ptrdiff_t i = 0; i < blocks; i++) {
        const float *x = src + 64 * i;
        uint8_t *y = dst + 18 * i;
        const float d = absmax(x, 64);
        const float id = d > 0.0f ? 1.0f / d : 0.0f;
        ggml_put_u16(y, ggml_f32_to_f16(d));
        uint8_t q[64];
        if (finite_f32(id)) { /* |x*id| <= 1.0001 */
            for (int j = 0; j < 64; j++) {
                const int32_t t = round_small(x[j] * id) + 1;
                q[j] = (uint8_t)(t < 0 ? 0 : t > 3 ? 3 : t);
            }
        } else {
            for (int j = 0; j < 64; j++) {
                const int32_t t = ggml_c_int(ggml_roundf(x[j] * id)) + 1;
                q[j] = (uint8_t)(t < 0 ? 0 : t > 3 ? 3 : t);
            }
        }
        for (int k = 0; k < 16; k++) { /* q[4k + n] at bits 8n of v, to bits 2n */
            const uint32_t v = (uint32_t)q[4 * k] | (uint32_t)q[4 * k + 1] << 8 |
                               (uint32_t)q[4 * k + 2] << 16 | (uint32_t)q[4 * k + 3] << 24;
            y[2 + k] = (uint8_t)(v | v >> 6 | v >> 12 | v >> 18);
        }
    }
    return -1;
}

/* TQ1_0 / TQ2_0: d = max |x| over 256, trit t = lroundf(x / d) + 1 as an int.  When 1/d
 * overflows every x*id is an infinity or a NaN (0 * inf): lroundf gives LONG_MIN, and
 * LONG_MIN + 1 kept in an int is 1. */
static ALWAYS_INLINE float trits256(const float *x, uint8_t *t) {
    const float d = absmax(x, 256);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    if (finite_f32(id)) { /* |x*id| <= 1.0001 */
        for (int j = 0; j < 256; j++) {
            t[j] = (uint8_t)(round_small(x[j] * id) + 1);
        }
    } else {
        memset(t, 1, 256);
    }
    return d;
}

/* ggml's byte of 5 trits (the first most significant): ceil(value * 256 / 243). */
static ALWAYS_INLINE uint8_t tq_byte(unsigned value) {
    return (uint8_t)((value * 256u + 242u) / 243u);
}

/* TQ1_0: qs[m] (m < 32) packs x[m + 32n], qs[32 + m] (m < 16) x[160 + m + 16n], n < 5;
 * qh[j] x[240 + j + 4n], n < 4, times 3; then d. */
static VECTOR_CLONES ptrdiff_t enc_tq1_0(const float *restrict src, uint8_t *restrict dst,
                                    ptrdiff_t blocks) {
    for (ptrdiff_t i = 0; i < blocks; i++) {
        uint8_t *y = dst + 54 * i;
        uint8_t t[256];
        const float d = trits256(src + 256 * i, t);
        for (int m = 0; m < 32; m++) {
            y[m] = tq_byte(t[m] * 81u + t[m + 32] * 27u + t[m + 64] * 9u + t[m + 96] * 3u +
                           t[m + 128]);
        }
        const uint8_t *u = t + 160;
        for (int m = 0; m < 16; m++) {
            y[32 + m] = tq_byte(u[m] * 81u + u[m + 16] * 27u + u[m + 32] * 9u + u[m + 48] * 3u +
                                u[m + 64]);
        }
        const uint8_t *h = t + 240;
        for (int j = 0; j < 4; j++) {
            y[48 + j] = tq_byte((h[j] * 27u + h[j + 4] * 9u + h[j + 8] * 3u + h[j + 12]) * 3u);
        }
        ggml_put_u16(y + 52, ggml_f32_to_f16(d));
    }
    return -1;
}

/* TQ2_0: byte 32h + m holds x[128h + m + 32n] in bits 2n, n < 4; then d. */
static VECTOR_CLONES ptrdiff_t enc_tq2_0(const float *restrict src, uint8_t *restrict dst,
                                    ptrdiff_t blocks) {
    for (ptrdiff_t i = 0; i < blocks; i++) {
        uint8_t *y = dst + 66 * i;
        uint8_t t[256];
        const float d = trits256(src + 256 * i, t);
        for (int h = 0; h < 2; h++) {
            const uint8_t *u = t + 128 * h;
            for (int m = 0; m < 32; m++) {
                y[32 * h + m] =
                    (uint8_t)(u[m] | (u[m + 32] << 2) | (u[m + 64] << 4) | (u[m + 96] << 6));
            }
        }
        ggml_put_u16(y + 64, ggml_f32_to_f16(d));
    }
    return -1;
}

/* ---- With an importance matrix: quantize_row_q{4,5}_{0,1}_impl ----------------------
 * Eight blocks at a time, one a lane (xt[j][k]: element j of block k; a last group of
 * fewer fills its other lanes with zeros, never written), each lane with its own sums
 * in ggml's element order. */
#define LANES 8
/* The loops over the lanes stay loops, for the vectoriser: fully unrolled, GCC would
 * vectorise the loop over the elements instead, as in-order sums. */
#if defined(__GNUC__) && !defined(__clang__)
#define ACROSS _Pragma("GCC unroll 1")
#else
#define ACROSS
#endif
#define GROUP_MAX_EPS 1e-15f
#define QX_TRIES 19 /* make_qx_quants' first try (is = 0), then is = -9 .. -1, 1 .. 9 */

/* ggml's weights of the group's blocks: w = qw * sqrtf(sigma2 + x*x). */
static ALWAYS_INLINE void group(const float *restrict src, const float *restrict qw,
                                float sigma2, int n, float xt[32][LANES],
                                float wt[32][LANES]) {
    for (int j = 0; j < 32; j++) {
        ACROSS for (int k = 0; k < LANES; k++) {
            const float x = k < n ? src[32 * k + j] : 0.0f;
            xt[j][k] = x;
            wt[j][k] = k < n ? qw[32 * k + j] * sqrtf(sigma2 + x * x) : 0.0f;
        }
    }
}

/* (float)MAX(lo, MIN(hi, nearest_int(v))) for |v| < 2**22, in float lanes only: the
 * same float addition rounds v, and subtracting 1.5 * 2**23 again is exact. */
static ALWAYS_INLINE float round_clamp(float v, float lo, float hi) {
    float r = (v + 12582912.0f) - 12582912.0f;
    r = r < lo ? lo : r;
    return r > hi ? hi : r;
}

/* make_qx_quants(32, nmax, x, L, 1, w) of the LANES blocks: scale[k] and the quants
 * Lt[j][k] (l + nmax; 0 for a block below GROUP_MAX_EPS). */
static ALWAYS_INLINE void qx_quants(const float xt[32][LANES], const float wt[32][LANES],
                                    int nmax, float scale[LANES], uint8_t Lt[32][LANES]) {
    float mx[LANES] = {0}, amax[LANES] = {0};
    for (int j = 0; j < 32; j++) {
        for (int k = 0; k < LANES; k++) { /* ggml: if (ax > amax) { amax = ax; max = x; } */
            const float v = xt[j][k], a = ggml_fabsf(v);
            const int bigger = a > amax[k];
            amax[k] = bigger ? a : amax[k];
            mx[k] = bigger ? v : mx[k];
        }
    }
    const float lo = (float)-nmax, hi = (float)(nmax - 1);
    float iscale[QX_TRIES][LANES], sumlx[QX_TRIES][LANES], suml2[QX_TRIES][LANES];
    for (int t = 0; t < QX_TRIES; t++) {
        const int is = t == 0 ? 0 : t <= 9 ? t - 10 : t - 9;
        const float num = -((float)nmax + 0.1f * (float)is);
        for (int k = 0; k < LANES; k++) {
            iscale[t][k] = num / mx[k];
            sumlx[t][k] = 0.0f;
            suml2[t][k] = 0.0f;
        }
    }
    for (int j = 0; j < 32; j++) {
        for (int t = 0; t < QX_TRIES; t++) {
            for (int k = 0; k < LANES; k++) {
                /* |iscale * x| <= nmax + 0.9 where amax >= GROUP_MAX_EPS (no element
                 * exceeds max); the other lanes are discarded */
                const float l = round_clamp(iscale[t][k] * xt[j][k], lo, hi);
                const float w = wt[j][k];
                sumlx[t][k] += (w * xt[j][k]) * l;
                suml2[t][k] += (w * l) * l;
            }
        }
    }
    float best[LANES], chosen[LANES];
    for (int k = 0; k < LANES; k++) {
        scale[k] = suml2[0][k] != 0.0f ? sumlx[0][k] / suml2[0][k] : 0.0f; /* a NaN is not 0 */
        best[k] = scale[k] * sumlx[0][k];
        chosen[k] = iscale[0][k];
    }
    for (int t = 1; t < QX_TRIES; t++) {
        for (int k = 0; k < LANES; k++) {
            const float slx = sumlx[t][k], sl2 = suml2[t][k], s = slx / sl2;
            const int better = (sl2 > 0.0f) & (slx * slx > best[k] * sl2);
            scale[k] = better ? s : scale[k];
            best[k] = better ? s * slx : best[k];
            chosen[k] = better ? iscale[t][k] : chosen[k];
        }
    }
    for (int k = 0; k < LANES; k++) {
        const int live = amax[k] >= GROUP_MAX_EPS;
        scale[k] = live ? scale[k] : 0.0f;
        chosen[k] = live ? chosen[k] : 0.0f; /* round_clamp(0) = 0: less nmax below */
    }
    for (int j = 0; j < 32; j++) {
        for (int k = 0; k < LANES; k++) {
            const int l = (int)round_clamp(chosen[k] * xt[j][k], lo, hi);
            Lt[j][k] = (uint8_t)(l + (amax[k] >= GROUP_MAX_EPS ? nmax : 0));
        }
    }
}

/* make_qkx3_quants(32, nmax, x, w, L, &the_min, Laux, -0.9f, 0.05f, 36, false) of the
 * LANES blocks (ggml's make_qkx2_quants with these weights: ggml_quant_qkx.h): scale[k],
 * min[k] (ggml's min, -the_min) and the levels Lt[j][k]. */
static ALWAYS_INLINE void qkx3_quants(const float xt[32][LANES], const float wt[32][LANES],
                                      int nmax, float scale[LANES], float min[LANES],
                                      uint8_t Lt[32][LANES]) {
    float the_min[LANES], is[LANES], lo[LANES];
    qkx2_search(&xt[0][0], &wt[0][0], 32, LANES, nmax, -0.9f, 0.05f, 36, 0, scale, the_min, is,
                lo);
    ACROSS for (int k = 0; k < LANES; k++) {
        min[k] = -the_min[k];
    }
    for (int j = 0; j < 32; j++) {
        ACROSS for (int k = 0; k < LANES; k++) {
            Lt[j][k] = (uint8_t)clamp_level(is[k] * (xt[j][k] - lo[k]), nmax);
        }
    }
}

/* Block k's quants (Lt[.][k]) as ggml packs them: nibbles q[j] | q[j + 16] << 4 at nib,
 * and (five) their fifth bits in qh (bit j of the little-endian word: bit 4 of q[j]). */
static ALWAYS_INLINE void pack_lane(const uint8_t Lt[32][LANES], int k, int five, uint8_t *nib,
                                    uint8_t *qh) {
    uint8_t bit[32];
    for (int j = 0; j < 16; j++) {
        nib[j] = (uint8_t)((Lt[j][k] & 0x0F) | (Lt[j + 16][k] << 4));
        bit[j] = (uint8_t)(Lt[j][k] >> 4);
        bit[j + 16] = (uint8_t)(Lt[j + 16][k] >> 4);
    }
    if (five) {
        for (int b = 0; b < 4; b++) {
            qh[b] = gather_bits(bit + 8 * b);
        }
    }
}

/* Q4_0 / Q5_0 (five) with weights: d = make_qx_quants' scale, then the quants. */
static ALWAYS_INLINE ptrdiff_t centred_weighted(const float *restrict src,
                                                const float *restrict qw, float sigma2,
                                                uint8_t *restrict dst, ptrdiff_t blocks,
                                                int five) {
    const int bytes = five ? 22 : 18, nmax = five ? 16 : 8;
    for (ptrdiff_t i0 = 0; i0 < blocks; i0 += LANES) {
        const int n = blocks - i0 < LANES ? (int)(blocks - i0) : LANES;
        float xt[32][LANES], wt[32][LANES], scale[LANES];
        uint8_t Lt[32][LANES];
        group(src + 32 * i0, qw + 32 * i0, sigma2, n, xt, wt);
        qx_quants(xt, wt, nmax, scale, Lt);
        for (int k = 0; k < n; k++) {
            uint8_t *y = dst + bytes * (i0 + k);
            ggml_put_u16(y, ggml_f32_to_f16(scale[k]));
            pack_lane(Lt, k, five, y + (five ? 6 : 2), y + 2);
        }
    }
    return -1;
}

/* Q4_1 / Q5_1 (five) with weights: d and m = make_qkx3_quants' scale and min. */
static ALWAYS_INLINE ptrdiff_t offset_weighted(const float *restrict src,
                                               const float *restrict qw, float sigma2,
                                               uint8_t *restrict dst, ptrdiff_t blocks,
                                               int five) {
    const int bytes = five ? 24 : 20, nmax = five ? 31 : 15;
    for (ptrdiff_t i0 = 0; i0 < blocks; i0 += LANES) {
        const int n = blocks - i0 < LANES ? (int)(blocks - i0) : LANES;
        float xt[32][LANES], wt[32][LANES], scale[LANES], min[LANES];
        uint8_t Lt[32][LANES];
        group(src + 32 * i0, qw + 32 * i0, sigma2, n, xt, wt);
        qkx3_quants(xt, wt, nmax, scale, min, Lt);
        for (int k = 0; k < n; k++) {
            uint8_t *y = dst + bytes * (i0 + k);
            ggml_put_u16(y, ggml_f32_to_f16(scale[k]));
            ggml_put_u16(y + 2, ggml_f32_to_f16(min[k]));
            pack_lane(Lt, k, five, y + (five ? 8 : 4), y + 4);
        }
    }
    return -1;
}

static VECTOR_CLONES ptrdiff_t enc_q4_0_w(const float *restrict src, const float *restrict qw,
                                          float sigma2, uint8_t *restrict dst, ptrdiff_t blocks) {
    return centred_weighted(src, qw, sigma2, dst, blocks, 0);
}

static VECTOR_CLONES ptrdiff_t enc_q5_0_w(const float *restrict src, const float *restrict qw,
                                          float sigma2, uint8_t *restrict dst, ptrdiff_t blocks) {
    return centred_weighted(src, qw, sigma2, dst, blocks, 1);
}

static VECTOR_CLONES ptrdiff_t enc_q4_1_w(const float *restrict src, const float *restrict qw,
                                          float sigma2, uint8_t *restrict dst, ptrdiff_t blocks) {
    return offset_weighted(src, qw, sigma2, dst, blocks, 0);
}

static VECTOR_CLONES ptrdiff_t enc_q5_1_w(const float *restrict src, const float *restrict qw,
                                          float sigma2, uint8_t *restrict dst, ptrdiff_t blocks) {
    return offset_weighted(src, qw, sigma2, dst, blocks, 1);
}

const GGMLEncoder kiln_ggml_enc_basic[] = {
    {2, 32, 18, enc_q4_0, NULL, enc_q4_0_w},
    {3, 32, 20, enc_q4_1, NULL, enc_q4_1_w},
    {6, 32, 22, enc_q5_0, NULL, enc_q5_0_w},
    {7, 32, 24, enc_q5_1, NULL, enc_q5_1_w},
    {8, 32, 34, enc_q8_0},
    {34, 256, 54, enc_tq1_0},
    {35, 256, 66, enc_tq2_0},
    {41, 128, 18, enc_q1_0},
    {42, 64, 18, enc_q2_0},
    {-1, 0, 0, NULL},
};
