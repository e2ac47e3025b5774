"""The logical view (``Weights.logical()``): grouping a checkpoint's parts by the
scheme table, the rules a group must keep, and every door that reads a
``LogicalTensor`` (describe, compare, save_weights, the command line).

The table is data, so these tests put one scheme of their own in it
(``_TOY``: an F8_E4M3 ``weight`` times a per-2x2-block F32 ``toy_scale``, as
bfloat16) and compute what it must give independently; the real schemes'
bits are checked against their producers in tests/schemes/.
"""

from __future__ import annotations

import json
import math
import os
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from _helpers import run_main

import kiln_np
from kiln_np import KilnError, LogicalTensor
from kiln_np._schemes import table
from kiln_np._schemes.scheme import Facts, Part, Plan, Scheme, final
from kiln_np._weights import logical as logical_module


def _plan(name: str, facts: Mapping[str, Facts], config: Mapping[str, Any]) -> Plan:
    w, s = facts["weight"], facts["toy_scale"]
    rows, cols = w.shape
    if s.shape != ((rows + 1) // 2, (cols + 1) // 2):
        raise KilnError("SHAPE", f"tensor {name!r}: expected 2x2 blocks, found {s.shape}")
    return Plan((rows, cols), "bfloat16", {"block": 2})


def _decode(
    plan: Plan, arrays: Mapping[str, np.ndarray], r0: int, r1: int, dtype: np.dtype[Any]
) -> np.ndarray:
    w = arrays["weight"][r0:r1].astype(np.float32)
    s = arrays["toy_scale"]
    scale = np.repeat(np.repeat(s, 2, axis=0), 2, axis=1)[r0:r1, : w.shape[1]]
    return final((w * scale).astype(ml_dtypes.bfloat16), "bfloat16", dtype)


_TOY = Scheme(
    name="toy",
    logical=".weight",
    parts=(
        Part("weight", ".weight", frozenset({"f8e4m3"})),
        Part("toy_scale", ".toy_scale", frozenset({"f32"})),
    ),
    plan=_plan,
    decode=_decode,
    methods=frozenset({"toy"}),
    configured=lambda config: config.get("toy_version", 1) == 1,
    formula="weight * toy_scale[r // 2, c // 2], to bfloat16",
    reference="these tests",
)

_BLOBS = Scheme(  # a scheme whose logical name is the base itself (as gpt-oss's)
    name="blobs",
    logical="",
    parts=(
        Part("blocks", "_blocks", frozenset({"u8"})),
        Part("scales", "_scales", frozenset({"u8"})),
    ),
    plan=lambda name, facts, config: Plan(facts["blocks"].shape, "float32", {}),
    decode=lambda plan, arrays, r0, r1, dtype: (
        arrays["blocks"][r0:r1].astype(np.float32).astype(dtype)
    ),
    methods=frozenset({"blobs"}),
    configured=lambda config: True,
    formula="blocks as float32",
    reference="these tests",
)


@pytest.fixture(autouse=True)
def _toy_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(table, "SCHEMES", (_TOY, _BLOBS))


def _expected(w: np.ndarray, s: np.ndarray) -> np.ndarray:
    out = np.empty(w.shape, np.float32)
    for r in range(w.shape[0]):
        for c in range(w.shape[1]):
            out[r, c] = np.float32(w[r, c]) * s[r // 2, c // 2]
    return out.astype(ml_dtypes.bfloat16)


def _checkpoint(
    folder: Path,
    *,
    config: dict[str, Any] | None = None,
    extra: dict[str, np.ndarray] | None = None,
    scale_first: bool = False,
) -> tuple[Path, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    w = rng.standard_normal((5, 3)).astype(ml_dtypes.float8_e4m3fn)
    w[0, 0] = np.nan
    s = rng.random((3, 2)).astype(np.float32) * 4
    tensors: dict[str, np.ndarray] = {"norm.weight": np.arange(4, dtype=np.float32)}
    parts = {"q.weight": w, "q.toy_scale": s}
    if scale_first:
        parts = dict(reversed(list(parts.items())))
    tensors.update(parts)
    tensors.update(extra or {})
    folder.mkdir(exist_ok=True)
    kiln_np.save_weights(folder / "model.safetensors", tensors, format="safetensors")
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    return folder, w, s


_CONFIG = {"model_type": "toy", "hidden_size": 3, "quantization_config": {"quant_method": "toy"}}


def test_a_group_is_one_tensor_of_its_values_in_file_order(tmp_path: Path) -> None:
    folder, w, s = _checkpoint(tmp_path / "m", config=_CONFIG, scale_first=True)
    with kiln_np.open_weights(folder) as plain:
        view = plain.logical()
        assert list(plain) == ["norm.weight", "q.toy_scale", "q.weight"]
        assert list(view) == ["norm.weight", "q.weight"]  # where its first part stood
        t = view["q.weight"]
        assert isinstance(t, LogicalTensor)
        assert t.scheme == "toy"
        assert t.format_dtype == "toy"
        assert t.shape == (5, 3)
        assert t.size == 15
        assert t.dtype.name == "bfloat16"
        assert t.byte_length == 15 + 24
        assert {r: p.name for r, p in t.parts.items()} == {
            "weight": "q.weight",
            "toy_scale": "q.toy_scale",
        }
        assert t.parts["weight"] is plain["q.weight"]
        want = _expected(w, s)
        assert np.array_equal(t.numpy().view(np.uint8), want.view(np.uint8))
        assert np.array_equal(np.asarray(t).view(np.uint8), want.view(np.uint8))
        f16 = t.dequantize(np.float16)
        assert np.array_equal(f16.view(np.uint8), want.astype(np.float16).view(np.uint8))
        assert np.array_equal(t.rows(2, 4).view(np.uint8), want[2:4].view(np.uint8))
        assert view["norm.weight"] is plain["norm.weight"]
        assert view.plain is plain
        assert plain.plain is plain
        assert view.logical() is view
        assert view.quantization == {"quant_method": "toy"}
        assert view.config is not None
        assert view.config["hidden_size"] == 3
        assert view.config_path == str(folder / "config.json")
        assert "logical" in repr(view)
        assert "toy" in repr(t)
        assert "toy_scale" in t._repr_html_()


def test_a_logical_tensor_has_no_one_payload_and_only_float_outputs(tmp_path: Path) -> None:
    folder, _, _ = _checkpoint(tmp_path / "m", config=_CONFIG)
    with kiln_np.open_weights(folder) as plain:
        t = plain.logical()["q.weight"]
        assert isinstance(t, LogicalTensor)
        with pytest.raises(KilnError, match=r"TYPE: tensor 'q.weight': expected one payload"):
            t.payload()
        with pytest.raises(KilnError, match=r"expected a dtype of float32, bfloat16, float16"):
            t.dequantize(np.int8)
        with pytest.raises(ValueError, match="copy=False is impossible"):
            np.asarray(t, copy=False)
        with pytest.raises(IndexError, match=r"rows \[4, 9\)"):
            t.rows(4, 9)
        assert np.asarray(t, np.float64).dtype == np.float64


def test_views_and_pickles_keep_the_logical_reading(tmp_path: Path) -> None:
    folder, w, s = _checkpoint(tmp_path / "m", config=_CONFIG)
    want = _expected(w, s).view(np.uint8)
    with kiln_np.open_weights(folder) as plain:
        view = plain.logical()
        picked = view.select("q.*")
        assert list(picked) == ["q.weight"]
        assert picked.plain is plain
        for again in (pickle.loads(pickle.dumps(picked)), pickle.loads(pickle.dumps(view))):
            with again:
                assert isinstance(again["q.weight"], LogicalTensor)
                assert np.array_equal(again["q.weight"].numpy().view(np.uint8), want)
        t = pickle.loads(pickle.dumps(view["q.weight"]))
        assert np.array_equal(t.numpy().view(np.uint8), want)


def test_names_and_types_alone_without_a_config(tmp_path: Path) -> None:
    lone = {"k.weight": np.zeros((2, 2), ml_dtypes.float8_e4m3fn)}  # FP8 with no scale: plain
    folder, _w, _s = _checkpoint(tmp_path / "m", extra=lone)
    with kiln_np.open_weights(folder) as plain:
        view = plain.logical()
        assert view.config is None
        assert view.quantization == {}
        assert isinstance(view["q.weight"], LogicalTensor)
        assert not isinstance(view["k.weight"], LogicalTensor)
    folder, _, _ = _checkpoint(
        tmp_path / "c", config={"quantization_config": {"quant_method": "x"}}
    )
    with kiln_np.open_weights(folder) as plain:
        with pytest.raises(KilnError, match=r"quant_method 'x', which no scheme reads"):
            plain.logical()
        assert isinstance(plain.logical(config=False)["q.weight"], LogicalTensor)
        assert isinstance(plain.logical({"quant_method": "toy"})["q.weight"], LogicalTensor)
        with pytest.raises(KilnError, match=r"whose configuration no scheme reads"):
            plain.logical({"quant_method": "toy", "toy_version": 2})
        with pytest.raises(KilnError, match="expected config to be a mapping") as e:
            plain.logical("toy")  # type: ignore[arg-type]
        assert e.value.kind == "TYPE"


def test_parts_that_do_not_fit_are_errors_naming_the_tensor_and_rule(tmp_path: Path) -> None:
    f8 = ml_dtypes.float8_e4m3fn
    cases: list[tuple[dict[str, np.ndarray], dict[str, Any] | None, str]] = [
        # with a config, an FP8 weight without its scale is damage
        (
            {"k.weight": np.zeros((2, 2), f8)},
            _CONFIG,
            r"SHAPE: tensor 'k.weight' \(toy\): "
            r"expected its parts k.weight, k.toy_scale, found no 'k.toy_scale'",
        ),
        # with a config, a scale without its weight
        (
            {"k.toy_scale": np.zeros((1, 1), np.float32)},
            _CONFIG,
            r"SHAPE: tensor 'k.toy_scale': expected the toy_scale of a toy weight keyed by "
            r"'k.weight', found no such tensor",
        ),
        # a part of the wrong type once the group has begun
        (
            {"k.weight": np.zeros((2, 2), f8), "k.toy_scale": np.zeros((1, 1), np.float16)},
            _CONFIG,
            r"TYPE: tensor 'k.weight' \(toy\): expected part 'k.toy_scale' of type f32, "
            r"found f16",
        ),
        # the scheme's own shape rule
        (
            {"k.weight": np.zeros((4, 4), f8), "k.toy_scale": np.zeros((1, 2), np.float32)},
            None,
            r"SHAPE: tensor 'k.weight': expected 2x2 blocks, found \(1, 2\)",
        ),
        # a logical name that a stored tensor has too
        (
            {
                "e_blocks": np.zeros(2, np.uint8),
                "e_scales": np.zeros(2, np.uint8),
                "e": np.zeros(2, np.float32),
            },
            None,
            r"TYPE: tensor 'e': expected one tensor of that name, found a stored tensor and the "
            r"blobs weight its parts make",
        ),
    ]
    for i, (extra, config, message) in enumerate(cases):
        folder, _, _ = _checkpoint(tmp_path / f"m{i}", config=config, extra=extra)
        with kiln_np.open_weights(folder) as plain, pytest.raises(KilnError, match=message):
            plain.logical()
    # without a config the wrong-typed look-alike is two plain tensors
    look = {"k.weight": np.zeros((2, 2), f8), "k.toy_scale": np.zeros((1, 1), np.float16)}
    folder, _, _ = _checkpoint(tmp_path / "plain", extra=look)
    with kiln_np.open_weights(folder) as plain:
        view = plain.logical()
        assert "k.toy_scale" in view
        assert not isinstance(view["k.weight"], LogicalTensor)


def test_config_json_is_read_strictly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, _, _ = _checkpoint(tmp_path / "m")
    config = folder / "config.json"
    for text, message in [
        (b"{", r"config.json': expected valid JSON"),
        (b"[1]", r"expected a JSON object, found list"),
        (b'{"quantization_config": 3}', r"expected quantization_config to be an object"),
        (b"\xff", r"expected valid JSON"),
    ]:
        config.write_bytes(text)
        with kiln_np.open_weights(folder) as plain, pytest.raises(KilnError, match=message):
            plain.logical()
    monkeypatch.setattr(logical_module, "CONFIG_LIMIT", 8)
    config.write_text(json.dumps(_CONFIG))
    with (
        kiln_np.open_weights(folder) as plain,
        pytest.raises(KilnError, match=r"expected a config of at most 8 bytes"),
    ):
        plain.logical()


DEEP = b'{"a": ' + b"[" * 100000 + b"]" * 100000 + b"}"


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        # issue 36: RecursionError before, now the package's parser and its depth cap
        ("config.json", DEEP, "expected JSON nested at most 127 levels, found 100001"),
        (
            "config.json",
            b'{"quantization_config": {"quant_method": "toy", "x": '
            + b"[" * 5000
            + b"]" * 5000
            + b"}}",
            "nested at most 127 levels",
        ),
        ("hf_quant_config.json", DEEP, "expected JSON nested at most 127 levels"),
        ("config.json", b'{"a": 1, "a": 2}', "expected unique keys, found 'a' twice"),
    ],
    ids=["config-deep", "config-deep-inside", "hf-quant-config-deep", "config-duplicate"],
)
def test_sidecars_are_read_by_the_one_json_parser(
    tmp_path: Path, name: str, text: bytes, says: str
) -> None:
    folder, _, _ = _checkpoint(tmp_path / "m")
    (folder / name).write_bytes(text)
    with kiln_np.open_weights(folder) as plain, pytest.raises(KilnError) as e:
        plain.logical()
    assert e.value.kind == "TYPE"
    assert str(e.value).startswith(f"TYPE: {str(folder / name)!r}: ")
    assert says in str(e.value)


def test_a_sidecar_may_hold_what_pythons_json_writes(tmp_path: Path) -> None:
    """NaN and Infinity (Python's json.dump writes them) stay readable in a config."""
    folder, _, _ = _checkpoint(tmp_path / "m", config={**_CONFIG, "rope": float("nan")})
    with kiln_np.open_weights(folder) as plain:
        view = plain.logical()
        assert view.config is not None
        assert math.isnan(view.config["rope"])


@pytest.mark.parametrize(
    ("setting", "says"),
    [
        ({"quant_method": ["toy"]}, "quantization_config quant_method: expected text, found list"),
        ({"quant_method": {"a": 1}}, "quant_method: expected text, found dict"),
        ({"quant_method": "toy", "format": ["x"]}, "quantization_config format: expected text"),
        (
            {"quant_method": "toy", "config_groups": {"g": {"format": {"x": 1}}}},
            "quantization_config config_groups.g format: expected text, found dict",
        ),
        (
            {"quant_method": "toy", "config_groups": {"g": {"weights": {"group_size": 2**70}}}},
            f"config_groups.g.weights group_size: expected an integer from -1 to {2**31 - 1}",
        ),
        ({"quant_method": "toy", "group_size": 2**70}, "group_size: expected an integer from -1"),
        ({"quant_method": "toy", "bits": True}, "bits: expected an integer from 1 to 64"),
        ({"quant_method": "toy", "load_in_4bit": "yes"}, "load_in_4bit: expected true or false"),
        ({"quant_method": "toy", "config_groups": [1]}, "config_groups: expected an object"),
        ({"quant_method": "toy", "config_groups": {"g": 3}}, "config_groups.g: expected an object"),
    ],
)
def test_every_setting_is_checked_naming_the_file_and_key(
    tmp_path: Path, setting: dict[str, Any], says: str
) -> None:
    """A list for quant_method or format was numpy's TypeError (unhashable); each
    setting is checked for type and range where the config is read, TYPE naming
    the file and the key (issue 36), and given by hand, the key."""
    config = {"model_type": "toy", "quantization_config": setting}
    folder, _, _ = _checkpoint(tmp_path / "m", config=config)
    with kiln_np.open_weights(folder) as plain:
        with pytest.raises(KilnError) as e:
            plain.logical()
        assert e.value.kind == "TYPE"
        assert str(e.value).startswith(
            f"TYPE: {str(folder / 'config.json')!r}: quantization_config"
        )
        assert says in str(e.value)
        with pytest.raises(KilnError) as e:
            plain.logical(setting)
        assert e.value.kind == "TYPE"
        assert str(e.value).startswith("TYPE: quantization_config")
        assert says in str(e.value)


def test_hf_quant_config_settings_name_that_file(tmp_path: Path) -> None:
    folder, _, _ = _checkpoint(tmp_path / "m")
    doc = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": ["FP8"]}}
    (folder / "hf_quant_config.json").write_text(json.dumps(doc))
    with kiln_np.open_weights(folder) as plain, pytest.raises(KilnError) as e:
        plain.logical()
    where = repr(str(folder / "hf_quant_config.json"))
    assert (
        str(e.value) == f"TYPE: {where}: quantization quant_algo: expected text, found list ['FP8']"
    )


def test_describe_and_compare_read_the_values(tmp_path: Path) -> None:
    folder, w, s = _checkpoint(tmp_path / "m", config=_CONFIG)
    want = _expected(w, s).astype(np.float64)
    with kiln_np.open_weights(folder) as plain:
        view = plain.logical()
        row = kiln_np.describe(view).row("q.weight")
        finite = want[np.isfinite(want)]
        assert (row.type, row.count, row.nan, row.finite) == ("toy", 15, 1, 14)
        assert (row.min, row.max) == (finite.min(), finite.max())
        assert row.mean == pytest.approx(finite.mean(), rel=1e-12)
        assert row.scales["toy_scale"] == (float(s.min()), float(s.max()))
        same = kiln_np.compare(view, view)
        assert same.equal
        assert same.tensors[1].same_bytes
        out = tmp_path / "plain.safetensors"
        kiln_np.save_weights(out, view, format="safetensors", dequantize="bf16")
        written = kiln_np.open_weights(out)
        result = kiln_np.compare(view, written)
        assert result.equal
        assert not result.tensors[1].same_bytes
        assert np.array_equal(
            written["q.weight"].numpy().view(np.uint8), _expected(w, s).view(np.uint8)
        )


def test_a_config_beside_the_output_that_no_conversion_wrote_is_never_replaced(
    tmp_path: Path,
) -> None:
    # Issue 35 item 4: a user's own config.json beside DST was silently replaced.
    folder, _, _ = _checkpoint(tmp_path / "m", config=_CONFIG)
    out = tmp_path / "out"
    out.mkdir()
    mine = out / "config.json"
    mine.write_text('{"model_type": "mine"}')
    with kiln_np.open_weights(folder) as plain:
        view = plain.logical()
        for door in (kiln_np.save_weights, kiln_np.formats.save_weights_paths):
            with pytest.raises(KilnError, match=r"config.json': expected to write the plain") as e:
                door(out / "m.safetensors", view, format="safetensors", dequantize="bf16")
            assert e.value.kind == "TYPE"
            assert "found a file of 22 bytes that this conversion did not write" in e.value.message
        assert mine.read_text() == '{"model_type": "mine"}'
        assert sorted(os.listdir(out)) == ["config.json"]
        mine.unlink()  # a config this very conversion writes is no replacement: a rerun works
        for _ in range(2):
            kiln_np.save_weights(
                out / "m.safetensors", view, format="safetensors", dequantize="bf16"
            )
        assert json.loads(mine.read_text()) == {"model_type": "toy", "hidden_size": 3}


def test_convert_replaces_a_config_it_did_not_write_only_with_force_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _, _ = _checkpoint(tmp_path / "m", config=_CONFIG)
    (tmp_path / "out").mkdir()
    mine = tmp_path / "out" / "config.json"
    mine.write_text("{}")
    argv = ["convert", str(folder), str(tmp_path / "out" / "m.safetensors"), "--dequantize", "bf16"]
    status, out, err = run_main(capsys, *argv)
    assert (status, out) == (2, "")
    assert err == (
        f"kiln-np: FILE: cannot write {str(mine)!r} beside the output: it exists (a file of 2 "
        "bytes) and this conversion did not write it; pass --force to replace it\n"
    )
    assert mine.read_text() == "{}"
    assert not (tmp_path / "out" / "m.safetensors").exists()
    status, out, err = run_main(capsys, *argv, "--force")
    assert status == 0
    assert err == f"replacing {mine} (not written by a conversion)\n"
    assert json.loads(mine.read_text()) == {"model_type": "toy", "hidden_size": 3}


@pytest.mark.parametrize("shards", [None, "32B"])
def test_a_checkpoint_directory_converts_to_a_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], shards: str | None
) -> None:
    # Issue 36 item 11: `convert hf_dir plain --to safetensors --dequantize bf16` wrote
    # one extensionless file `plain` and dropped config.json beside it in the parent.
    folder, w, s = _checkpoint(tmp_path / "m", config=_CONFIG)
    dst = tmp_path / "plain"
    argv = ["convert", str(folder), str(dst), "--to", "safetensors", "--dequantize", "bf16"]
    status, _, err = run_main(
        capsys, *argv, *(() if shards is None else ("--max-shard-size", shards))
    )
    assert (status, err) == (0, "")
    assert sorted(os.listdir(tmp_path)) == ["m", "plain"]
    files = sorted(os.listdir(dst))
    if shards is None:
        assert files == ["config.json", "model.safetensors"]
    else:
        assert files[0] == "config.json"
        assert files[-1] == "model.safetensors.index.json"
    assert json.loads((dst / "config.json").read_text()) == {"model_type": "toy", "hidden_size": 3}
    with kiln_np.open_weights(dst) as got, kiln_np.open_weights(folder) as source:
        assert list(got) == list(source.logical())  # the same tensor names
        assert np.array_equal(
            got["q.weight"].numpy().view(np.uint8),
            _expected(w, s).astype(ml_dtypes.bfloat16).view(np.uint8),
        )
    # a DST that names a file stays a file
    status, _, err = run_main(capsys, *argv[:2], str(tmp_path / "one.safetensors"), *argv[3:])
    assert (status, err) == (0, "")
    assert (tmp_path / "one.safetensors").is_file()


def test_parts_dequantized_get_no_config_beside_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 37: a plain open holds its config.json now; a stripped config is still
    # written only beside a dequantized logical view, never beside parts that stay
    # quantized (--parts: --dequantize reads GGML blocks only).
    folder, w, _ = _checkpoint(tmp_path / "m", config=_CONFIG)
    dst = tmp_path / "parts"
    argv = ["convert", str(folder), str(dst), "--to", "safetensors", "--dequantize", "bf16"]
    status, _, err = run_main(capsys, *argv, "--parts")
    assert (status, err) == (0, "")
    assert os.listdir(dst) == ["model.safetensors"]
    with kiln_np.open_weights(dst) as got:
        assert got["q.weight"].format_dtype == "F8_E4M3"  # the part, as stored
        assert np.array_equal(got["q.weight"].numpy().view(np.uint8), w.view(np.uint8))
        assert got.config is None
    with kiln_np.open_weights(folder) as plain:
        assert plain.config is not None
        assert "quantization_config" in plain.config
        target = tmp_path / "api" / "model.safetensors"
        for chosen in (plain, plain.select("q.*")):
            paths = kiln_np.formats.save_weights_paths(
                target, chosen, format="safetensors", dequantize="bf16"
            )
            assert paths == [str(target)]
        # the logical view of the same files: its values, and the config beside them
        paths = kiln_np.formats.save_weights_paths(
            target, plain.logical(), format="safetensors", dequantize="bf16"
        )
        assert paths == [str(target), str(target.parent / "config.json")]


def test_save_writes_a_plain_checkpoint_and_its_config(tmp_path: Path) -> None:
    folder, w, s = _checkpoint(tmp_path / "m", config=_CONFIG)
    with kiln_np.open_weights(folder) as plain:
        view = plain.logical()
        with pytest.raises(KilnError, match=r"pass dequantize='bf16'"):
            kiln_np.save_weights(tmp_path / "x.safetensors", view, format="safetensors")
        with pytest.raises(KilnError, match=r"found the source checkpoint's own config there"):
            kiln_np.save_weights(
                folder / "bf16.safetensors", view, format="safetensors", dequantize="bf16"
            )
        assert not (folder / "bf16.safetensors").exists()
        out = tmp_path / "out"
        out.mkdir()
        target = out / "model.safetensors"
        paths = kiln_np.formats.save_weights_paths(
            target, view, format="safetensors", dequantize="bf16"
        )
        assert paths == [str(target), str(out / "config.json")]
        kiln_np.save_weights(target, view, format="safetensors", dequantize="bf16")
        written = json.loads((out / "config.json").read_text())
        assert written == {"model_type": "toy", "hidden_size": 3}
        sharded = tmp_path / "sharded"
        for _ in range(2):  # a second save replaces the first, its config included
            kiln_np.save_weights(
                sharded, view, format="safetensors", dequantize="bf16", max_shard_size=32
            )
        assert sorted(os.listdir(sharded)) == [
            "config.json",
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
            "model.safetensors.index.json",
        ]
        with kiln_np.open_weights(sharded) as again:
            assert np.array_equal(
                again["q.weight"].numpy().view(np.uint8), _expected(w, s).view(np.uint8)
            )
        # the plain view writes the parts as they are
        copy = tmp_path / "copy.safetensors"
        kiln_np.save_weights(copy, plain, format="safetensors")
        assert kiln_np.compare(plain, kiln_np.open_weights(copy)).equal


def test_the_command_line_reads_the_logical_view_unless_parts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def run_cli(*argv: str) -> tuple[int, str, str]:
        return run_main(capsys, *argv)

    folder, _w, _s = _checkpoint(tmp_path / "m", config=_CONFIG)
    code, out, _ = run_cli("ls", str(folder), "--json")
    listed = json.loads(out)
    assert code == 0
    assert [t["name"] for t in listed["tensors"]] == ["norm.weight", "q.weight"]
    toy = listed["tensors"][1]
    assert (toy["kiln"], toy["code"], toy["shape"]) == ("toy", None, [5, 3])
    assert toy["parts"] == {"weight": "q.weight", "toy_scale": "q.toy_scale"}
    code, out, _ = run_cli("ls", str(folder), "--parts", "--json")
    assert [t["name"] for t in json.loads(out)["tensors"]] == [
        "norm.weight",
        "q.toy_scale",  # safetensors writes the widest first
        "q.weight",
    ]
    code, out, _ = run_cli("stats", str(folder), "--json")
    assert code == 0
    assert json.loads(out)["tensors"][1]["type"] == "toy"
    dst = tmp_path / "bf16"
    code, out, err = run_cli(
        "convert",
        str(folder),
        str(dst),
        "--to",
        "safetensors",
        "--dequantize",
        "bf16",
        "--max-shard-size",
        "1000000",
    )
    assert code == 0, err
    assert json.loads((dst / "config.json").read_text()) == {"model_type": "toy", "hidden_size": 3}
    code, out, _ = run_cli("diff", str(folder), str(dst))
    assert code == 0, out
    code, out, _ = run_cli("diff", str(folder), str(dst), "--parts")
    assert code == 1
    broken = tmp_path / "broken"
    _checkpoint(
        broken, config=_CONFIG, extra={"k.weight": np.zeros((2, 2), ml_dtypes.float8_e4m3fn)}
    )
    code, _, err = run_cli("stats", str(broken))
    assert code == 2
    assert "(--parts reads the tensors as stored)" in err
    code, _, err = run_cli("stats", str(broken), "--parts")
    assert code == 0, err


def test_describe_and_bit_histogram_of_one_logical_tensor(tmp_path: Path) -> None:
    folder, w, s = _checkpoint(tmp_path / "m", config=_CONFIG)
    want = _expected(w, s)
    with kiln_np.open_weights(folder) as plain:
        t = plain.logical()["q.weight"]
        assert isinstance(t, LogicalTensor)
        d = kiln_np.describe(t)
        assert (d.dtype.name, d.shape, d.count, d.nan) == ("bfloat16", (5, 3), 15, 1)
        finite = want.astype(np.float64)[~np.isnan(want.astype(np.float64))]
        assert (d.min, d.max) == (finite.min(), finite.max())
        counts = kiln_np.bit_histogram(t)  # one count per 16-bit pattern
        assert counts.sum() == 15
        assert np.array_equal(counts, np.bincount(want.view(np.uint16).ravel(), minlength=65536))
