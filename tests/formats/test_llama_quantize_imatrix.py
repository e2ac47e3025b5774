"""The file ``llama-quantize --imatrix`` writes, byte for byte: the two models
``llama-imatrix`` ran (``tests/fixtures/imatrix/make_imatrix.py``: the tiny llama
and its mixture of 4 experts), each quantized with its own imatrix to issue 39's
file types, and the flag cases of ``make_quant_files.IMATRIX_FLAGS`` (the legacy
``.dat``, ``--include-weights``, ``--exclude-weights``, an entry missing, none
kept, an ``--imatrix`` argument past 127 bytes, ``--pure`` runs,
``--prune-layers``), converted by ``save_weights(..., quantize=POLICY)`` with
``imatrix=`` the path as llama-quantize was given it, and compared by SHA-256
with ``imatrix_files.json`` (``make_quant_files.py`` with the real build).

Every case is byte-identical; the two llama-quantize refuses (an entry
missing for a type that needs one, none kept) are refused alike.
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

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
IMATRIX_DIR = FIXTURES / "imatrix"
DATA = json.loads((FIXTURES / "llama_quant" / "imatrix_files.json").read_text())


def _generator() -> Any:
    sys.path.insert(0, str(FIXTURES / "llama_quant"))
    try:
        import make_quant_files  # the fixture script, with gguf-py
    finally:
        sys.path.remove(str(FIXTURES / "llama_quant"))
    return make_quant_files


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    make = _generator()
    folder = tmp_path_factory.mktemp("llama_imatrix")
    paths = {}
    for model, digest in DATA["inputs"].items():
        paths[model] = make.write_imatrix_model(folder / f"{model}.gguf", model)
        found = hashlib.sha256(paths[model].read_bytes()).hexdigest()
        assert found == digest, f"gguf-py wrote another {model}: regenerate imatrix_files.json"
    return paths


def _policy(ftype: str, flags: list[str]) -> QuantizePolicy:
    """llama-quantize's command-line flags as the policy's keywords."""
    keywords: dict[str, Any] = {}
    it = iter(flags)
    for flag in it:
        name = flag.removeprefix("--").replace("-", "_")
        if name == "pure":
            keywords[name] = True
        elif name in ("include_weights", "exclude_weights", "override_kv"):
            keywords.setdefault(name, []).append(next(it))
        elif name == "prune_layers":
            keywords[name] = [int(n) for n in next(it).split(",")]
        else:
            keywords[name] = next(it)
    return QuantizePolicy.parse(ftype, **keywords)


def _id(case: dict[str, Any]) -> str:
    return " ".join([case["model"], case["ftype"], *case["flags"]])


@needs("gguf")  # the generator imports gguf-py
def test_every_file_type_of_issue_39_is_a_case() -> None:
    make = _generator()
    plain = {(c["model"], c["ftype"]) for c in DATA["cases"] if len(c["flags"]) == 2}
    issue = ("Q4_K_M", "Q3_K_S", "IQ4_XS", "IQ3_XXS", "IQ3_M", "IQ2_XXS", "IQ2_M", "IQ1_S")
    assert {f for _, f in plain} == {*issue, "Q2_K_S"}
    assert {m for m, _ in plain} == set(make.IMATRIX_MODELS)
    assert len(DATA["cases"]) == 30
    refused = [c["error"] for c in DATA["cases"] if "error" in c]
    assert refused == [
        "Missing importance matrix for tensor blk.0.ffn_down.weight in a very low-bit quantization",
        "this quantization requires an imatrix!",
    ]


@needs("gguf")
@pytest.mark.parametrize("case", DATA["cases"], ids=_id)
def test_the_file_is_llama_quantize_s(
    case: dict[str, Any], inputs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(IMATRIX_DIR)
    out = tmp_path / "out.gguf"
    source = inputs[case["model"]]
    with kiln_np.open_weights(source) as given:
        policy = _policy(case["ftype"], case["flags"])
        try:
            kiln_np.save_weights(
                out, given, format="gguf", metadata=given.metadata, quantize=policy
            )
            refused = None
        except KilnError as exc:
            refused = exc
    if "error" in case:  # refused as llama-quantize refuses it, naming the tensor
        assert refused is not None
        assert refused.kind == "TYPE"
        assert "imatrix" in refused.message
        assert "blk.0." in refused.message
        assert not out.exists()
        return
    assert refused is None, refused
    body = out.read_bytes()
    assert len(body) == case["bytes"]
    assert hashlib.sha256(body).hexdigest() == case["sha256"]
