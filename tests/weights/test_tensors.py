"""The weight kit's tensors and mappings (``_weights.tensors``, ``_weights.weights``,
``_weights.mapped``): laziness, closing, pickling by reference, files changed under them."""

from __future__ import annotations

import os
import pickle
import platform
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pytest
from _helpers import bits, optional, raises_kind

import kiln_np
from kiln_np import Weights, WeightTensor

if TYPE_CHECKING:
    import onnx
    from onnx import numpy_helper
else:
    onnx = optional("onnx")
    numpy_helper = optional("onnx.numpy_helper")


# --------------------------------------------------------------- tensors and maps


def test_public_names() -> None:
    for obj in (kiln_np.open_weights, kiln_np.save_weights, Weights, WeightTensor):
        assert obj.__module__ == "kiln_np"


def test_weights_is_a_read_only_mapping(tmp_path: Path) -> None:
    kiln_np.save_weights(
        tmp_path / "a.st", {"b": np.ones(1), "a": np.ones(2)}, format="safetensors"
    )
    w = kiln_np.open_weights(tmp_path / "a.st")
    assert list(w) == ["b", "a"]
    assert len(w) == 2
    assert "a" in w
    assert cast(Any, 3) not in w
    assert w.byte_length == 24
    with pytest.raises(TypeError):
        w["c"] = w["a"]  # type: ignore[index]
    with pytest.raises(TypeError):
        w.metadata["x"] = "y"  # type: ignore[index]
    assert repr(w).startswith("Weights('safetensors', ")
    assert pickle.loads(pickle.dumps(w)).keys() == w.keys()


def test_tensor_attributes_and_array(tmp_path: Path) -> None:
    arr = np.arange(6, dtype=np.int16).reshape(2, 3)
    kiln_np.save_weights(tmp_path / "a.st", {"w": arr}, format="safetensors")
    with kiln_np.open_weights(tmp_path / "a.st") as w:
        t = w["w"]
        assert (t.name, t.code, t.shape, t.layout, t.byte_length) == ("w", 10, (2, 3), None, 12)
        assert t.path == str(tmp_path / "a.st")
        assert t.offset % 8 == 0
        view = np.asarray(t)
        assert not view.flags.writeable
        assert bits(view) == bits(arr)
        assert np.asarray(t, dtype=np.float64).dtype == np.float64
        copied = np.array(t, copy=True)
        assert copied.flags.writeable
        assert t.info.context == "code 10 (i16) shape (2, 3): "


def test_payloads_outlive_close(tmp_path: Path) -> None:
    kiln_np.save_weights(
        tmp_path / "a.st", {"a": np.arange(4.0), "b": np.ones(2)}, format="safetensors"
    )
    w = kiln_np.open_weights(tmp_path / "a.st")
    payload = w["a"].payload()
    arr = w["a"].numpy()
    w.close()
    assert bytes(payload.data) == np.arange(4.0).tobytes()  # still mapped: it is referenced
    assert arr[3] == 3.0
    with pytest.raises(ValueError, match="closed"):
        w["b"].payload()  # the map is gone: payload() refuses once nothing holds it
    del payload, arr


@pytest.mark.parametrize("fmt", ["safetensors", "kiln", "gguf"])
def test_after_close_no_tensor_hands_out_a_payload(tmp_path: Path, fmt: str) -> None:
    """docs/weights.md: mapped or not, every tensor refuses after close()."""
    path = tmp_path / ("w" if fmt == "kiln" else f"w.{fmt}")
    kiln_np.save_weights(path, {"a": np.arange(3.0), "b": np.ones(2)}, format=fmt)
    w = kiln_np.open_weights(path)
    w["a"].numpy().sum()  # its file mapped (the whole file, but for a Kiln directory)
    held = w["a"].numpy()
    w.close()
    for name in ("a", "b"):  # mapped and not
        with pytest.raises(ValueError, match="closed"):
            w[name].payload()
    assert held.tolist() == [0.0, 1.0, 2.0]


def test_closing_releases_unreferenced_maps(tmp_path: Path) -> None:
    kiln_np.save_weights(tmp_path / "a.st", {"a": np.arange(4.0)}, format="safetensors")
    with kiln_np.open_weights(tmp_path / "a.st") as w:
        w["a"].numpy().sum()  # mapped, then dropped
        file = w._files[0]
        assert "not mapped" not in repr(file)
    assert repr(file).endswith("closed)")
    assert file._map is None


def test_tensors_pickle_by_reference(tmp_path: Path) -> None:
    big = np.arange(1 << 18, dtype=np.float64)
    kiln_np.save_weights(tmp_path / "a.st", {"big": big}, format="safetensors")
    with kiln_np.open_weights(tmp_path / "a.st") as w:
        blob = pickle.dumps(w["big"])
    assert len(blob) < 1000
    # unpickled elsewhere (another working directory, another process): same bytes
    script = textwrap.dedent(
        f"""
        import os, pickle, sys
        os.chdir({str(tmp_path.parent)!r})
        t = pickle.loads(sys.stdin.buffer.read())
        sys.stdout.write(t.numpy()[-3:].tobytes().hex() + " " + str(t.path))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], input=blob, capture_output=True, check=True
    ).stdout.decode()
    assert out == f"{big[-3:].tobytes().hex()} {tmp_path / 'a.st'}"


def test_unpickled_tensor_maps_only_its_range(tmp_path: Path) -> None:
    tensors = {f"t{i}": np.full(50_000, i, np.float64) for i in range(4)}
    kiln_np.save_weights(tmp_path / "a.st", tensors, format="safetensors")
    with kiln_np.open_weights(tmp_path / "a.st") as w:
        t = pickle.loads(pickle.dumps(w["t2"]))
    assert bits(t.numpy()) == bits(tensors["t2"])
    assert t._file is not None
    assert t._file._map is not None
    assert len(t._file._map) < 2 * 400_000


def test_a_file_replaced_since_it_was_opened_is_type_never_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "a.st"
    kiln_np.save_weights(path, {"a": np.zeros(4), "b": np.zeros(4)}, format="safetensors")
    w = kiln_np.open_weights(path)
    blob = pickle.dumps(w["b"])
    os.replace(_same_size_other(tmp_path, {"a": np.ones(4), "b": np.ones(4)}), path)
    err = raises_kind("TYPE", w["b"].numpy)  # the old bytes were never mapped: refused, not 1.0s
    assert str(path) in str(err)
    assert "changed since it was opened" in str(err)
    assert "replaced" in str(err)
    raises_kind("TYPE", pickle.loads(blob).numpy)  # an unpickled tensor checks the same identity
    err = raises_kind("TYPE", kiln_np.save_weights, tmp_path / "c.st", w, format="safetensors")
    assert "tensor 'a'" in str(err)  # copying from it checks it too
    assert not (tmp_path / "c.st").exists()


def _same_size_other(tmp_path: Path, tensors: dict[str, Any]) -> Path:
    other = tmp_path / "other.st"
    kiln_np.save_weights(other, tensors, format="safetensors")
    return other


def test_a_file_modified_in_place_since_it_was_opened_is_type(tmp_path: Path) -> None:
    path = tmp_path / "a.st"
    kiln_np.save_weights(path, {"a": np.zeros(4)}, format="safetensors")
    w = kiln_np.open_weights(path)
    size = path.stat().st_size
    with open(path, "r+b") as f:  # same inode, same size, other bytes
        f.seek(size - 8)
        f.write(np.float64(1.0).tobytes())
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    err = raises_kind("TYPE", w["a"].numpy)
    assert "modification time" in str(err)
    with open(path, "ab") as f:
        f.write(b"x")
    assert f"{size} bytes when opened, {size + 1} now" in str(raises_kind("TYPE", w["a"].numpy))


def test_saving_over_its_own_file_reads_every_tensor_before_replacing(tmp_path: Path) -> None:
    # docs/weights.md: what was mapped keeps the old bytes; what was not is TYPE.
    path = tmp_path / "a.st"
    kiln_np.save_weights(path, {"a": np.zeros(4), "b": np.full(4, 2.0)}, format="safetensors")
    with kiln_np.open_weights(path) as w:
        kiln_np.save_weights(path, w, format="safetensors", metadata={"format": "pt"})
        raises_kind("TYPE", w["a"].numpy)
    with kiln_np.open_weights(path) as w:
        assert w.metadata == {"format": "pt"}
        assert w["b"].numpy().tolist() == [2.0] * 4
        held = w["b"].numpy()  # maps the whole file
        kiln_np.save_weights(path, {"b": np.ones(4)}, format="safetensors")
        assert held.tolist() == w["b"].numpy().tolist() == [2.0] * 4  # the old file, mapped
        assert w["a"].numpy().tolist() == [0.0] * 4  # the same map
    directory = tmp_path / "dir"
    kiln_np.save_weights(directory, {"a": np.zeros(4), "b": np.full(4, 2.0)}, format="kiln")
    with kiln_np.open_weights(directory) as w:
        a = w["a"].numpy()
        kiln_np.save_weights(directory, w, format="kiln")
        assert a.tolist() == w["a"].numpy().tolist() == [0.0] * 4  # a's file was mapped
        raises_kind("TYPE", w["b"].numpy)  # b's file is the new directory's
    with kiln_np.open_weights(directory, verify=True) as w:
        assert w["b"].numpy().tolist() == [2.0] * 4


def test_a_tensor_unpickled_on_another_machine_skips_the_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kiln_np.save_weights(tmp_path / "a.st", {"a": np.arange(3.0)}, format="safetensors")
    with kiln_np.open_weights(tmp_path / "a.st") as w:
        blob = pickle.dumps(w["a"])
    monkeypatch.setattr(platform, "node", lambda: "another-machine")
    t = pickle.loads(blob)
    assert t._file is not None
    assert t._file.identity.device is None
    assert t.numpy().tolist() == [0.0, 1.0, 2.0]


def test_onnx_tensors_pickle_their_bytes(tmp_path: Path) -> None:
    arr = np.arange(3, dtype=np.float32)
    graph = onnx.helper.make_graph(
        [], "g", [], [], initializer=[numpy_helper.from_array(arr, name="w")]
    )
    onnx.save(onnx.helper.make_model(graph), tmp_path / "m.onnx")
    with kiln_np.open_weights(tmp_path / "m.onnx") as w:
        t = pickle.loads(pickle.dumps(w["w"]))
    assert t.path is None
    assert bits(t.numpy()) == bits(arr)
