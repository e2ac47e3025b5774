"""The kit every weight-file format builds on; nothing here names a format.

``mapped`` (``MappedFile``: a file mapped read-only once, on first use),
``summary`` (``Summary``: a checkpoint at a glance, from headers alone),
``tensors`` (``WeightTensor``), ``logical`` (``LogicalTensor``: one weight a
quantization scheme stores as several tensors, recognised by the table of
``kiln_np._schemes``), ``weights`` (``Weights``, the mapping ``open_weights``
returns, its ``select`` and ``logical()`` views and ``summary()``), ``metadata``
(strict JSON and the metadata encoding that keeps each value's type) and
``unknown`` (what a path no format recognises holds).  Writing lives a floor up,
in ``kiln_np._convert`` (the quantize policy, tensors to write, the plan).  Each imports only the
modules listed before it, and the layers below (core, codec, files).

For format modules
------------------
A format module (``kiln_np.safetensors``, ``kiln_np.gguf``, ``kiln_np.kilndir``,
``kiln_np.onnx``) builds its tensors as ``WeightTensor(name,
payload_info(...).with_offset(offset), mapped_file, format_dtype)`` and returns
``Weights(tensors, format=..., metadata=..., path=..., files=[...],
opener=...)``, where ``opener`` is its own function that opens ``path`` again
(what a ``Weights`` pickles as), with ``hf_config=True`` where the
``config.json`` beside its files describes them (safetensors) and ``file_type=``
where the file says llama.cpp's file type (GGUF); to write, it receives checked
:class:`~kiln_np._convert.sources.TensorSource` items from the conversion plan,
writes a file through ``kiln_np._files.io.replacing`` or a directory through
``kiln_np._files.io.building_directory``, and copies each payload with
``TensorSource.write_to``; it exports its row, ``FORMAT``.  ``kiln_np.formats``
lists the rows; no format imports it.
"""
