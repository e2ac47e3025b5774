/* kiln_np._kernels.native: the fused, single-pass byte kernels behind kiln_np._kernels.nibbles.
 *
 * Plain C over the buffer protocol: no numpy headers, so the extension does not
 * depend on the numpy version it runs with, and it builds wherever a C compiler
 * and the Python headers are.  Each function works on one index range [lo, hi)
 * of flat byte buffers, so the Python side can split a large input over its
 * thread pool (disjoint ranges, results independent of the split); the GIL is
 * released while a range of more than GIL_FREE_BYTES is processed.  Every loop
 * is byte arithmetic, so the bytes are the same on either byte order, and
 * plain enough for the compiler to vectorize at -O2/-O3 without intrinsics.
 *
 * The caller (kiln_np._kernels.nibbles) guarantees that source and destination do not
 * overlap (it copies the source first when they do); the bounds of every
 * range are checked here all the same, so a wrong call is a ValueError, never
 * a stray write.  The ONNX 2- and 6-bit kernels (the section before the method
 * table) serve kiln_np.onnx._subbyte, whose callers always write into a new array.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "ggml.h"
#include "int4.h"
#include "moments.h"
#include "differences.h"
#include "fp8.h"
#include "bnb.h"
#include "fp4.h"

#if defined(_MSC_VER) && !defined(__clang__)
#define restrict __restrict /* MSVC's C mode before C11 knows only its own spelling */
#endif

/* Below this many bytes, releasing and re-taking the GIL costs more than the loop. */
#define GIL_FREE_BYTES 16384
/* `call` (a loop over a range of `bytes` bytes), with the GIL released when the range
 * is large enough for that to pay. */
#define RUN_LOOP(bytes, call)           \
    do {                                \
        if ((bytes) > GIL_FREE_BYTES) { \
            Py_BEGIN_ALLOW_THREADS      \
            call;                       \
            Py_END_ALLOW_THREADS        \
        } else {                        \
            call;                       \
        }                               \
    } while (0)
/* The check loops reduce a block at a time and scan a block only when it is bad. */
#define BLOCK 4096

typedef struct {
    Py_buffer src;
    Py_buffer dst;
    int has_dst;
} Views;

static void release(Views *v) {
    PyBuffer_Release(&v->src);
    if (v->has_dst) {
        PyBuffer_Release(&v->dst);
    }
}

static int get_views(PyObject *src, PyObject *dst, Views *v) {
    v->has_dst = 0;
    if (PyObject_GetBuffer(src, &v->src, PyBUF_C_CONTIGUOUS) < 0) {
        return -1;
    }
    if (dst != NULL) {
        if (PyObject_GetBuffer(dst, &v->dst, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
            PyBuffer_Release(&v->src);
            return -1;
        }
        v->has_dst = 1;
    }
    return 0;
}

/* The C-contiguous buffers of args[0, n), writable where writable[i]; on failure the
 * ones already taken are released.  release_buffers gives them back. */
static void release_buffers(Py_buffer *views, int n) {
    for (int i = 0; i < n; i++) {
        PyBuffer_Release(&views[i]);
    }
}

static int get_buffers(PyObject *const *args, int n, const int *writable, Py_buffer *views) {
    for (int i = 0; i < n; i++) {
        if (PyObject_GetBuffer(args[i], &views[i],
                               PyBUF_C_CONTIGUOUS | (writable[i] ? PyBUF_WRITABLE : 0)) < 0) {
            release_buffers(views, i);
            return -1;
        }
    }
    return 0;
}

static int check_nargs(const char *name, Py_ssize_t nargs, Py_ssize_t want) {
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name, want, nargs);
        return -1;
    }
    return 0;
}

static int get_index(PyObject *obj, Py_ssize_t *out) {
    *out = PyNumber_AsSsize_t(obj, PyExc_OverflowError);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* lo <= hi, lo >= 0, lo even (a range starts on a byte boundary). */
static int check_range(Py_ssize_t lo, Py_ssize_t hi, int even) {
    if (lo < 0 || hi < lo || (even && (lo & 1))) {
        PyErr_Format(PyExc_ValueError, "bad range [%zd, %zd)", lo, hi);
        return -1;
    }
    return 0;
}

static int check_fits(const char *what, Py_ssize_t need, Py_ssize_t have) {
    if (need > have) {
        PyErr_Format(PyExc_ValueError, "%s holds %zd bytes, the range needs %zd", what, have, need);
        return -1;
    }
    return 0;
}

/* ---- the loops ------------------------------------------------------------------- */

/* VECTOR_CLONES and ALWAYS_INLINE: see ggml.h. */

VECTOR_CLONES
static void unpack_loop(const uint8_t *restrict s, uint8_t *restrict d, Py_ssize_t nbytes) {
    for (Py_ssize_t i = 0; i < nbytes; i++) {
        const uint8_t b = s[i];
        d[2 * i] = b & 0x0F;
        d[2 * i + 1] = b >> 4;
    }
}

/* Index of the first byte above `limit` in s[0, n), or -1; `limit` is 2^k - 1,
 * so an OR over a block exceeds it exactly when one of its bytes does.  A block
 * at a time: the OR (vectorized), then a scan of the one block that fails. */
VECTOR_CLONES
static Py_ssize_t first_above_loop(const uint8_t *s, Py_ssize_t n, uint8_t limit) {
    for (Py_ssize_t start = 0; start < n; start += BLOCK) {
        const Py_ssize_t stop = n - start < BLOCK ? n : start + BLOCK;
        uint8_t seen = 0;
        for (Py_ssize_t i = start; i < stop; i++) {
            seen |= s[i];
        }
        if (seen > limit) {
            for (Py_ssize_t i = start; i < stop; i++) {
                if (s[i] > limit) {
                    return i;
                }
            }
        }
    }
    return -1;
}

/* Pack the byte pairs s[2i], s[2i+1] into d[i] for i in [0, lanes), checking for
 * bits above the nibble as it goes (an OR over each block, fused into the pack
 * loop).  Returns the index into s of the first value above 15, or -1; blocks
 * before the bad one are written. */
VECTOR_CLONES
static Py_ssize_t pack_loop(const uint8_t *restrict s, uint8_t *restrict d, Py_ssize_t lanes) {
    for (Py_ssize_t start = 0; start < lanes; start += BLOCK) {
        const Py_ssize_t stop = lanes - start < BLOCK ? lanes : start + BLOCK;
        uint8_t seen = 0;
        for (Py_ssize_t i = start; i < stop; i++) {
            const uint8_t lo = s[2 * i], hi = s[2 * i + 1];
            seen |= lo | hi;
            d[i] = (uint8_t)(lo | (hi << 4));
        }
        if (seen & 0xF0) {
            return first_above_loop(s + 2 * start, 2 * (stop - start), 15) + 2 * start;
        }
    }
    return -1;
}

/* MXFP4 dequantize: e2m1 element codes times 2**(e8m0 byte - 127), exact in float32
 * for every pair the caller's exactness check lets through.  The scale is built from
 * its bits (byte e >= 1: exponent field e; e == 0: the subnormal 2**-127), so there is
 * no pow/ldexp; a scale byte 0xff makes its block the canonical quiet NaN. */
static const float E2M1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                               -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

static float bits_to_float(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

VECTOR_CLONES
static void mxfp4_loop(const uint8_t *restrict v, const uint8_t *restrict s, float *restrict out,
                       Py_ssize_t blocks, Py_ssize_t block, int packed) {
    const float nan = bits_to_float(0x7FC00000u);
    const Py_ssize_t stride = packed ? block / 2 : block;
    for (Py_ssize_t k = 0; k < blocks; k++) {
        const uint8_t e = s[k];
        float *restrict o = out + k * block;
        const uint8_t *restrict b = v + k * stride;
        if (e == 0xFF) {
            for (Py_ssize_t j = 0; j < block; j++) {
                o[j] = nan;
            }
            continue;
        }
        const float scale = bits_to_float(e ? (uint32_t)e << 23 : 0x00400000u);
        if (packed) {
            for (Py_ssize_t j = 0; j < block / 2; j++) {
                o[2 * j] = E2M1[b[j] & 0x0F] * scale;
                o[2 * j + 1] = E2M1[b[j] >> 4] * scale;
            }
        } else {
            for (Py_ssize_t j = 0; j < block; j++) {
                o[j] = E2M1[b[j] & 0x0F] * scale;
            }
        }
    }
}

/* GGUF MXFP4 / NVFP4 <-> Kiln repacking.  A GGUF block is `header` scale bytes, then
 * its element bytes in half-split groups of G bytes (G = 16 for MXFP4, 8 for NVFP4):
 * byte j of a group holds element j in its low nibble and element j + G in its high
 * nibble.  Kiln packs consecutive elements, the earlier in the low nibble, so the first
 * half of a Kiln group is the low nibbles of the group's even and odd bytes, paired, and
 * the second half their high nibbles.  Pure bit moves, 32 bytes a step (two MXFP4
 * blocks, one NVFP4 block): two byte shuffles within 16-byte halves and a few masks,
 * written with GNU C vector extensions (GCC, Clang), which become vpshufb with AVX2,
 * pshufb with SSSE3 and tbl on ARM; other compilers (and a build with -DKILN_NP_BYTEWISE,
 * which the tests use to check that variant) get the same moves a byte at a time. */
#if defined(__GNUC__) && !defined(KILN_NP_BYTEWISE)
typedef uint8_t V32 __attribute__((vector_size(32)));
typedef uint8_t V16 __attribute__((vector_size(16)));
typedef uint16_t W16 __attribute__((vector_size(32)));
#if defined(__clang__) || __GNUC__ >= 12
#define SHUFFLE(v, ...) __builtin_shufflevector((v), (v), __VA_ARGS__)
/* v = 16 bytes at s0, then 16 at s1: two loads and one insert, no trip through memory. */
#define JOIN(v, s0, s1)                                                                       \
    do {                                                                                      \
        V16 lo_, hi_;                                                                         \
        memcpy(&lo_, (s0), 16);                                                               \
        memcpy(&hi_, (s1), 16);                                                               \
        (v) = __builtin_shufflevector(lo_, hi_, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13,  \
                                      14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, \
                                      28, 29, 30, 31);                                        \
    } while (0)
#else
#define SHUFFLE(v, ...) __builtin_shuffle((v), (V32){__VA_ARGS__})
#define JOIN(v, s0, s1)                         \
    do {                                        \
        memcpy(&(v), (s0), 16);                 \
        memcpy((uint8_t *)&(v) + 16, (s1), 16); \
    } while (0)
#endif
/* A 16-byte pattern in both halves: as is (masks), or shifted into the upper half
 * (shuffle indices, which stay within their half). */
#define BOTH(a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p) \
    a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p
#define HALVES(a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p)                                  \
    a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, a + 16, b + 16, c + 16, d + 16, e + 16,     \
        f + 16, g + 16, h + 16, i + 16, j + 16, k + 16, l + 16, m + 16, n + 16, o + 16, p + 16
#define SPLAT(x) ((V32){BOTH(x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x)})

/* `low` selects the output bytes that take low nibbles; `a` holds, for each output
 * byte, the input byte whose nibble goes to its low half, `b` the one for its high
 * half.  The shifts work on 16-bit lanes (x86 has no byte shift): the bits that cross
 * into the neighbouring byte are the ones the masks drop.  (A macro, not a function:
 * a 32-byte vector never crosses a call.) */
#define TAKE_NIBBLES(a, b, low)                                                          \
    (((a) & ((low) & SPLAT(0x0F))) | ((V32)((W16)(a) >> 4) & (~(low) & SPLAT(0x0F))) | \
     ((V32)((W16)(b) << 4) & ((low) & SPLAT(0xF0))) | ((b) & (~(low) & SPLAT(0xF0))))

/* 16 bytes from s0 and 16 from s1 (one MXFP4 group each, or two NVFP4 groups each)
 * to d0 and d1. */
static ALWAYS_INLINE void repack32(const uint8_t *s0, const uint8_t *s1, uint8_t *d0,
                                   uint8_t *d1, int group, int to_kiln) {
    V32 v, a, b, low;
    JOIN(v, s0, s1);
    if (to_kiln && group == 16) {
        a = SHUFFLE(v, HALVES(0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12, 14));
        b = SHUFFLE(v, HALVES(1, 3, 5, 7, 9, 11, 13, 15, 1, 3, 5, 7, 9, 11, 13, 15));
        low = (V32){BOTH(255, 255, 255, 255, 255, 255, 255, 255, 0, 0, 0, 0, 0, 0, 0, 0)};
    } else if (to_kiln) {
        a = SHUFFLE(v, HALVES(0, 2, 4, 6, 0, 2, 4, 6, 8, 10, 12, 14, 8, 10, 12, 14));
        b = SHUFFLE(v, HALVES(1, 3, 5, 7, 1, 3, 5, 7, 9, 11, 13, 15, 9, 11, 13, 15));
        low = (V32){BOTH(255, 255, 255, 255, 0, 0, 0, 0, 255, 255, 255, 255, 0, 0, 0, 0)};
    } else if (group == 16) {
        a = SHUFFLE(v, HALVES(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7));
        b = SHUFFLE(v, HALVES(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15));
        low = (V32){BOTH(255, 0, 255, 0, 255, 0, 255, 0, 255, 0, 255, 0, 255, 0, 255, 0)};
    } else {
        a = SHUFFLE(v, HALVES(0, 0, 1, 1, 2, 2, 3, 3, 8, 8, 9, 9, 10, 10, 11, 11));
        b = SHUFFLE(v, HALVES(4, 4, 5, 5, 6, 6, 7, 7, 12, 12, 13, 13, 14, 14, 15, 15));
        low = (V32){BOTH(255, 0, 255, 0, 255, 0, 255, 0, 255, 0, 255, 0, 255, 0, 255, 0)};
    }
    const V32 out = TAKE_NIBBLES(a, b, low);
    memcpy(d0, &out, 16);
    memcpy(d1, (uint8_t *)&out + 16, 16);
}
#else
static void repack16(const uint8_t *s, uint8_t *d, int group, int to_kiln) {
    const int half = group / 2;
    for (int i = 0; i < 16; i++) {
        const int base = i - i % group, j = i % group;
        if (to_kiln) { /* Kiln byte j < G/2: elements 2j, 2j + 1; else the pair G higher */
            const int first = j < half, pair = base + 2 * (first ? j : j - half);
            const int shift = first ? 0 : 4;
            d[i] = (uint8_t)(((s[pair] >> shift) & 0x0F) | (((s[pair + 1] >> shift) & 0x0F) << 4));
        } else { /* split byte j: element j and element j + G */
            const int shift = 4 * (j & 1);
            d[i] = (uint8_t)(((s[base + j / 2] >> shift) & 0x0F) |
                             (((s[base + half + j / 2] >> shift) & 0x0F) << 4));
        }
    }
}

static void repack32(const uint8_t *s0, const uint8_t *s1, uint8_t *d0, uint8_t *d1, int group,
                     int to_kiln) {
    uint8_t tmp[16];
    memcpy(tmp, s1, 16); /* s1 may be s0 (the last MXFP4 block of an odd count) */
    repack16(s0, d0, group, to_kiln);
    repack16(tmp, d1, group, to_kiln);
}
#endif

/* Blocks [0, blocks) of GGUF `ggml` to (to_kiln) or from Kiln `values` (the element
 * bytes of each block, 16 * pairs of them) and `scales` (header bytes per block).
 * Inlined into one loop per layout, so the sizes are constants there.  Each step takes
 * 32 element bytes: two blocks of 16, or one of 32; an odd last MXFP4 block goes through
 * a scratch half. */
static ALWAYS_INLINE void repack_loop(uint8_t *restrict ggml, uint8_t *restrict values,
                                      uint8_t *restrict scales, Py_ssize_t blocks,
                                      int block_bytes, int header, int group, int to_kiln) {
    const int body = block_bytes - header;
    const int step = 32 / body;  /* blocks per step: 2 or 1 */
    uint8_t spare[16];
    for (Py_ssize_t k = 0; k < blocks; k += step) {
        const int both = k + step <= blocks;
        uint8_t *b0 = ggml + k * block_bytes + header;
        uint8_t *b1 = step == 2 ? (both ? b0 + block_bytes : spare) : b0 + 16;
        uint8_t *v0 = values + k * body;
        uint8_t *v1 = both ? v0 + 16 : spare;
        if (to_kiln) {
            repack32(b0, both ? b1 : b0, v0, v1, group, 1);
        } else {
            repack32(v0, both ? v1 : v0, b0, b1, group, 0);
        }
        for (Py_ssize_t j = k; j < k + step && j < blocks; j++) {
            if (to_kiln) {
                memcpy(scales + j * header, ggml + j * block_bytes, header);
            } else {
                memcpy(ggml + j * block_bytes, scales + j * header, header);
            }
        }
    }
}

VECTOR_CLONES
static void repack_mxfp4(uint8_t *restrict ggml, uint8_t *restrict values,
                         uint8_t *restrict scales, Py_ssize_t blocks, int to_kiln) {
    if (to_kiln) {
        repack_loop(ggml, values, scales, blocks, 17, 1, 16, 1);
    } else {
        repack_loop(ggml, values, scales, blocks, 17, 1, 16, 0);
    }
}

VECTOR_CLONES
static void repack_nvfp4(uint8_t *restrict ggml, uint8_t *restrict values,
                         uint8_t *restrict scales, Py_ssize_t blocks, int to_kiln) {
    if (to_kiln) {
        repack_loop(ggml, values, scales, blocks, 36, 4, 8, 1);
    } else {
        repack_loop(ggml, values, scales, blocks, 36, 4, 8, 0);
    }
}

/* ---- the Python functions --------------------------------------------------------- */

PyDoc_STRVAR(unpack_doc,
    "unpack(src, dst, lo, hi)\n--\n\n"
    "Unpack elements [lo, hi) of the nibble stream src (lo even) into dst[lo:hi]:\n"
    "dst[2k] = src[k] & 15, dst[2k+1] = src[k] >> 4; an odd hi takes the low\n"
    "nibble of its last byte.");

static PyObject *unpack(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t lo, hi;
    Views v;
    if (check_nargs("unpack", nargs, 4) < 0 || get_index(args[2], &lo) < 0 ||
        get_index(args[3], &hi) < 0 || check_range(lo, hi, 1) < 0 ||
        get_views(args[0], args[1], &v) < 0) {
        return NULL;
    }
    if (check_fits("src", (hi + 1) / 2, v.src.len) < 0 || check_fits("dst", hi, v.dst.len) < 0) {
        release(&v);
        return NULL;
    }
    const uint8_t *s = (const uint8_t *)v.src.buf + lo / 2;
    uint8_t *d = (uint8_t *)v.dst.buf + lo;
    const Py_ssize_t whole = (hi - lo) / 2;
    RUN_LOOP(hi - lo, unpack_loop(s, d, whole));
    if ((hi - lo) & 1) {
        d[2 * whole] = s[whole] & 0x0F;
    }
    release(&v);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(pack_doc,
    "pack(src, dst, lo, hi) -> int\n--\n\n"
    "Pack the values src[lo:hi] (lo even) two per byte into dst[lo // 2:(hi + 1) // 2],\n"
    "the earlier in the low nibble (an odd hi leaves the last high nibble 0).\n"
    "Returns the index of the first value above 15, or -1; the bytes of the range\n"
    "are then unspecified.");

static PyObject *pack(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t lo, hi, bad;
    Views v;
    if (check_nargs("pack", nargs, 4) < 0 || get_index(args[2], &lo) < 0 ||
        get_index(args[3], &hi) < 0 || check_range(lo, hi, 1) < 0 ||
        get_views(args[0], args[1], &v) < 0) {
        return NULL;
    }
    if (check_fits("src", hi, v.src.len) < 0 || check_fits("dst", (hi + 1) / 2, v.dst.len) < 0) {
        release(&v);
        return NULL;
    }
    const uint8_t *s = (const uint8_t *)v.src.buf + lo;
    uint8_t *d = (uint8_t *)v.dst.buf + lo / 2;
    const Py_ssize_t lanes = (hi - lo) / 2;
    RUN_LOOP(hi - lo, bad = pack_loop(s, d, lanes));
    if (bad < 0 && ((hi - lo) & 1)) {
        const uint8_t last = s[2 * lanes];
        bad = last > 15 ? 2 * lanes : -1;
        d[lanes] = last;
    }
    release(&v);
    return PyLong_FromSsize_t(bad < 0 ? -1 : lo + bad);
}

PyDoc_STRVAR(first_above_doc,
    "first_above(src, limit, lo, hi) -> int\n--\n\n"
    "The index of the first byte of src[lo:hi] above limit (2**k - 1: 1, 15, ...), or -1.");

static PyObject *first_above(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t limit, lo, hi, bad;
    Views v;
    if (check_nargs("first_above", nargs, 4) < 0 || get_index(args[1], &limit) < 0 ||
        get_index(args[2], &lo) < 0 || get_index(args[3], &hi) < 0 ||
        check_range(lo, hi, 0) < 0) {
        return NULL;
    }
    if (limit < 0 || limit > 255 || (limit & (limit + 1))) {
        PyErr_Format(PyExc_ValueError, "limit must be 2**k - 1 in 0-255, got %zd", limit);
        return NULL;
    }
    if (get_views(args[0], NULL, &v) < 0) {
        return NULL;
    }
    if (check_fits("src", hi, v.src.len) < 0) {
        release(&v);
        return NULL;
    }
    const uint8_t *s = (const uint8_t *)v.src.buf + lo;
    RUN_LOOP(hi - lo, bad = first_above_loop(s, hi - lo, (uint8_t)limit));
    release(&v);
    return PyLong_FromSsize_t(bad < 0 ? -1 : lo + bad);
}

PyDoc_STRVAR(mxfp4_doc,
    "mxfp4_to_float32(values, scales, out, block, packed, lo, hi)\n--\n\n"
    "Blocks [lo, hi) of an MXFP4 tensor into the float32 buffer out (4 * block bytes per\n"
    "block): element code (low nibble of each values byte, or both nibbles, low first,\n"
    "when packed) times 2**(scales[k] - 127); scale byte 0xff gives NaN.  block is even\n"
    "when packed.  The caller checks exactness and the codes (0-15).");

static PyObject *mxfp4_to_float32(PyObject *Py_UNUSED(module), PyObject *const *args,
                                  Py_ssize_t nargs) {
    Py_ssize_t block, packed, lo, hi;
    if (check_nargs("mxfp4_to_float32", nargs, 7) < 0 || get_index(args[3], &block) < 0 ||
        get_index(args[4], &packed) < 0 || get_index(args[5], &lo) < 0 ||
        get_index(args[6], &hi) < 0 || check_range(lo, hi, 0) < 0) {
        return NULL;
    }
    if (block < 1 || (packed && (block & 1)) || block > PY_SSIZE_T_MAX / 4 / (hi ? hi : 1)) {
        PyErr_Format(PyExc_ValueError, "bad block size %zd", block);
        return NULL;
    }
    Py_buffer views[3]; /* values, scales, out */
    if (get_buffers(args, 3, (const int[]){0, 0, 1}, views) < 0) {
        return NULL;
    }
    const Py_buffer *values = &views[0], *scales = &views[1], *out = &views[2];
    const Py_ssize_t stride = packed ? block / 2 : block;
    PyObject *result = NULL;
    if (check_fits("values", hi * stride, values->len) == 0 &&
        check_fits("scales", hi, scales->len) == 0 &&
        check_fits("out", 4 * hi * block, out->len) == 0) {
        const uint8_t *v = (const uint8_t *)values->buf + lo * stride;
        const uint8_t *s = (const uint8_t *)scales->buf + lo;
        float *o = (float *)out->buf + lo * block;
        RUN_LOOP((hi - lo) * block, mxfp4_loop(v, s, o, hi - lo, block, packed != 0));
        result = Py_NewRef(Py_None);
    }
    release_buffers(views, 3);
    return result;
}

PyDoc_STRVAR(repack_doc,
    "repack(ggml, values, scales, block_bytes, to_kiln, lo, hi)\n--\n\n"
    "Blocks [lo, hi) of a GGUF MXFP4 (block_bytes 17: 1 scale byte, 16 element bytes) or\n"
    "NVFP4 (36: 4 scale bytes, 32 element bytes) payload, to (to_kiln true) or from Kiln's\n"
    "packed e2m1 values (the element bytes of each block, consecutive elements low nibble\n"
    "first) and its scale bytes.  Writes values and scales, or ggml; the buffers must not\n"
    "overlap.");

static PyObject *repack(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t block_bytes, to_kiln, lo, hi;
    if (check_nargs("repack", nargs, 7) < 0 || get_index(args[3], &block_bytes) < 0 ||
        get_index(args[4], &to_kiln) < 0 || get_index(args[5], &lo) < 0 ||
        get_index(args[6], &hi) < 0 || check_range(lo, hi, 0) < 0) {
        return NULL;
    }
    if (block_bytes != 17 && block_bytes != 36) {
        PyErr_Format(PyExc_ValueError, "block_bytes must be 17 (MXFP4) or 36 (NVFP4), got %zd",
                     block_bytes);
        return NULL;
    }
    const Py_ssize_t header = block_bytes == 17 ? 1 : 4, body = block_bytes - header;
    if (hi > PY_SSIZE_T_MAX / block_bytes) {
        PyErr_Format(PyExc_ValueError, "bad range [%zd, %zd)", lo, hi);
        return NULL;
    }
    const int write_kiln = to_kiln != 0;
    Py_buffer views[3]; /* ggml, values, scales: the ones written are writable */
    if (get_buffers(args, 3, (const int[]){!write_kiln, write_kiln, write_kiln}, views) < 0) {
        return NULL;
    }
    const Py_buffer *ggml = &views[0], *values = &views[1], *scales = &views[2];
    PyObject *result = NULL;
    if (check_fits("ggml", hi * block_bytes, ggml->len) == 0 &&
        check_fits("values", hi * body, values->len) == 0 &&
        check_fits("scales", hi * header, scales->len) == 0) {
        uint8_t *g = (uint8_t *)ggml->buf + lo * block_bytes;
        uint8_t *v = (uint8_t *)values->buf + lo * body;
        uint8_t *s = (uint8_t *)scales->buf + lo * header;
        void (*loop)(uint8_t *, uint8_t *, uint8_t *, Py_ssize_t, int) =
            block_bytes == 17 ? repack_mxfp4 : repack_nvfp4;
        RUN_LOOP((hi - lo) * block_bytes, loop(g, v, s, hi - lo, write_kiln));
        result = Py_NewRef(Py_None);
    }
    release_buffers(views, 3);
    return result;
}

/* ---- block-scaled pair counts (kiln_np._explore.scaled) -----------------------------
 *
 * A block-scaled tensor's dequantized values are element value x scale value, so their
 * whole distribution is the joint histogram of (scale byte, element code) pairs.  The
 * uint8 codes are seen as (P, n, q) in C order, blocks of `block` along n, and their
 * scale bytes as (P, ceil(n / block), q): each element counts once at
 * joint[lane][scale << 8 | code], in memory order, its lane (element index mod 4 along
 * n when q is 1, column mod 4 otherwise) a table of its own so that runs of one code (an
 * all-zero block) do not wait on one counter.  Each block ORs flags[code] over its
 * elements (the padding of a partial last block is no element): out[0] counts the
 * blocks with bit 0 (saturating), out[1] those without bit 1 (nonzero), out[2] is the
 * OR over every block.  With q > 1, columns go 256 at a time, their block flags in a
 * stack array. */

#define PAIR_BINS 65536
#define PAIR_TILE 256

static void scaled_pairs_loop(const uint8_t *restrict codes, const uint8_t *restrict scales,
                              const uint8_t *restrict flags, int64_t *restrict joint,
                              Py_ssize_t slabs, Py_ssize_t n, Py_ssize_t q, Py_ssize_t block,
                              Py_ssize_t *restrict out) {
    const Py_ssize_t nb = n ? (n - 1) / block + 1 : 0;
    Py_ssize_t saturated = 0, zero = 0;
    unsigned seen = 0;
    uint8_t acc[PAIR_TILE];
    for (Py_ssize_t p = 0; p < slabs; p++) {
        const uint8_t *c = codes + p * n * q;
        const uint8_t *s = scales + p * nb * q;
        for (Py_ssize_t k = 0; k < nb; k++) {
            const Py_ssize_t i0 = k * block, i1 = n - i0 < block ? n : i0 + block;
            if (q == 1) {
                int64_t *h0 = joint + ((Py_ssize_t)s[k] << 8);
                int64_t *h1 = h0 + PAIR_BINS, *h2 = h1 + PAIR_BINS, *h3 = h2 + PAIR_BINS;
                unsigned a = 0;
                Py_ssize_t i = i0;
                for (; i + 4 <= i1; i += 4) {
                    const uint8_t x0 = c[i], x1 = c[i + 1], x2 = c[i + 2], x3 = c[i + 3];
                    h0[x0]++;
                    h1[x1]++;
                    h2[x2]++;
                    h3[x3]++;
                    a |= (unsigned)(flags[x0] | flags[x1] | flags[x2] | flags[x3]);
                }
                for (; i < i1; i++) {
                    h0[c[i]]++;
                    a |= flags[c[i]];
                }
                saturated += a & 1;
                zero += !(a & 2);
                seen |= a;
                continue;
            }
            for (Py_ssize_t b0 = 0; b0 < q; b0 += PAIR_TILE) {
                const Py_ssize_t w = q - b0 < PAIR_TILE ? q - b0 : PAIR_TILE;
                const uint8_t *sk = s + k * q + b0;
                memset(acc, 0, (size_t)w);
                for (Py_ssize_t i = i0; i < i1; i++) {
                    const uint8_t *ci = c + i * q + b0;
                    for (Py_ssize_t b = 0; b < w; b++) {
                        joint[((b & 3) << 16) | ((Py_ssize_t)sk[b] << 8) | ci[b]]++;
                        acc[b] |= flags[ci[b]];
                    }
                }
                for (Py_ssize_t b = 0; b < w; b++) {
                    saturated += acc[b] & 1;
                    zero += !(acc[b] & 2);
                    seen |= acc[b];
                }
            }
        }
    }
    out[0] = saturated;
    out[1] = zero;
    out[2] = (Py_ssize_t)seen;
}

PyDoc_STRVAR(scaled_pairs_doc,
    "scaled_pairs(codes, scales, flags, joint, n, q, block, lo, hi)\n--\n\n"
    "Slabs [lo, hi) of a block-scaled tensor's uint8 element codes seen as (P, n, q), in\n"
    "blocks of block along n, with their (P, ceil(n / block), q) scale bytes: adds one to\n"
    "joint[lane][scale << 8 | code] for each element (joint: 4 x 65536 int64, C order)\n"
    "and returns (blocks with flag bit 0, blocks without flag bit 1, OR of every block's\n"
    "flags), a block's flags being the OR of flags[code] (256 bytes) over its elements.");

static PyObject *scaled_pairs(PyObject *Py_UNUSED(module), PyObject *const *args,
                              Py_ssize_t nargs) {
    Py_ssize_t n, q, block, lo, hi;
    if (check_nargs("scaled_pairs", nargs, 9) < 0 || get_index(args[4], &n) < 0 ||
        get_index(args[5], &q) < 0 || get_index(args[6], &block) < 0 ||
        get_index(args[7], &lo) < 0 || get_index(args[8], &hi) < 0 ||
        check_range(lo, hi, 0) < 0) {
        return NULL;
    }
    if (block < 1 || n < 0 || q < 1) {
        PyErr_Format(PyExc_ValueError, "bad block size %zd or shape (%zd, %zd)", block, n, q);
        return NULL;
    }
    const Py_ssize_t nb = n ? (n - 1) / block + 1 : 0;
    if ((n && q > PY_SSIZE_T_MAX / n) || (n && hi > PY_SSIZE_T_MAX / (n * q))) {
        PyErr_Format(PyExc_ValueError, "bad range [%zd, %zd)", lo, hi);
        return NULL;
    }
    Py_buffer views[4]; /* codes, scales, flags, joint */
    if (get_buffers(args, 4, (const int[]){0, 0, 0, 1}, views) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    if (check_fits("codes", hi * n * q, views[0].len) == 0 &&
        check_fits("scales", hi * nb * q, views[1].len) == 0 &&
        check_fits("flags", 256, views[2].len) == 0 &&
        check_fits("joint", 4 * PAIR_BINS * (Py_ssize_t)sizeof(int64_t), views[3].len) == 0) {
        const uint8_t *c = (const uint8_t *)views[0].buf + lo * n * q;
        const uint8_t *s = (const uint8_t *)views[1].buf + lo * nb * q;
        Py_ssize_t out[3];
        RUN_LOOP((hi - lo) * n * q,
                 scaled_pairs_loop(c, s, (const uint8_t *)views[2].buf, (int64_t *)views[3].buf,
                                   hi - lo, n, q, block, out));
        result = Py_BuildValue("(nnn)", out[0], out[1], out[2]);
    }
    release_buffers(views, 4);
    return result;
}

/* ---- ONNX 2- and 6-bit elements (kiln_np.onnx._subbyte) ----------------------------
 *
 * Unpacked, an element is one byte holding its bits in the low bits.  Packed, ONNX
 * puts 2-bit elements four to a byte (x0 | x1 << 2 | x2 << 4 | x3 << 6) and 6-bit
 * elements in one little-endian bit stream, four in three bytes.  A range [lo, hi)
 * of elements starts on a group of four (lo % 4 == 0); a hi that is not a multiple
 * of 4 ends in a partial last byte (2-bit) or group (6-bit), its unused bits 0.
 * Pack takes values checked by the caller (first_above: the check before any output
 * exists keeps a rejection cheap; fused into the pack it saved 1.1-1.3x at most); a
 * value with bits above the element gives unspecified bytes, never a stray write. */

/* The fields of a 2-bit byte spread to the four bytes of a word (b | b << 6 | ...,
 * masked), stored as one 32-bit word: GCC vectorizes that with widening loads, about
 * 10x faster than four interleaved byte stores.  LE32 puts field 0 in the word's first
 * byte on either byte order. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define LE32(w) __builtin_bswap32(w)
#else
#define LE32(w) (w)
#endif

VECTOR_CLONES
static void unpack2_loop(const uint8_t *restrict s, uint8_t *restrict d, Py_ssize_t nbytes) {
    for (Py_ssize_t i = 0; i < nbytes; i++) {
        const uint32_t b = s[i];
        const uint32_t w = LE32((b | b << 6 | b << 12 | b << 18) & 0x03030303u);
        memcpy(d + 4 * i, &w, 4);
    }
}

VECTOR_CLONES
static void pack2_loop(const uint8_t *restrict s, uint8_t *restrict d, Py_ssize_t groups) {
    for (Py_ssize_t i = 0; i < groups; i++) {
        const uint8_t x0 = s[4 * i], x1 = s[4 * i + 1], x2 = s[4 * i + 2], x3 = s[4 * i + 3];
        d[i] = (uint8_t)(x0 | (x1 << 2) | (x2 << 4) | (x3 << 6));
    }
}

/* 6-bit: three bytes to four and back, byte by byte; with AVX2 GCC vectorizes these
 * (a 32-bit load or store per group measured slower). */
VECTOR_CLONES
static void unpack6_loop(const uint8_t *restrict s, uint8_t *restrict d, Py_ssize_t groups) {
    for (Py_ssize_t i = 0; i < groups; i++) {
        const uint8_t b0 = s[3 * i], b1 = s[3 * i + 1], b2 = s[3 * i + 2];
        d[4 * i] = b0 & 0x3F;
        d[4 * i + 1] = (uint8_t)((b0 >> 6) | ((b1 & 0x0F) << 2));
        d[4 * i + 2] = (uint8_t)((b1 >> 4) | ((b2 & 0x03) << 4));
        d[4 * i + 3] = b2 >> 2;
    }
}

VECTOR_CLONES
static void pack6_loop(const uint8_t *restrict s, uint8_t *restrict d, Py_ssize_t groups) {
    for (Py_ssize_t i = 0; i < groups; i++) {
        const uint8_t x0 = s[4 * i], x1 = s[4 * i + 1], x2 = s[4 * i + 2], x3 = s[4 * i + 3];
        d[3 * i] = (uint8_t)(x0 | (x1 << 6));
        d[3 * i + 1] = (uint8_t)((x1 >> 2) | (x2 << 4));
        d[3 * i + 2] = (uint8_t)((x2 >> 4) | (x3 << 2));
    }
}

/* Bytes that hold elements [0, n) at `bits` (2, 6 or 8) bits each: ceil(n * bits / 8),
 * without overflow for any n >= 0. */
static Py_ssize_t sub_byte_length(Py_ssize_t n, int bits) {
    const Py_ssize_t rest = n % 4;
    return (n / 4) * (bits * 4 / 8) + (rest * bits + 7) / 8;
}

/* The arguments (src, dst, lo, hi) of the 2-/6-bit kernels: a range on a group of four,
 * src and dst long enough (src holding `src_bits`-bit elements, dst `dst_bits`-bit). */
static int sub_byte_args(const char *name, PyObject *const *args, Py_ssize_t nargs, int src_bits,
                         int dst_bits, Py_ssize_t *lo, Py_ssize_t *hi, Views *v) {
    if (check_nargs(name, nargs, 4) < 0 || get_index(args[2], lo) < 0 ||
        get_index(args[3], hi) < 0 || check_range(*lo, *hi, 0) < 0) {
        return -1;
    }
    if (*lo % 4) {
        PyErr_Format(PyExc_ValueError, "bad range [%zd, %zd): lo is not a multiple of 4", *lo, *hi);
        return -1;
    }
    if (get_views(args[0], args[1], v) < 0) {
        return -1;
    }
    if (check_fits("src", sub_byte_length(*hi, src_bits), v->src.len) < 0 ||
        check_fits("dst", sub_byte_length(*hi, dst_bits), v->dst.len) < 0) {
        release(v);
        return -1;
    }
    return 0;
}

/* The bytes of a partial last byte or group (at most 3), as a little-endian word. */
static uint32_t read_tail(const uint8_t *s, Py_ssize_t nbytes) {
    uint32_t word = 0;
    for (Py_ssize_t k = 0; k < nbytes; k++) {
        word |= (uint32_t)s[k] << (8 * k);
    }
    return word;
}

static PyObject *unpack_sub_byte(const char *name, PyObject *const *args, Py_ssize_t nargs,
                                 int bits) {
    Py_ssize_t lo, hi;
    Views v;
    if (sub_byte_args(name, args, nargs, bits, 8, &lo, &hi, &v) < 0) {
        return NULL;
    }
    const uint8_t *s = (const uint8_t *)v.src.buf + sub_byte_length(lo, bits);
    uint8_t *d = (uint8_t *)v.dst.buf + lo;
    const Py_ssize_t groups = (hi - lo) / 4, rest = (hi - lo) % 4;
    const Py_ssize_t used = groups * (bits / 2); /* bytes of the whole groups */
    RUN_LOOP(hi - lo, (bits == 2 ? unpack2_loop : unpack6_loop)(s, d, groups));
    const uint32_t word = read_tail(s + used, (rest * bits + 7) / 8);
    for (Py_ssize_t k = 0; k < rest; k++) {
        d[4 * groups + k] = (uint8_t)((word >> (bits * k)) & ((1u << bits) - 1));
    }
    release(&v);
    Py_RETURN_NONE;
}

static PyObject *pack_sub_byte(const char *name, PyObject *const *args, Py_ssize_t nargs,
                               int bits) {
    Py_ssize_t lo, hi;
    Views v;
    if (sub_byte_args(name, args, nargs, 8, bits, &lo, &hi, &v) < 0) {
        return NULL;
    }
    const uint8_t *s = (const uint8_t *)v.src.buf + lo;
    uint8_t *d = (uint8_t *)v.dst.buf + sub_byte_length(lo, bits);
    const Py_ssize_t groups = (hi - lo) / 4, rest = (hi - lo) % 4;
    const Py_ssize_t used = groups * (bits / 2);
    RUN_LOOP(hi - lo, (bits == 2 ? pack2_loop : pack6_loop)(s, d, groups));
    uint32_t word = 0;
    for (Py_ssize_t k = 0; k < rest; k++) {
        word |= (uint32_t)s[4 * groups + k] << (bits * k);
    }
    for (Py_ssize_t k = 0; k < (rest * bits + 7) / 8; k++) {
        d[used + k] = (uint8_t)(word >> (8 * k));
    }
    release(&v);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(unpack2_doc,
    "unpack2(src, dst, lo, hi)\n--\n\n"
    "Unpack elements [lo, hi) (lo a multiple of 4) of the 2-bit stream src, four per\n"
    "byte, the first in the lowest bits, into dst[lo:hi], one per byte.");

static PyObject *unpack2(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    return unpack_sub_byte("unpack2", args, nargs, 2);
}

PyDoc_STRVAR(unpack6_doc,
    "unpack6(src, dst, lo, hi)\n--\n\n"
    "Unpack elements [lo, hi) (lo a multiple of 4) of the 6-bit little-endian bit\n"
    "stream src, four per three bytes, into dst[lo:hi], one per byte.");

static PyObject *unpack6(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    return unpack_sub_byte("unpack6", args, nargs, 6);
}

PyDoc_STRVAR(pack2_doc,
    "pack2(src, dst, lo, hi)\n--\n\n"
    "Pack the values src[lo:hi] (lo a multiple of 4; each 0-3, checked by the caller)\n"
    "four per byte into dst from byte lo // 4, the first in the lowest bits, unused\n"
    "bits of a last byte 0.");

static PyObject *pack2(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    return pack_sub_byte("pack2", args, nargs, 2);
}

PyDoc_STRVAR(pack6_doc,
    "pack6(src, dst, lo, hi)\n--\n\n"
    "Pack the values src[lo:hi] (lo a multiple of 4; each 0-63, checked by the caller)\n"
    "into the 6-bit little-endian bit stream dst from byte 3 * lo // 4, unused bits of\n"
    "a last byte 0.");

static PyObject *pack6(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    return pack_sub_byte("pack6", args, nargs, 6);
}

/* ---- GGML block decoders (ggml.h; the loops are in ggml_*.c) ---------------------- */

static const GGMLDecoder *const GGML_FAMILIES[] = {kiln_ggml_basic, kiln_ggml_k, kiln_ggml_iq};

static const GGMLDecoder *ggml_decoder(Py_ssize_t type_id) {
    for (size_t f = 0; f < sizeof GGML_FAMILIES / sizeof GGML_FAMILIES[0]; f++) {
        for (const GGMLDecoder *d = GGML_FAMILIES[f]; d->type_id >= 0; d++) {
            if (d->type_id == type_id) {
                return d;
            }
        }
    }
    return NULL;
}

/* The (type_id, src, dst, lo, hi) arguments of the GGML block entry points: 0, or -1
 * with an exception set (a bad count or index, lo > hi). */
static int block_call(const char *name, PyObject *const *args, Py_ssize_t nargs,
                      Py_ssize_t *type_id, Py_ssize_t *lo, Py_ssize_t *hi) {
    if (check_nargs(name, nargs, 5) < 0 || get_index(args[0], type_id) < 0 ||
        get_index(args[3], lo) < 0 || get_index(args[4], hi) < 0 ||
        check_range(*lo, *hi, 0) < 0) {
        return -1;
    }
    return 0;
}

/* 0 when blocks [lo, hi) of `elements` float32 values have a byte count Py_ssize_t holds;
 * else -1, ValueError set. */
static int block_count_fits(Py_ssize_t lo, Py_ssize_t hi, int elements) {
    if (hi > PY_SSIZE_T_MAX / 4 / elements) {
        PyErr_Format(PyExc_ValueError, "bad range [%zd, %zd)", lo, hi);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(ggml_to_float32_doc,
    "ggml_to_float32(type_id, src, dst, lo, hi)\n--\n\n"
    "Decode blocks [lo, hi) of GGML type type_id from the flat bytes src into the\n"
    "float32 buffer dst (block i's values at element i * block_elements), as ggml's\n"
    "dequantize_row_* computes them.  ValueError for a type without a compiled decoder\n"
    "or a range the buffers do not hold; the buffers must not overlap.");

VECTOR_CLONES
static void bf16_loop(const float *restrict s, uint16_t *restrict d, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t x;
        memcpy(&x, s + i, sizeof x);
        d[i] = kiln_bf16_bits(x);
    }
}

/* Float32 values a decode to bfloat16 holds at a time: 16 KiB, in L1 beside the blocks
 * read, so the float32 values never reach memory. */
#define DECODE_SCRATCH 4096

static void ggml_bf16_loop(const GGMLDecoder *d, const uint8_t *s, uint16_t *o,
                           Py_ssize_t blocks) {
    float scratch[DECODE_SCRATCH];
    const Py_ssize_t step = DECODE_SCRATCH / d->block_elements; /* 16 blocks of 256 */
    for (Py_ssize_t b = 0; b < blocks; b += step) {
        const Py_ssize_t n = blocks - b < step ? blocks - b : step;
        d->decode(s + b * d->block_bytes, scratch, n);
        bf16_loop(scratch, o + b * d->block_elements, n * d->block_elements);
    }
}

PyDoc_STRVAR(ggml_to_bfloat16_doc,
    "ggml_to_bfloat16(type_id, src, dst, lo, hi)\n--\n\n"
    "As ggml_to_float32, each float32 value then rounded to bfloat16 as ml_dtypes rounds\n"
    "(to nearest even; a NaN to the quiet NaN 0x7fc0 of its sign) into dst, a buffer of\n"
    "2-byte bfloat16 bits (host order), without the float32 values leaving the cache.");

/* ggml_to_float32 (bf16 = 0) and ggml_to_bfloat16 (1): one checked call, two outputs. */
static PyObject *ggml_decode_call(const char *name, PyObject *const *args, Py_ssize_t nargs,
                                  int bf16) {
    Py_ssize_t type_id, lo, hi;
    if (block_call(name, args, nargs, &type_id, &lo, &hi) < 0) {
        return NULL;
    }
    const GGMLDecoder *d = ggml_decoder(type_id);
    if (d == NULL) {
        PyErr_Format(PyExc_ValueError, "no compiled decoder for GGML type %zd", type_id);
        return NULL;
    }
    if (block_count_fits(lo, hi, d->block_elements) < 0) {
        return NULL;
    }
    Py_buffer views[2]; /* src, dst */
    if (get_buffers(args + 1, 2, (const int[]){0, 1}, views) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    if (check_fits("src", hi * d->block_bytes, views[0].len) == 0 &&
        check_fits("dst", (bf16 ? 2 : 4) * hi * d->block_elements, views[1].len) == 0) {
        const uint8_t *s = (const uint8_t *)views[0].buf + lo * d->block_bytes;
        if (bf16) {
            uint16_t *o = (uint16_t *)views[1].buf + lo * d->block_elements;
            RUN_LOOP((hi - lo) * d->block_bytes, ggml_bf16_loop(d, s, o, hi - lo));
        } else {
            float *o = (float *)views[1].buf + lo * d->block_elements;
            RUN_LOOP((hi - lo) * d->block_bytes, d->decode(s, o, hi - lo));
        }
        result = Py_NewRef(Py_None);
    }
    release_buffers(views, 2);
    return result;
}

static PyObject *ggml_to_float32(PyObject *Py_UNUSED(module), PyObject *const *args,
                                 Py_ssize_t nargs) {
    return ggml_decode_call("ggml_to_float32", args, nargs, 0);
}

static PyObject *ggml_to_bfloat16(PyObject *Py_UNUSED(module), PyObject *const *args,
                                  Py_ssize_t nargs) {
    return ggml_decode_call("ggml_to_bfloat16", args, nargs, 1);
}

PyDoc_STRVAR(float32_to_bfloat16_doc,
    "float32_to_bfloat16(src, dst, lo, hi)\n--\n\n"
    "Elements [lo, hi) of the float32 buffer src rounded to bfloat16 as ml_dtypes rounds\n"
    "(to nearest even; a NaN to the quiet NaN 0x7fc0 of its sign) into the same\n"
    "elements of dst, a buffer of 2-byte bfloat16 bits (host order).");

static PyObject *float32_to_bfloat16(PyObject *Py_UNUSED(module), PyObject *const *args,
                                     Py_ssize_t nargs) {
    Py_ssize_t lo, hi;
    if (check_nargs("float32_to_bfloat16", nargs, 4) < 0 || get_index(args[2], &lo) < 0 ||
        get_index(args[3], &hi) < 0 || check_range(lo, hi, 0) < 0) {
        return NULL;
    }
    if (hi > PY_SSIZE_T_MAX / 4) {
        PyErr_Format(PyExc_ValueError, "bad range [%zd, %zd)", lo, hi);
        return NULL;
    }
    Py_buffer views[2]; /* src, dst */
    if (get_buffers(args, 2, (const int[]){0, 1}, views) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    if (check_fits("src", 4 * hi, views[0].len) == 0 &&
        check_fits("dst", 2 * hi, views[1].len) == 0) {
        const float *s = (const float *)views[0].buf + lo;
        uint16_t *o = (uint16_t *)views[1].buf + lo;
        RUN_LOOP(4 * (hi - lo), bf16_loop(s, o, hi - lo));
        result = Py_NewRef(Py_None);
    }
    release_buffers(views, 2);
    return result;
}

PyDoc_STRVAR(ggml_types_doc,
    "ggml_types()\n--\n\n"
    "The GGML types with a compiled decoder: a tuple of (type_id, block_elements,\n"
    "block_bytes).");

/* Append (type_id, block_elements, block_bytes) to list; -1 (list released) on failure. */
static int append_type(PyObject *list, int type_id, int elements, int bytes) {
    PyObject *row = Py_BuildValue("(iii)", type_id, elements, bytes);
    if (row == NULL || PyList_Append(list, row) < 0) {
        Py_XDECREF(row);
        Py_DECREF(list);
        return -1;
    }
    Py_DECREF(row);
    return 0;
}

/* The list as a tuple, the list released (NULL in, NULL out). */
static PyObject *as_tuple(PyObject *list) {
    if (list == NULL) {
        return NULL;
    }
    PyObject *result = PyList_AsTuple(list);
    Py_DECREF(list);
    return result;
}

static PyObject *ggml_types(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(args)) {
    PyObject *list = PyList_New(0);
    for (size_t f = 0; list != NULL && f < sizeof GGML_FAMILIES / sizeof GGML_FAMILIES[0]; f++) {
        for (const GGMLDecoder *d = GGML_FAMILIES[f]; d->type_id >= 0; d++) {
            if (append_type(list, d->type_id, d->block_elements, d->block_bytes) < 0) {
                return NULL;
            }
        }
    }
    return as_tuple(list);
}

/* ---- GGML block encoders (ggml.h; the loops are in ggml_quant_*.c) --------------- */

static const GGMLEncoder *const GGML_ENCODER_FAMILIES[] = {
    kiln_ggml_enc_basic, kiln_ggml_enc_fp4, kiln_ggml_enc_iq1, kiln_ggml_enc_iq2, kiln_ggml_enc_iq3,
    kiln_ggml_enc_iq4,   kiln_ggml_enc_k_min, kiln_ggml_enc_k_sym};

static const GGMLEncoder *ggml_encoder(Py_ssize_t type_id) {
    for (size_t f = 0; f < sizeof GGML_ENCODER_FAMILIES / sizeof GGML_ENCODER_FAMILIES[0]; f++) {
        for (const GGMLEncoder *e = GGML_ENCODER_FAMILIES[f]; e->type_id >= 0; e++) {
            if (e->type_id == type_id) {
                return e;
            }
        }
    }
    return NULL;
}

/* Whether any of the n float32 at x is a NaN or an infinity (exponent all ones: adding
 * one to the exponent field carries into the sign bit; SSE2 vectorises it). */
static VECTOR_CLONES int any_not_finite(const uint32_t *restrict x, ptrdiff_t n) {
    uint32_t acc = 0;
    for (ptrdiff_t i = 0; i < n; i++) {
        acc |= (x[i] & 0x7F800000u) + 0x00800000u;
    }
    return (acc & 0x80000000u) != 0;
}

/* Encode `blocks` blocks, a run of them at a time (checked while it is in L1, then
 * encoded); the first block holding a NaN or infinity or on which ggml aborts (those
 * before it encoded), or -1. */
static ptrdiff_t encode_checked(const GGMLEncoder *e, const float *src, uint8_t *dst,
                                ptrdiff_t blocks) {
    const ptrdiff_t run = e->block_elements >= 1024 ? 1 : 1024 / e->block_elements;
    for (ptrdiff_t b = 0; b < blocks; b += run) {
        ptrdiff_t n = blocks - b < run ? blocks - b : run;
        const float *x = src + b * e->block_elements;
        ptrdiff_t bad = -1;
        if (any_not_finite((const uint32_t *)x, n * e->block_elements)) {
            for (ptrdiff_t k = 0; k < n; k++) {
                if (any_not_finite((const uint32_t *)x + k * e->block_elements,
                                   e->block_elements)) {
                    bad = n = k;
                    break;
                }
            }
        }
        const ptrdiff_t aborted = n ? e->encode(x, dst + b * e->block_bytes, n) : -1;
        if (aborted >= 0 || bad >= 0) {
            return b + (aborted >= 0 ? aborted : bad);
        }
    }
    return -1;
}

PyDoc_STRVAR(ggml_from_float32_doc,
    "ggml_from_float32(type_id, src, dst, lo, hi) -> int\n--\n\n"
    "Quantize blocks [lo, hi) of the float32 buffer src (block i's values at element\n"
    "i * block_elements) into GGML type type_id's blocks in the flat bytes dst, as\n"
    "ggml_quantize_chunk writes them with no importance matrix.  Returns -1, or the\n"
    "first block holding a NaN or infinity or on which ggml aborts (the blocks before\n"
    "it written).  ValueError\n"
    "for a type without a compiled encoder or a range the buffers do not hold; the\n"
    "buffers must not overlap.");

static PyObject *ggml_from_float32(PyObject *Py_UNUSED(module), PyObject *const *args,
                                   Py_ssize_t nargs) {
    Py_ssize_t type_id, lo, hi;
    if (block_call("ggml_from_float32", args, nargs, &type_id, &lo, &hi) < 0) {
        return NULL;
    }
    const GGMLEncoder *e = ggml_encoder(type_id);
    if (e == NULL || e->encode == NULL) {
        PyErr_Format(PyExc_ValueError, "no compiled encoder for GGML type %zd", type_id);
        return NULL;
    }
    if (block_count_fits(lo, hi, e->block_elements) < 0) {
        return NULL;
    }
    Py_buffer views[2]; /* src, dst */
    if (get_buffers(args + 1, 2, (const int[]){0, 1}, views) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    if (check_fits("src", 4 * hi * e->block_elements, views[0].len) == 0 &&
        check_fits("dst", hi * e->block_bytes, views[1].len) == 0) {
        const float *s = (const float *)views[0].buf + lo * e->block_elements;
        uint8_t *o = (uint8_t *)views[1].buf + lo * e->block_bytes;
        ptrdiff_t bad = -1;
        RUN_LOOP((hi - lo) * e->block_bytes, bad = encode_checked(e, s, o, hi - lo));
        result = PyLong_FromSsize_t(bad < 0 ? -1 : lo + bad);
    }
    release_buffers(views, 2);
    return result;
}

/* ggml's sigma2 of the row of n values at x (quantize_row_q4_0_impl ... q5_1_impl):
 * sum_x2 += x[j]*x[j] in order from 0, then sum_x2 / n_per_row (n as a float). */
static float row_sigma2(const float *x, ptrdiff_t n) {
    float sum_x2 = 0.0f;
    for (ptrdiff_t j = 0; j < n; j++) {
        sum_x2 += x[j] * x[j];
    }
    return sum_x2 / (float)n;
}

/* Encode `blocks` blocks with importance weights, as encode_checked does without: block b
 * (counted from the start of a row of row_blocks blocks at `first` blocks before src)
 * takes the weights of its place in the row, qw + ((first + b) % row_blocks) * elements,
 * so a run never crosses the end of a row.  A type whose weights take the row's sigma2
 * gets it computed once per row, over the whole row (src must hold the rows whole). */
static ptrdiff_t encode_weighted_checked(const GGMLEncoder *e, const float *src,
                                         const float *qw, ptrdiff_t row_blocks,
                                         ptrdiff_t first, uint8_t *dst, ptrdiff_t blocks) {
    const ptrdiff_t run = e->block_elements >= 1024 ? 1 : 1024 / e->block_elements;
    ptrdiff_t sigma2_row = -1; /* the row whose sigma2 is known, counted from src's */
    float sigma2 = 0.0f;
    for (ptrdiff_t b = 0; b < blocks;) {
        const ptrdiff_t in_row = (first + b) % row_blocks;
        ptrdiff_t n = blocks - b < run ? blocks - b : run;
        n = n < row_blocks - in_row ? n : row_blocks - in_row;
        const float *x = src + b * e->block_elements;
        const float *w = qw + in_row * e->block_elements;
        ptrdiff_t bad = -1;
        for (ptrdiff_t k = 0; k < n; k++) {
            if (any_not_finite((const uint32_t *)x + k * e->block_elements, e->block_elements)) {
                bad = n = k;
                break;
            }
        }
        ptrdiff_t aborted = -1;
        if (n && e->encode_row_weighted != NULL) {
            if (sigma2_row != (first + b) / row_blocks) {
                sigma2_row = (first + b) / row_blocks;
                const ptrdiff_t row = row_blocks * e->block_elements;
                sigma2 = row_sigma2(x - in_row * e->block_elements, row);
            }
            aborted = e->encode_row_weighted(x, w, sigma2, dst + b * e->block_bytes, n);
        } else if (n) {
            aborted = e->encode_weighted(x, w, dst + b * e->block_bytes, n);
        }
        if (aborted >= 0 || bad >= 0) {
            return b + (aborted >= 0 ? aborted : bad);
        }
        b += n;
    }
    return -1;
}

PyDoc_STRVAR(ggml_from_float32_weighted_doc,
    "ggml_from_float32_weighted(type_id, src, qw, dst, lo, hi) -> int\n--\n\n"
    "As ggml_from_float32, with the importance weights qw (float32, one row of\n"
    "whole blocks): src is whole rows of len(qw) values and each block takes the\n"
    "weights of its place in its row, as ggml_quantize_chunk writes with quant_weights.\n"
    "ValueError for a type without a compiled weighted encoder, weights that are not\n"
    "whole blocks, src that is not whole rows, or a range the buffers do not hold.");

static PyObject *ggml_from_float32_weighted(PyObject *Py_UNUSED(module),
                                            PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t type_id, lo, hi;
    if (check_nargs("ggml_from_float32_weighted", nargs, 6) < 0 ||
        get_index(args[0], &type_id) < 0 || get_index(args[4], &lo) < 0 ||
        get_index(args[5], &hi) < 0 || check_range(lo, hi, 0) < 0) {
        return NULL;
    }
    const GGMLEncoder *e = ggml_encoder(type_id);
    if (e == NULL || (e->encode_weighted == NULL && e->encode_row_weighted == NULL)) {
        PyErr_Format(PyExc_ValueError, "no compiled weighted encoder for GGML type %zd",
                     type_id);
        return NULL;
    }
    if (block_count_fits(lo, hi, e->block_elements) < 0) {
        return NULL;
    }
    Py_buffer views[3]; /* src, qw, dst */
    if (get_buffers(args + 1, 3, (const int[]){0, 0, 1}, views) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    const Py_ssize_t row = views[1].len / 4; /* weights: float32 */
    if (row == 0 || views[1].len % 4 || row % e->block_elements) {
        PyErr_Format(PyExc_ValueError, "weights of %zd bytes: not whole blocks of %d float32",
                     views[1].len, e->block_elements);
    } else if (views[0].len % (4 * row)) {
        PyErr_Format(PyExc_ValueError, "src of %zd bytes: not whole rows of %zd float32",
                     views[0].len, row);
    } else if (check_fits("src", 4 * hi * e->block_elements, views[0].len) == 0 &&
               check_fits("dst", hi * e->block_bytes, views[2].len) == 0) {
        const float *s = (const float *)views[0].buf + lo * e->block_elements;
        uint8_t *o = (uint8_t *)views[2].buf + lo * e->block_bytes;
        const ptrdiff_t row_blocks = row / e->block_elements;
        ptrdiff_t bad = -1;
        RUN_LOOP((hi - lo) * e->block_bytes,
                 bad = encode_weighted_checked(e, s, (const float *)views[1].buf, row_blocks,
                                               lo, o, hi - lo));
        result = PyLong_FromSsize_t(bad < 0 ? -1 : lo + bad);
    }
    release_buffers(views, 3);
    return result;
}

PyDoc_STRVAR(ggml_quant_types_doc,
    "ggml_quant_types()\n--\n\n"
    "The GGML types with a compiled encoder: a tuple of (type_id, block_elements,\n"
    "block_bytes, plain, weighted), plain 1 where it has one without an importance\n"
    "matrix, weighted 1 where it has one with importance weights.");

static PyObject *ggml_quant_types(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(args)) {
    PyObject *list = PyList_New(0);
    const size_t families = sizeof GGML_ENCODER_FAMILIES / sizeof GGML_ENCODER_FAMILIES[0];
    for (size_t f = 0; list != NULL && f < families; f++) {
        for (const GGMLEncoder *e = GGML_ENCODER_FAMILIES[f]; e->type_id >= 0; e++) {
            PyObject *row = Py_BuildValue("(iiiii)", e->type_id, e->block_elements,
                                          e->block_bytes, e->encode != NULL,
                                          e->encode_weighted != NULL ||
                                              e->encode_row_weighted != NULL);
            if (row == NULL || PyList_Append(list, row) < 0) {
                Py_XDECREF(row);
                Py_DECREF(list);
                return NULL;
            }
            Py_DECREF(row);
        }
    }
    return as_tuple(list);
}

/* ---- the statistics kernel (moments.h; the loops are in moments.c) --------------- */

PyDoc_STRVAR(moments_doc,
    "moments(kind, src, lo, hi) -> tuple\n--\n\n"
    "(finite, min, max, mean, m2, zeros, nan, posinf, neginf) of elements [lo, hi) of the\n"
    "host-order float buffer src, kind 0 float32, 1 bfloat16, 2 IEEE float16: the count\n"
    "of finite elements, their minimum and maximum (+inf and -inf when there is none),\n"
    "mean and sum of squared deviations from it (0.0 and 0.0 when there is none), and the\n"
    "counts of zeros (either sign), NaNs (any pattern), +inf and -inf.");

static PyObject *moments(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t kind, lo, hi;
    if (check_nargs("moments", nargs, 4) < 0 || get_index(args[0], &kind) < 0 ||
        get_index(args[2], &lo) < 0 || get_index(args[3], &hi) < 0 ||
        check_range(lo, hi, 0) < 0) {
        return NULL;
    }
    if (kind < KILN_MOMENTS_F32 || kind > KILN_MOMENTS_F16) {
        PyErr_Format(PyExc_ValueError, "kind must be 0 (float32), 1 (bfloat16) or 2 (float16), "
                     "got %zd", kind);
        return NULL;
    }
    const Py_ssize_t size = kind == KILN_MOMENTS_F32 ? 4 : 2;
    if (hi > PY_SSIZE_T_MAX / size) {
        PyErr_Format(PyExc_ValueError, "bad range [%zd, %zd)", lo, hi);
        return NULL;
    }
    Py_buffer view;
    if (get_buffers(args + 1, 1, (const int[]){0}, &view) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    if (check_fits("src", hi * size, view.len) == 0) {
        KilnMoments m;
        const uint8_t *s = (const uint8_t *)view.buf + lo * size;
        RUN_LOOP((hi - lo) * size, kiln_moments((int)kind, s, hi - lo, &m));
        result = Py_BuildValue("(LddddLLLL)", (long long)m.finite, m.min, m.max, m.mean, m.m2,
                               (long long)m.zeros, (long long)m.nan, (long long)m.posinf,
                               (long long)m.neginf);
    }
    release_buffers(&view, 1);
    return result;
}

/* ---- the differences kernel (differences.h; the loops are in differences.c) ------- */

PyDoc_STRVAR(differences_doc,
    "differences(kind_a, a, kind_b, b, lo, hi) -> tuple\n--\n\n"
    "Elements [lo, hi) of the host-order float buffers a (kind_a) and b (kind_b), kind 0\n"
    "float32, 1 bfloat16, 2 IEEE float16, element i against element i: (differ, first,\n"
    "nan_bits, signed_zeros, nonfinite, aa, bb, ab, dd, max_abs, max_abs_at, max_rel,\n"
    "max_rel_at), the places counted from 0 (lo is place lo), -1 for none.");

static PyObject *differences(PyObject *Py_UNUSED(module), PyObject *const *args,
                             Py_ssize_t nargs) {
    Py_ssize_t ka, kb, lo, hi;
    if (check_nargs("differences", nargs, 6) < 0 || get_index(args[0], &ka) < 0 ||
        get_index(args[2], &kb) < 0 || get_index(args[4], &lo) < 0 ||
        get_index(args[5], &hi) < 0 || check_range(lo, hi, 0) < 0) {
        return NULL;
    }
    if (ka < KILN_MOMENTS_F32 || ka > KILN_MOMENTS_F16 || kb < KILN_MOMENTS_F32 ||
        kb > KILN_MOMENTS_F16) {
        PyErr_Format(PyExc_ValueError, "kinds must be 0 (float32), 1 (bfloat16) or 2 (float16), "
                     "got %zd and %zd", ka, kb);
        return NULL;
    }
    const Py_ssize_t sa = ka == KILN_MOMENTS_F32 ? 4 : 2, sb = kb == KILN_MOMENTS_F32 ? 4 : 2;
    if (hi > PY_SSIZE_T_MAX / 4) {
        PyErr_Format(PyExc_ValueError, "bad range [%zd, %zd)", lo, hi);
        return NULL;
    }
    PyObject *sources[2] = {args[1], args[3]};
    Py_buffer views[2];
    if (get_buffers(sources, 2, (const int[]){0, 0}, views) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    if (check_fits("a", hi * sa, views[0].len) == 0 && check_fits("b", hi * sb, views[1].len) == 0) {
        KilnDifferences d;
        const uint8_t *a = (const uint8_t *)views[0].buf + lo * sa;
        const uint8_t *b = (const uint8_t *)views[1].buf + lo * sb;
        RUN_LOOP((hi - lo) * (sa + sb), kiln_differences((int)ka, a, (int)kb, b, hi - lo, &d));
        const long long shift = (long long)lo;
        result = Py_BuildValue(
            "(LLLLLdddddLdL)", (long long)d.differ, d.first < 0 ? -1LL : d.first + shift,
            (long long)d.nan_bits, (long long)d.signed_zeros, (long long)d.nonfinite, d.aa, d.bb,
            d.ab, d.dd, d.max_abs, d.max_abs_at < 0 ? -1LL : d.max_abs_at + shift, d.max_rel,
            d.max_rel_at < 0 ? -1LL : d.max_rel_at + shift);
    }
    release_buffers(views, 2);
    return result;
}

/* ---- the FP8 dequantization kernel (fp8.h; the loops are in fp8.c) ---------------- */

PyDoc_STRVAR(fp8_dequant_doc,
    "fp8_dequant(kind, codes, lut, scales, dst, cols, b0, b1, scols, row0, lo, hi)\n--\n\n"
    "Rows [lo, hi) of the (rows, cols) FP8 codes (uint8, row 0 being row row0 of the\n"
    "tensor) into the same rows of dst, kind 0 float32, 1 bfloat16, 2 IEEE float16:\n"
    "lut[code] * scales[(row0 + r) // b0, c // b1] in float32 (lut: 256 float32, scales:\n"
    "float32 with scols columns), rounded once to nearest even.");

static PyObject *fp8_dequant(PyObject *Py_UNUSED(module), PyObject *const *args,
                             Py_ssize_t nargs) {
    Py_ssize_t kind, cols, b0, b1, scols, row0, lo, hi;
    if (check_nargs("fp8_dequant", nargs, 12) < 0 || get_index(args[0], &kind) < 0 ||
        get_index(args[5], &cols) < 0 || get_index(args[6], &b0) < 0 ||
        get_index(args[7], &b1) < 0 || get_index(args[8], &scols) < 0 ||
        get_index(args[9], &row0) < 0 || get_index(args[10], &lo) < 0 ||
        get_index(args[11], &hi) < 0 || check_range(lo, hi, 0) < 0) {
        return NULL;
    }
    if (kind < KILN_FP8_F32 || kind > KILN_FP8_F16) {
        PyErr_Format(PyExc_ValueError, "kind must be 0 (float32), 1 (bfloat16) or 2 (float16), "
                     "got %zd", kind);
        return NULL;
    }
    const Py_ssize_t big = (Py_ssize_t)1 << 40;
    if (cols < 0 || cols > big || b0 < 1 || b0 > big || b1 < 1 || b1 > big || row0 < 0 ||
        row0 > big || hi > big || scols < (cols ? (cols - 1) / b1 + 1 : 0) || scols > big) {
        PyErr_Format(PyExc_ValueError, "bad geometry: cols %zd, block %zd x %zd, %zd scale "
                     "columns, row0 %zd", cols, b0, b1, scols, row0);
        return NULL;
    }
    Py_buffer views[4];
    if (get_buffers(args + 1, 4, (const int[]){0, 0, 0, 1}, views) < 0) {
        return NULL;
    }
    const Py_ssize_t size = kind == KILN_FP8_F32 ? 4 : 2;
    const Py_ssize_t srows = hi > lo ? (row0 + hi - 1) / b0 + 1 : 0;
    PyObject *result = NULL;
    if (check_fits("codes", hi * cols, views[0].len) == 0 &&
        check_fits("lut", 256 * 4, views[1].len) == 0 &&
        check_fits("scales", srows * scols * 4, views[2].len) == 0 &&
        check_fits("dst", hi * cols * size, views[3].len) == 0) {
        int status;
        RUN_LOOP((hi - lo) * cols,
                 status = kiln_fp8_dequant((int)kind, (const uint8_t *)views[0].buf,
                                           (const float *)views[1].buf,
                                           (const float *)views[2].buf, views[3].buf, cols, b0,
                                           b1, scols, row0, lo, hi));
        result = status == 0 ? Py_NewRef(Py_None) : PyErr_NoMemory();
    }
    release_buffers(views, 4);
    return result;
}

/* ---- bitsandbytes 4-bit decode (bnb.h; the loops are in bnb.c) -------------------- */

PyDoc_STRVAR(bnb4_doc,
    "bnb4(kind, codes, lut, scales, out, blocksize, off, lo, hi)\n--\n\n"
    "Elements [lo, hi) of the packed 4-bit codes (element 2k the high nibble of byte k):\n"
    "lut[code] * scales[i // blocksize] in float32 (lut: 16 float32, scales: float32),\n"
    "rounded to nearest even to kind 0 float32, 1 bfloat16 or 2 IEEE float16 (a NaN to\n"
    "the quiet NaN of its sign), written to out[i - off] (host byte order), off <= lo.");

static PyObject *bnb4(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t kind, blocksize, off, lo, hi;
    if (check_nargs("bnb4", nargs, 9) < 0 || get_index(args[0], &kind) < 0 ||
        get_index(args[5], &blocksize) < 0 || get_index(args[6], &off) < 0 ||
        get_index(args[7], &lo) < 0 || get_index(args[8], &hi) < 0 ||
        check_range(lo, hi, 0) < 0) {
        return NULL;
    }
    if (kind < KILN_BNB_F32 || kind > KILN_BNB_F16 || blocksize < 1 || off < 0 || off > lo) {
        PyErr_Format(PyExc_ValueError, "bad kind %zd, blocksize %zd or offset %zd", kind,
                     blocksize, off);
        return NULL;
    }
    const Py_ssize_t size = kind == KILN_BNB_F32 ? 4 : 2;
    if (hi > PY_SSIZE_T_MAX / size - 1) {
        PyErr_Format(PyExc_ValueError, "bad range [%zd, %zd)", lo, hi);
        return NULL;
    }
    Py_buffer views[4]; /* codes, lut, scales, out */
    if (get_buffers(args + 1, 4, (const int[]){0, 0, 0, 1}, views) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    const Py_ssize_t blocks = hi > lo ? (hi - 1) / blocksize + 1 : 0;
    if (check_fits("codes", (hi + 1) / 2, views[0].len) == 0 &&
        check_fits("lut", 16 * (Py_ssize_t)sizeof(float), views[1].len) == 0 &&
        check_fits("scales", blocks * (Py_ssize_t)sizeof(float), views[2].len) == 0 &&
        check_fits("out", (hi - off) * size, views[3].len) == 0) {
        uint8_t *out = (uint8_t *)views[3].buf + (lo - off) * size;
        RUN_LOOP((hi - lo) * size,
                 kiln_bnb4((int)kind, (const uint8_t *)views[0].buf, (const float *)views[1].buf,
                           (const float *)views[2].buf, out, blocksize, lo, hi));
        result = Py_NewRef(Py_None);
    }
    release_buffers(views, 4);
    return result;
}

/* ---- the e2m1 scaled decode (fp4.h; the loops are in fp4.c) ---------------------- */

PyDoc_STRVAR(fp4_scaled_doc,
    "fp4_scaled(kind, packed, scales, table, out, block, post, minus_zero, lo, hi)\n--\n\n"
    "Blocks [lo, hi) of block (a multiple of 16) elements: e2m1 codes, two a packed byte\n"
    "(the even element in the low nibble), times the block's scale table[scales[k]] (one\n"
    "byte a block into 256 float32), times post, in float32, rounded to nearest even into\n"
    "out of kind 0 float32, 1 bfloat16, 2 float16; code 8 is -0.0 when minus_zero, else\n"
    "+0.0.");

static PyObject *fp4_scaled(PyObject *Py_UNUSED(module), PyObject *const *args,
                            Py_ssize_t nargs) {
    Py_ssize_t kind, block, minus_zero, lo, hi;
    if (check_nargs("fp4_scaled", nargs, 10) < 0 || get_index(args[0], &kind) < 0 ||
        get_index(args[5], &block) < 0 || get_index(args[7], &minus_zero) < 0 ||
        get_index(args[8], &lo) < 0 || get_index(args[9], &hi) < 0 ||
        check_range(lo, hi, 0) < 0) {
        return NULL;
    }
    const double post = PyFloat_AsDouble(args[6]);
    if (post == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    if (kind < KILN_FP4_F32 || kind > KILN_FP4_F16) {
        PyErr_Format(PyExc_ValueError, "kind must be 0 (float32), 1 (bfloat16) or 2 (float16), "
                     "got %zd", kind);
        return NULL;
    }
    if (block < 16 || (block & 15) || block > PY_SSIZE_T_MAX / 4 / (hi ? hi : 1)) {
        PyErr_Format(PyExc_ValueError, "bad block size %zd", block);
        return NULL;
    }
    const Py_ssize_t size = kind == KILN_FP4_F32 ? 4 : 2;
    Py_buffer views[4]; /* packed, scales, table, out */
    if (get_buffers(args + 1, 4, (const int[]){0, 0, 0, 1}, views) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    if (check_fits("packed", hi * (block / 2), views[0].len) == 0 &&
        check_fits("scales", hi, views[1].len) == 0 &&
        check_fits("table", 4 * 256, views[2].len) == 0 &&
        check_fits("out", size * hi * block, views[3].len) == 0) {
        const uint8_t *p = (const uint8_t *)views[0].buf + lo * (block / 2);
        const uint8_t *s = (const uint8_t *)views[1].buf + lo;
        const float *t = (const float *)views[2].buf;
        uint8_t *o = (uint8_t *)views[3].buf + size * lo * block;
        RUN_LOOP((hi - lo) * block,
                 kiln_fp4_scaled((int)kind, p, s, t, (float)post, minus_zero != 0, hi - lo, block,
                                 o));
        result = Py_NewRef(Py_None);
    }
    release_buffers(views, 4);
    return result;
}

/* ---- the int4 dequantize kernel (int4.h; the loops are in int4.c) ----------------- */

PyDoc_STRVAR(int4_rows_doc,
    "int4_rows(words, layout, wcols, r0, gidx, group, scale, zero, native, out, okind, lo,\n"
    "          hi)\n--\n\n"
    "Rows [lo, hi) of out (rows x in of kind okind: 0 float32, 1 bfloat16, 2 float16)\n"
    "from the int32 words (layout 0 GPTQ, 1 AWQ, 2 rows; wcols words a row) of logical\n"
    "rows r0 + row: (code - zero) * scale in float32, rounded to kind native, then to\n"
    "okind; gidx (int32, in) gives each column's group, scale (float32) and zero (int32)\n"
    "are (rows, groups); group > 0 says gidx[i] is i // group (0: no such rule).");

static PyObject *int4_rows(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t layout, wcols, r0, group, native, okind, lo, hi;
    if (check_nargs("int4_rows", nargs, 13) < 0 || get_index(args[1], &layout) < 0 ||
        get_index(args[2], &wcols) < 0 || get_index(args[3], &r0) < 0 ||
        get_index(args[5], &group) < 0 || get_index(args[8], &native) < 0 ||
        get_index(args[10], &okind) < 0 || get_index(args[11], &lo) < 0 ||
        get_index(args[12], &hi) < 0 || check_range(lo, hi, 0) < 0) {
        return NULL;
    }
    if (layout < KILN_INT4_GPTQ || layout > KILN_INT4_ROWS || native < 0 || native > 2 ||
        okind < 0 || okind > 2 || wcols < 1 || r0 < 0 || group < 0) {
        PyErr_Format(PyExc_ValueError,
                     "bad layout %zd, kinds %zd %zd, wcols %zd, r0 %zd or group %zd", layout,
                     native, okind, wcols, r0, group);
        return NULL;
    }
    /* words, gidx, scale, zero, out */
    PyObject *objs[5] = {args[0], args[4], args[6], args[7], args[9]};
    Py_buffer views[5];
    if (get_buffers(objs, 5, (const int[]){0, 0, 0, 0, 1}, views) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    const Py_ssize_t nwords = views[0].len / 4, in = views[1].len / 4;
    const Py_ssize_t osize = okind == KILN_INT4_F32 ? 4 : 2;
    const Py_ssize_t rows = in > 0 ? views[4].len / osize / in : 0;
    const Py_ssize_t groups = rows > 0 ? views[2].len / 4 / rows : 0;
    const int32_t *gidx = (const int32_t *)views[1].buf;
    Py_ssize_t last = 0; /* the largest word index a row of [0, rows) reads, plus one */
    if (rows > 0) {
        const Py_ssize_t o = r0 + rows - 1;
        last = layout == KILN_INT4_GPTQ  ? ((in - 1) >> 3) * wcols + o
               : layout == KILN_INT4_AWQ ? (in - 1) * wcols + (o >> 3)
                                         : o * wcols + ((in - 1) >> 3);
        last += 1;
    }
    int ok = in > 0 && rows * in * osize == views[4].len && rows * groups * 4 == views[2].len &&
             views[3].len == views[2].len && hi <= rows && last <= nwords &&
             (layout == KILN_INT4_GPTQ  ? r0 + rows <= wcols
              : layout == KILN_INT4_AWQ ? ((r0 + rows - 1) >> 3) < wcols
                                        : ((in - 1) >> 3) < wcols);
    for (Py_ssize_t i = 0; ok && i < in; i++) {
        ok = gidx[i] >= 0 && gidx[i] < groups && (group == 0 || gidx[i] == i / group);
    }
    if (!ok) {
        PyErr_SetString(PyExc_ValueError,
                        "int4_rows: the words, groups, scales, zeros or output do not fit");
    } else {
        KilnInt4 k = {(const int32_t *)views[0].buf, (int)layout, wcols, r0, in, gidx,
                      (const float *)views[2].buf, (const int32_t *)views[3].buf, groups,
                      group, (int)native, (int)okind, views[4].buf};
        int rc = 0;
        RUN_LOOP((hi - lo) * in * osize, rc = kiln_int4_rows(&k, lo, hi));
        result = rc == 0 ? Py_NewRef(Py_None) : PyErr_NoMemory();
    }
    release_buffers(views, 5);
    return result;
}

static PyMethodDef methods[] = {
    {"unpack", (PyCFunction)(void (*)(void))unpack, METH_FASTCALL, unpack_doc},
    {"pack", (PyCFunction)(void (*)(void))pack, METH_FASTCALL, pack_doc},
    {"first_above", (PyCFunction)(void (*)(void))first_above, METH_FASTCALL, first_above_doc},
    {"mxfp4_to_float32", (PyCFunction)(void (*)(void))mxfp4_to_float32, METH_FASTCALL,
     mxfp4_doc},
    {"repack", (PyCFunction)(void (*)(void))repack, METH_FASTCALL, repack_doc},
    {"scaled_pairs", (PyCFunction)(void (*)(void))scaled_pairs, METH_FASTCALL,
     scaled_pairs_doc},
    {"unpack2", (PyCFunction)(void (*)(void))unpack2, METH_FASTCALL, unpack2_doc},
    {"pack2", (PyCFunction)(void (*)(void))pack2, METH_FASTCALL, pack2_doc},
    {"unpack6", (PyCFunction)(void (*)(void))unpack6, METH_FASTCALL, unpack6_doc},
    {"pack6", (PyCFunction)(void (*)(void))pack6, METH_FASTCALL, pack6_doc},
    {"ggml_to_float32", (PyCFunction)(void (*)(void))ggml_to_float32, METH_FASTCALL,
     ggml_to_float32_doc},
    {"ggml_to_bfloat16", (PyCFunction)(void (*)(void))ggml_to_bfloat16, METH_FASTCALL,
     ggml_to_bfloat16_doc},
    {"float32_to_bfloat16", (PyCFunction)(void (*)(void))float32_to_bfloat16, METH_FASTCALL,
     float32_to_bfloat16_doc},
    {"ggml_types", ggml_types, METH_NOARGS, ggml_types_doc},
    {"ggml_from_float32", (PyCFunction)(void (*)(void))ggml_from_float32, METH_FASTCALL,
     ggml_from_float32_doc},
    {"ggml_from_float32_weighted", (PyCFunction)(void (*)(void))ggml_from_float32_weighted,
     METH_FASTCALL, ggml_from_float32_weighted_doc},
    {"ggml_quant_types", ggml_quant_types, METH_NOARGS, ggml_quant_types_doc},
    {"moments", (PyCFunction)(void (*)(void))moments, METH_FASTCALL, moments_doc},
    {"differences", (PyCFunction)(void (*)(void))differences, METH_FASTCALL, differences_doc},
    {"fp8_dequant", (PyCFunction)(void (*)(void))fp8_dequant, METH_FASTCALL, fp8_dequant_doc},
    {"bnb4", (PyCFunction)(void (*)(void))bnb4, METH_FASTCALL, bnb4_doc},
    {"fp4_scaled", (PyCFunction)(void (*)(void))fp4_scaled, METH_FASTCALL, fp4_scaled_doc},
    {"int4_rows", (PyCFunction)(void (*)(void))int4_rows, METH_FASTCALL, int4_rows_doc},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot slots[] = {
#ifdef Py_mod_multiple_interpreters
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
#ifdef Py_GIL_DISABLED
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kiln_np._kernels.native",
    .m_doc = "Fused single-pass 4-bit and byte-check kernels behind kiln_np._kernels.nibbles.\n\n"
             "Each works on one range [lo, hi) of flat C-contiguous buffers:\n\n"
             ">>> import numpy as np\n"
             ">>> out = np.zeros(3, np.uint8)\n"
             ">>> unpack(b'\\x21\\x03', out, 0, 3)\n"
             ">>> out.tolist()\n"
             "[1, 2, 3]\n"
             ">>> pack(out, np.zeros(2, np.uint8), 0, 3), first_above(b'\\x01\\x00\\x07', 1, 0, 3)\n"
             "(-1, 2)\n",
    .m_size = 0,
    .m_methods = methods,
    .m_slots = slots,
};

PyMODINIT_FUNC PyInit_native(void) { return PyModuleDef_Init(&module_def); }
