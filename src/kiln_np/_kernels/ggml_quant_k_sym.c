/* GGML encoders of the symmetric k-quants (Q3_K, Q6_K): ggml's quantize_row_q3_K_ref and quantize_row_q6_K_ref,
 * in ggml's operation order (ggml.h). */
#include "ggml.h"

const GGMLEncoder kiln_ggml_enc_k_sym[] = {
    {-1, 0, 0, NULL},
};
