"""The file ``llama-quantize --imatrix`` writes, byte for byte: the two models
``llama-imatrix`` ran (``tests/fixtures/imatrix/make_imatrix.py``: the tiny llama
and its mixture of 4 experts), each quantized with its own imatrix to issue 39's
file types, and the flag cases of ``make_quant_files.IMATRIX_FLAGS`` (the legacy
``.dat``, ``--include-weights``, ``--exclude-weights``, an entry missing, none
kept, an ``--imatrix`` argument past 127 bytes, ``--pure`` runs,
``--prune-layers``), converted by ``save_weights(..., quantize=POLICY)`` with
``imatrix=`` the path as llama-quantize was given it, and compared by SHA-256
with ``imatrix_files.json`` (``make_quant_files.py`` with the real build).

A case whose tensors take a GGML type kiln_np has no importance-weighted
quantizer of yet is refused, naming the type (never written without its
weights); every other is byte-identical.  :data:`COVERED` lists the cases
written, so one more encoder registered, or one missing, fails
:func:`test_the_cases_covered` (and only it): update the list then.
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
from kiln_np._quants.quantize import WEIGHTED_KERNELS
from kiln_np.formats import plan_weights

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
IMATRIX_DIR = FIXTURES / "imatrix"
DATA = json.loads((FIXTURES / "llama_quant" / "imatrix_files.json").read_text())
NO_WEIGHTED = "that takes an importance matrix"  # the refusal of a type with no weighted encoder

COVERED = [
    "tiny-llama Q4_K_M --imatrix llama.imatrix.gguf",
    "tiny-llama Q3_K_S --imatrix llama.imatrix.gguf",
    "tiny-llama IQ4_XS --imatrix llama.imatrix.gguf",
    "tiny-llama IQ3_M --imatrix llama.imatrix.gguf",
    "tiny-llama Q2_K_S --imatrix llama.imatrix.gguf",
    "tiny-moe Q4_K_M --imatrix moe.imatrix.gguf",
    "tiny-moe Q3_K_S --imatrix moe.imatrix.gguf",
    "tiny-moe IQ4_XS --imatrix moe.imatrix.gguf",
    "tiny-moe IQ3_M --imatrix moe.imatrix.gguf",
    "tiny-moe Q2_K_S --imatrix moe.imatrix.gguf",
    "tiny-llama Q4_K_M --imatrix llama.imatrix.dat",
    "tiny-llama Q4_K_M --imatrix llama.imatrix.gguf"
    " --include-weights attn_v --include-weights blk.1.ffn",
    "tiny-moe IQ4_XS --imatrix moe.imatrix.gguf --exclude-weights ffn_up",
    "tiny-llama IQ3_M --imatrix llama.imatrix.gguf --include-weights nothing",
    "tiny-llama Q4_K_M --imatrix "
    + "./" * 60
    + "llama.imatrix.gguf --override-kv general.name=str:tiny",
    "tiny-llama Q4_0 --imatrix llama.imatrix.gguf"
    " --pure --output-tensor-type q8_0 --token-embedding-type q8_0",
    "tiny-llama IQ4_NL --imatrix llama.imatrix.gguf"
    " --pure --output-tensor-type q8_0 --token-embedding-type q8_0",
    "tiny-moe Q5_K_M --imatrix moe.imatrix.gguf --prune-layers 0",
]
"""The cases kiln_np writes with the encoders registered (``WEIGHTED_KERNELS``:
Q4_0 ... Q5_1, Q2_K ... Q6_K, IQ4_NL, IQ4_XS, IQ3_XXS, IQ3_S), each
byte-identical; the others (IQ2_XXS, IQ2_M, IQ1_S: their weighted i-quants are
not registered yet) are refused, naming the type, and join this list as they
land; the cases llama-quantize refuses are refused alike."""


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


def _covered(case: dict[str, Any], source: Path, out: Path) -> bool:
    """Whether kiln_np plans the case (False: a type it has no weighted encoder
    of); a refusal llama-quantize makes too raises."""
    with kiln_np.open_weights(source) as given:
        policy = _policy(case["ftype"], case["flags"])
        try:
            plan_weights(out, given, format="gguf", metadata=given.metadata, quantize=policy)
        except KilnError as exc:
            if NO_WEIGHTED not in exc.message:
                raise
            found = exc.message.split(" gives it ")[1].split()[0]
            assert found not in WEIGHTED_KERNELS  # refused for want of its encoder only
            return False
    return True


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
def test_the_cases_covered(
    inputs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(IMATRIX_DIR)  # --imatrix as llama-quantize was given it
    covered = []
    for case in DATA["cases"]:
        if "error" in case:
            continue
        if _covered(case, inputs[case["model"]], tmp_path / "out.gguf"):
            covered.append(_id(case))
    assert covered == COVERED


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
    if refused is not None:  # only a type whose weighted encoder is not registered yet
        assert NO_WEIGHTED in refused.message, refused.message
        assert refused.message.split(" gives it ")[1].split()[0] not in WEIGHTED_KERNELS
        assert not out.exists()
        return
    body = out.read_bytes()
    assert len(body) == case["bytes"]
    assert hashlib.sha256(body).hexdigest() == case["sha256"]
