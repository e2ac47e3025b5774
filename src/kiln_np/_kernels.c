/* kiln_np._kernels: the fused, single-pass byte kernels behind kiln_np._nibbles.
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
 * The caller (kiln_np._nibbles) guarantees that source and destination do not
 * overlap (it copies the source first when they do); the bounds of every
 * range are checked here all the same, so a wrong call is a ValueError, never
 * a stray write.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Below this many bytes, releasing and re-taking the GIL costs more than the loop. */
#define GIL_FREE_BYTES 16384
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

/* On x86-64 Linux the loops are also compiled for AVX2 and the dynamic loader
 * picks the variant the CPU supports (an ifunc): the wheel stays portable (the
 * default variant is plain SSE2) and a recent CPU moves 32 bytes per step. */
#if defined(__x86_64__) && defined(__linux__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef VECTOR_CLONES
#define VECTOR_CLONES
#endif

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
    if (hi - lo > GIL_FREE_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        unpack_loop(s, d, whole);
        Py_END_ALLOW_THREADS
    } else {
        unpack_loop(s, d, whole);
    }
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
    if (hi - lo > GIL_FREE_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        bad = pack_loop(s, d, lanes);
        Py_END_ALLOW_THREADS
    } else {
        bad = pack_loop(s, d, lanes);
    }
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
    if (hi - lo > GIL_FREE_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        bad = first_above_loop(s, hi - lo, (uint8_t)limit);
        Py_END_ALLOW_THREADS
    } else {
        bad = first_above_loop(s, hi - lo, (uint8_t)limit);
    }
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
    Py_buffer values, scales, out;
    if (check_nargs("mxfp4_to_float32", nargs, 7) < 0 || get_index(args[3], &block) < 0 ||
        get_index(args[4], &packed) < 0 || get_index(args[5], &lo) < 0 ||
        get_index(args[6], &hi) < 0 || check_range(lo, hi, 0) < 0) {
        return NULL;
    }
    if (block < 1 || (packed && (block & 1)) || block > PY_SSIZE_T_MAX / 4 / (hi ? hi : 1)) {
        PyErr_Format(PyExc_ValueError, "bad block size %zd", block);
        return NULL;
    }
    if (PyObject_GetBuffer(args[0], &values, PyBUF_C_CONTIGUOUS) < 0) {
        return NULL;
    }
    if (PyObject_GetBuffer(args[1], &scales, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&values);
        return NULL;
    }
    if (PyObject_GetBuffer(args[2], &out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&values);
        PyBuffer_Release(&scales);
        return NULL;
    }
    const Py_ssize_t stride = packed ? block / 2 : block;
    PyObject *result = NULL;
    if (check_fits("values", hi * stride, values.len) == 0 &&
        check_fits("scales", hi, scales.len) == 0 &&
        check_fits("out", 4 * hi * block, out.len) == 0) {
        const uint8_t *v = (const uint8_t *)values.buf + lo * stride;
        const uint8_t *s = (const uint8_t *)scales.buf + lo;
        float *o = (float *)out.buf + lo * block;
        if ((hi - lo) * block > GIL_FREE_BYTES) {
            Py_BEGIN_ALLOW_THREADS
            mxfp4_loop(v, s, o, hi - lo, block, packed != 0);
            Py_END_ALLOW_THREADS
        } else {
            mxfp4_loop(v, s, o, hi - lo, block, packed != 0);
        }
        result = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&values);
    PyBuffer_Release(&scales);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"unpack", (PyCFunction)(void (*)(void))unpack, METH_FASTCALL, unpack_doc},
    {"pack", (PyCFunction)(void (*)(void))pack, METH_FASTCALL, pack_doc},
    {"first_above", (PyCFunction)(void (*)(void))first_above, METH_FASTCALL, first_above_doc},
    {"mxfp4_to_float32", (PyCFunction)(void (*)(void))mxfp4_to_float32, METH_FASTCALL,
     mxfp4_doc},
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
    .m_name = "kiln_np._kernels",
    .m_doc = "Fused single-pass 4-bit and byte-check kernels behind kiln_np._nibbles.\n\n"
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

PyMODINIT_FUNC PyInit__kernels(void) { return PyModuleDef_Init(&module_def); }
