"""An importance matrix in a conversion (``QuantizePolicy(imatrix=...)``) and in
``kiln_np.gguf.quantize(..., imatrix=...)``: the policy's API, the
``quantize.imatrix.*`` keys as llama-quantize writes them, and the runs a
tensor is quantized in: whole rows, an expert's rows with that expert's weights,
never a run across two experts, from floats and from GGML blocks requantized.

The runs are checked with a weighted quantizer that stands in for ggml's (it
quantizes ``values x weights`` as Q4_0 and records each call), so they are held
whatever weighted encoders are registered; ``test_llama_quantize_imatrix.py``
holds the real ones to llama-quantize's files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kiln_np
import kiln_np._convert.policy as policy_module
import kiln_np._convert.sources as sources_module
import kiln_np._quants.quantize as quantize_module
import kiln_np.gguf._quantize as gguf_quantize
from kiln_np import KilnError, QuantizePolicy
from kiln_np._convert.imatrix import imatrix_keys
from kiln_np._convert.plan import execute
from kiln_np._kernels.dispatch import Kernel
from kiln_np.formats import plan_weights, quantize_kept
from kiln_np.gguf import Imatrix, ImatrixEntry, dequantize, quantize, read_gguf, save_gguf

EXPERTS, ROWS, ROW = 4, 5, 64
NAME = "blk.0.ffn_up_exps.weight"


def _imatrix(weights: dict[str, np.ndarray], path: str = "i.gguf", chunks: int = 3) -> Imatrix:
    entries = {n: ImatrixEntry(n, w, (1,) * len(w)) for n, w in weights.items()}
    return Imatrix(path, "gguf", ("calibration.txt",), chunks, 512, entries, len(entries))


def _weights(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.random((EXPERTS, ROW)) * 4 + 0.25).astype(np.float32)


def _values(seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((EXPERTS, ROWS, ROW)).astype(np.float32)


@pytest.fixture
def weighted(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, np.ndarray]]:
    """Q4_0 with a stand-in weighted quantizer: the blocks of ``values x weights``
    (each call's element count and weights recorded)."""
    calls: list[tuple[int, np.ndarray]] = []
    plain = quantize_module.KERNELS["Q4_0"]

    def stand_in(src: np.ndarray, weights: np.ndarray, dst: np.ndarray) -> Any:
        assert src.size % weights.size == 0  # whole rows
        calls.append((src.size, weights.copy()))
        scaled = (src.reshape(-1, weights.size) * weights).reshape(-1)
        return plain.pick()(np.ascontiguousarray(scaled, np.float32), dst)

    kernels = {"Q4_0": Kernel("stand-in", None, stand_in, None)}
    monkeypatch.setattr(quantize_module, "WEIGHTED_KERNELS", kernels)
    monkeypatch.setattr(policy_module, "WEIGHTED_KERNELS", kernels)
    monkeypatch.setattr(gguf_quantize, "_WEIGHTED", ["Q4_0", "Q8_0"])
    return calls


def _expected(values: np.ndarray, weights: np.ndarray) -> bytes:
    return b"".join(
        bytes(quantize(values[e] * weights[e], "q4_0").data) for e in range(len(weights))
    )


def _tensor_bytes(path: Path, name: str) -> bytes:
    found = next(t for t in read_gguf(path).tensors if t.name == name)
    with open(path, "rb") as f:
        f.seek(found.offset)
        return f.read(found.info.byte_length)


# -- the policy --------------------------------------------------------------------------


def test_a_path_is_kept_as_given_until_a_door_reads_it() -> None:
    policy = QuantizePolicy.parse("q4_k_m", imatrix=Path("m.imatrix.gguf"), exclude_weights="attn")
    assert policy.imatrix == "m.imatrix.gguf"
    assert (policy.include_weights, policy.exclude_weights) == ((), ("attn",))
    assert repr(policy) == (
        "QuantizePolicy('Q4_K_M', imatrix='m.imatrix.gguf', exclude_weights=['attn'])"
    )
    assert policy == QuantizePolicy.parse(
        "Q4_K_M", imatrix="m.imatrix.gguf", exclude_weights=["attn"]
    )
    assert policy != QuantizePolicy.parse("q4_k_m", imatrix="m.imatrix.gguf")
    with pytest.raises(KilnError, match="found its path") as info:
        quantize_kept({"w.weight": np.ones((2, 32), np.float32)}, policy)
    assert info.value.kind == "TYPE"


def test_an_imatrix_read_keeps_the_entries_include_and_exclude_keep() -> None:
    ones = np.ones((1, 32), np.float32)
    matrix = _imatrix({"blk.0.attn_v.weight": ones, "blk.0.ffn_up.weight": ones})
    kept = QuantizePolicy.parse("q8_0", imatrix=matrix, include_weights=["attn"]).imatrix
    assert isinstance(kept, Imatrix)
    assert list(kept.entries) == ["blk.0.attn_v.weight"]
    assert kept.loaded == 2  # the file's count is not what was kept
    path = QuantizePolicy.parse("q8_0", imatrix="i.gguf", exclude_weights="ffn")
    read = path.with_imatrix(matrix).imatrix
    assert isinstance(read, Imatrix)
    assert list(read.entries) == ["blk.0.attn_v.weight"]
    assert QuantizePolicy.parse("q8_0", imatrix=matrix).imatrix is matrix


@pytest.mark.parametrize(
    ("keywords", "words"),
    [
        ({"imatrix": "i.gguf", "include_weights": "a", "exclude_weights": "b"}, "not both"),
        ({"include_weights": "a"}, "with include_weights, found no imatrix"),
        ({"imatrix": 8}, "expected a path or a kiln_np.gguf.Imatrix"),
        ({"imatrix": _imatrix({"w": np.ones(4, np.float32)})}, "shape (experts, row length)"),
        ({"imatrix": _imatrix({"w": np.full((1, 4), np.inf, np.float32)})}, "found inf"),
        ({"imatrix": _imatrix({}, chunks=-1)}, "Imatrix.chunk_count"),
    ],
)
def test_the_policy_refuses(keywords: dict[str, Any], words: str) -> None:
    with pytest.raises(KilnError) as info:
        QuantizePolicy.parse("q4_k_m", **keywords)
    assert info.value.kind == "TYPE"
    assert words in info.value.message


def test_a_flag_without_a_file_type_is_refused() -> None:
    with pytest.raises(KilnError, match="for imatrix"):
        QuantizePolicy.parse("nvfp4", imatrix="i.gguf")


# -- the keys ----------------------------------------------------------------------------


def _keys(path: Path, policy: QuantizePolicy) -> dict[str, tuple[str, Any]]:
    tensors = {"blk.0.ffn_up.weight": np.ones((2, 32), np.float32)}
    kiln_np.save_weights(
        path, tensors, format="gguf", metadata={"general.name": "t"}, quantize=policy
    )
    meta = read_gguf(path).metadata
    return {k: (meta.types[k], meta[k]) for k in meta}


def test_the_keys_come_after_the_overrides_as_llama_quantize_writes_them(tmp_path: Path) -> None:
    long = "./" * 63 + "é.gguf"  # the 127th byte is the first of é's two
    matrix = _imatrix({"blk.0.ffn_up.weight": np.ones((1, 32), np.float32)}, long)
    policy = QuantizePolicy.parse("q8_0", imatrix=matrix, override_kv=["x.y=int:-4"])
    keys = _keys(tmp_path / "m.gguf", policy)
    assert list(keys) == [
        "general.name",
        "general.quantization_version",
        "general.file_type",
        "x.y",
        "quantize.imatrix.file",
        "quantize.imatrix.dataset",
        "quantize.imatrix.entries_count",
        "quantize.imatrix.chunks_count",
    ]
    assert keys["quantize.imatrix.entries_count"] == ("uint32", 1)
    assert keys["quantize.imatrix.chunks_count"] == ("uint32", 3)
    kind, file = keys["quantize.imatrix.file"]
    assert kind == "string"
    raw = file.encode("utf-8", "surrogateescape")  # cut inside é, as strncpy cuts
    assert raw == long.encode()[:127]
    assert raw[-1:] == b"\xc3"


def test_no_chunk_count_no_dataset_no_entry() -> None:
    entry = {"w": np.ones((1, 32), np.float32)}
    bare = _imatrix(entry, chunks=0)._replace(datasets=())
    assert [k for k, _, _ in imatrix_keys(bare)] == [
        "quantize.imatrix.file",
        "quantize.imatrix.entries_count",
    ]
    assert imatrix_keys(_imatrix({})) == ()  # none kept: as without --imatrix


def test_none_kept_is_no_imatrix(tmp_path: Path) -> None:
    matrix = _imatrix({"blk.9.ffn_up.weight": np.ones((1, 32), np.float32)})
    policy = QuantizePolicy.parse("q8_0", imatrix=matrix, include_weights="nothing")
    keys = _keys(tmp_path / "m.gguf", policy)
    assert not any(k.startswith("quantize.") for k in keys)


# -- the runs ----------------------------------------------------------------------------


def test_each_expert_is_quantized_with_its_weights_in_runs_that_never_cross_one(
    weighted: list[tuple[int, np.ndarray]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sources_module, "_QUANTIZE_CHUNK", 3 * ROW)  # runs of 3 rows
    values, weights = _values(), _weights()
    policy = QuantizePolicy.parse("q4_0", pure=True, imatrix=_imatrix({NAME: weights}))
    plan = plan_weights(tmp_path / "m.gguf", {NAME: values}, format="gguf", quantize=policy)
    assert [s.imatrix for s in plan.steps] == ["weights"]
    execute(plan)
    assert _tensor_bytes(tmp_path / "m.gguf", NAME) == _expected(values, weights)
    # runs of 3 rows, 0-2, 3-5, 6-8, ...; experts of 5, 0-4, 5-9, ...: a run is cut
    # where an expert ends (3-4 | 5, 9 | 10-11)
    sizes = [n // ROW for n, _ in weighted]
    assert sizes == [3, 2, 1, 3, 1, 2, 3, 3, 2]
    assert sum(sizes) == EXPERTS * ROWS
    used = [int(np.flatnonzero((weights == w).all(axis=1))[0]) for _, w in weighted]
    assert used == [0, 0, 1, 1, 1, 2, 2, 3, 3]


def test_blocks_requantized_take_the_weights_too(
    weighted: list[tuple[int, np.ndarray]], tmp_path: Path
) -> None:
    values, weights = _values(), _weights()
    blocks = quantize(values, "q8_0")
    policy = QuantizePolicy.parse(
        "q4_0", pure=True, allow_requantize=True, imatrix=_imatrix({NAME: weights})
    )
    kiln_np.save_weights(tmp_path / "m.gguf", {NAME: blocks}, format="gguf", quantize=policy)
    assert _tensor_bytes(tmp_path / "m.gguf", NAME) == _expected(dequantize(blocks), weights)
    assert len(weighted) == EXPERTS  # one run per expert


def test_gguf_quantize_takes_a_row_per_expert(weighted: list[tuple[int, np.ndarray]]) -> None:
    values, weights = _values(), _weights()
    per_expert = quantize(values, "q4_0", imatrix=weights)
    assert bytes(per_expert.data) == _expected(values, weights)
    same = quantize(values.astype(np.float64), "Q4_0", imatrix=weights[1])  # one row for all
    assert bytes(same.data) == _expected(values, np.stack([weights[1]] * EXPERTS))


def test_a_type_that_ignores_the_weights_writes_the_same_bytes(tmp_path: Path) -> None:
    values, weights = _values(), _weights()
    with_them = quantize(values, "q8_0", imatrix=weights)
    assert np.array_equal(
        np.frombuffer(with_them.data, np.uint8),
        np.frombuffer(quantize(values, "q8_0").data, np.uint8),
    )
    policy = QuantizePolicy.parse("q8_0", imatrix=_imatrix({NAME: weights}))
    plan = plan_weights(tmp_path / "m.gguf", {NAME: values}, format="gguf", quantize=policy)
    assert [s.imatrix for s in plan.steps] == ["ignored"]


def test_a_tensor_without_an_entry_is_quantized_as_without_an_importance_matrix(
    tmp_path: Path,
) -> None:
    other = QuantizePolicy.parse("q4_0", pure=True, imatrix=_imatrix({"x": _weights()}))
    kiln_np.save_weights(tmp_path / "m.gguf", {NAME: _values()}, format="gguf", quantize=other)
    assert _tensor_bytes(tmp_path / "m.gguf", NAME) == bytes(quantize(_values(), "q4_0").data)


def test_save_gguf_reads_a_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        save_gguf(
            tmp_path / "m.gguf",
            {NAME: _values()},
            quantize=QuantizePolicy.parse("q8_0", imatrix=str(tmp_path / "none.gguf")),
        )
