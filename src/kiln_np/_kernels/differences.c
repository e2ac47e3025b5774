/* The differences kernel behind kiln_np._kernels.differences: two arrays of float32,
 * bfloat16 or IEEE float16 elements (each side its own kind) read once, element i
 * against element i, for kiln_np.compare: how many places differ and the first of
 * them, the NaN places whose bits differ and the zeros whose signs differ, the largest
 * |a - b| and |a - b| / max(|a|, |b|) over the differing places with the first place of
 * each, and, over the places where both sides are finite, the float64 sums of a*a,
 * b*b, a*b and (a - b)^2 that the error figures (RMSE, SNR, cosine) are made of.
 *
 * Every element is widened exactly to float32 (a NaN keeps its payload), then to
 * double; the arithmetic is double, as numpy's float64 would do it (setup.py compiles
 * with -ffp-contract=off: no fused multiply-add).  The elements go a block of BLOCK
 * at a time, each sum over LANES independent accumulators that the compiler turns
 * into SIMD registers, the blocks' sums added in a binary-counter order (block 2k
 * with 2k + 1, then pairs of pairs), so the rounding error grows with the logarithm
 * of the element count.  The order of every addition is fixed by the source: every
 * build gives the same bits.
 *
 * A block is widened into two L1 scratch arrays of doubles, then its first pass runs
 * over them, branch-free on 64-bit lanes (it vectorizes), assuming both sides finite:
 * a square of a finite float32 is below 2**256, so the block is all finite exactly
 * when its sums of squares are.  A block that is not is read again by the masked
 * pass, which also sorts out the NaNs and the infinities (a differing place where a
 * side is NaN or infinite counts inf in both maxima).  The first pass keeps only each
 * lane's largest errors; a block whose largest beats the range's so far is scanned
 * again for the first place holding it, which happens a few dozen times in a range,
 * so every maximum comes with its first place. */
#include "differences.h"

#include <math.h>

#include "moments.h"

#define LANES 8
#define BLOCK 1024 /* elements: 16 KiB of doubles and 4-8 KiB of sources, in L1 */

typedef struct {
    double aa, bb, ab, dd;
} Sums;

static Sums sums_add(Sums x, Sums y) {
    const Sums out = {x.aa + y.aa, x.bb + y.bb, x.ab + y.ab, x.dd + y.dd};
    return out;
}

/* A block's (or a range's) counts and maxima. */
typedef struct {
    int64_t differ, first, nan_bits, signed_zeros, nonfinite;
    double max_abs, max_rel;
    int64_t max_abs_at, max_rel_at;
} Counts;

/* b's maxima after a's: b wins only when larger (a holds the earlier places). */
static void counts_merge(Counts *a, const Counts *b) {
    a->differ += b->differ;
    a->first = a->first >= 0 ? a->first : b->first;
    a->nan_bits += b->nan_bits;
    a->signed_zeros += b->signed_zeros;
    a->nonfinite += b->nonfinite;
    if (b->max_abs > a->max_abs) {
        a->max_abs = b->max_abs;
        a->max_abs_at = b->max_abs_at;
    }
    if (b->max_rel > a->max_rel) {
        a->max_rel = b->max_rel;
        a->max_rel_at = b->max_rel_at;
    }
}

/* The bits of a double. */
static ALWAYS_INLINE uint64_t bits64(double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* |x - y| / max(|x|, |y|), and 0.0 where both are 0. */
static ALWAYS_INLINE double relative(double x, double y, double ad) {
    const double ax = fabs(x), ay = fabs(y), s = ax > ay ? ax : ay;
    return ad / (s + (double)(s == 0.0));
}

/* The masked pass over a block of n elements (indices from base): any values. */
static ALWAYS_INLINE Sums masked_block(const uint8_t *restrict a, int ka,
                                       const uint8_t *restrict b, int kb, ptrdiff_t n,
                                       int64_t base, Counts *c) {
    const double inf = (double)ggml_bits_f32(0x7F800000u);
    double aa[LANES] = {0}, bb[LANES] = {0}, ab[LANES] = {0}, dd[LANES] = {0};
    for (ptrdiff_t i = 0; i < n; i++) {
        const float x = kiln_float_at(a, i, ka), y = kiln_float_at(b, i, kb);
        const uint32_t ux = ggml_f32_bits(x), uy = ggml_f32_bits(y);
        const uint32_t mx = ux & 0x7FFFFFFFu, my = uy & 0x7FFFFFFFu;
        const int finite = mx < 0x7F800000u && my < 0x7F800000u;
        const int nans = mx > 0x7F800000u && my > 0x7F800000u;
        const double dx = x, dy = y, d = dx - dy;
        if (!(x == y || nans)) {
            double ad = inf, rel = inf;
            if (finite) {
                ad = fabs(d);
                rel = relative(dx, dy, ad);
            }
            c->differ++;
            if (c->first < 0) {
                c->first = base + i;
            }
            if (ad > c->max_abs) {
                c->max_abs = ad;
                c->max_abs_at = base + i;
            }
            if (rel > c->max_rel) {
                c->max_rel = rel;
                c->max_rel_at = base + i;
            }
        }
        c->nan_bits += nans && ux != uy;
        c->signed_zeros += (mx | my) == 0 && ux != uy;
        if (finite) {
            const int j = (int)(i % LANES);
            aa[j] += dx * dx;
            bb[j] += dy * dy;
            ab[j] += dx * dy;
            dd[j] += d * d;
        } else {
            c->nonfinite++;
        }
    }
    const Sums out = {kiln_lanes_sum(LANES, aa), kiln_lanes_sum(LANES, bb),
                      kiln_lanes_sum(LANES, ab), kiln_lanes_sum(LANES, dd)};
    return out;
}

/* The first place of xs, ys (n values) whose |x - y| (which 0) or relative error
 * (which 1) is `best`. */
static ALWAYS_INLINE int64_t first_at(const double *xs, const double *ys, ptrdiff_t n, int which,
                                      double best) {
    for (ptrdiff_t i = 0; i < n; i++) {
        const double ad = fabs(xs[i] - ys[i]);
        if ((which ? relative(xs[i], ys[i], ad) : ad) == best) {
            return i;
        }
    }
    return -1;
}

static ALWAYS_INLINE double lanes_max(const double *m) {
    double best = 0.0;
    for (int j = 0; j < LANES; j++) {
        best = m[j] > best ? m[j] : best;
    }
    return best;
}

/* Element i of the block's doubles into lane j: branch-free, on 64-bit lanes, so that
 * the loop vectorizes.  Where both values are 0 the relative error is 0/0, a NaN,
 * which `rel > best` never keeps. */
#define STEP(i, j)                                                                    \
    do {                                                                              \
        const double x = xs[i], y = ys[i], d = x - y, ad = fabs(d);                   \
        const double ax = fabs(x), ay = fabs(y), rel = ad / (ax > ay ? ax : ay);      \
        aa[j] += x * x;                                                               \
        bb[j] += y * y;                                                               \
        ab[j] += x * y;                                                               \
        dd[j] += d * d;                                                               \
        differ[j] += x != y;                                                          \
        mabs[j] = ad > mabs[j] ? ad : mabs[j];                                        \
        mrel[j] = rel > mrel[j] ? rel : mrel[j];                                      \
    } while (0)

/* A block of n elements (indices from base), widened into xs and ys, then the
 * unmasked pass over those doubles (branch-free, on 64-bit lanes: it vectorizes), or
 * the masked one when a side holds a NaN or an infinity.  Its counts go to c (fresh),
 * its sums out; the place of a maximum is looked for only when it beats the maximum so
 * far (so_far), the first differing place only when there is none so far. */
static ALWAYS_INLINE Sums block(const uint8_t *restrict a, int ka, const uint8_t *restrict b,
                                int kb, ptrdiff_t n, int64_t base, const Counts *so_far,
                                Counts *c, double *restrict xs, double *restrict ys) {
    for (ptrdiff_t i = 0; i < n; i++) {
        xs[i] = kiln_float_at(a, i, ka);
        ys[i] = kiln_float_at(b, i, kb);
    }
    double aa[LANES] = {0}, bb[LANES] = {0}, ab[LANES] = {0}, dd[LANES] = {0};
    double mabs[LANES] = {0}, mrel[LANES] = {0};
    int64_t differ[LANES] = {0};
    const ptrdiff_t full = n - n % LANES;
    for (ptrdiff_t i = 0; i < full; i += LANES) {
        for (int j = 0; j < LANES; j++) {
            STEP(i + j, j);
        }
    }
    for (ptrdiff_t i = full; i < n; i++) {
        STEP(i, i - full);
    }
    const Sums s = {kiln_lanes_sum(LANES, aa), kiln_lanes_sum(LANES, bb),
                    kiln_lanes_sum(LANES, ab), kiln_lanes_sum(LANES, dd)};
    if (!(s.aa + s.bb - (s.aa + s.bb) == 0.0)) { /* an infinity or a NaN on a side */
        return masked_block(a, ka, b, kb, n, base, c);
    }
    for (int j = 0; j < LANES; j++) {
        c->differ += differ[j];
    }
    if (c->differ < n) { /* equal places: zeros of different signs among them? */
        int64_t zeros = 0;
        for (ptrdiff_t i = 0; i < n; i++) {
            const uint64_t ux = bits64(xs[i]), uy = bits64(ys[i]);
            zeros += ((ux | uy) << 1 == 0) & (ux != uy);
        }
        c->signed_zeros = zeros;
    }
    if (c->differ == 0) {
        return s;
    }
    c->max_abs = lanes_max(mabs);
    c->max_rel = lanes_max(mrel);
    if (c->max_abs > so_far->max_abs) {
        c->max_abs_at = base + first_at(xs, ys, n, 0, c->max_abs);
    }
    if (c->max_rel > so_far->max_rel) {
        c->max_rel_at = base + first_at(xs, ys, n, 1, c->max_rel);
    }
    if (so_far->first < 0) {
        ptrdiff_t i = 0;
        while (xs[i] == ys[i]) {
            i++;
        }
        c->first = base + i;
    }
    return s;
}

#undef STEP

static const Counts NO_COUNTS = {0, -1, 0, 0, 0, 0.0, 0.0, -1, -1};

/* The whole range, inlined once per pair of kinds so that the kinds are constants in
 * the loops. */
static ALWAYS_INLINE void differences_loop(const uint8_t *restrict a, int ka,
                                           const uint8_t *restrict b, int kb, ptrdiff_t n,
                                           KilnDifferences *out) {
    const size_t sa = ka == KILN_MOMENTS_F32 ? 4 : 2, sb = kb == KILN_MOMENTS_F32 ? 4 : 2;
    Counts total = NO_COUNTS;
    Sums stack[64]; /* stack[k]: the sums of 2**level(k) blocks, levels decreasing */
    int top = 0;
    ptrdiff_t index = 0;
    double xs[BLOCK], ys[BLOCK]; /* the block's values */
    for (ptrdiff_t start = 0; start < n; start += BLOCK, index++) {
        const ptrdiff_t count = n - start < BLOCK ? n - start : BLOCK;
        Counts c = NO_COUNTS;
        stack[top++] = block(a + (size_t)start * sa, ka, b + (size_t)start * sb, kb, count,
                             (int64_t)start, &total, &c, xs, ys);
        counts_merge(&total, &c);
        for (ptrdiff_t k = index + 1; (k & 1) == 0; k >>= 1) { /* a carry: add a pair */
            top--;
            stack[top - 1] = sums_add(stack[top - 1], stack[top]);
        }
    }
    Sums all = {0.0, 0.0, 0.0, 0.0};
    while (top > 0) {
        all = sums_add(stack[--top], all);
    }
    out->differ = total.differ;
    out->first = total.first;
    out->nan_bits = total.nan_bits;
    out->signed_zeros = total.signed_zeros;
    out->nonfinite = total.nonfinite;
    out->aa = all.aa;
    out->bb = all.bb;
    out->ab = all.ab;
    out->dd = all.dd;
    out->max_abs = total.max_abs;
    out->max_rel = total.max_rel;
    out->max_abs_at = total.max_abs_at;
    out->max_rel_at = total.max_rel_at;
}

typedef void (*differences_fn)(const uint8_t *restrict, const uint8_t *restrict, ptrdiff_t,
                               KilnDifferences *);

#define DIFFERENCES_PAIR(name, ka, kb)                                                    \
    VECTOR_CLONES static void name(const uint8_t *restrict a, const uint8_t *restrict b, \
                                   ptrdiff_t n, KilnDifferences *out) {                  \
        differences_loop(a, ka, b, kb, n, out);                                           \
    }

DIFFERENCES_PAIR(f32_f32, KILN_MOMENTS_F32, KILN_MOMENTS_F32)
DIFFERENCES_PAIR(f32_bf16, KILN_MOMENTS_F32, KILN_MOMENTS_BF16)
DIFFERENCES_PAIR(f32_f16, KILN_MOMENTS_F32, KILN_MOMENTS_F16)
DIFFERENCES_PAIR(bf16_f32, KILN_MOMENTS_BF16, KILN_MOMENTS_F32)
DIFFERENCES_PAIR(bf16_bf16, KILN_MOMENTS_BF16, KILN_MOMENTS_BF16)
DIFFERENCES_PAIR(bf16_f16, KILN_MOMENTS_BF16, KILN_MOMENTS_F16)
DIFFERENCES_PAIR(f16_f32, KILN_MOMENTS_F16, KILN_MOMENTS_F32)
DIFFERENCES_PAIR(f16_bf16, KILN_MOMENTS_F16, KILN_MOMENTS_BF16)
DIFFERENCES_PAIR(f16_f16, KILN_MOMENTS_F16, KILN_MOMENTS_F16)

#undef DIFFERENCES_PAIR

static const differences_fn PAIRS[3][3] = {
    {f32_f32, f32_bf16, f32_f16},
    {bf16_f32, bf16_bf16, bf16_f16},
    {f16_f32, f16_bf16, f16_f16},
};

void kiln_differences(int kind_a, const uint8_t *a, int kind_b, const uint8_t *b, ptrdiff_t n,
                      KilnDifferences *out) {
    PAIRS[kind_a][kind_b](a, b, n, out);
}
