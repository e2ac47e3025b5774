"""A tiny llama converted to Q8_0 by kiln_np is gguf-py's own Q8_0 file, tensor for tensor.

``tests/fixtures/llama/make_tiny_llama.py`` writes a two-block random llama with
gguf-py's ``GGUFWriter``: as F32 (the source) and as gguf-py's Q8_0 file (its
converter's way: 2-D tensors through ``gguf.quants.quantize``, norms kept F32).
kiln_np converts the F32 file to Q8_0 three ways (``kiln_np.gguf.quantize`` with
``save_gguf``; ``save_weights(..., quantize="*=q8_0")``, the glob that gives every
tensor it can the type; ``kiln-np convert --quantize '*=q8_0'``), and each result
must hold the same tensors as gguf-py's file (names, types, shapes and bytes, as
``gguf.GGUFReader`` and as ``kiln_np.open_weights`` read them) and the source's
metadata.  The bare file type ``q8_0`` is llama-quantize's Q8_0 file: the same
tensors, in llama.cpp's order, with ``general.quantization_version`` and
``general.file_type`` last (issue 38; gguf-py's file has neither).  That llama.cpp
runs these files (and k-quant mixes) is ``tests/fixtures/llama/run_llama_cpp.py``,
run by hand: it needs llama-cpp-python.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _helpers import bits, load_script

import kiln_np
import kiln_np.gguf as kg
from kiln_np._quants.mix import llama_order_key
from kiln_np.cli import main

pytest.importorskip(
    "gguf", reason="needs gguf (a test-only oracle of the test extra), which is not installed"
)
import gguf

SCRIPT = Path(__file__).resolve().parents[1] / "fixtures" / "llama" / "make_tiny_llama.py"


tiny = load_script(SCRIPT)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The F32 tiny llama and gguf-py's own Q8_0 file of it."""
    d = tmp_path_factory.mktemp("llama")
    return tiny.write_tiny_llama(d / "f32.gguf"), tiny.write_tiny_llama(
        d / "gguf-py-q8_0.gguf", quantize="Q8_0"
    )


def _reader_tensors(path: Path) -> list[tuple[str, str, list[int], bytes]]:
    return [
        (t.name, t.tensor_type.name, [int(n) for n in t.shape], t.data.tobytes())
        for t in gguf.GGUFReader(path).tensors
    ]


def _kiln_tensors(path: Path) -> list[tuple[str, int, tuple[int, ...], str, bytes]]:
    with kiln_np.open_weights(path) as w:
        return [(n, w[n].code, w[n].shape, str(w[n].layout), bytes(w[n].payload().data)) for n in w]


def _fields(path: Path) -> list[tuple[str, list[int], bytes]]:
    """Every metadata key of ``path`` (not the header's counts) with its value types
    and value bytes, as gguf-py reads them."""
    return [
        (name, [int(t) for t in f.types], b"".join(bits(f.parts[i]) for i in f.data))
        for name, f in gguf.GGUFReader(path).fields.items()
        if not name.startswith("GGUF.")
    ]


def _assert_is_gguf_pys(converted: Path, files: tuple[Path, Path]) -> None:
    source, oracle = files
    assert _reader_tensors(converted) == _reader_tensors(oracle)
    assert _kiln_tensors(converted) == _kiln_tensors(oracle)
    assert _fields(converted) == _fields(source) == _fields(oracle)
    meta, want = kg.read_gguf(converted).metadata, kg.read_gguf(source).metadata
    assert dict(meta.types) == dict(want.types)
    # kiln_np's writer lays the file out as GGUFWriter does: the whole file is gguf-py's.
    assert converted.read_bytes() == oracle.read_bytes()


def test_the_fixture_is_a_llama_of_whole_k_quant_rows(files: tuple[Path, Path]) -> None:
    source, oracle = files
    tensors = gguf.GGUFReader(source).tensors
    assert [t.name for t in tensors] == list(tiny.tiny_llama_tensors())
    assert {t.tensor_type.name for t in tensors} == {"F32"}
    assert all(int(t.shape[0]) % 256 == 0 for t in tensors)  # ne[0]: whole Q4_K blocks
    fields = gguf.GGUFReader(source).fields
    assert fields["general.architecture"].contents() == "llama"
    assert fields["llama.embedding_length"].contents() == 256
    assert fields["tokenizer.ggml.tokens"].contents()[:3] == ["<unk>", "<s>", "</s>"]
    quantized = {t.name: t.tensor_type.name for t in gguf.GGUFReader(oracle).tensors}
    assert quantized["blk.0.ffn_down.weight"] == "Q8_0"
    assert quantized["output_norm.weight"] == "F32"


def test_gguf_quantize_and_save_gguf_write_gguf_pys_file(
    files: tuple[Path, Path], tmp_path: Path
) -> None:
    source = files[0]
    out = tmp_path / "kiln-q8_0.gguf"
    with kiln_np.open_weights(source) as w:
        tensors: dict[str, Any] = {}
        for name in w:
            array = w[name].numpy()
            tensors[name] = kg.quantize(array, "Q8_0") if array.ndim == 2 else array
        kg.save_gguf(out, tensors, w.metadata)
    _assert_is_gguf_pys(out, files)


def _assert_is_llama_quantize_s_layout(converted: Path, files: tuple[Path, Path]) -> None:
    """gguf-py's tensors in llama.cpp's order, the source's keys then the two
    llama-quantize writes last."""
    source, oracle = files
    got, want = _reader_tensors(converted), _reader_tensors(oracle)
    assert sorted(got) == sorted(want)
    assert [t[0] for t in got] == sorted((t[0] for t in want), key=llama_order_key)
    fields = _fields(converted)
    assert fields[:-2] == _fields(source)
    u32 = [int(gguf.GGUFValueType.UINT32)]
    assert fields[-2:] == [
        ("general.quantization_version", u32, (2).to_bytes(4, "little")),
        ("general.file_type", u32, (7).to_bytes(4, "little")),  # MOSTLY_Q8_0
    ]


def test_save_weights_quantize_q8_0_writes_gguf_pys_tensors(
    files: tuple[Path, Path], tmp_path: Path
) -> None:
    out = tmp_path / "kiln-q8_0.gguf"
    with kiln_np.open_weights(files[0]) as w:
        kiln_np.save_weights(out, w, format="gguf", metadata=w.metadata, quantize="*=q8_0")
    _assert_is_gguf_pys(out, files)
    with kiln_np.open_weights(files[0]) as w:
        kiln_np.save_weights(out, w, format="gguf", metadata=w.metadata, quantize="q8_0")
    _assert_is_llama_quantize_s_layout(out, files)


def test_cli_convert_quantize_q8_0_writes_gguf_pys_tensors(
    files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cli-q8_0.gguf"
    assert main(["convert", str(files[0]), str(out), "--quantize", "*=q8_0", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    norms = [n for n in tiny.tiny_llama_tensors() if n.endswith("norm.weight")]
    assert (report["quantize"], report["quantized"]) == ("*=Q8_0", 21 - len(norms))
    assert [(k["name"], k["type"]) for k in report["kept"]] == [(n, "f32") for n in norms]
    _assert_is_gguf_pys(out, files)
    argv = ["convert", str(files[0]), str(out), "--quantize", "q8_0", "--json", "--force"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["quantize"], report["quantized"]) == ("Q8_0", 21 - len(norms))
    kept = sorted(norms, key=llama_order_key)  # llama.cpp keeps them: 1-D
    assert [(k["name"], k["type"]) for k in report["kept"]] == [(n, "f32") for n in kept]
    _assert_is_llama_quantize_s_layout(out, files)
