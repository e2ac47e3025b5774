"""Hostile GGUF files: random mutations of a valid file either open or raise KilnError.

A small file written by ``gguf.GGUFWriter`` (every metadata value type, plain
and quantized tensors) is mutated: bytes overwritten, "interesting" integers
(0, 1, 2**31, 2**63, 2**64-1, the file size) written over counts and offsets,
the file cut short.  ``read_gguf`` must then either succeed, with every tensor
payload and metadata value readable, or raise ``KilnError``; nothing else may
escape.  What opens is written back with ``save_gguf`` (which may refuse it
with ``KilnError``: an empty tensor, a name llama.cpp cannot load) and must
read back with the same tensor bytes and metadata types.  ``fuzz/run.py
hypothesis --match gguf`` runs the property for longer.
"""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path

import gguf
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import kiln_np.gguf as kg
from kiln_np import KilnError

EXAMPLES = max(1, settings().max_examples // 2)


def _seed() -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "seed.gguf"
        w = gguf.GGUFWriter(str(path), "llama")
        w.add_uint32("u32", 7)
        w.add_float32("f32", 0.5)
        w.add_bool("b", True)
        w.add_string("s", "str")
        w.add_array("toks", ["a", "bc"])
        w.add_array("ints", [1, 2])
        w.add_array("nested", [[1], [2, 3]])
        w.add_tensor("w", np.arange(6, dtype=np.float32).reshape(2, 3))
        q = gguf.quants.quantize(np.ones((2, 32), np.float32), gguf.GGMLQuantizationType.Q8_0)
        w.add_tensor("q", q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return path.read_bytes()


SEED = _seed()
INTERESTING = [0, 1, 4, 9, 13, 2**31, 2**32 - 1, 2**63, 2**64 - 1, len(SEED), 2**60]

edits = st.lists(
    st.one_of(
        st.tuples(st.integers(0, len(SEED) - 1), st.binary(min_size=1, max_size=4)),
        st.tuples(
            st.integers(0, len(SEED) - 8),
            st.sampled_from(INTERESTING).map(lambda n: struct.pack("<Q", n)),
        ),
    ),
    min_size=1,
    max_size=4,
)


def _mutate(edit_list: list[tuple[int, bytes]], cut: int | None) -> bytes:
    data = bytearray(SEED)
    for pos, raw in edit_list:
        data[pos : pos + len(raw)] = raw
    return bytes(data[:cut] if cut is not None else data)


def _read_all(path: Path) -> tuple[dict[str, bytes], dict[str, str]]:
    found = kg.read_gguf(path)
    meta = found.metadata
    for key in meta:
        assert meta[key] is not None  # every value decodes
    with kg.open_gguf(path) as weights:
        data = {name: bytes(t.payload().data) for name, t in weights.items()}
        for t in weights.values():
            t.numpy()
    return data, dict(meta.types)


@settings(max_examples=EXAMPLES)
@given(edits, st.one_of(st.none(), st.integers(0, len(SEED))))
def test_mutated_gguf_oracle(edit_list: list[tuple[int, bytes]], cut: int | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.gguf"
        path.write_bytes(_mutate(edit_list, cut))
        try:
            data, types = _read_all(path)
        except KilnError:
            return
        copy = Path(tmp) / "copy.gguf"
        try:
            with kg.open_gguf(path) as weights:
                kg.save_gguf(copy, weights, weights.metadata)
        except KilnError:
            return
        again, again_types = _read_all(copy)
        assert again == data
        assert again_types == {k: v for k, v in types.items() if not k.startswith("split.")}


def test_the_seed_opens() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "seed.gguf"
        path.write_bytes(SEED)
        data, types = _read_all(path)
    assert list(data) == ["w", "q"]
    assert types["nested"] == "array[array[int32]]"
