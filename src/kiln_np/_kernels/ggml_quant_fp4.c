/* GGML encoders of the FP4 block types, MXFP4 (e8m0 scale) and NVFP4 (UE4M3 scales): ggml's quantize_row_mxfp4_ref and quantize_row_nvfp4_ref,
 * in ggml's operation order (ggml.h). */
#include "ggml.h"

const GGMLEncoder kiln_ggml_enc_fp4[] = {
    {-1, 0, 0, NULL},
};
