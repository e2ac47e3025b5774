"""llama.cpp's own expected types: ``tests/snapshots/*.schema`` of llama.cpp
(copied to tests/fixtures/llama_quant), checked the way
``tests/test-quant-type-selection.cpp`` checks them.

Each schema section ``[FTYPE] default`` lists the tensors whose type is not the
file type's default; the test builds the model from its metadata and tensors
(``snapshot_models``), drops the tensors llama.cpp never quantizes, sorts the
rest in llama.cpp's order, chooses every tensor's type (as ``--dry-run``: the
snapshots include the file types that need an importance matrix) and compares
every tensor, then that every tensor the section lists was found.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from snapshot_models import MODELS, SnapshotModel

from kiln_np._quants.filetypes import OPTIONS
from kiln_np._quants.mix import Choice, choose_types, llama_order_key
from kiln_np._quants.mix_rules import Tensor, refusal

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llama_quant"
Section = tuple[str, str, dict[str, str]]  # file type, default type, listed tensors


def parse_schema(path: Path) -> tuple[list[str], list[Section]]:
    """``parse_snapshot_file``: the header lines and the sections, type names upper case."""
    header: list[str] = []
    sections: list[Section] = []
    for line in path.read_text().splitlines():
        if not line or line.startswith("#"):
            header.append(line)
            continue
        if line.startswith("["):
            close = line.index("]")
            sections.append((line[1:close], line[close + 1 :].strip(" ").upper(), {}))
            continue
        name, _, type_ = line.rpartition(" ")
        assert name, f"no space in tensor line {line!r}"
        sections[-1][2][name] = type_.upper()
    return header, sections


def snapshot_choices(model: SnapshotModel, ftype: str) -> list[Choice]:
    """The types ``llama_quant_compute_types`` gives the test's mock tensors."""
    arch = model.architecture
    tensors = [
        (name, shape, 0)  # the C++ test's tensors are F32
        for name, shape in model.tensors()
        if refusal(Tensor.of(name, shape), arch, copy=False, keep_output=False) is None
    ]
    tensors.sort(key=lambda t: llama_order_key(t[0]))
    return choose_types(ftype, tensors, model.metadata, dry_run=True)


@pytest.mark.parametrize("model", MODELS, ids=[m.schema for m in MODELS])
def test_snapshot(model: SnapshotModel) -> None:
    header, sections = parse_schema(FIXTURES / f"{model.schema}.schema")
    assert f"n_layer={model.n_layer}," in header[1]
    assert len(sections) == 33  # every file type with a default type, no NVFP4
    names = {name for name, _ in model.tensors()}
    failures: list[str] = []
    for ftype, default, listed in sections:
        assert OPTIONS[ftype].default == default, ftype
        assert set(listed) <= names, f"[{ftype}] lists tensors the model lacks"
        choices = snapshot_choices(model, ftype)
        for c in choices:
            expected = listed.get(c.name, default)
            if c.type_name != expected:
                failures.append(f"[{ftype}] {c.name}: {expected} expected, {c.type_name}: {c.rule}")
        found = {c.name for c in choices}
        failures += [
            f"[{ftype}] {name} listed, not chosen for" for name in listed if name not in found
        ]
    assert not failures, "\n".join(failures[:40])
