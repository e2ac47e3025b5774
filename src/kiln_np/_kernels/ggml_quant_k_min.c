/* GGML encoders of the k-quants with a scale and a min per sub-block (Q2_K, Q4_K, Q5_K): ggml's quantize_row_q{2,4,5}_K_ref,
 * in ggml's operation order (ggml.h). */
#include "ggml.h"

const GGMLEncoder kiln_ggml_enc_k_min[] = {
    {-1, 0, 0, NULL},
};
