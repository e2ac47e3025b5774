"""What ``save_weights`` takes as a tensor: numpy arrays and scalars, Kiln
payloads (``Payload``, ``LazyPayload``), ``WeightTensor``s; another library's
array is refused with what to do, whether numpy's ``__array__`` would have
worked for it (a float32 torch tensor) or not (bfloat16, float8).

torch is not installed here: the stand-ins below have what a torch tensor has
that numpy could use (``__array__``, ``__dlpack__``, ``dtype``), and raise
what torch raises for a bfloat16 tensor.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from _helpers import bits

import kiln_np


class Tensor:
    """A stand-in for ``torch.Tensor``: ``np.asarray`` works for float32 (it did
    before, silently), and fails as torch does for bfloat16."""

    __module__ = "torch"

    def __init__(self, values: np.ndarray, dtype: str) -> None:
        self.values = values
        self.dtype = dtype

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if self.dtype == "torch.bfloat16":
            raise TypeError("Got unsupported ScalarType BFloat16")
        return self.values

    def __dlpack__(self, stream: Any = None) -> Any:
        return self.values.__dlpack__()


class OnlyDLPack:
    """An array of a library numpy knows only through DLPack."""

    dtype = "float8_e4m3fn"

    def __dlpack__(self, stream: Any = None) -> Any:
        raise NotImplementedError


FOREIGN = {
    "torch-bf16": Tensor(np.ones(2, np.float32), "torch.bfloat16"),
    "torch-f32": Tensor(np.ones(2, np.float32), "torch.float32"),  # was accepted silently
    "dlpack-only": OnlyDLPack(),
}


@pytest.mark.parametrize("fmt", ["safetensors", "gguf", "kiln"])
@pytest.mark.parametrize("value", FOREIGN.values(), ids=FOREIGN.keys())
def test_another_librarys_array_is_refused_saying_what_to_do(
    tmp_path: Path, value: object, fmt: str
) -> None:
    with pytest.raises(kiln_np.KilnError) as info:
        kiln_np.save_weights(tmp_path / "out", {"w": value}, format=fmt)
    err = info.value
    kind = type(value)
    assert err.kind == "TYPE"
    assert str(err).startswith(
        "TYPE: tensor 'w': expected a kiln_np.Payload, a numpy array, a torch tensor or a "
        f"WeightTensor, found a {kind.__module__}.{kind.__qualname__} of dtype "
        f"{value.dtype!r}: "  # type: ignore[attr-defined]
    )
    assert "pass a numpy array, np.asarray(x)" in str(err)
    assert "docs/interop.md" in str(err)
    assert list(tmp_path.iterdir()) == []


def test_bf16_bits_viewed_from_int16_are_written_bit_exact(tmp_path: Path) -> None:
    # what t.view(torch.int16).numpy().view(ml_dtypes.bfloat16) hands over (the
    # view the torch door makes)
    raw = np.array([0x3F80, 0x7FC1, 0x8000], np.uint16).view(np.int16)
    kiln_np.save_weights(
        tmp_path / "m.st", {"w": raw.view(ml_dtypes.bfloat16)}, format="safetensors"
    )
    with kiln_np.open_weights(tmp_path / "m.st") as w:
        assert w["w"].format_dtype == "BF16"
        assert bits(w["w"].numpy().view(np.int16)) == bits(raw)


def test_numpy_and_kiln_values_are_still_taken(tmp_path: Path) -> None:
    (tmp_path / "lazy.kiln").write_bytes(np.arange(4, dtype="<f4").tobytes())
    np.save(tmp_path / "a.npy", np.arange(3, dtype=np.int16))
    values = {
        "scalar": np.float32(1.5),  # a numpy scalar: a 0-d array
        "memmap": np.load(tmp_path / "a.npy", mmap_mode="r"),
        "lazy": kiln_np.LazyPayload(tmp_path / "lazy.kiln", "f32", (4,)),
        "payload": kiln_np.from_numpy(np.ones(2, np.uint8)),
    }
    kiln_np.save_weights(tmp_path / "d", values, format="kiln")
    with kiln_np.open_weights(tmp_path / "d") as w:
        assert [(t.name, t.shape) for t in w.values()] == [
            ("scalar", ()),
            ("memmap", (3,)),
            ("lazy", (4,)),
            ("payload", (2,)),
        ]
        assert bits(w["lazy"].numpy()) == bits(np.arange(4, dtype="<f4"))
