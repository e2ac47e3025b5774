"""``kiln-np convert --quantize POLICY``: float tensors written as GGML blocks.

In process through :func:`kiln_np.cli.main`, as ``tests/cli/test_cli.py`` runs
every other command: a bare llama-quantize file type (``q8_0``, ``Q4_K_M``) is
its mix, with llama-quantize's flags; the bytes are ``kiln_np.gguf.quantize``'s,
each tensor that keeps its type is a line on stderr and an entry of ``--json``'s
``kept``, and the refusals (a malformed policy, safetensors, ``--dequantize``
beside it, a flag without a file type, a NaN) leave nothing written.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from _helpers import run_main

import kiln_np
from kiln_np.gguf import quantize


def tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "blk.0.attn_q.weight": rng.standard_normal((4, 64)).astype(np.float32),
        "blk.0.attn_norm.weight": rng.standard_normal(64).astype(np.float32),
        "blk.0.ffn_down.weight": rng.standard_normal((2, 96)).astype(np.float16),
        "odd": rng.standard_normal((2, 40)).astype(np.float32),
        "ids": np.arange(64, dtype=np.int32).reshape(2, 32),
    }


@pytest.fixture
def model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``m.safetensors`` in the working directory (its 4-byte tensors first, then f16)."""
    monkeypatch.chdir(tmp_path)
    kiln_np.save_weights("m.safetensors", tensors(), format="safetensors")
    return tmp_path / "m.safetensors"


def _listing(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}


def test_quantize_writes_gguf_quantize_s_bytes_and_lists_what_it_keeps(
    model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run_main(
        capsys, "convert", "m.safetensors", "out.gguf", "--quantize", "q8_0"
    )
    assert status == 0
    assert out == (
        "out.gguf: 5 tensors, 1308 payload bytes, safetensors -> gguf, 2 quantized (Q8_0), "
        "3 kept their type\n"
    )
    # llama-quantize's Q8_0, in llama.cpp's order: what llama.cpp does not quantize
    # keeps its type, and the output says the model gets the generic rules (no metadata)
    not_a_weight = "Q8_0 does not quantize it (not a weight (the name does not end in 'weight'))"
    assert err.splitlines()[:3] == [
        f"kept ids as i32: {not_a_weight}",
        f"kept odd as f32: {not_a_weight}",
        "kept blk.0.attn_norm.weight as f32: Q8_0 does not quantize it (1-D)",
    ]
    assert err.splitlines()[3].startswith("note: no 'general.architecture' (llama.cpp would not")
    given = tensors()
    with kiln_np.open_weights("out.gguf") as got:
        for name in ("blk.0.attn_q.weight", "blk.0.ffn_down.weight"):
            assert bytes(got[name].payload().data) == bytes(quantize(given[name], "q8_0").data)
        assert bytes(got["odd"].payload().data) == given["odd"].tobytes()


def test_flags_reach_the_mix_and_need_a_file_type(
    model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    Path("types.txt").write_text("ATTN_Q=q4_0\n  ffn_down=f16 ")
    argv = ["convert", "m.safetensors", "out.gguf", "--quantize", "q8_0", "--json"]
    status, out, _ = run_main(capsys, *argv, "--tensor-type-file", "types.txt", "--dry-run")
    assert status == 0
    steps = {t["name"]: (t["target_type"], t["reason"]) for t in json.loads(out)["tensors"]}
    assert steps["blk.0.attn_q.weight"] == ("ggml.q4_0", "--tensor-type 'ATTN_Q'")
    assert steps["blk.0.ffn_down.weight"] == ("f16", "--tensor-type 'ffn_down': already f16")
    status, out, _ = run_main(capsys, *argv, "--tensor-type", "attn_q=q5_0", "--dry-run")
    written = {t["name"]: t["target_type"] for t in json.loads(out)["tensors"]}
    assert written["blk.0.attn_q.weight"] == "ggml.q5_0"
    status, out, _ = run_main(
        capsys, *argv, "--prune-layers", "0", "--override-kv", "a.b=str:x", "--dry-run"
    )
    assert [t["name"] for t in json.loads(out)["tensors"]] == ["ids", "odd"]  # layer 0 gone
    status, _, err = run_main(capsys, *argv, "--prune-layers", "x")
    assert status == 2
    assert "--prune-layers: expected layer numbers such as 1,3, found 'x'" in err
    status, _, err = run_main(capsys, "convert", "m.safetensors", "o.gguf", "--pure")
    assert (status, err) == (
        2,
        "kiln-np: USAGE: --pure: llama-quantize's flags need --quantize with a file type "
        "(Q4_K_M, q8_0, ...)\n",
    )
    assert not os.path.exists("o.gguf")


def test_json_lists_the_kept_tensors(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = "*.ffn_down.*=q8_0,*norm*=f16"
    status, out, _ = run_main(
        capsys, "convert", "m.safetensors", "out.gguf", "--quantize", policy, "--json"
    )
    assert status == 0
    record = json.loads(out)
    assert (record["quantize"], record["quantized"]) == ("*.ffn_down.*=Q8_0,*norm*=f16", 2)
    assert (record["dequantize"], record["dequantized"]) == (None, 0)
    unmatched = "no pattern of the policy matches it and it has no default type"
    assert record["kept"] == [
        {"name": "blk.0.attn_q.weight", "type": "f32", "reason": unmatched},
        {"name": "odd", "type": "f32", "reason": unmatched},
        {"name": "ids", "type": "i32", "reason": unmatched},
    ]
    with kiln_np.open_weights("out.gguf") as got:
        assert got["blk.0.attn_norm.weight"].info.element.name == "f16"
        assert got.byte_length == record["byte_length"]


def test_a_kiln_directory_destination(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("convert", "m.safetensors", "w", "--to", "kiln", "--quantize", "Q8_0")
    status, out, _ = run_main(capsys, *argv)
    assert status == 0
    assert out.startswith("w: 5 tensors")
    with kiln_np.open_weights("w", verify=True) as got:
        q = got["blk.0.attn_q.weight"]
        assert q.info.layout == kiln_np.Layout("ggml.q8_0", 34)
        expected = quantize(tensors()["blk.0.attn_q.weight"], "q8_0")
        assert bytes(q.payload().data) == bytes(expected.data)


def test_gguf_blocks_keep_their_type_and_metadata_goes_along(
    model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_main(capsys, "convert", "m.safetensors", "q.gguf", "--quantize", "*=q8_0")[0] == 0
    meta = dict(kiln_np.gguf.read_gguf("q.gguf").metadata)
    status, out, err = run_main(
        capsys, "convert", "q.gguf", "r.gguf", "--quantize", "*norm*=f16,*=q8_0", "--json"
    )
    assert status == 0
    kept = {k["name"]: (k["type"], k["reason"]) for k in json.loads(out)["kept"]}
    assert kept["blk.0.attn_q.weight"] == (
        "ggml.q8_0",
        "already GGML Q8_0 blocks (kiln_np does not requantize)",
    )
    assert "kept blk.0.attn_q.weight as ggml.q8_0: already GGML Q8_0 blocks" in err
    assert dict(kiln_np.gguf.read_gguf("r.gguf").metadata) == meta
    with kiln_np.open_weights("q.gguf") as a, kiln_np.open_weights("r.gguf") as b:
        assert bytes(a["blk.0.attn_q.weight"].payload().data) == bytes(
            b["blk.0.attn_q.weight"].payload().data
        )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ("o.safetensors", "--quantize", "q8_0"),
            "kiln-np: USAGE: --quantize writes GGML blocks, which safetensors cannot hold: "
            "convert to gguf or kiln\n",
        ),
        (
            ("o.gguf", "--quantize", "q8_0", "--dequantize", "f32"),
            "kiln-np: USAGE: pass --quantize or --dequantize, not both: kiln_np does not "
            "requantize GGML blocks (with --quantize they keep their type)\n",
        ),
        (
            ("o.gguf", "--quantize", "q8_0,,*norm*=f32"),
            "kiln-np: TYPE: policy entry 2: expected TYPE or PATTERN=TYPE between commas, "
            "found an empty entry in 'q8_0,,*norm*=f32'\n",
        ),
        (
            ("o.gguf", "--quantize", "*=iq2_xs"),
            "kiln-np: TYPE: policy entry 1 ('*=iq2_xs'): expected a type to quantize to",
        ),
    ],
)
def test_refusals_write_nothing(
    model: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str
) -> None:
    before = _listing(model.parent)
    status, out, err = run_main(capsys, "convert", "m.safetensors", *argv)
    assert status != 0
    assert out == ""
    assert err.startswith(message)
    assert _listing(model.parent) == before


def test_a_nan_is_type_naming_the_tensor_and_leaves_no_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    given = tensors()
    given["blk.0.ffn_down.weight"][1, 3] = np.nan
    kiln_np.save_weights("m.gguf", given, format="gguf")
    status, out, err = run_main(capsys, "convert", "m.gguf", "out.gguf", "--quantize", "q8_0")
    assert (status, out) == (2, "")
    assert err.endswith(
        "kiln-np: TYPE: tensor 'blk.0.ffn_down.weight': expected finite values to quantize to "
        "Q8_0 (ggml's result on NaN and infinity is undefined), found nan at index (1, 3)\n"
    )
    assert sorted(os.listdir(tmp_path)) == ["m.gguf"]


def test_requantizing_needs_allow_requantize(
    model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_main(capsys, "convert", "m.safetensors", "q.gguf", "--quantize", "q8_0")[0] == 0
    argv = ["convert", "q.gguf", "r.gguf", "--quantize", "q4_0"]
    status, _, err = run_main(capsys, *argv)
    assert status == 2
    assert "is Q8_0 already: requantizing it as Q4_0 needs allow_requantize=True" in err
    assert not os.path.exists("r.gguf")
    assert run_main(capsys, *argv, "--allow-requantize")[0] == 0
    with kiln_np.open_weights("q.gguf") as q, kiln_np.open_weights("r.gguf") as r:
        t = q["blk.0.attn_q.weight"]
        assert r["blk.0.attn_q.weight"].info.element.name == "ggml.q4_0"
        again = quantize(kiln_np.gguf.dequantize(t.payload()), "q4_0")  # ggml's values, then Q4_0
        assert bytes(r["blk.0.attn_q.weight"].payload().data) == bytes(again.data)


def test_keep_split_writes_the_input_s_splits(
    model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    weights = {k: v for k, v in tensors().items() if k.startswith("blk.")}
    kiln_np.save_weights("s.gguf", weights, format="gguf", max_shard_size=600)
    given = sorted(p.name for p in Path().glob("s-*.gguf"))
    assert given == [f"s-0000{i}-of-00003.gguf" for i in (1, 2, 3)]  # a tensor each
    argv = ["convert", given[0], "out.gguf", "--quantize", "q8_0", "--keep-split"]
    status, out, _ = run_main(capsys, *argv)
    assert status == 0, out
    assert sorted(p.name for p in Path().glob("out*")) == [
        f"out-0000{i}-of-00003.gguf" for i in (1, 2, 3)
    ]
    with (
        kiln_np.open_weights(given[0]) as src,
        kiln_np.open_weights("out-00001-of-00003.gguf") as got,
    ):
        assert list(got) == list(src)  # the input's order, not llama.cpp's
        assert "kiln_np.split.set_id" not in got.metadata  # llama-quantize writes none
    status, _, err = run_main(
        capsys, "convert", "m.safetensors", "o.gguf", "--quantize", "q8_0", "--keep-split"
    )
    assert status == 2
    assert "--keep-split writes a split GGUF's splits again" in err
    assert "found tensors not from a GGUF (safetensors)" in err
    kiln_np.save_weights("one.gguf", weights, format="gguf")
    status, _, err = run_main(capsys, "convert", "one.gguf", "o.gguf", *argv[3:])
    assert status == 2
    assert "found one input file" in err
    assert not Path("o.gguf").exists()
