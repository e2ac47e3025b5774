"""Issue 37, item 4: the order ``kiln-np ls`` and ``kiln-np stats`` list tensors in.

Natural name order across shards by default (layer 2 before layer 10, a layer's
tensors together) for every format but GGUF, which keeps its file order;
``--sort file|name|size|type`` chooses; ``--json`` says which (``order``).  In
Python, ``kiln_np.describe(weights, sort=...)`` and ``kiln_np.dask.describe``
take the same orders, file order by default, and the ``Weights`` mapping keeps
its file order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from _helpers import needs, optional, run_main

import kiln_np
from kiln_np._weights.summary import ORDERS, natural_key
from kiln_np.formats import FORMATS

if TYPE_CHECKING:
    import onnx
    from onnx import numpy_helper
else:
    onnx = optional("onnx")
    numpy_helper = optional("onnx.numpy_helper")

# Written in this order: neither natural nor plain string order.
_WRITTEN = [
    "model.layers.10.mlp.down_proj.weight",
    "model.layers.2.self_attn.q_proj.weight",
    "lm_head.weight",
    "model.layers.2.mlp.down_proj.weight",
    "model.layers.10.self_attn.q_proj.weight",
    "model.layers.1.mlp.down_proj.weight",
    "model.norm.weight",
]
_NATURAL = [
    "lm_head.weight",
    "model.layers.1.mlp.down_proj.weight",
    "model.layers.2.mlp.down_proj.weight",
    "model.layers.2.self_attn.q_proj.weight",
    "model.layers.10.mlp.down_proj.weight",
    "model.layers.10.self_attn.q_proj.weight",
    "model.norm.weight",
]
# Rows (of 8 columns) per tensor: sizes with ties, types mixed.
_ROWS = [4, 2, 4, 1, 2, 3, 1]
_F16 = {"model.layers.2.self_attn.q_proj.weight", "model.norm.weight", "lm_head.weight"}


def _tensors() -> dict[str, np.ndarray]:
    return {
        name: np.full((rows, 8), i, np.float16 if name in _F16 else np.float32)
        for i, (name, rows) in enumerate(zip(_WRITTEN, _ROWS, strict=True))
    }


def _file_order(path: str) -> list[str]:
    with kiln_np.open_weights(path) as w:
        return list(w)


def _expected(sort: str, path: str | None = None) -> list[str]:
    """The order ``sort`` names, computed here from the test's own data (file
    order: the mapping's, of ``path``; safetensors' writer groups by dtype)."""
    tensors = _tensors()
    if sort == "file":
        return _WRITTEN if path is None else _file_order(path)
    if sort == "name":
        return list(_NATURAL)
    if sort == "size":
        return sorted(_NATURAL, key=lambda n: -tensors[n].nbytes)  # stable: ties stay natural
    kinds = {np.dtype(np.float16): "F16", np.dtype(np.float32): "F32"}
    return sorted(_NATURAL, key=lambda n: kinds[tensors[n].dtype])


def _save(tmp_path: Path, fmt: str) -> str:
    if fmt == "sharded":
        path = tmp_path / "ckpt"
        kiln_np.save_weights(path, _tensors(), format="safetensors", max_shard_size=200)
        assert len(list(path.glob("*.safetensors"))) > 2  # the layers spread over shards
        return str(path)
    path = tmp_path / {"kiln": "k", "zarr": "z.zarr", "safetensors": "m.safetensors"}.get(
        fmt, f"m.{fmt}"
    )
    kiln_np.save_weights(path, _tensors(), format=fmt)
    return str(path)


def _ls(capsys: pytest.CaptureFixture[str], path: str, *options: str) -> dict[str, Any]:
    status, out, err = run_main(capsys, "ls", path, "--json", *options)
    assert (status, err) == (0, "")
    record: dict[str, Any] = json.loads(out)
    return record


def _stats(capsys: pytest.CaptureFixture[str], path: str, *options: str) -> dict[str, Any]:
    status, out, err = run_main(capsys, "stats", path, "--json", *options)
    assert (status, err) == (0, "")
    record: dict[str, Any] = json.loads(out)
    return record


def test_the_test_data_is_in_no_sorted_order() -> None:
    """Else a listing that ignored --sort would pass."""
    orders = [_expected(sort) for sort in ORDERS]
    assert len({tuple(o) for o in orders}) == 4
    assert sorted(_WRITTEN) not in orders[:2]  # plain string order is not natural order


@pytest.mark.parametrize("fmt", ["safetensors", "sharded", "kiln", "zarr"])
def test_ls_and_stats_default_to_natural_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    path = _save(tmp_path, fmt)
    assert sorted(_file_order(path)) == sorted(_WRITTEN)
    assert _file_order(path) != _NATURAL  # or the default would go unseen
    for record in (_ls(capsys, path), _stats(capsys, path)):
        assert record["order"] == "name"
        assert [t["name"] for t in record["tensors"]] == _NATURAL
    out = run_main(capsys, "ls", path)[1]
    assert [line.split()[0] for line in out.splitlines()[1:-1]] == _NATURAL
    out = run_main(capsys, "stats", path)[1]
    assert [line.split()[0] for line in out.splitlines()[2:]] == _NATURAL


def test_gguf_defaults_to_file_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _save(tmp_path, "gguf")
    for record in (_ls(capsys, path), _stats(capsys, path)):
        assert record["order"] == "file"
        assert [t["name"] for t in record["tensors"]] == _WRITTEN
    record = _ls(capsys, path, "--sort", "name")
    assert (record["order"], [t["name"] for t in record["tensors"]]) == ("name", _NATURAL)


def test_onnx_defaults_to_natural_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inits = [numpy_helper.from_array(a, name=n) for n, a in _tensors().items()]
    graph = onnx.helper.make_graph([], "g", [], [], initializer=inits)
    onnx.save(onnx.helper.make_model(graph), tmp_path / "m.onnx")
    record = _ls(capsys, str(tmp_path / "m.onnx"))
    assert (record["order"], [t["name"] for t in record["tensors"]]) == ("name", _NATURAL)
    record = _ls(capsys, str(tmp_path / "m.onnx"), "--sort", "file")
    assert [t["name"] for t in record["tensors"]] == _WRITTEN


@pytest.mark.parametrize("sort", ORDERS)
@pytest.mark.parametrize("fmt", ["sharded", "gguf"])
def test_sort_chooses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, sort: str
) -> None:
    path = _save(tmp_path, fmt)
    listed = _ls(capsys, path, "--sort", sort)
    stats = _stats(capsys, path, "--sort", sort)
    assert listed["order"] == stats["order"] == sort
    assert [t["name"] for t in listed["tensors"]] == _expected(sort, path)
    assert [t["name"] for t in stats["tensors"]] == _expected(sort, path)
    if sort == "size":
        sizes = [t["byte_length"] for t in listed["tensors"]]
        assert sizes == sorted(sizes, reverse=True)


def test_sort_with_a_selection_and_the_logical_view(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _save(tmp_path, "sharded")
    record = _ls(capsys, path, "--include", "model.layers.*", "--sort", "size")
    assert [t["name"] for t in record["tensors"]] == [
        n for n in _expected("size") if n.startswith("model.layers.")
    ]
    assert record["selection"]["selected"] == 5


def test_a_bad_sort_is_usage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _save(tmp_path, "kiln")
    for command in ("ls", "stats"):
        status, out, err = run_main(capsys, command, path, "--sort", "bytes")
        assert (status, out) == (2, "")
        assert "--sort" in err
        assert "'bytes'" in err


def test_the_rows_say_which_formats_keep_file_order() -> None:
    by_file = {row.name for row in FORMATS if row.listing_order == "file"}
    assert by_file == {"gguf"}
    assert {row.listing_order for row in FORMATS} <= {"file", "name"}


# -- Python: describe(weights, sort=...) ----------------------------------------------------


@pytest.mark.parametrize("sort", [None, *ORDERS])
def test_describe_takes_the_same_orders(tmp_path: Path, sort: str | None) -> None:
    path = _save(tmp_path, "sharded")
    with kiln_np.open_weights(path) as w:
        stats = kiln_np.describe(w, sort=sort)
        assert [r.name for r in stats] == _expected(sort or "file", path)
        for r in stats:  # each row is its own tensor's, whatever the order
            assert r.max == float(_WRITTEN.index(r.name))
            assert r.byte_length == w[r.name].byte_length


@pytest.mark.parametrize("sort", ["bytes", "", "NAME", 1, np.array(["name"])])
def test_describe_refuses_an_unknown_sort(tmp_path: Path, sort: Any) -> None:
    match = "expected sort= among file, name, size, type, found"
    with (
        kiln_np.open_weights(_save(tmp_path, "kiln")) as w,
        pytest.raises(kiln_np.KilnError, match=match) as info,
    ):
        kiln_np.describe(w, sort=sort)
    assert info.value.kind == "SHAPE"


def test_sort_is_for_describe_of_weights() -> None:
    with pytest.raises(kiln_np.KilnError, match="sort= is for describe") as info:
        kiln_np.describe(np.ones(3, np.float32), sort="name")  # type: ignore[call-overload]
    assert info.value.kind == "SHAPE"


@needs("dask")
def test_dask_describe_takes_the_same_orders(tmp_path: Path) -> None:
    from kiln_np import dask  # imports dask: only where it is installed

    path = _save(tmp_path, "sharded")
    with kiln_np.open_weights(path) as w:
        for sort in ORDERS:
            rows = dask.describe(w, sort=sort)
            assert [r.name for r in rows] == _expected(sort, path)
        with pytest.raises(kiln_np.KilnError, match="expected sort="):
            dask.describe(w, sort="bytes")


def test_natural_key_orders_the_test_names() -> None:
    assert sorted(_WRITTEN, key=natural_key) == _NATURAL
