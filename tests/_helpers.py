"""Helpers shared by several test files (import with ``from _helpers import ...``).

The names are public because other modules use them; add a helper here as
soon as a second test file needs it, instead of copying it.
"""

from __future__ import annotations

import importlib
import importlib.util
import shutil
import struct
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

__all__ = [
    "HF_MODELS",
    "OPTIONAL",
    "available",
    "bits",
    "every_code",
    "external_tensor",
    "gguf_bytes",
    "gguf_facts",
    "gguf_info",
    "gguf_kv",
    "gguf_py_file",
    "gguf_with_tokenizer",
    "kiln_np_exe",
    "llama_safetensors",
    "needs",
    "optional",
    "payload_bytes",
    "quantized_gguf",
    "raises_kind",
    "run_command",
    "skip_reason",
]

HF_MODELS = (
    "llama",
    "llama_tied_f16",
    "qwen2",
    "qwen3",
    "qwen3_moe",
    "gemma3",
    "gemma3_f32",
    "phi3",
    "mixtral",
    "gemma2",
    "qwen2_moe",
)
"""The tiny random models of ``tests/fixtures/hf`` (``make_hf_models.py``), each a
checkpoint directory and ``NAME.gguf``, the converter's file of it."""

OPTIONAL = {
    "aiohttp": "the remote extra",
    "dask": "the dask extra",
    "distributed": "the dask extra",
    "fsspec": "the remote extra",
    "gguf": "a test-only oracle of the test extra",
    "matplotlib": "the plot extra",
    "moto": "a test-only fake S3 of the test extra",
    "onnx": "the onnx extra",
    "s3fs": "the remote extra",
    "safetensors": "a test-only oracle of the test extra",
    "selenium": "a test-only browser driver of the test extra",
    "sentencepiece": "the hf extra",
    "tokenizers": "the hf extra",
    "torch": "the torch extra",
    "transformers": "a test-only oracle of the test extra (loads the hf files)",
    "zarr": "the zarr extra",
}
"""The packages outside the runtime dependencies (numpy, ml_dtypes) that tests use,
and where each comes from: a test that needs a missing one skips, saying which."""


def skip_reason(name: str) -> str:
    """Why a test that needs ``name`` skips: the package and its extra."""
    root = name.partition(".")[0]
    return f"needs {root} ({OPTIONAL[root]}), which is not installed"


def available(name: str) -> bool:
    """Whether the optional package ``name`` is installed (found, not imported)."""
    return importlib.util.find_spec(name.partition(".")[0]) is not None


def needs(*names: str) -> pytest.MarkDecorator:
    """A mark skipping a test (or a module, as ``pytestmark``) when one of these
    optional packages is missing, with the reason naming it and its extra."""
    missing = [name for name in names if not available(name)]
    why = "; ".join(skip_reason(name) for name in missing) or f"needs {', '.join(names)}"
    return pytest.mark.skipif(bool(missing), reason=why)


class _Missing:
    """What :func:`optional` gives for a package that is not installed: its first
    public attribute read skips, the test that reads it, or the whole module when
    read as the module is imported (a parametrize list of its types)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        __tracebackhide__ = True  # the skip is reported at the line that used the package
        if attribute.startswith("_"):  # pytest's and hypothesis's introspection
            raise AttributeError(attribute)
        pytest.skip(skip_reason(self._name), allow_module_level=True)

    def __repr__(self) -> str:
        return f"<{self._name}: not installed>"


def optional(name: str, *submodules: str) -> Any:
    """``import name`` (and ``name.sub`` for each of ``submodules``) for a package
    outside the runtime dependencies, at the top of a test module whose other tests
    run without it: the module, or when the package is not installed a stand-in whose
    first use skips with the reason.  Spell it ``if TYPE_CHECKING: import x`` /
    ``else: x = optional("x")`` so mypy still sees the package's types."""
    root = name.partition(".")[0]
    assert root in OPTIONAL, f"{root} is not in _helpers.OPTIONAL"
    try:
        module = importlib.import_module(name)
        for sub in submodules:
            importlib.import_module(f"{name}.{sub}")
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.partition(".")[0] != root:
            raise  # installed but broken: an error, not a skip
        return _Missing(name)
    return module


def _gguf() -> Any:
    """gguf-py, the oracle's reader and writer, imported where a helper needs it
    (every test imports _helpers, only some need gguf): skips without it."""
    return optional("gguf", "quants")


def bits(arr: Any) -> bytes:
    """The bytes of ``arr`` in native order, for bit-exact comparisons (NaN
    payloads, -0.0 and ml_dtypes' masking make ``==`` lie); object arrays as
    the repr of their values."""
    a = np.ascontiguousarray(arr)
    if a.dtype.kind == "O":
        return repr(a.tolist()).encode()
    return a.astype(a.dtype.newbyteorder("=")).view(np.uint8).tobytes()


def external_tensor(
    location: str | bytes,
    *,
    data_type: int = 1,
    dims: tuple[int, ...] = (2,),
    name: str = "w",
    **entries: str,
) -> Any:
    """An ONNX ``TensorProto`` (FLOAT [2] by default) whose data is external, at
    ``location``, with the other ``external_data`` entries given (``offset="8"``)."""
    onnx = pytest.importorskip("onnx", reason=skip_reason("onnx"))
    tensor = onnx.TensorProto()
    tensor.name = name
    tensor.data_type = data_type
    tensor.dims.extend(dims)
    tensor.data_location = onnx.TensorProto.EXTERNAL
    for key, value in {"location": location, **entries}.items():
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor


def kiln_np_exe() -> list[str]:
    """The installed ``kiln-np`` entry point next to this interpreter, as argv."""
    exe = shutil.which("kiln-np", path=str(Path(sys.executable).parent)) or shutil.which("kiln-np")
    if exe is None:  # a source tree on PYTHONPATH, not installed
        pytest.skip("needs the kiln-np console script: pip install kiln_np")
    return [exe]


def run_command(*argv: str) -> Any:
    """Run a ``kiln-np`` command as :func:`kiln_np.cli.main` does, minus the
    handler that turns its KilnError into a line on stderr (so a test sees the
    error itself)."""
    from kiln_np import cli

    return cli.run(list(argv))


def load_script(path: Path) -> ModuleType:
    """A script of the repository (a fixture generator, not a package module), imported."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_main(capsys: Any, *argv: str) -> tuple[int, str, str]:
    """One ``kiln-np`` command in process through :func:`kiln_np.cli.main`, its
    KilnError handler included: the status, stdout and stderr (``capsys`` is
    pytest's fixture)."""
    from kiln_np.cli import main

    try:
        status = main(list(argv))
    except SystemExit as exc:  # argparse: a USAGE error
        status = int(exc.code or 0)
    out, err = capsys.readouterr()
    return status, out, err


def gguf_kv(key: str, vtype: int, body: bytes) -> bytes:
    """One GGUF metadata key/value: the key string, the value type, the value bytes."""
    raw = key.encode()
    return struct.pack("<Q", len(raw)) + raw + struct.pack("<I", vtype) + body


def gguf_info(name: str, dims: tuple[int, ...] = (2,), type_id: int = 0, offset: int = 0) -> bytes:
    """One GGUF tensor info (an F32 [2] at data offset 0 by default)."""
    raw = name.encode()
    n = len(dims)
    return struct.pack(f"<Q{len(raw)}sI{n}QIQ", len(raw), raw, n, *dims, type_id, offset)


def gguf_bytes(
    kvs: Sequence[bytes] = (),
    infos: Sequence[bytes] = (),
    data: bytes = b"",
    *,
    version: int = 3,
    n_tensors: int | None = None,
    n_kv: int | None = None,
) -> bytes:
    """A GGUF file by hand (counts from the lists unless given), padded to 32
    bytes before ``data``, for hostile-header tests."""
    head = b"GGUF" + struct.pack(
        "<IQQ",
        version,
        len(infos) if n_tensors is None else n_tensors,
        len(kvs) if n_kv is None else n_kv,
    )
    body = head + b"".join(kvs) + b"".join(infos)
    return body + bytes(-len(body) % 32) + data


def gguf_facts(read: Callable[[], Any], where: str) -> tuple[object, ...]:
    """What ``read()`` (a ``read_gguf`` of the file or URL ``where``) gives, ``where``
    taken out, to compare two readings of the same bytes: a KilnError's kind and
    message, or the header's version, alignment, metadata types and values, and
    tensor infos (their paths left out)."""
    from kiln_np import KilnError

    try:
        found = read()
    except KilnError as exc:
        return exc.kind, str(exc).replace(repr(where), "<where>")
    meta = found.metadata
    return (
        found.version,
        found.alignment,
        dict(meta.types),
        [repr(meta[k]) for k in meta],
        [t._replace(path="") for t in found.tensors],
    )


def gguf_with_tokenizer(path: Path, *, tokens: int, data_bytes: int) -> int:
    """A GGUF file of a llama-like tokenizer of ``tokens`` tokens in its metadata
    (token strings of 4 to 12 bytes, float32 scores, int32 token types) and one
    F32 tensor ``token_embd.weight`` of ``data_bytes`` bytes (a multiple of 16 KiB)
    whose data is a hole: the file is sparse, however large.  Returns the
    header's size (where the data starts)."""
    words = [f"tok{i:x}".encode()[: 4 + i % 9].ljust(4 + i % 9, b"_") for i in range(tokens)]
    strings = b"".join(struct.pack("<Q", len(w)) + w for w in words)
    kvs = [
        gguf_kv("general.architecture", 8, struct.pack("<Q", 5) + b"llama"),
        gguf_kv("general.name", 8, struct.pack("<Q", 9) + b"Tokenized"),
        gguf_kv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, tokens) + strings),
        gguf_kv(
            "tokenizer.ggml.scores",
            9,
            struct.pack("<IQ", 6, tokens) + np.arange(tokens, dtype="<f4").tobytes(),
        ),
        gguf_kv(
            "tokenizer.ggml.token_type",
            9,
            struct.pack("<IQ", 5, tokens) + np.ones(tokens, "<i4").tobytes(),
        ),
    ]
    dims = (4096, data_bytes // (4 * 4096))
    head = gguf_bytes(kvs, [gguf_info("token_embd.weight", dims, 0, 0)])
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(len(head) + data_bytes)
    return len(head)


def gguf_py_file(
    path: Path,
    tensors: dict[str, tuple[np.ndarray, Any]],
    *,
    name: str | None = None,
    file_type: int | None = None,
) -> Path:
    """A GGUF file written by gguf-py's ``GGUFWriter`` (the oracle's writer): each
    tensor is ``(array, raw_dtype)``, ``raw_dtype`` a ``GGMLQuantizationType`` for
    blocks from ``gguf.quants.quantize`` or None for a plain array; ``name`` and
    ``file_type`` its ``general.name`` and ``general.file_type``, if given."""
    writer = _gguf().GGUFWriter(str(path), "llama")
    if name is not None:
        writer.add_name(name)
    if file_type is not None:
        writer.add_file_type(file_type)
    for tensor, (arr, raw) in tensors.items():
        writer.add_tensor(tensor, arr, raw_dtype=raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


LLAMA_ROLES = {
    "self_attn.q_proj": (64, 64),
    "self_attn.k_proj": (32, 64),
    "self_attn.v_proj": (32, 64),
    "self_attn.o_proj": (64, 64),
    "mlp.gate_proj": (128, 64),
    "mlp.up_proj": (128, 64),
    "mlp.down_proj": (64, 128),
}
"""The matrices of one layer of :func:`llama_safetensors`, by role."""


def llama_safetensors(path: Path, layers: int = 3, metadata: dict[str, str] | None = None) -> Path:
    """A small llama-like bf16 safetensors checkpoint, seeded: an embedding
    (320 x 64), ``layers`` layers of :data:`LLAMA_ROLES` plus two norms (layer
    ``i`` scaled by ``0.02 * (i + 1)``), the final norm and ``lm_head``."""
    import ml_dtypes

    import kiln_np

    rng = np.random.default_rng(22)
    bf16 = ml_dtypes.bfloat16
    tensors: dict[str, np.ndarray] = {
        "model.embed_tokens.weight": (rng.standard_normal((320, 64)) * 0.02).astype(bf16)
    }
    for i in range(layers):
        for role, shape in LLAMA_ROLES.items():
            values = rng.standard_normal(shape) * 0.02 * (i + 1)
            tensors[f"model.layers.{i}.{role}.weight"] = values.astype(bf16)
        for norm in ("input_layernorm", "post_attention_layernorm"):
            tensors[f"model.layers.{i}.{norm}.weight"] = np.ones(64, bf16)
    tensors["model.norm.weight"] = np.ones(64, bf16)
    tensors["lm_head.weight"] = (rng.standard_normal((320, 64)) * 0.02).astype(bf16)
    kiln_np.save_weights(path, tensors, format="safetensors", metadata=metadata)
    return path


def quantized_gguf(path: Path, *, name: str | None = None, file_type: int | None = None) -> Path:
    """A GGUF file (gguf-py's writer) of two llama blocks: Q8_0 ``attn_q``, F32
    ``attn_norm``, then an F32 ``output_norm``; seeded.  ``name`` and
    ``file_type`` as :func:`gguf_py_file` takes them."""
    rng = np.random.default_rng(23)
    gguf = _gguf()
    q8_0 = gguf.GGMLQuantizationType.Q8_0
    tensors: dict[str, tuple[np.ndarray, Any]] = {}
    for i in range(2):
        weights = (rng.standard_normal((64, 64)) * 0.05 * (i + 1)).astype(np.float32)
        tensors[f"blk.{i}.attn_q.weight"] = (gguf.quants.quantize(weights, q8_0), q8_0)
        tensors[f"blk.{i}.attn_norm.weight"] = (np.ones(64, np.float32), None)
    tensors["output_norm.weight"] = (np.ones(64, np.float32), None)
    return gguf_py_file(path, tensors, name=name, file_type=file_type)


def raises_kind(kind: str, call: Any, *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)`` raises a KilnError of ``kind``: that error."""
    from kiln_np import KilnError

    with pytest.raises(KilnError) as info:
        call(*args, **kwargs)
    assert info.value.kind == kind, str(info.value)
    return info.value


def every_code() -> dict[str, Any]:
    """One tensor per closed code, an opaque one, odd shapes, empties, scalars."""
    import kiln_np
    from kiln_np import Layout, Payload

    rng = np.random.default_rng(5)
    tensors: dict[str, Any] = {}
    for row in kiln_np.DTYPES:
        if row.packed:
            raw = rng.integers(0, 16, 7, dtype=np.uint8)
            tensors[row.name] = raw.view(row.dtype)
        elif row.name == "bool":
            tensors[row.name] = rng.integers(0, 2, (2, 3)).astype(bool)
        else:
            raw = rng.integers(0, 256, 6 * row.dtype.itemsize, dtype=np.uint8)
            tensors[row.name] = raw.view(row.dtype).reshape(3, 2)
    tensors["empty"] = np.zeros((0, 4), np.float32)
    tensors["scalar"] = np.array(-0.0, np.float64)
    tensors["snan"] = np.array([0x7F800001, 0xFFC00001], np.uint32).view("<f4")
    tensors["q4"] = Payload(0x4702, memoryview(bytes(range(36))), (2, 1), Layout("ggml.q4_0", 18))
    return tensors


def payload_bytes(value: Any) -> bytes:
    """The payload bytes of a Payload, or of an array as from_numpy encodes it."""
    from kiln_np import Payload, from_numpy

    if isinstance(value, Payload):
        return bytes(value.data)
    return bytes(from_numpy(value).data)
