"""``llama-quantize --dry-run``'s own choices, recorded by
``tests/fixtures/llama_quant/make_dry_runs.py`` into ``dry_runs.json``: tiny
models (llama with GQA 4 and 2, tied embeddings, 80-layer llama and qwen2,
qwen3 with rows of 160 and 100, 8 and 16 experts, gemma3, falcon) under every
file type and a few flag sets.  ``choose_types`` must give every tensor the same
type, in llama-quantize's order and with its names, or refuse what it refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kiln_np import KilnError
from kiln_np._quants.mix import Choice, choose_types, llama_order_key

DRY_RUNS = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures" / "llama_quant" / "dry_runs.json").read_text()
)


def _flags(flags: list[str]) -> dict[str, Any]:
    """llama-quantize's flags as ``choose_types``' keywords."""
    out: dict[str, Any] = {"tensor_types": []}
    words = iter(flags)
    for flag in words:
        key = flag.removeprefix("--").replace("-", "_")
        if key in ("pure", "leave_output_tensor"):
            out[key] = True
        elif key == "tensor_type":
            out["tensor_types"].append(next(words))
        elif key == "prune_layers":
            out[key] = [int(p) for p in next(words).split(",")]
        elif key == "imatrix":  # a dry run reads only that there is one
            next(words)
            out[key] = {}
        else:
            out[key] = next(words)
    return out


def _id(case: dict[str, Any]) -> str:
    return " ".join([case["model"], case["ftype"], *case["flags"]])


@pytest.mark.parametrize("case", DRY_RUNS["cases"], ids=_id)
def test_dry_run(case: dict[str, Any]) -> None:
    model = DRY_RUNS["models"][case["model"]]
    tensors = sorted((tuple(t) for t in model["tensors"]), key=lambda t: llama_order_key(t[0]))
    assert [t[0] for t in tensors] == model["order"]

    def run() -> list[Choice]:
        return choose_types(
            case["ftype"], tensors, model["metadata"], dry_run=True, **_flags(case["flags"])
        )

    if "error" in case:
        with pytest.raises(KilnError, match="no fallback"):
            run()
        return
    choices = run()
    assert [c.name for c in choices] == case.get("names", model["order"])
    got = [c.type_name for c in choices]
    expected = case["types"].split()
    assert got == expected, [
        (c.name, c.type_name, e, c.rule)
        for c, e in zip(choices, expected, strict=False)
        if c.type_name != e
    ]


def test_the_dry_runs_cover_every_file_type_and_model() -> None:
    cases = DRY_RUNS["cases"]
    assert len({c["ftype"] for c in cases}) == 39
    assert len({c["model"] for c in cases}) == len(DRY_RUNS["models"]) == 12
    assert sum(1 for c in cases if c["flags"] and c["flags"][0] != "--imatrix") == 14
    with_imatrix = {(c["model"], c["ftype"]) for c in cases if c["flags"][:1] == ["--imatrix"]}
    assert with_imatrix == {(c["model"], c["ftype"]) for c in cases if not c["flags"]}
