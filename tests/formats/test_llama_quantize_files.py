"""The file ``llama-quantize`` writes, byte for byte: every file type it writes
without an importance matrix, over the tiny models of
``tests/fixtures/llama_quant/make_dry_runs.py`` (seeded random values) and its
flag sets, converted by ``save_weights(..., quantize=POLICY)`` and compared by
SHA-256 with llama-quantize's own output (``quant_files.json``, written by
``make_quant_files.py`` with the real build): tensor order, key/values, types,
bytes, padding.  A case llama-quantize refuses is refused here too.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from _helpers import needs

import kiln_np
from kiln_np import KilnError, QuantizePolicy

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llama_quant"
DATA = json.loads((FIXTURES / "quant_files.json").read_text())


def _generator() -> Any:
    sys.path.insert(0, str(FIXTURES))
    try:
        import make_quant_files  # the fixture script, with gguf-py
    finally:
        sys.path.remove(str(FIXTURES))
    return make_quant_files


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    make = _generator()
    folder = tmp_path_factory.mktemp("llama_quant")
    paths = {}
    aligned = {f"{model}-align{n}": (model, n, 0) for model, _, n in make.ALIGNED}
    split = {f"{model}-split": (model, None, make.SPLIT_TENSORS) for model, _, _ in make.SPLIT}
    for model, digest in DATA["inputs"].items():
        name, alignment, tensors = {**aligned, **split}.get(model, (model, None, 0))
        given = make.write_input(folder / f"{model}.gguf", name, alignment=alignment, split=tensors)
        paths[model] = given[0]  # the first split opens the set
        found = hashlib.sha256(b"".join(p.read_bytes() for p in given)).hexdigest()
        assert found == digest, f"gguf-py wrote another {model}: regenerate quant_files.json"
    return paths


def _policy(ftype: str, flags: list[str]) -> QuantizePolicy:
    """llama-quantize's command-line flags as the policy's keywords."""
    keywords: dict[str, Any] = {"tensor_types": []}
    it = iter(flags)
    for flag in it:
        name = flag.removeprefix("--").replace("-", "_")
        if name in ("pure", "leave_output_tensor", "allow_requantize", "keep_split"):
            keywords[name] = True
        elif name == "tensor_type":
            keywords["tensor_types"].append(next(it))
        elif name == "override_kv":
            keywords.setdefault("override_kv", []).append(next(it))
        elif name == "prune_layers":
            keywords[name] = [int(n) for n in next(it).split(",")]
        else:
            keywords[name] = next(it)
    return QuantizePolicy.parse(ftype, **keywords)


def _convert(source: Path, out: Path, policy: QuantizePolicy) -> KilnError | None:
    """``source`` converted to ``out`` under ``policy``; the refusal, if any."""
    with kiln_np.open_weights(source) as given:
        try:
            kiln_np.save_weights(
                out, given, format="gguf", metadata=given.metadata, quantize=policy
            )
        except KilnError as exc:
            return exc
    return None


def _id(case: dict[str, Any]) -> str:
    aligned = [f"general.alignment={case['alignment']}"] if "alignment" in case else []
    aligned += [f"splits of {case['split']}"] if "split" in case else []
    return " ".join([case["model"], case["ftype"], *case["flags"], *aligned])


@needs("gguf")  # the generator imports gguf-py
def test_every_non_imatrix_file_type_of_every_model_is_a_case() -> None:
    make = _generator()
    plain = {(c["model"], c["ftype"]) for c in DATA["cases"] if not c["flags"]}
    assert plain == {(m, f) for m in make.MODELS for f in make.FILE_TYPES if f not in make.IMATRIX}
    assert len(plain) == 372  # 12 models x 31 file types
    written = [c for c in DATA["cases"] if "sha256" in c]
    assert len(written) == 385  # byte-identical below (one refused: general.alignment 64)
    assert sum(c["ftype"] in ("IQ3_S", "IQ3_M") for c in written) == 24
    kept = [c for c in DATA["cases"] if "--keep-split" in c["flags"]]
    assert [len(c["sha256"]) for c in kept] == [8, 8]  # a file per split


@needs("gguf")  # gguf-py writes the inputs
def test_docs_table_is_the_generated_one() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "weights.md").read_text()
    begin, end = "<!-- llama-quantize-files -->\n", "\n<!-- /llama-quantize-files -->"
    assert doc.split(begin)[1].split(end)[0] == _generator().table(DATA)


@needs("gguf")
@pytest.mark.parametrize("case", DATA["cases"], ids=_id)
def test_the_file_is_llama_quantize_s(
    case: dict[str, Any], inputs: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "out.gguf"
    policy = _policy(case["ftype"], case["flags"])
    source = inputs[case["model"]]
    if "alignment" in case:
        source = inputs[f"{case['model']}-align{case['alignment']}"]
    if "split" in case:
        source = inputs[f"{case['model']}-split"]
    if "from" in case:  # requantized: the input's file of that type first (kiln_np's own)
        source = tmp_path / "first.gguf"
        assert _convert(inputs[case["model"]], source, QuantizePolicy.parse(case["from"])) is None
    refused = _convert(source, out, policy)
    if case.get("alignment", 32) != 32:
        # llama-quantize keeps general.alignment but lays the data out at 32: a file
        # llama.cpp cannot load, which kiln_np refuses to write
        assert refused is not None
        assert refused.kind == "TYPE"
        assert "expected 32 (or no key)" in refused.message
        assert not out.exists()
        return
    if refused is not None:
        # refused as llama-quantize refuses it (TYPE; SHAPE: rows with no fallback)
        assert "error" in case, refused.message
        assert refused.kind in ("TYPE", "SHAPE")
        assert not out.exists()
        return
    assert "error" not in case, "llama-quantize refuses it"
    if "split" in case:  # llama-quantize's files, one per split with --keep-split
        written = sorted(tmp_path.glob("out-000*-of-000*.gguf")) if case["flags"] else [out]
        assert [p.stat().st_size for p in written] == case["bytes"]
        assert [hashlib.sha256(p.read_bytes()).hexdigest() for p in written] == case["sha256"]
        return
    body = out.read_bytes()
    assert len(body) == case["bytes"]
    assert hashlib.sha256(body).hexdigest() == case["sha256"]
