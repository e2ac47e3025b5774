"""An ONNX model file opened as :class:`~kiln_np.Weights`: what
``kiln_np.open_weights`` hands out for a model, its initializers in graph order.

Initializers held inside the model are kept as the bytes protobuf parsed (a
protobuf has no stable offsets, so they pickle as bytes).  A tensor in an
external data file is a tensor of that file, like a safetensors tensor: its
``path`` and ``offset`` are the file's, the file is mapped once, on first use,
and it pickles by reference.  The 2- and 6-bit types are the exception: ONNX
packs them and Kiln holds them one element per byte, so they are unpacked when
the model is opened and kept in memory.  ``onnx`` is imported when a model is
opened.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from kiln_np._convert.row import WeightFormat
from kiln_np._core.errors import KilnError
from kiln_np._core.payload import payload_info
from kiln_np._files.io import open_regular_raw
from kiln_np._weights.mapped import MappedFile
from kiln_np._weights.tensors import WeightTensor
from kiln_np._weights.weights import Weights

from ._proto import external_range, model_to_kiln
from ._types import raw_type

__all__ = ["FORMAT", "open_model_weights"]

_HEAD = 16  # bytes shown of a file that does not parse


def open_model_weights(path: str) -> Weights:
    """The initializers of the binary ONNX model at ``path`` (absolute), as weights.

    Raises
    ------
    ImportError
        When onnx is not installed.
    KilnError
        TYPE for a file that does not parse as a ``ModelProto`` (showing its
        first bytes in hex), and what ``model_to_kiln`` raises.

    Examples
    --------
    >>> import os, tempfile, numpy as np, onnx
    >>> from kiln_np.onnx import from_numpy
    >>> graph = onnx.helper.make_graph([], "g", [], [], [from_numpy(np.ones(2, "<f4"), name="w")])
    >>> path = os.path.join(tempfile.mkdtemp(), "m.onnx")
    >>> onnx.save(onnx.helper.make_model(graph), path)
    >>> with open_model_weights(path) as w:
    ...     print(w.format, w["w"], w["w"].path)
    onnx WeightTensor('w', code 2 (f32), shape (2,), 8 bytes, FLOAT) None
    >>> import shutil; shutil.rmtree(os.path.dirname(path))
    """
    try:
        import onnx
        from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
    except ImportError as exc:
        raise ImportError(
            f"{path!r} starts like an ONNX model (byte 0x08); reading ONNX needs onnx: "
            "pip install 'kiln-np[onnx]'"
        ) from exc
    try:
        # format= stops onnx choosing a text parser from the file name.
        with open_regular_raw(path) as f:
            model = onnx.load(f, format="protobuf", load_external_data=False)
    except (DecodeError, ValueError, RuntimeError) as exc:
        with open_regular_raw(path) as f:
            head = f.read(_HEAD)
        raise KilnError(
            "TYPE",
            f"{path!r}: expected a weight file; it starts like an ONNX model "
            f"({head.hex(' ')}) but does not parse as one: {exc}",
            found=head,
        ) from None
    base = os.path.dirname(path)
    files: dict[str, MappedFile] = {}
    tensors = []
    # model_to_kiln checks every initializer (its external data against the file,
    # the content of bool and 4-bit ones) before any tensor is handed out.
    for (name, p), init in zip(model_to_kiln(model, base), model.graph.initializer, strict=True):
        info = payload_info(p.code, p.shape, p.layout)
        dtype = onnx.TensorProto.DataType.Name(init.data_type)
        if init.data_location != onnx.TensorProto.EXTERNAL or raw_type(init.data_type).sub_byte:
            # inside the model, or 2-/6-bit values that Kiln holds unpacked: in memory
            tensors.append(WeightTensor(name, info, None, dtype, data=p.data))
            continue
        external, offset, _ = external_range(init, name, base)
        if external not in files:
            files[external] = MappedFile.open(external)
        tensors.append(WeightTensor(name, info.with_offset(offset), files[external], dtype))
    metadata = {
        "ir_version": int(model.ir_version),
        "producer_name": model.producer_name,
        "producer_version": model.producer_version,
        "domain": model.domain,
        "model_version": int(model.model_version),
        "opset_import": {o.domain: int(o.version) for o in model.opset_import},
        "metadata_props": {p.key: p.value for p in model.metadata_props},
    }
    return Weights(
        tensors,
        format="onnx",
        metadata=metadata,
        path=path,
        files=files.values(),
        opener=open_model_weights,
    )


def _recognise(path: str, head: bytes | None, size: int) -> str | None:
    # 0x08: field 1 (ir_version) as a varint, the tag every ONNX writer puts first
    return path if head is not None and head[:1] == b"\x08" else None


def _open(
    path: str, *, verify: bool = False, storage_options: Mapping[str, Any] | None = None
) -> Weights:
    return open_model_weights(path)


FORMAT = WeightFormat("onnx", _recognise, _open, suffixes=(".onnx",))
"""ONNX, read only: a file that parses as a ``ModelProto``, first byte ``0x08``
(protobuf has no magic, so this row comes last)."""
