"""Quantization schemes that store one logical weight as several tensors.

A checkpoint quantized by DeepSeek's FP8 recipe, NVIDIA ModelOpt,
compressed-tensors, GPTQ, AWQ, bitsandbytes or gpt-oss keeps each weight as
*parts* (``X.weight`` F8_E4M3 plus ``X.weight_scale_inv`` F32, ...).  Each
scheme is one row of :data:`~kiln_np._schemes.table.SCHEMES`: its name, its
parts (name suffix, accepted types), the rule that checks their shapes and
gives the logical shape (``plan``), and the one function that combines them,
reproducing the producer's reference rounding step by step (``decode``).
Nothing here knows a file: ``kiln_np._weights.logical`` builds the logical
view of a checkpoint on this table.
"""
