/* GGML's i-quant block types: the compiled decoders (see ggml.h). */
#include "ggml.h"

const GGMLDecoder kiln_ggml_iq[] = {
    {-1, 0, 0, NULL},
};
