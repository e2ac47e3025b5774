"""Conversion as a plan, then its execution: what every writing door shares.

``row`` (``WeightFormat``: a format as one row of data, the type each adapter's
``FORMAT`` is), ``policy`` (``QuantizePolicy``: which type each tensor is written
as under ``quantize=``), ``sources`` (``TensorSource``: tensors to write, checked
before anything is written, copying, dequantizing and quantizing their bytes on the
way), ``plan`` (``plan_conversion``: per tensor its action and reason, the
output paths and extra files, every refusal; ``execute``), and the model map the
plan asks for a row that names tensors as transformers does: ``model_names`` (the
generated name table), ``models`` (names, transforms and config keys of each
architecture, both ways) and ``hf`` (a GGUF read as its Hugging Face checkpoint,
a run of rows at a time).  The plan is handed the
destination's row, so nothing here names a format; the adapters import this
package, never the reverse.
"""
