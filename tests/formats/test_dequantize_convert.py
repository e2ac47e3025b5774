"""Conversion with explicit intent: ``save_weights(..., dequantize=)``.

Every tensor of a decodable GGML block type becomes the named float type, its
bits those of ``kiln_np.gguf.dequantize`` (and of gguf-py for Q8_0); every other
tensor keeps its bytes; without the option, a target that cannot hold blocks
is TYPE naming the option and the tensor; memory stays one fixed buffer.
"""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np
import pytest
from _helpers import optional

import kiln_np
from kiln_np import KilnError, Layout, Payload
from kiln_np._convert import sources
from kiln_np._convert.plan import CLI, PYTHON
from kiln_np._quants.blocks import BLOCKS
from kiln_np._quants.decode import DECODERS
from kiln_np.formats import plan_weights, save_weights_paths
from kiln_np.gguf import dequantize

if TYPE_CHECKING:
    import gguf
    import gguf.quants
else:
    gguf = optional("gguf", "quants")

GOLDEN = np.load(Path(__file__).parents[1] / "fixtures" / "ggml" / "dequantize.npz")
DTYPES: dict[str, Any] = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}
TARGETS = ["safetensors", "gguf", "kiln"]
DECODED = [name for name in BLOCKS if name in DECODERS]
GOLDEN_DECODED = [n for n in DECODED if f"{n}.blocks" in GOLDEN.files]  # all but Q8_1


def blocks_payload(name: str, rows: int = 2) -> Payload:
    """``rows`` rows of ggml's golden blocks of type ``name`` (special scales first)."""
    block = BLOCKS[name]
    raw = GOLDEN[f"{name}.blocks"]
    raw = raw[: raw.shape[0] // rows * rows]
    shape = (rows, raw.shape[0] // rows)
    return Payload(
        block.code, memoryview(raw.tobytes()), shape, Layout(block.layout_name, block.bytes)
    )


def random_q8_0(shape: tuple[int, ...], seed: int = 0) -> Payload:
    """Q8_0 blocks of ``shape`` (in blocks): random bytes, ordinary f16 scales."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (*shape, 34), np.uint8)
    raw[..., :2] = rng.integers(0x1400, 0x2C00, shape).astype("<u2")[..., None].view(np.uint8)
    return Payload(0x4708, memoryview(raw.tobytes()), shape, Layout("ggml.q8_0", 34))


def source_gguf(path: Path, tensors: dict[str, Any]) -> kiln_np.Weights:
    kiln_np.save_weights(path, tensors, format="gguf")
    return kiln_np.open_weights(path)


def output(tmp_path: Path, target: str) -> Path:
    return tmp_path / {"safetensors": "o.safetensors", "gguf": "o.gguf", "kiln": "o"}[target]


def bits(arr: np.ndarray) -> bytes:
    return np.ascontiguousarray(arr).view(np.uint8).tobytes()


def payload_bytes(t: kiln_np.WeightTensor) -> bytes:
    return bytes(t.payload().data)


@pytest.fixture
def mixed(tmp_path: Path) -> kiln_np.Weights:
    """A GGUF of Q8_0 tensors (golden blocks with special scales; random ones of
    1, 2 and 3 dims) beside F32, F16 and I32 tensors."""
    return source_gguf(
        tmp_path / "mixed.gguf",
        {
            "golden": blocks_payload("Q8_0"),
            "f32": np.array([1.5, -0.0, np.nan, np.inf], np.float32),
            "row": random_q8_0((7,), 1),
            "f16": np.array([[1, 2], [3, 65504]], np.float16),
            "cube": random_q8_0((2, 3, 4), 2),
            "i32": np.arange(5, dtype=np.int32),
        },
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("target", TARGETS)
def test_blocks_become_their_values_and_the_rest_keeps_its_bytes(
    mixed: kiln_np.Weights, tmp_path: Path, target: str, dtype: str
) -> None:
    out = output(tmp_path, target)
    kiln_np.save_weights(out, mixed, format=target, dequantize=dtype)
    with kiln_np.open_weights(out) as got:
        assert list(got) == list(mixed) or target == "safetensors"  # safetensors: widest first
        assert set(got) == set(mixed)
        for name, src in mixed.items():
            t = got[name]
            if src.layout is None:
                assert (t.code, t.info.shape) == (src.code, src.info.shape)
                assert payload_bytes(t) == payload_bytes(src), name
                continue
            with np.errstate(over="ignore"):  # f16: the golden blocks' largest values are inf
                want = dequantize(src, dtype=DTYPES[dtype])
            assert t.code == kiln_np.Code[dtype.upper()]
            assert t.info.shape == want.shape
            assert payload_bytes(t) == bits(want), name


@pytest.mark.parametrize("dtype", DTYPES)
def test_q8_0_values_are_gguf_py_s(mixed: kiln_np.Weights, tmp_path: Path, dtype: str) -> None:
    out = tmp_path / "o.safetensors"
    kiln_np.save_weights(out, mixed, format="safetensors", dequantize=dtype)
    with kiln_np.open_weights(out) as got:
        for name in ("golden", "row", "cube"):
            raw = np.frombuffer(mixed[name].payload().data, np.uint8).reshape(-1, 34)
            with np.errstate(all="ignore"):
                oracle = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.Q8_0)
                want = oracle.astype(np.float32).astype(DTYPES[dtype])  # rounded to nearest even
            assert payload_bytes(got[name]) == bits(want), name


@pytest.mark.parametrize("name", GOLDEN_DECODED)
def test_every_decodable_type_converts(name: str, tmp_path: Path) -> None:
    src = source_gguf(tmp_path / "s.gguf", {"w": blocks_payload(name), "b": np.ones(3, "<f4")})
    kiln_np.save_weights(tmp_path / "o.safetensors", src, format="safetensors", dequantize="f32")
    with kiln_np.open_weights(tmp_path / "o.safetensors") as got:
        want = GOLDEN[f"{name}.values"][: src["w"].info.shape[-1] * 2]
        assert payload_bytes(got["w"]) == bits(want.reshape(2, -1))
        assert payload_bytes(got["b"]) == payload_bytes(src["b"])


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_chunk_boundaries_and_payloads_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dtype: str
) -> None:
    # three blocks a chunk: 7 blocks end with a short chunk, from a file and from memory
    monkeypatch.setattr(sources, "_DEQUANTIZE_CHUNK", 96)
    q = random_q8_0((7,), 3)
    src = source_gguf(tmp_path / "s.gguf", {"q": q})
    for tensors, out in [(src, tmp_path / "file.gguf"), ({"q": q}, tmp_path / "memory.gguf")]:
        kiln_np.save_weights(out, tensors, format="gguf", dequantize=dtype)
        with kiln_np.open_weights(out) as got:
            assert payload_bytes(got["q"]) == bits(dequantize(q, dtype=DTYPES[dtype]))


def test_dtypes_are_taken_as_names_or_numpy_types(mixed: kiln_np.Weights, tmp_path: Path) -> None:
    kiln_np.save_weights(tmp_path / "a", mixed, format="kiln", dequantize=ml_dtypes.bfloat16)
    kiln_np.save_weights(tmp_path / "b", mixed, format="kiln", dequantize="bf16")
    with kiln_np.open_weights(tmp_path / "a") as a, kiln_np.open_weights(tmp_path / "b") as b:
        assert [payload_bytes(t) for t in a.values()] == [payload_bytes(t) for t in b.values()]
        assert a["cube"].code == kiln_np.Code.BF16


@pytest.mark.parametrize("value", ["f64", np.float64, "float8_e4m3fn", np.int8, "q8", 3])
def test_another_dequantize_is_type(mixed: kiln_np.Weights, tmp_path: Path, value: Any) -> None:
    with pytest.raises(KilnError, match="expected dequantize to be 'f32', 'bf16', 'f16' or None"):
        kiln_np.save_weights(tmp_path / "o.gguf", mixed, format="gguf", dequantize=value)
    assert not (tmp_path / "o.gguf").exists()


def test_without_the_option_safetensors_names_it_and_the_tensor(
    mixed: kiln_np.Weights, tmp_path: Path
) -> None:
    out = tmp_path / "o.safetensors"
    with pytest.raises(KilnError) as caught:
        kiln_np.save_weights(out, mixed, format="safetensors")
    assert caught.value.kind == "TYPE"
    assert caught.value.message.startswith(
        "tensor 'golden': safetensors cannot hold GGML Q8_0 blocks (opaque code 18184 (0x4708)"
    )
    assert "pass dequantize='f32' (or 'bf16', 'f16') to write their values" in str(caught.value)
    assert sorted(os.listdir(tmp_path)) == ["mixed.gguf"]  # nothing written, no temporary left


def test_without_the_option_gguf_and_kiln_keep_the_blocks(
    mixed: kiln_np.Weights, tmp_path: Path
) -> None:
    for target in ("gguf", "kiln"):
        out = output(tmp_path, target)
        kiln_np.save_weights(out, mixed, format=target)
        with kiln_np.open_weights(out) as got:
            for name, src in mixed.items():
                assert (got[name].code, got[name].layout) == (src.code, src.layout)
                assert got[name].info.shape == src.info.shape
                assert payload_bytes(got[name]) == payload_bytes(src)


def test_a_type_with_no_decoder_keeps_its_bytes_or_says_why(tmp_path: Path) -> None:
    # a GGML type id kiln_np does not know (a fork's): its bytes, its GGUF dims in the layout
    unknown = Payload(0x4700 + 142, memoryview(bytes(96)), (96,), Layout("ggml.type142[32,3]", 1))
    tensors = {"k": unknown, "q": random_q8_0((2,))}
    kiln_np.save_weights(tmp_path / "o.gguf", tensors, format="gguf", dequantize="f32")
    with kiln_np.open_weights(tmp_path / "o.gguf") as got:
        assert (got["k"].layout, payload_bytes(got["k"])) == (unknown.layout, bytes(unknown.data))
        assert got["q"].code == kiln_np.Code.F32
    with pytest.raises(KilnError, match="tensor 'k': safetensors cannot hold GGML type 142 blocks"):
        kiln_np.save_weights(tmp_path / "o.st", tensors, format="safetensors", dequantize="f32")
    for option in ("dequantize", "--dequantize"):
        with pytest.raises(KilnError, match=f"{option} cannot turn them into numbers"):
            check_blocks(tensors, format="safetensors", dequantize="f16", option=option)


def check_blocks(
    tensors: Any, *, format: str, dequantize: str | None = None, option: str = "dequantize"
) -> None:
    """The plan's one check of GGML blocks a format cannot hold, as ``option`` spells it."""
    spelling = CLI if option.startswith("-") else PYTHON
    plan_weights("out", tensors, format=format, dequantize=dequantize, spelling=spelling)


def test_check_blocks_spells_the_option_as_asked(mixed: kiln_np.Weights) -> None:
    with pytest.raises(KilnError, match=r"'golden': .* pass --dequantize f32 \(or bf16, f16\)"):
        check_blocks(mixed, format="safetensors", option="--dequantize")
    with pytest.raises(KilnError, match=r"pass dequantize='f32'"):
        check_blocks(mixed, format="safetensors")
    check_blocks(mixed, format="safetensors", dequantize="f32")
    check_blocks(mixed, format="gguf")  # GGUF holds blocks
    check_blocks(mixed, format="kiln")


def test_shards_and_splits_are_cut_by_the_values_sizes(
    mixed: kiln_np.Weights, tmp_path: Path
) -> None:
    # golden (2312 bytes of blocks) splits alone either way; cube (816 bytes of blocks,
    # 3072 of f32) and golden's 8704 bytes of f32 split alone only as values
    for dequant, count in ((None, 2), ("f32", 4)):
        paths = save_weights_paths(
            tmp_path / "s.gguf", mixed, format="gguf", max_shard_size=2048, dequantize=dequant
        )
        assert len(paths) == count
    written = kiln_np.save_weights(
        tmp_path / "ckpt", mixed, format="safetensors", max_shard_size=2048, dequantize="f32"
    )
    with kiln_np.open_weights(written[0]) as got:
        assert got["cube"].byte_length == 4 * 24 * 32


def test_a_source_cut_while_it_is_dequantized_is_length(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sources, "_DEQUANTIZE_CHUNK", 32)
    path = tmp_path / "s.gguf"
    src = source_gguf(path, {"q": random_q8_0((4,))})
    end = src["q"].offset + 34

    def cut(_: int) -> None:  # after the first chunk: only one block is left
        os.truncate(path, end)

    with pytest.raises(KilnError) as caught:
        kiln_np.save_weights(
            tmp_path / "o.gguf", src, format="gguf", dequantize="f32", progress=cut
        )
    assert caught.value.kind == "LENGTH"
    assert "shrank while tensor 'q' was dequantized" in caught.value.message
    assert not (tmp_path / "o.gguf").exists()


def test_a_source_replaced_before_it_is_dequantized_is_type(tmp_path: Path) -> None:
    path = tmp_path / "s.gguf"
    src = source_gguf(path, {"q": random_q8_0((4,))})
    os.replace(source_gguf(tmp_path / "t.gguf", {"q": random_q8_0((4,), 9)}).path, path)
    with pytest.raises(KilnError, match=r"tensor 'q': .*\(it was replaced\)"):
        kiln_np.save_weights(tmp_path / "o.gguf", src, format="gguf", dequantize="f32")


def _peak(fn: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_memory_is_one_buffer_not_a_tensor(tmp_path: Path, dtype: str) -> None:
    # 16 Mi elements: 64 MiB of float32 values, 17 MiB of blocks; peak <= 16 MiB
    src = source_gguf(tmp_path / "s.gguf", {"a": random_q8_0((256, 2048)), "b": np.ones(4)})
    out = tmp_path / "o.safetensors"
    peak = _peak(lambda: kiln_np.save_weights(out, src, format="safetensors", dequantize=dtype))
    assert peak <= 16 << 20, peak
    with kiln_np.open_weights(out) as got:
        assert got["a"].byte_length == (64 << 20) // (1 + (dtype == "f16"))
