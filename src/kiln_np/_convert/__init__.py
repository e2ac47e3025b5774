"""Conversion as a plan, then its execution: what every writing door shares.

``row`` (``WeightFormat``: a format as one row of data, the type each adapter's
``FORMAT`` is), ``policy`` (``QuantizePolicy``: which type each tensor is written
as under ``quantize=``), ``sources`` (``TensorSource``: tensors to write, checked
before anything is written, copying, dequantizing and quantizing their bytes on the
way) and ``plan`` (``plan_conversion``: per tensor its action and reason, the
output paths and extra files, every refusal; ``execute``).  The plan is handed the
destination's row, so nothing here names a format; the adapters import this
package, never the reverse.
"""
