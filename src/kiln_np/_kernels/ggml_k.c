/* GGML's k-quant block types: the compiled decoders (see ggml.h). */
#include "ggml.h"

const GGMLDecoder kiln_ggml_k[] = {
    {-1, 0, 0, NULL},
};
