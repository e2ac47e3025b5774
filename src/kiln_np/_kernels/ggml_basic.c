/* GGML's one-scale block types: the compiled decoders (see ggml.h). */
#include "ggml.h"

/* block_q8_0: f16 d, int8 qs[32]; y = qs * d. */
static void q8_0(const uint8_t *restrict s, float *restrict y, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++, s += 34, y += 32) {
        const float d = ggml_f16_at(s);
        for (int j = 0; j < 32; j++) {
            y[j] = (float)(int8_t)s[2 + j] * d;
        }
    }
}

const GGMLDecoder kiln_ggml_basic[] = {
    {8, 32, 34, q8_0},
    {-1, 0, 0, NULL},
};
