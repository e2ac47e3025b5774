"""Hugging Face checkpoints to GGUF as llama.cpp's converter writes them:
``kiln-np convert DIR out.gguf [--outtype T]`` and
``save_weights(out, open_weights(DIR), format="gguf", outtype=T)``.

The oracles are the converter's own files, made from the tiny random checkpoints
of ``tests/fixtures/hf`` with the vendored ``convert_hf_to_gguf.py``: the
committed ``NAME.gguf`` (``--outtype`` the checkpoint's dtype) and
``NAME-q8_0.gguf`` (``make_hf_models.py``), and for every model under every
outtype the records of ``converter_outtypes.json`` (``make_outtypes.py``).
``--quantize FTYPE`` is compared with the two-tool path, the converter's
``--outtype f32`` followed by ``llama-quantize FTYPE`` (with ``--imatrix`` for
some), recorded the same way in ``llama_quantize.json``.
Everything is compared but the ``tokenizer.*`` keys: every other key with its
type and value in the converter's order, every tensor's name, order, type,
shape, bytes and offset from the first tensor's data, the alignment.  The tiny
models' tokenizer is one the converter refuses (its pre-tokenizer's hash is no
published tokenizer's: ``make_hf_models.py`` answered "gpt-2" for it), so they
are converted with ``tokenizer=False``; the tokenizer's keys are checked against
the converter's by ``tests/weights/test_tokenizer_gguf.py``, and their one place
in the file here: with the converter's keys the whole file is its, byte for
byte, and a tiny llama given a SentencePiece tokenizer gets
``tokenizer_keys``' keys last.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _helpers import HF_MODELS, run_main

import kiln_np
from kiln_np import KilnError
from kiln_np._convert.gguf_keys import id_components, rounded
from kiln_np._convert.plan import OptionsError
from kiln_np._convert.to_gguf import gguf_view
from kiln_np._convert.tokenizer_gguf import tokenizer_keys
from kiln_np.formats import plan_weights
from kiln_np.gguf import GGUFMetadata, save_gguf

HF = Path(__file__).parents[1] / "fixtures" / "hf"
TOKENIZERS = HF.parent / "tokenizers"
RECORDS = json.loads((HF / "converter_outtypes.json").read_text())
QUANTIZED = json.loads((HF / "llama_quantize.json").read_text())
DTYPES = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}
Q8_0 = ("llama", "qwen2", "qwen3", "qwen3_moe", "gemma3", "phi3")  # NAME-q8_0.gguf


def _record(path: Path) -> dict[str, Any]:
    """A GGUF as ``make_outtypes.record`` records one, read by kiln_np."""
    with kiln_np.open_weights(path) as w:
        meta = w.metadata
        assert isinstance(meta, GGUFMetadata)
        keys = [
            [k, meta.types[k], v.item() if isinstance(v, np.generic) else v]
            for k, v in meta.items()
            if not k.startswith("tokenizer.")
        ]
        first = min((t.info.offset for t in w.values()), default=0)
        tensors = [
            [
                t.name,
                t.info.element.name.removeprefix("ggml.").upper(),
                list(t.shape),
                hashlib.sha256(t.payload().data).hexdigest(),
                t.info.offset - first,
            ]
            for t in w.values()
        ]
        alignment = int(meta.get("general.alignment", 32))
    return {"keys": keys, "tensors": tensors, "alignment": alignment}


def _float32_keys(record: dict[str, Any]) -> dict[str, Any]:
    """A record with each float32 key as its float32 bits, to compare exactly."""
    keys = [
        [k, t, np.float32(v).view(np.uint32).item() if t == "float32" else v]
        for k, t, v in record["keys"]
    ]
    return {**record, "keys": keys}


def _converted(name: str, outtype: str, tmp_path: Path) -> Path:
    out = tmp_path / f"{name}-{outtype}.gguf"
    with kiln_np.open_weights(HF / name) as w:
        kiln_np.save_weights(out, w, format="gguf", tokenizer=False, outtype=outtype)
    return out


def _dtype(name: str) -> str:
    config = json.loads((HF / name / "config.json").read_text())
    return DTYPES[config["dtype"]]


@pytest.mark.parametrize("name", HF_MODELS)
def test_the_converters_file_but_the_tokenizer(name: str, tmp_path: Path) -> None:
    out = _converted(name, _dtype(name), tmp_path)
    assert _float32_keys(_record(out)) == _float32_keys(_record(HF / f"{name}.gguf"))


def test_gemma2s_lm_head_is_left_out_as_the_converter_leaves_it(tmp_path: Path) -> None:
    """A gemma2 checkpoint saved with its tied head: the converter's file all the same."""
    folder = tmp_path / "gemma2"
    shutil.copytree(HF / "gemma2", folder)
    data = (folder / "model.safetensors").read_bytes()
    size = int.from_bytes(data[:8], "little")
    header, body = json.loads(data[8 : 8 + size]), data[8 + size :]
    embd = header["model.embed_tokens.weight"]
    start, stop = embd["data_offsets"]
    header["lm_head.weight"] = {**embd, "data_offsets": [len(body), len(body) + stop - start]}
    text = json.dumps(header).encode()
    (folder / "model.safetensors").write_bytes(
        len(text).to_bytes(8, "little") + text + body + body[start:stop]
    )
    out = tmp_path / "o.gguf"
    with kiln_np.open_weights(folder) as w:
        assert "lm_head.weight" in w
        kiln_np.save_weights(out, w, format="gguf", tokenizer=False, outtype="bf16")
    assert _float32_keys(_record(out)) == _float32_keys(_record(HF / "gemma2.gguf"))


@pytest.mark.parametrize("name", Q8_0)
def test_q8_0_is_the_converters_own(name: str, tmp_path: Path) -> None:
    out = _converted(name, "q8_0", tmp_path)
    assert _float32_keys(_record(out)) == _float32_keys(_record(HF / f"{name}-q8_0.gguf"))


@pytest.mark.parametrize("key", sorted(RECORDS))
def test_every_outtype_as_the_converter_writes_it(key: str, tmp_path: Path) -> None:
    name, outtype = key.split(":")
    made = _float32_keys(_record(_converted(name, outtype, tmp_path)))
    assert made == _float32_keys(RECORDS[key])


def test_the_records_cover_every_model_and_outtype() -> None:
    outtypes = ("f32", "f16", "bf16", "q8_0", "auto")
    assert sorted(RECORDS) == sorted(f"{n}:{t}" for n in HF_MODELS for t in outtypes)


@pytest.mark.parametrize("key", sorted(QUANTIZED))
def test_quantize_is_the_converter_then_llama_quantize(
    key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name, kind = key.split(":")
    ftype, _, weighted = kind.partition("+")
    monkeypatch.chdir(HF)  # quantize.imatrix.file is the path as llama-quantize was given it
    policy = kiln_np.QuantizePolicy.parse(
        ftype.lower(), imatrix=f"imatrix/{name}.gguf" if weighted else None
    )
    out = tmp_path / "q.gguf"
    with kiln_np.open_weights(HF / name) as w:
        kiln_np.save_weights(out, w, format="gguf", tokenizer=False, quantize=policy)
    assert _float32_keys(_record(out)) == _float32_keys(QUANTIZED[key])


def test_quantize_takes_a_file_type_and_no_other_outtype(tmp_path: Path) -> None:
    with kiln_np.open_weights(HF / "llama") as w:
        with pytest.raises(OptionsError) as caught:
            plan_weights(
                tmp_path / "o.gguf",
                w,
                format="gguf",
                tokenizer=False,
                quantize="q4_k_m",
                outtype="bf16",
            )
        assert "--quantize FTYPE of a Hugging Face checkpoint" in caught.value.usage
        plan = plan_weights(
            tmp_path / "o.gguf", w, format="gguf", tokenizer=False, quantize="q4_k_m"
        )
    step = next(s for s in plan.steps if s.name == "blk.0.attn_q.weight")
    assert (step.action, step.source_type) == ("quantize", "f32")


def _tokenizer_keys(path: Path) -> list[tuple[str, Any, str]]:
    """The converter's ``tokenizer.*`` keys of a GGUF, as ``(key, value, type)``: what
    the tokenizer's conversion (issue 41) is to return for its checkpoint."""
    with kiln_np.open_weights(path) as w:
        meta = w.metadata
        assert isinstance(meta, GGUFMetadata)
        return [(k, v, meta.types[k]) for k, v in meta.items() if k.startswith("tokenizer.")]


@pytest.mark.parametrize(
    ("name", "suffix"), [(n, "") for n in HF_MODELS] + [(n, "-q8_0") for n in Q8_0]
)
def test_with_the_tokenizer_keys_the_whole_file_is_the_converters(
    name: str, suffix: str, tmp_path: Path
) -> None:
    """The one place the tokenizer's keys go: given the converter's, every byte is its."""
    theirs = HF / f"{name}{suffix}.gguf"
    outtype = "q8_0" if suffix else _dtype(name)
    with kiln_np.open_weights(HF / name) as w:
        view = gguf_view(w, outtype, _tokenizer_keys(theirs))
        types = {key: kind for key, kind, _ in view.keys}
        values = {key: value for key, _, value in view.keys}
        save_gguf(tmp_path / "o.gguf", view.tensors, values, metadata_types=types)
    assert (tmp_path / "o.gguf").read_bytes() == theirs.read_bytes()
    assert not any("tokenizer" in note for note in view.notes)


def test_the_command_line_writes_the_same_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "q.gguf"
    status, said, err = run_main(
        capsys, "convert", str(HF / "qwen3_moe"), str(out), "--outtype", "bf16", "--no-tokenizer"
    )
    assert status == 0, err
    assert "no tokenizer.ggml.* keys are written (the tokenizer left out)" in err
    assert _float32_keys(_record(out)) == _float32_keys(_record(HF / "qwen3_moe.gguf"))
    status, said, err = run_main(
        capsys,
        "convert",
        str(HF / "phi3"),
        str(out),
        "--dry-run",
        "--outtype",
        "q8_0",
        "--no-tokenizer",
    )
    assert status == 0, err
    assert "blk.0.attn_qkv.weight" in said
    assert "from model.layers.0.self_attn.qkv_proj.weight (bf16 -> q8_0)" in said
    status, said, err = run_main(
        capsys, "convert", str(HF / "mixtral"), str(out), "--dry-run", "--no-tokenizer"
    )
    assert status == 0, err
    stacked = [line for line in said.splitlines() if "blk.1.ffn_down_exps.weight" in line]
    assert len(stacked) == 1
    assert (
        "4 experts stacked (model.layers.1.block_sparse_moe.experts.0.w2.weight, ...)"
        in (stacked[0])
    )


def test_the_default_outtype_is_the_converters_f16(tmp_path: Path) -> None:
    out = tmp_path / "llama.gguf"
    with kiln_np.open_weights(HF / "llama") as w:
        kiln_np.save_weights(out, w, format="gguf", tokenizer=False)
    assert _float32_keys(_record(out)) == _float32_keys(RECORDS["llama:f16"])


def test_names_raw_keeps_the_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "raw.gguf"
    with kiln_np.open_weights(HF / "llama") as w:
        kiln_np.save_weights(out, w, format="gguf", tokenizer=False, names="raw")
        names = list(w)
    with kiln_np.open_weights(out) as g:
        assert list(g) == names
        assert "general.architecture" not in g.metadata


def test_an_architecture_outside_the_map_is_written_raw_and_said(tmp_path: Path) -> None:
    src = tmp_path / "gpt2"
    shutil.copytree(HF / "llama", src)
    config = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    with kiln_np.open_weights(src) as w:
        plan = plan_weights(tmp_path / "o.gguf", w, format="gguf", tokenizer=False)
        assert [s.name for s in plan.steps] == list(w)
    assert plan.notes == (
        "config.json's model_type 'gpt2' is no architecture of the model map (llama, mistral, "
        "qwen2, qwen3, qwen3_moe, gemma3, phi3, mixtral, gemma2, qwen2_moe): written under its "
        "own names, no llama.cpp keys",
    )
    with kiln_np.open_weights(src) as w, pytest.raises(OptionsError) as caught:
        plan_weights(tmp_path / "o.gguf", w, format="gguf", tokenizer=False, outtype="bf16")
    assert "expected outtype only for a Hugging Face checkpoint" in str(caught.value)


def test_quantized_sources_are_refused(tmp_path: Path) -> None:
    src = tmp_path / "fp8"
    shutil.copytree(HF / "llama", src)
    config = json.loads((src / "config.json").read_text())
    fp8 = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    (src / "config.json").write_text(json.dumps({**config, "quantization_config": fp8}))
    with kiln_np.open_weights(src) as w, pytest.raises(KilnError) as caught:
        plan_weights(tmp_path / "o.gguf", w, format="gguf", tokenizer=False)
    assert caught.value.kind == "TYPE"
    assert "found quantized ones (quantization_config 'fp8')" in str(caught.value)


def test_options_the_map_does_not_take(tmp_path: Path) -> None:
    with kiln_np.open_weights(HF / "llama") as w:
        with pytest.raises(OptionsError) as caught:
            plan_weights(tmp_path / "o.gguf", w, format="gguf", tokenizer=False, quantize="*=q4_k")
        assert "--outtype {f32,f16,bf16,q8_0,auto} chooses its types" in caught.value.usage
        with pytest.raises(OptionsError):
            plan_weights(tmp_path / "o.gguf", w, format="gguf", tokenizer=False, dequantize="f32")
        with pytest.raises(OptionsError):
            plan_weights(tmp_path / "o.gguf", w, format="gguf", tokenizer=False, names="hf")
        with pytest.raises(KilnError):
            plan_weights(tmp_path / "o.gguf", w, format="gguf", tokenizer=False, outtype="tq1_0")
        with pytest.raises(OptionsError):
            plan_weights(tmp_path / "o.safetensors", w, format="safetensors", outtype="f16")


@pytest.mark.parametrize(
    ("model_id", "total", "parts"),
    [  # gguf-py's Metadata.get_model_id_components, run on these ids
        ("Mistral-7B-Instruct-v0.2", 7_000_000_000,
         ("Mistral-7B-Instruct-v0.2", None, "Mistral", "Instruct", "v0.2", "7B")),
        ("meta-llama/Llama-3.2-1B", 1_235_814_400,
         ("Llama-3.2-1B", "meta-llama", "Llama-3.2", None, None, "1B")),
        ("Qwen/Qwen3-30B-A3B", 30_000_000_000,
         ("Qwen3-30B-A3B", "Qwen", "Qwen3", None, None, "30B-A3B")),
        ("qwen3_moe", 99_000, ("qwen3_moe", None, None, None, None, None)),
        ("bloom-7b1", 7_000_000_000, ("bloom-7b1", None, "bloom", None, None, "7.1B")),
        ("gemma-3-270m-it", 270_000_000, ("gemma-3-270m-it", None, "gemma-3", "it", None, "270M")),
        ("SmolLM2-135M-Instruct-v0.1-8k", 135_000_000,
         ("SmolLM2-135M-Instruct-v0.1-8k", None, "SmolLM2", "Instruct-8k", "v0.1", "135M")),
        ("phi-3-mini-128k-instruct", 3_800_000_000,
         ("phi-3-mini-128k-instruct", None, "phi-3", "128k-instruct", None, "mini")),
    ],
)  # fmt: skip
def test_name_parts_as_gguf_py_finds_them(
    model_id: str, total: int, parts: tuple[str | None, ...]
) -> None:
    assert id_components(model_id, total) == parts


def test_size_labels() -> None:
    assert [rounded(n) for n in (111_232, 4_020_000_000, 999, 1_500_000)] == [
        "111K", "4.0B", "1.0K", "1.5M",
    ]  # fmt: skip


def test_the_tokenizer_keys_come_last_as_the_converter_puts_them(tmp_path: Path) -> None:
    folder = tmp_path / "llama"
    shutil.copytree(HF / "llama", folder)
    (folder / "tokenizer.json").unlink()  # the tokenizer.model beside it is read instead
    for name in ("tokenizer.model", "tokenizer_config.json", "added_tokens.json"):
        shutil.copy(TOKENIZERS / "spm" / name, folder / name)
    keys = tokenizer_keys(folder, "llama", json.loads((folder / "config.json").read_text()))
    with kiln_np.open_weights(folder) as w:
        plan = plan_weights(tmp_path / "o.gguf", w, format="gguf", outtype="bf16")
        kiln_np.save_weights(tmp_path / "o.gguf", w, format="gguf", outtype="bf16")
    assert not any("tokenizer" in note for note in plan.notes)
    made = _record(tmp_path / "o.gguf")
    assert _float32_keys(made) == _float32_keys(_record(HF / "llama.gguf"))  # the rest
    with kiln_np.open_weights(tmp_path / "o.gguf") as g:
        meta = g.metadata
        assert isinstance(meta, GGUFMetadata)
        written = [k for k in meta if k.startswith("tokenizer.")]
        assert list(meta)[-len(keys) :] == written == [k for k, _, _ in keys]
        assert [meta.types[k] for k in written] == [t for _, _, t in keys]
