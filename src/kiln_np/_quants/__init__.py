"""GGML's quantized block types decoded exactly: the numbers llama.cpp computes.

``blocks`` is the table of block types (the one place their sizes are spelled)
and the field readers every decoder shares; ``decoder`` says what a decoder is;
``basic`` (one scale a block: Q4_0 ... Q8_0, Q1_0, Q2_0, TQ, IQ4, MXFP4, NVFP4),
``kquants`` (Q2_K ... Q8_K) and ``iquants`` (the grid types) hold the numpy
decoders, bit for bit ggml's ``dequantize_row_*``; ``decode`` runs them, or
the compiled kernels of ``kiln_np._kernels`` (``ggml_*.c``), over the thread
pool.  Nothing here knows a file format: ``kiln_np.gguf.dequantize`` and the
weight tensors build on it.
"""
