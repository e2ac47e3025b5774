/* GGML encoders of the FP4 block types, MXFP4 (e8m0 scale) and NVFP4 (UE4M3 scales):
 * ggml's quantize_row_mxfp4_ref and quantize_row_nvfp4_ref, in ggml's operation order
 * (ggml.h).  kiln_np._quants.encode_fp4 is the numpy twin and says why each step gives
 * ggml's bytes.
 *
 * An element's code is ggml's best_index_mxfp4 (the first of kvalues_fp4 with the smallest
 * float32 error |kvalue * d - x|), searched on |x| over the seven positive levels and level
 * 0 (no other level can win: encode_fp4.py), then given the sign bit when x < 0 and the
 * level is not 0.  The search is the same chain of strict comparisons for every element,
 * with no branch, so the compiler runs it on a vector of elements at a time. */
#include "ggml.h"

/* LOG2_FLOOR_BITS of encode_fp4.py (tests/quants/test_ggml_quantize_fp4.py checks the
 * two): by n + 148 for n = -148 ... 128, the float32 bits from which floorf(log2f(x)) is n
 * (log2f correctly rounded, as glibc's is there): 2**n, less the floats just below it
 * whose logarithm rounds up to n. */
static const uint32_t LOG2_FLOOR_BITS[277] = {
    0x00000002u, 0x00000004u, 0x00000008u, 0x00000010u, 0x00000020u, 0x00000040u, 0x00000080u,
    0x00000100u, 0x00000200u, 0x00000400u, 0x00000800u, 0x00001000u, 0x00002000u, 0x00004000u,
    0x00008000u, 0x00010000u, 0x00020000u, 0x0003FFFFu, 0x0007FFFEu, 0x000FFFFBu, 0x001FFFF5u,
    0x003FFFF5u, 0x007FFFEAu, 0x00FFFFD4u, 0x017FFFD4u, 0x01FFFFD4u, 0x027FFFD4u, 0x02FFFFD4u,
    0x037FFFD4u, 0x03FFFFD4u, 0x047FFFD4u, 0x04FFFFD4u, 0x057FFFD4u, 0x05FFFFD4u, 0x067FFFD4u,
    0x06FFFFD4u, 0x077FFFD4u, 0x07FFFFD4u, 0x087FFFD4u, 0x08FFFFD4u, 0x097FFFD4u, 0x09FFFFD4u,
    0x0A7FFFD4u, 0x0AFFFFD4u, 0x0B7FFFD4u, 0x0BFFFFD4u, 0x0C7FFFD4u, 0x0CFFFFD4u, 0x0D7FFFD4u,
    0x0DFFFFD4u, 0x0E7FFFD4u, 0x0EFFFFD4u, 0x0F7FFFD4u, 0x0FFFFFD4u, 0x107FFFD4u, 0x10FFFFD4u,
    0x117FFFD4u, 0x11FFFFD4u, 0x127FFFD4u, 0x12FFFFD4u, 0x137FFFD4u, 0x13FFFFD4u, 0x147FFFD4u,
    0x14FFFFD4u, 0x157FFFD4u, 0x15FFFFD4u, 0x167FFFD4u, 0x16FFFFD4u, 0x177FFFD4u, 0x17FFFFD4u,
    0x187FFFD4u, 0x18FFFFD4u, 0x197FFFD4u, 0x19FFFFD4u, 0x1A7FFFD4u, 0x1AFFFFD4u, 0x1B7FFFD4u,
    0x1BFFFFD4u, 0x1C7FFFD4u, 0x1CFFFFD4u, 0x1D7FFFD4u, 0x1DFFFFD4u, 0x1E7FFFD4u, 0x1EFFFFD4u,
    0x1F7FFFD4u, 0x1FFFFFEAu, 0x207FFFEAu, 0x20FFFFEAu, 0x217FFFEAu, 0x21FFFFEAu, 0x227FFFEAu,
    0x22FFFFEAu, 0x237FFFEAu, 0x23FFFFEAu, 0x247FFFEAu, 0x24FFFFEAu, 0x257FFFEAu, 0x25FFFFEAu,
    0x267FFFEAu, 0x26FFFFEAu, 0x277FFFEAu, 0x27FFFFEAu, 0x287FFFEAu, 0x28FFFFEAu, 0x297FFFEAu,
    0x29FFFFEAu, 0x2A7FFFEAu, 0x2AFFFFEAu, 0x2B7FFFEAu, 0x2BFFFFEAu, 0x2C7FFFEAu, 0x2CFFFFEAu,
    0x2D7FFFEAu, 0x2DFFFFEAu, 0x2E7FFFEAu, 0x2EFFFFEAu, 0x2F7FFFEAu, 0x2FFFFFF5u, 0x307FFFF5u,
    0x30FFFFF5u, 0x317FFFF5u, 0x31FFFFF5u, 0x327FFFF5u, 0x32FFFFF5u, 0x337FFFF5u, 0x33FFFFF5u,
    0x347FFFF5u, 0x34FFFFF5u, 0x357FFFF5u, 0x35FFFFF5u, 0x367FFFF5u, 0x36FFFFF5u, 0x377FFFF5u,
    0x37FFFFFBu, 0x387FFFFBu, 0x38FFFFFBu, 0x397FFFFBu, 0x39FFFFFBu, 0x3A7FFFFBu, 0x3AFFFFFBu,
    0x3B7FFFFBu, 0x3BFFFFFEu, 0x3C7FFFFEu, 0x3CFFFFFEu, 0x3D7FFFFEu, 0x3DFFFFFFu, 0x3E7FFFFFu,
    0x3F000000u, 0x3F800000u, 0x40000000u, 0x40800000u, 0x40FFFFFFu, 0x417FFFFFu, 0x41FFFFFEu,
    0x427FFFFEu, 0x42FFFFFEu, 0x437FFFFEu, 0x43FFFFFBu, 0x447FFFFBu, 0x44FFFFFBu, 0x457FFFFBu,
    0x45FFFFFBu, 0x467FFFFBu, 0x46FFFFFBu, 0x477FFFFBu, 0x47FFFFF5u, 0x487FFFF5u, 0x48FFFFF5u,
    0x497FFFF5u, 0x49FFFFF5u, 0x4A7FFFF5u, 0x4AFFFFF5u, 0x4B7FFFF5u, 0x4BFFFFF5u, 0x4C7FFFF5u,
    0x4CFFFFF5u, 0x4D7FFFF5u, 0x4DFFFFF5u, 0x4E7FFFF5u, 0x4EFFFFF5u, 0x4F7FFFF5u, 0x4FFFFFEAu,
    0x507FFFEAu, 0x50FFFFEAu, 0x517FFFEAu, 0x51FFFFEAu, 0x527FFFEAu, 0x52FFFFEAu, 0x537FFFEAu,
    0x53FFFFEAu, 0x547FFFEAu, 0x54FFFFEAu, 0x557FFFEAu, 0x55FFFFEAu, 0x567FFFEAu, 0x56FFFFEAu,
    0x577FFFEAu, 0x57FFFFEAu, 0x587FFFEAu, 0x58FFFFEAu, 0x597FFFEAu, 0x59FFFFEAu, 0x5A7FFFEAu,
    0x5AFFFFEAu, 0x5B7FFFEAu, 0x5BFFFFEAu, 0x5C7FFFEAu, 0x5CFFFFEAu, 0x5D7FFFEAu, 0x5DFFFFEAu,
    0x5E7FFFEAu, 0x5EFFFFEAu, 0x5F7FFFEAu, 0x5FFFFFD4u, 0x607FFFD4u, 0x60FFFFD4u, 0x617FFFD4u,
    0x61FFFFD4u, 0x627FFFD4u, 0x62FFFFD4u, 0x637FFFD4u, 0x63FFFFD4u, 0x647FFFD4u, 0x64FFFFD4u,
    0x657FFFD4u, 0x65FFFFD4u, 0x667FFFD4u, 0x66FFFFD4u, 0x677FFFD4u, 0x67FFFFD4u, 0x687FFFD4u,
    0x68FFFFD4u, 0x697FFFD4u, 0x69FFFFD4u, 0x6A7FFFD4u, 0x6AFFFFD4u, 0x6B7FFFD4u, 0x6BFFFFD4u,
    0x6C7FFFD4u, 0x6CFFFFD4u, 0x6D7FFFD4u, 0x6DFFFFD4u, 0x6E7FFFD4u, 0x6EFFFFD4u, 0x6F7FFFD4u,
    0x6FFFFFD4u, 0x707FFFD4u, 0x70FFFFD4u, 0x717FFFD4u, 0x71FFFFD4u, 0x727FFFD4u, 0x72FFFFD4u,
    0x737FFFD4u, 0x73FFFFD4u, 0x747FFFD4u, 0x74FFFFD4u, 0x757FFFD4u, 0x75FFFFD4u, 0x767FFFD4u,
    0x76FFFFD4u, 0x777FFFD4u, 0x77FFFFD4u, 0x787FFFD4u, 0x78FFFFD4u, 0x797FFFD4u, 0x79FFFFD4u,
    0x7A7FFFD4u, 0x7AFFFFD4u, 0x7B7FFFD4u, 0x7BFFFFD4u, 0x7C7FFFD4u, 0x7CFFFFD4u, 0x7D7FFFD4u,
    0x7DFFFFD4u, 0x7E7FFFD4u, 0x7EFFFFD4u, 0x7F7FFFD4u,
};

/* floorf(log2f(x)) for the bits of a positive finite float32. */
static ALWAYS_INLINE int floor_log2(uint32_t bits) {
    int k = (int)(bits >> 23) - 127; /* floor of the exact logarithm */
    if (bits < 0x00800000u) {        /* subnormal: 2**-149 times the bits */
        k = -150;
        for (uint32_t b = bits; b != 0; b >>= 1) {
            k++;
        }
    }
    return k + (bits >= LOG2_FLOOR_BITS[k + 149]);
}

/* The bits of max |x[j]| over j < n: finite floats' magnitudes order as their bits do. */
static ALWAYS_INLINE uint32_t abs_max_bits(const float *restrict x, int n) {
    uint32_t m = 0;
    for (int j = 0; j < n; j++) {
        const uint32_t a = ggml_f32_bits(x[j]) & 0x7FFFFFFFu;
        m = m > a ? m : a;
    }
    return m;
}

/* One step of the search: level (k * d, code k) replaces the best so far if its error is
 * strictly smaller (masks, not branches, so the loop below vectorises). */
static ALWAYS_INLINE void e2m1_step(float level, uint32_t k, float a, float *best,
                                    uint32_t *c) {
    const float err = ggml_fabsf(level - a);
    const uint32_t wins = 0u - (uint32_t)(err < *best);
    *c = (*c & ~wins) | (k & wins);
    *best = err < *best ? err : *best;
}

/* best_index_mxfp4(x[j], d) for j < n, as codes 0 ... 15. */
static ALWAYS_INLINE void e2m1_codes(const float *restrict x, int n, float d,
                                     uint32_t *restrict code) {
    const float l1 = d, l2 = 2.0f * d, l3 = 3.0f * d, l4 = 4.0f * d;
    const float l6 = 6.0f * d, l8 = 8.0f * d, l12 = 12.0f * d; /* (float)kvalue * d */
    for (int j = 0; j < n; j++) {
        const uint32_t bits = ggml_f32_bits(x[j]);
        const float a = ggml_bits_f32(bits & 0x7FFFFFFFu);
        float best = a; /* level 0's error */
        uint32_t c = 0;
        e2m1_step(l1, 1, a, &best, &c);
        e2m1_step(l2, 2, a, &best, &c);
        e2m1_step(l3, 3, a, &best, &c);
        e2m1_step(l4, 4, a, &best, &c);
        e2m1_step(l6, 5, a, &best, &c);
        e2m1_step(l8, 6, a, &best, &c);
        e2m1_step(l12, 7, a, &best, &c);
        code[j] = c | ((bits >> 28) & ((c + 7u) & 8u)); /* 8 if x < 0 and c != 0 */
    }
}

/* MXFP4: e = (uint8_t)(floorf(log2f(amax)) - 2 + 127) (the low byte: a block below
 * 2**-125 wraps to 232 ... 255), 0 for amax 0; d = ggml_e8m0_to_fp32_half(e); byte j of
 * qs holds element j low, element j + 16 high. */
static VECTOR_CLONES ptrdiff_t enc_mxfp4(const float *restrict src, uint8_t *restrict dst,
                                    ptrdiff_t blocks) {
    for (ptrdiff_t i = 0; i < blocks; i++) {
        const float *x = src + 32 * i;
        uint8_t *y = dst + 17 * i;
        const uint32_t amax = abs_max_bits(x, 32);
        const uint32_t e = amax ? (uint32_t)(floor_log2(amax) + 125) & 0xFFu : 0u;
        const float d = ggml_bits_f32(e < 2 ? 0x00200000u << e : (e - 1) << 23);
        uint32_t code[32];
        e2m1_codes(x, 32, d, code);
        y[0] = (uint8_t)e;
        for (int j = 0; j < 16; j++) {
            y[1 + j] = (uint8_t)(code[j] | (code[16 + j] << 4));
        }
    }
    return -1;
}

/* ggml_fp32_to_ue4m3 of q >= 0 (finite): 448 and up (and every exponent past 15) give
 * 0x7E; the mantissa rounds on its fourth bit alone; below 2**-6, (int)(q * 512 + 0.5f)
 * capped at 7. */
static ALWAYS_INLINE uint32_t ue4m3(float q) {
    if (!(q > 0.0f)) {
        return 0;
    }
    q = q > 448.0f ? 448.0f : q;
    const uint32_t bits = ggml_f32_bits(q);
    if ((bits >> 23) <= 120) {
        const int m = (int)(q * 512.0f + 0.5f);
        return m > 7 ? 7u : (uint32_t)m;
    }
    uint32_t exp = (bits >> 23) - 120, man = ((bits >> 20) & 7u) + ((bits >> 19) & 1u);
    if (man > 7) {
        man = 0;
        exp++;
    }
    return exp >= 15 ? 0x7Eu : (exp << 3) | man;
}

/* ggml_ue4m3_to_fp32 of a UE4M3 byte below 0x7F: the scale halved (exact). */
static ALWAYS_INLINE float ue4m3_half(uint32_t ue) {
    const uint32_t exp = ue >> 3, man = ue & 7u;
    if (exp == 0) {
        return (float)man * 0.0009765625f; /* man * 2**-10 */
    }
    return ggml_bits_f32(((exp + 119u) << 23) | (man << 20));
}

/* NVFP4: four sub-blocks of 16, each with scale byte ue4m3(amax / 6) and 8 bytes of qs
 * holding its element j low, element j + 8 high. */
static VECTOR_CLONES ptrdiff_t enc_nvfp4(const float *restrict src, uint8_t *restrict dst,
                                    ptrdiff_t blocks) {
    for (ptrdiff_t i = 0; i < blocks; i++) {
        const float *x = src + 64 * i;
        uint8_t *y = dst + 36 * i;
        for (int s = 0; s < 4; s++) {
            const float *xb = x + 16 * s;
            const uint32_t ue = ue4m3(ggml_bits_f32(abs_max_bits(xb, 16)) / 6.0f);
            uint32_t code[16];
            e2m1_codes(xb, 16, ue4m3_half(ue), code);
            y[s] = (uint8_t)ue;
            for (int j = 0; j < 8; j++) {
                y[4 + 8 * s + j] = (uint8_t)(code[j] | (code[8 + j] << 4));
            }
        }
    }
    return -1;
}

const GGMLEncoder kiln_ggml_enc_fp4[] = {
    {39, 32, 17, enc_mxfp4},
    {40, 64, 36, enc_nvfp4},
    {-1, 0, 0, NULL},
};
