/* The statistics kernel behind kiln_np._kernels.moments: one pass over float32,
 * bfloat16 or IEEE float16 elements giving the count of finite values, their exact
 * minimum and maximum, their mean and sum of squared deviations (m2), and the counts
 * of zeros (+0 and -0), NaNs (every pattern) and each infinity.
 *
 * The elements go a block of BLOCK at a time, in two passes while the block is in L1:
 * its sum (in double; the values kept as doubles in a 16 KiB scratch), then the sum of
 * the squared deviations from the block's mean over that scratch;
 * the blocks' (count, mean, m2) are merged by Chan's update in a binary-counter order
 * (block 2k with 2k + 1, then pairs of pairs...), so the rounding error grows with the
 * logarithm of the element count.  Every sum runs over LANES independent accumulators
 * (element i of a step into lane i), which the compiler turns into SIMD registers; as
 * the order of every addition is fixed by the source, each build (AVX2 clone, SSE2
 * baseline, any compiler without fused multiply-adds) gives the same bits.
 *
 * A block's first pass assumes its elements finite: the sum of finite float32 values
 * in double cannot overflow, so the block is all finite exactly when that sum is.  A
 * block that is not goes through the masked passes, which also count the NaNs and the
 * infinities.  min and max of a block are taken with `x < lo ? x : lo`, which a NaN
 * never wins. */
#include "moments.h"

#define LANES 16
#define BLOCK 2048 /* elements: 4-8 KiB of source, 16 KiB of doubles, all in L1 */

typedef struct {
    int64_t n;
    double mean, m2;
} Part;

/* Chan, Golub and LeVeque's update: the moments of a's values followed by b's.
 * kiln_np._kernels.moments.Moments.merge is the same arithmetic. */
static Part merge(Part a, Part b) {
    if (b.n == 0) {
        return a;
    }
    if (a.n == 0) {
        return b;
    }
    const int64_t n = a.n + b.n;
    const double delta = b.mean - a.mean;
    const Part out = {n, a.mean + delta * ((double)b.n / (double)n),
                      a.m2 + b.m2 + delta * delta * ((double)a.n * (double)b.n / (double)n)};
    return out;
}

typedef struct {
    float lo[LANES], hi[LANES]; /* the finite minimum and maximum of each lane */
    int64_t zeros, nan, posinf, neginf;
} Totals;

/* The second pass over an all-finite block of n elements, dx its values (the first pass
 * gave their sum in s): the block's Part, its zeros and minimum and maximum per lane
 * added to t. */
static ALWAYS_INLINE Part finite_block(const double *restrict dx, ptrdiff_t n,
                                       const double *s, const int32_t *z, const float *lo,
                                       const float *hi, Totals *t) {
    const double mean = kiln_lanes_sum(LANES, s) / (double)n;
    const ptrdiff_t full = n - n % LANES;
    double q[LANES] = {0};
    for (ptrdiff_t i = 0; i < full; i += LANES) {
        for (int j = 0; j < LANES; j++) {
            const double d = dx[i + j] - mean;
            q[j] += d * d;
        }
    }
    for (ptrdiff_t i = full; i < n; i++) {
        const double d = dx[i] - mean;
        q[i - full] += d * d;
    }
    for (int j = 0; j < LANES; j++) {
        t->zeros += z[j];
        t->lo[j] = lo[j] < t->lo[j] ? lo[j] : t->lo[j];
        t->hi[j] = hi[j] > t->hi[j] ? hi[j] : t->hi[j];
    }
    const Part out = {n, mean, kiln_lanes_sum(LANES, q)};
    return out;
}

/* Both passes over a block of n elements holding a NaN or an infinity, masked. */
static ALWAYS_INLINE Part masked_block(const uint8_t *restrict p, ptrdiff_t n, int kind,
                                       Totals *t) {
    double s[LANES] = {0}, q[LANES] = {0};
    int64_t finite = 0;
    for (ptrdiff_t i = 0; i < n; i++) {
        const float x = kiln_float_at(p, i, kind);
        const uint32_t u = ggml_f32_bits(x), a = u & 0x7FFFFFFFu;
        const int j = (int)(i % LANES);
        if (a < 0x7F800000u) {
            finite++;
            s[j] += x;
            t->zeros += a == 0;
            t->lo[j] = x < t->lo[j] ? x : t->lo[j];
            t->hi[j] = x > t->hi[j] ? x : t->hi[j];
        } else if (a > 0x7F800000u) {
            t->nan++;
        } else if (u == 0x7F800000u) {
            t->posinf++;
        } else {
            t->neginf++;
        }
    }
    if (finite == 0) {
        const Part none = {0, 0.0, 0.0};
        return none;
    }
    const double mean = kiln_lanes_sum(LANES, s) / (double)finite;
    for (ptrdiff_t i = 0; i < n; i++) {
        const float x = kiln_float_at(p, i, kind);
        if ((ggml_f32_bits(x) & 0x7FFFFFFFu) < 0x7F800000u) {
            const double d = (double)x - mean;
            q[i % LANES] += d * d;
        }
    }
    const Part out = {finite, mean, kiln_lanes_sum(LANES, q)};
    return out;
}

/* The whole range, inlined once per kind so that `kind` is a constant in the loops.  The
 * first pass over a block keeps its values as doubles in L1 scratch for the second. */
static ALWAYS_INLINE void moments_loop(const uint8_t *restrict src, ptrdiff_t n, int kind,
                                       KilnMoments *out) {
    const size_t size = kind == KILN_MOMENTS_F32 ? 4 : 2;
    const float inf = ggml_bits_f32(0x7F800000u);
    Totals t = {.zeros = 0, .nan = 0, .posinf = 0, .neginf = 0};
    for (int j = 0; j < LANES; j++) {
        t.lo[j] = inf;
        t.hi[j] = -inf;
    }
    Part stack[64]; /* stack[k]: the merge of 2**level(k) blocks, levels decreasing */
    int top = 0;
    ptrdiff_t block = 0;
    double dx[BLOCK]; /* the block's values, for the second pass */
    for (ptrdiff_t start = 0; start < n; start += BLOCK, block++) {
        const ptrdiff_t count = n - start < BLOCK ? n - start : BLOCK;
        const uint8_t *p = src + (size_t)start * size;
        const ptrdiff_t full = count - count % LANES;
        double s[LANES] = {0};
        int32_t z[LANES] = {0};
        float lo[LANES], hi[LANES];
        for (int j = 0; j < LANES; j++) {
            lo[j] = inf;
            hi[j] = -inf;
        }
        for (ptrdiff_t i = 0; i < full; i += LANES) {
            for (int j = 0; j < LANES; j++) {
                const float x = kiln_float_at(p, i + j, kind);
                dx[i + j] = x;
                s[j] += x;
                z[j] += x == 0.0f;
                lo[j] = x < lo[j] ? x : lo[j];
                hi[j] = x > hi[j] ? x : hi[j];
            }
        }
        for (ptrdiff_t i = full; i < count; i++) {
            const float x = kiln_float_at(p, i, kind);
            const int j = (int)(i - full);
            dx[i] = x;
            s[j] += x;
            z[j] += x == 0.0f;
            lo[j] = x < lo[j] ? x : lo[j];
            hi[j] = x > hi[j] ? x : hi[j];
        }
        const double sum = kiln_lanes_sum(LANES, s);
        stack[top++] = sum - sum == 0.0 ? finite_block(dx, count, s, z, lo, hi, &t)
                                        : masked_block(p, count, kind, &t);
        for (ptrdiff_t k = block + 1; (k & 1) == 0; k >>= 1) { /* a carry: merge a pair */
            top--;
            stack[top - 1] = merge(stack[top - 1], stack[top]);
        }
    }
    Part all = {0, 0.0, 0.0};
    while (top > 0) {
        all = merge(stack[--top], all);
    }
    float lo = inf, hi = -inf;
    for (int j = 0; j < LANES; j++) {
        lo = t.lo[j] < lo ? t.lo[j] : lo;
        hi = t.hi[j] > hi ? t.hi[j] : hi;
    }
    out->finite = all.n;
    out->zeros = t.zeros;
    out->nan = t.nan;
    out->posinf = t.posinf;
    out->neginf = t.neginf;
    out->min = lo;
    out->max = hi;
    out->mean = all.mean;
    out->m2 = all.m2;
}

VECTOR_CLONES static void moments_f32(const uint8_t *restrict src, ptrdiff_t n, KilnMoments *out) {
    moments_loop(src, n, KILN_MOMENTS_F32, out);
}

VECTOR_CLONES static void moments_bf16(const uint8_t *restrict src, ptrdiff_t n,
                                       KilnMoments *out) {
    moments_loop(src, n, KILN_MOMENTS_BF16, out);
}

VECTOR_CLONES static void moments_f16(const uint8_t *restrict src, ptrdiff_t n, KilnMoments *out) {
    moments_loop(src, n, KILN_MOMENTS_F16, out);
}

void kiln_moments(int kind, const uint8_t *src, ptrdiff_t n, KilnMoments *out) {
    if (kind == KILN_MOMENTS_F32) {
        moments_f32(src, n, out);
    } else if (kind == KILN_MOMENTS_BF16) {
        moments_bf16(src, n, out);
    } else {
        moments_f16(src, n, out);
    }
}
