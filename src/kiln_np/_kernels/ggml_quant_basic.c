/* GGML encoders of the types with one scale a block (Q4_0 ... Q8_0, Q1_0, Q2_0) and
 * the ternary TQ1_0, TQ2_0: ggml's quantize_row_*_ref, in its operation order (ggml.h). */
#include "ggml.h"

/* Q8_0: d = max |x| / 127, q = roundf(x / d) as int8. */
static VECTOR_CLONES void enc_q8_0(const float *restrict src, uint8_t *restrict dst,
                                   ptrdiff_t blocks) {
    for (ptrdiff_t i = 0; i < blocks; i++) {
        const float *x = src + 32 * i;
        uint8_t *y = dst + 34 * i;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) {
            const float a = ggml_fabsf(x[j]);
            amax = amax > a ? amax : a;
        }
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        ggml_put_u16(y, ggml_f32_to_f16(d));
        for (int j = 0; j < 32; j++) {
            y[2 + j] = (uint8_t)ggml_c_int(ggml_roundf(x[j] * id));
        }
    }
}

const GGMLEncoder kiln_ggml_enc_basic[] = {
    {8, 32, 34, enc_q8_0},
    {-1, 0, 0, NULL},
};
