/* The GGML block decoders' shared pieces (kiln_np._kernels.native, ggml_*.c).
 *
 * Each ggml_*.c file decodes one family of GGML block types and lists them in a
 * table of GGMLDecoder rows ending with type_id -1; native.c looks a type up by
 * its GGML type id and runs the decoder over a range of whole blocks, GIL
 * released.  A decoder writes block_elements float32 values per block,
 * computed with ggml's dequantize_row_* operations in ggml's order: plain
 * float32 arithmetic (setup.py compiles with -ffp-contract=off, so no fused
 * multiply-add), so the bits are ggml's.  Fields are read byte by byte,
 * little-endian, whatever the host's byte order.
 */
#ifndef KILN_NP_GGML_H
#define KILN_NP_GGML_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(_MSC_VER) && !defined(__clang__)
#define restrict __restrict
#endif

/* On x86-64 Linux the loops are also compiled for AVX2 and the dynamic loader
 * picks the variant the CPU supports (an ifunc): the wheel stays portable (the
 * default variant is plain SSE2) and a recent CPU moves 32 bytes per step. */
#if defined(__x86_64__) && defined(__linux__) && defined(__has_attribute) && \
    !defined(KILN_NP_BASELINE) /* -DKILN_NP_BASELINE: the default variant only (tests) */
#if __has_attribute(target_clones)
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef VECTOR_CLONES
#define VECTOR_CLONES
#endif
#if defined(__GNUC__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif

typedef void (*ggml_decode_fn)(const uint8_t *restrict src, float *restrict dst, ptrdiff_t blocks);

typedef struct {
    int type_id;        /* enum ggml_type */
    int block_elements; /* float32 values written per block */
    int block_bytes;    /* bytes read per block */
    ggml_decode_fn decode;
} GGMLDecoder;

extern const GGMLDecoder kiln_ggml_basic[];
extern const GGMLDecoder kiln_ggml_k[];
extern const GGMLDecoder kiln_ggml_iq[];

static inline uint16_t ggml_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static inline uint32_t ggml_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline float ggml_bits_f32(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* IEEE binary16 -> float32 as ggml's portable conversion gives it: exact, a NaN keeps
 * its sign and payload and comes back quiet (ggml multiplies by a power of two). */
static inline float ggml_f16(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1Fu;
    const uint32_t man = h & 0x3FFu;
    if (exp == 0x1F) {
        return ggml_bits_f32(sign | 0x7F800000u | (man << 13) | (man ? 0x400000u : 0u));
    }
    if (exp == 0) { /* zero or subnormal: man * 2**-24, exact */
        const float tiny = (float)man * 5.9604644775390625e-8f;
        return sign ? -tiny : tiny;
    }
    return ggml_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

/* The little-endian f16 at p, as float32. */
static inline float ggml_f16_at(const uint8_t *p) { return ggml_f16(ggml_u16(p)); }

#endif
