"""A whole sharded FP8 block-scaled checkpoint converted in bounded memory.

``kiln-np convert SRC DST --dequantize bf16 --to safetensors --max-shard-size N`` (and
``save_weights(..., dequantize="bf16")``) reads each quantized part with ``readinto``
into a buffer of its own, never through a memory map, decodes a bounded run of rows
at a time (``LogicalTensor.rows_of``) and writes it, releasing the buffers when the
tensor is done.  So: the bytes are those of the whole checkpoint dequantized in memory
and written; the tracemalloc peak is the largest output tensor plus a fixed buffer
however large the checkpoint; no source shard is ever in ``/proc/self/maps``; a shard
cut short meanwhile is LENGTH naming the tensor and the file (a map would have been
SIGBUS, so that runs in a child); an interrupted run leaves the old destination.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tracemalloc
from collections.abc import Sequence
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from _helpers import run_main

import kiln_np
from kiln_np import KilnError, LogicalTensor
from kiln_np._weights.logical import logical_tensors
from kiln_np.safetensors import save_safetensors

DEEPSEEK = {"quant_method": "fp8", "weight_block_size": [128, 128]}
METADATA = {"format": "pt"}  # as transformers writes it; convert carries it
FIXED = 8 << 20
"""The fixed buffer beside the largest output tensor: a decoded run of rows (2 Mi
values of bf16, 4 MiB), with room to spare (the FP8 part read is half the output)."""


def fp8_checkpoint(
    directory: Path,
    shapes: Sequence[tuple[int, int]],
    shard: int,
    *,
    plain: bool = True,
    seed: int = 24,
) -> None:
    """A DeepSeek-style sharded checkpoint at ``directory``: per shape an F8_E4M3
    ``weight`` of random codes (NaNs included) and its F32 ``weight_scale_inv``, one per
    128x128 block; with ``plain``, a BF16 embedding and an F32 norm per layer, which
    pass through; shards of at most ``shard`` bytes; a ``config.json`` naming the scheme."""
    rng = np.random.default_rng(seed)
    tensors: dict[str, np.ndarray] = {}
    if plain:
        embed = rng.standard_normal((64, 256), np.float32)
        tensors["model.embed_tokens.weight"] = embed.astype(ml_dtypes.bfloat16)
    for i, (rows, cols) in enumerate(shapes):
        base = f"model.layers.{i}.mlp.down_proj"
        codes = rng.integers(0, 256, (rows, cols), np.uint8)
        tensors[base + ".weight"] = codes.view(ml_dtypes.float8_e4m3fn)
        blocks = (-(-rows // 128), -(-cols // 128))
        tensors[base + ".weight_scale_inv"] = rng.uniform(2**-10, 4.0, blocks).astype(np.float32)
        if plain:
            tensors[f"model.layers.{i}.input_layernorm.weight"] = rng.uniform(0, 2, cols).astype(
                np.float32
            )
    save_safetensors(directory, tensors, metadata=METADATA, max_shard_size=shard)
    config = {"model_type": "deepseek_v3", "quantization_config": DEEPSEEK}
    (directory / "config.json").write_text(json.dumps(config))


def convert(capsys: pytest.CaptureFixture[str], src: Path, dst: Path, shard: int) -> None:
    argv = ["convert", str(src), str(dst), "--dequantize", "bf16", "--to", "safetensors"]
    status, _, err = run_main(capsys, *argv, "--max-shard-size", str(shard))
    assert status == 0, err


def files_of(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_convert_writes_the_whole_dequantized_checkpoint_byte_for_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Partial blocks at the edges, a tensor of several runs of rows (2300 x 1024 is
    over the 2 Mi values decoded at a time), plain tensors in between, five shards in
    and several out."""
    src, dst, whole = tmp_path / "fp8", tmp_path / "bf16", tmp_path / "whole"
    shapes = [(300, 520), (2300, 1024), (129, 4096), (256, 384), (1000, 130)]
    fp8_checkpoint(src, shapes, shard=500_000)
    assert len(list(src.glob("*.safetensors"))) == 5
    convert(capsys, src, dst, shard=2_000_000)
    with kiln_np.open_weights(src) as stored:
        view = stored.logical()
        assert view.metadata == METADATA
        assert sum(isinstance(t, LogicalTensor) for t in view.values()) == len(shapes)
        values = {
            n: t.dequantize("bfloat16") if isinstance(t, LogicalTensor) else t.numpy()
            for n, t in view.items()
        }
        save_safetensors(whole, values, metadata=METADATA, max_shard_size=2_000_000)
    got, want = files_of(dst), files_of(whole)
    config = json.loads(got.pop("config.json"))
    assert config == {"model_type": "deepseek_v3"}
    assert len(want) > 3
    assert sorted(got) == sorted(want)
    for name, data in want.items():
        assert got[name] == data, name


def test_peak_memory_is_the_largest_tensor_plus_a_fixed_buffer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """24 weights of 2 MiB of FP8 (4 MiB of bf16 each): 48 MiB in, 96 MiB out, so
    holding every part read (or every output) is several times the bound."""
    src, dst = tmp_path / "fp8", tmp_path / "bf16"
    shape = (1024, 2048)
    fp8_checkpoint(src, [shape] * 24, shard=7 << 20, plain=False)
    largest = 2 * shape[0] * shape[1]
    total_in = sum(p.stat().st_size for p in src.glob("*.safetensors"))
    assert total_in > 2 * (largest + FIXED)
    fp8_checkpoint(tmp_path / "small", [(128, 128)], shard=1 << 20)
    convert(capsys, tmp_path / "small", tmp_path / "warm", shard=1 << 20)  # imports done
    tracemalloc.start()
    try:
        convert(capsys, src, dst, shard=10 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sum(p.stat().st_size for p in dst.glob("*.safetensors")) > 2 * total_in - (1 << 20)
    assert peak <= largest + FIXED, f"peak {peak / 2**20:.1f} MiB"


def _mapped(directory: Path) -> list[str]:
    """The lines of /proc/self/maps naming a file in ``directory``."""
    inside = os.path.realpath(directory) + os.sep
    with open("/proc/self/maps") as f:
        return [line for line in f if inside in line]


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="maps are listed by /proc")
def test_no_source_shard_is_mapped_during_or_after(tmp_path: Path) -> None:
    src, dst = tmp_path / "fp8", tmp_path / "bf16"
    fp8_checkpoint(src, [(512, 1024)] * 6, shard=1 << 20)
    seen: list[str] = []

    def progress(_: int) -> None:
        seen.extend(_mapped(src))

    with kiln_np.open_weights(src) as stored:
        view = stored.logical()
        kiln_np.save_weights(
            dst,
            view,
            format="safetensors",
            max_shard_size=2 << 20,
            dequantize="bf16",
            progress=progress,
        )
        after = _mapped(src)
    assert seen == []
    assert after == []
    assert len(list(dst.glob("*.safetensors"))) >= 3


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "schemes"
CASES = sorted(p.parent for p in FIXTURES.glob("*/*/model.safetensors"))


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="maps are listed by /proc")
@pytest.mark.parametrize("case", CASES, ids=[f"{c.parent.name}/{c.name}" for c in CASES])
def test_no_scheme_maps_its_checkpoint_when_converted(case: Path, tmp_path: Path) -> None:
    """Every scheme, its plan's reads (a bitsandbytes quant state and table, a
    ``g_idx``, a ``weight_shape``) included: the checkpoint (copied, so no other
    test's map of the fixture counts) is never mapped from open to close."""
    src = tmp_path / "src"
    shutil.copytree(case, src, ignore=shutil.ignore_patterns("expected.safetensors"))
    seen: list[str] = []
    with kiln_np.open_weights(src / "model.safetensors") as stored:
        view = stored.logical()
        assert any(isinstance(t, LogicalTensor) for t in view.values())
        seen.extend(_mapped(src))
        kiln_np.save_weights(
            tmp_path / "out",
            view,
            format="safetensors",
            max_shard_size=1 << 30,
            dequantize="bf16",
            progress=lambda _: seen.extend(_mapped(src)),
        )
        seen.extend(_mapped(src))
    assert seen == []


_CUT_MID_CONVERT = """
import os, sys, kiln_np
src, dst = sys.argv[1], sys.argv[2]
with kiln_np.open_weights(src) as stored:
    view = stored.logical()
    first, second = [t.parts["weight"] for t in view.values()][:2]
    assert first.path == second.path and second.offset > first.offset + first.byte_length // 2
    done = []
    def cut(n):
        if not done:  # the first run of rows of the first weight is written
            done.append(n)
            os.truncate(first.path, first.offset + first.byte_length // 4)
    try:
        kiln_np.save_weights(dst, view, format="safetensors", max_shard_size=1 << 30,
                             dequantize="bf16", progress=cut)
    except kiln_np.KilnError as exc:
        print(exc.kind, first.name, first.path, str(exc), sep="\\n")
"""


def test_a_shard_cut_short_mid_convert_is_length_not_sigbus(tmp_path: Path) -> None:
    """The shard of the tensor being written is cut to a quarter of its weight after
    the first run of rows: read with ``readinto``, that tensor is already in memory
    and the next one of the shard is LENGTH naming it and the file; through a map
    the next run of rows would have killed the process with SIGBUS."""
    src, dst = tmp_path / "fp8", tmp_path / "bf16"
    fp8_checkpoint(src, [(2048, 2048)] * 3, shard=9 << 20, plain=False)
    done = subprocess.run(
        [sys.executable, "-c", _CUT_MID_CONVERT, str(src), str(dst)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    kind, first, path, message = done.stdout.splitlines()[:4]
    assert kind == "LENGTH", message
    assert path in message
    assert "model.layers.1.mlp.down_proj.weight" in message
    assert first == "model.layers.0.mlp.down_proj.weight"
    assert not dst.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fp8"]  # no temporary left


def test_a_shard_replaced_mid_convert_is_type(tmp_path: Path) -> None:
    src, dst = tmp_path / "fp8", tmp_path / "bf16"
    fp8_checkpoint(src, [(256, 256)] * 4, shard=150_000, plain=False)
    with kiln_np.open_weights(src) as stored:
        view = stored.logical()
        logical = [t for t in view.values() if isinstance(t, LogicalTensor)]
        shard = Path(str(logical[-1].parts["weight"].path))
        first = next(t for t in logical if t.parts["weight"].path == str(shard))
        replaced: list[bool] = []

        def progress(_: int) -> None:
            if not replaced:  # the same bytes, another file
                replaced.append(True)
                shutil.copyfile(shard, tmp_path / "copy")
                os.replace(tmp_path / "copy", shard)

        with pytest.raises(KilnError) as caught:
            kiln_np.save_weights(
                dst, view, format="safetensors", max_shard_size=1 << 20, dequantize="bf16",
                progress=progress,
            )  # fmt: skip
    assert caught.value.kind == "TYPE"
    assert f"tensor {first.name!r}" in str(caught.value)
    assert "replaced" in str(caught.value)
    assert not dst.exists()


def test_an_interrupted_convert_leaves_the_old_destination(tmp_path: Path) -> None:
    old_src, new_src, dst = tmp_path / "old", tmp_path / "new", tmp_path / "bf16"
    shapes = [(512, 1024)] * 6
    fp8_checkpoint(old_src, shapes, shard=1 << 20, seed=1)
    fp8_checkpoint(new_src, shapes, shard=1 << 20, seed=2)
    with kiln_np.open_weights(old_src) as stored:
        kiln_np.save_weights(
            dst, stored.logical(), format="safetensors", max_shard_size=2 << 20, dequantize="bf16"
        )
    before = files_of(dst)
    listing = sorted(p.name for p in tmp_path.iterdir())
    written = [0]

    def interrupt(n: int) -> None:
        written[0] += n
        if written[0] > 3 << 20:  # past the first output shard
            raise KeyboardInterrupt

    with kiln_np.open_weights(new_src) as stored, pytest.raises(KeyboardInterrupt):
        kiln_np.save_weights(
            dst, stored.logical(), format="safetensors", max_shard_size=2 << 20,
            dequantize="bf16", progress=interrupt,
        )  # fmt: skip
    assert files_of(dst) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == listing
    assert written[0] > 3 << 20


def test_parts_held_in_memory_convert_as_from_a_file(tmp_path: Path) -> None:
    """A logical tensor whose parts are bytes in memory (no file) writes the same
    bytes as one read from a file."""
    src = tmp_path / "fp8"
    fp8_checkpoint(src, [(300, 520)], shard=1 << 30, plain=False)
    with kiln_np.open_weights(src) as stored:
        view = stored.logical()
        (t,) = view.values()
        assert isinstance(t, LogicalTensor)
        held = {
            p.name: kiln_np.WeightTensor(
                p.name, p.info, None, p.format_dtype, data=memoryview(bytes(p.payload().data))
            )
            for p in t.parts.values()
        }
        from_file = tmp_path / "file.safetensors"
        kiln_np.save_weights(from_file, view, format="safetensors", dequantize="bf16")
    (in_memory,) = logical_tensors(held, DEEPSEEK)
    assert isinstance(in_memory, LogicalTensor)
    assert in_memory.path is None
    from_memory = tmp_path / "memory.safetensors"
    kiln_np.save_weights(from_memory, {t.name: in_memory}, format="safetensors", dequantize="bf16")
    assert from_memory.read_bytes() == from_file.read_bytes()


def test_rows_of_checks_the_arrays_against_the_parts(tmp_path: Path) -> None:
    src = tmp_path / "fp8"
    fp8_checkpoint(src, [(300, 520)], shard=1 << 30, plain=False)
    with kiln_np.open_weights(src) as stored:
        (t,) = stored.logical().values()
        assert isinstance(t, LogicalTensor)
        arrays = {role: np.array(p.numpy()) for role, p in t.parts.items()}
        got = t.rows_of(arrays, 100, 260, "bfloat16").view(np.uint16)
        assert got.tobytes() == t.rows(100, 260, "bfloat16").view(np.uint16).tobytes()
        with pytest.raises(KilnError, match=r"TYPE: .*by role"):
            t.rows_of({"weight": arrays["weight"]}, 0, 1)
        with pytest.raises(KilnError, match=r"TYPE: .*as a float8_e4m3fn array, found uint8"):
            t.rows_of({**arrays, "weight": arrays["weight"].view(np.uint8)}, 0, 1)
        with pytest.raises(KilnError, match=r"SHAPE: .*of shape \(3, 5\), found \(5, 3\)"):
            t.rows_of({**arrays, "scale": arrays["scale"].reshape(5, 3)}, 0, 1)
