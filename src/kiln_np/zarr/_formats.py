"""The ``zarr`` row's doors, in the signatures of ``kiln_np.formats.WeightFormat``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kiln_np._core.errors import KilnError
from kiln_np._weights.policy import QuantizePolicy
from kiln_np._weights.sources import Dequantize, Progress
from kiln_np._weights.weights import Weights

from ._group import open_zarr, save_zarr, save_zarr_paths

__all__ = ["open_zarr_format", "save_zarr_format", "save_zarr_format_paths"]


def open_zarr_format(path: str, verify: bool) -> Weights:
    """``open``: :func:`~kiln_np.zarr.open_zarr`.

    >>> open_zarr_format.__name__
    'open_zarr_format'
    """
    return open_zarr(path, verify)


def _no_shards(max_shard_size: int | None) -> None:
    if max_shard_size is not None:
        raise KilnError(
            "TYPE", "expected max_shard_size only for safetensors or GGUF, found it for 'zarr'"
        )


def save_zarr_format(
    path: str,
    tensors: Mapping[str, Any],
    metadata: Mapping[str, Any] | None,
    max_shard_size: int | None,
    progress: Progress | None,
    dequantize: Dequantize,
    quantize: QuantizePolicy | str | None,
) -> list[str]:
    """``save``: :func:`~kiln_np.zarr.save_zarr`; the group's directory.

    >>> save_zarr_format.__name__
    'save_zarr_format'
    """
    _no_shards(max_shard_size)
    save_zarr(
        path,
        tensors,
        metadata=metadata,
        progress=progress,
        dequantize=dequantize,
        quantize=quantize,
    )
    return [path]


def save_zarr_format_paths(
    path: str,
    tensors: Mapping[str, Any],
    max_shard_size: int | None,
    dequantize: Dequantize,
    quantize: QuantizePolicy | str | None,
) -> list[str]:
    """``paths``: :func:`~kiln_np.zarr.save_zarr_paths`.

    >>> save_zarr_format_paths.__name__
    'save_zarr_format_paths'
    """
    _no_shards(max_shard_size)
    return save_zarr_paths(path, tensors)
