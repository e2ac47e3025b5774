"""One weight stored as several tensors, read as the tensor it means.

A quantized checkpoint keeps each weight as *parts* (DeepSeek's FP8
``X.weight`` plus ``X.weight_scale_inv``, GPTQ's ``qweight``, ``qzeros``,
``scales``, ...).  :func:`logical_tensors` groups a mapping's tensors by the
scheme table of :mod:`kiln_np._schemes` and gives each group as one
:class:`LogicalTensor` under its logical name, in file order; every other
tensor passes through.  :func:`read_config` reads the ``config.json`` that
stands beside a Hugging Face checkpoint, whose ``quantization_config`` names
the scheme (and :func:`read_generation_config` its ``generation_config.json``).

How a group is found
--------------------
A tensor whose name ends in a scheme's *key* suffix and whose type is one of
the key's starts a group; the other parts are the same base plus their
suffixes.  With a ``quantization_config``, only the schemes it names are
tried, and a key tensor without its required parts, or a part without its
key, is a KilnError (the config says the checkpoint is quantized so: a
missing part is damage, not a plain tensor).  Without one, every scheme is
tried in the table's order: a group whose key has none of its other parts is
a plain tensor (an F8_E4M3 ``weight`` with no scale is just FP8), one with
some but not all of its required parts is a KilnError.  A part of the wrong
type is TYPE, naming the tensor, the scheme and the types it may have.

>>> import numpy as np
>>> from kiln_np._core.payload import payload_info
>>> t = WeightTensor("w", payload_info("f32", (2,)), None, "F32", data=memoryview(bytes(8)))
>>> [x.name for x in logical_tensors({"w": t}, {})]
['w']
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from functools import partial
from types import MappingProxyType
from typing import Any

import numpy as np

from kiln_np._codec import Payload, to_numpy
from kiln_np._core.checks import set_module, show_value
from kiln_np._core.errors import KilnError
from kiln_np._core.jsontext import parse_json
from kiln_np._core.payload import check_representable
from kiln_np._core.table import as_dtype
from kiln_np._files.io import open_regular_raw, read_all
from kiln_np._schemes import table
from kiln_np._schemes.scheme import Facts, Plan, Scheme
from kiln_np._schemes.table import scheme_named

from .remote import is_url
from .summary import human_bytes
from .tensors import WeightTensor, mapped_file

__all__ = [
    "CONFIG",
    "CONFIG_LIMIT",
    "GENERATION_CONFIG",
    "HF_QUANT_CONFIG",
    "MAX_SETTING",
    "OUTPUT_DTYPES",
    "LogicalTensor",
    "beside",
    "check_settings",
    "configured_schemes",
    "logical_tensors",
    "modelopt_quantization",
    "part_type",
    "read_config",
    "read_generation_config",
    "read_part",
    "row_chunks",
]

CONFIG = "config.json"
"""A Hugging Face checkpoint's description of its model, beside its weights."""

GENERATION_CONFIG = "generation_config.json"
"""A Hugging Face checkpoint's generation defaults, beside its weights."""

CONFIG_LIMIT = 16 << 20
"""The largest ``config.json`` (or ``generation_config.json``) read (bytes): a
model's config is a few KiB."""

OUTPUT_DTYPES = ("float32", "bfloat16", "float16")
"""The dtypes a logical tensor dequantizes to."""

ROW_CHUNK = 1 << 22
"""Elements decoded at a time by :func:`row_chunks` (whole rows, at least one)."""


def part_type(t: WeightTensor) -> str:
    """A part's Kiln type name: the short name of a closed code (``"f8e4m3"``,
    ``"u8"``, ``"i32"``), or an opaque tensor's layout name."""
    return t.info.element.name


@set_module("kiln_np")
class LogicalTensor(WeightTensor):
    """One weight a quantization scheme stores as several tensors (its *parts*),
    under its logical name, with its logical shape.

    Made by :meth:`kiln_np.Weights.logical`.  It reads as a GGML quantized
    tensor does: :attr:`shape` is the element shape of the weight the scheme
    stands for (``nn.Linear``'s ``(out_features, in_features)`` for GPTQ and
    AWQ, whatever their storage); :meth:`dequantize` and :meth:`numpy` give
    its values as the producer's reference computes them (see
    docs/weights.md, "Quantization schemes"), a new array; the parts, each a
    :class:`WeightTensor` of the file, stay in :attr:`parts`.

    ``info``, ``code``, ``layout``, ``path`` and ``offset`` are those of the
    key part (the scheme's first: ``weight``, ``qweight``, ``weight_packed``,
    ``_blocks``); :meth:`payload` is TYPE, as there is no one payload.

    Attributes
    ----------
    scheme : str
        The scheme's name (``"fp8-block"``): also :attr:`format_dtype`.
    parts : Mapping[str, WeightTensor]
        The stored tensors, by role (``"weight"``, ``"weight_scale_inv"``).
    plan : Plan
        The checked facts ``decode`` uses: ``shape``, the reference's own output
        dtype (``native``) and the scheme's parameters.
    dtype : numpy.dtype
        What :meth:`numpy` returns: the reference's own output dtype.

    Examples
    --------
    >>> import numpy as np
    >>> from kiln_np._core.payload import payload_info
    >>> w = WeightTensor("q.weight", payload_info("f8e4m3", (4, 2)), None, "F8_E4M3",
    ...                  data=memoryview(bytes([0x38, 0xC0] * 4)))  # 1.0, -2.0
    >>> s = WeightTensor("q.weight_scale_inv", payload_info("f32", (1, 1)), None, "F32",
    ...                  data=memoryview(np.float32([0.5]).tobytes()))
    >>> (t,) = logical_tensors({"q.weight": w, "q.weight_scale_inv": s}, {})
    >>> t.scheme, t.shape, list(t.parts), t.byte_length
    ('fp8-block', (4, 2), ['weight', 'scale'], 12)
    >>> t.dequantize("bfloat16")[0].tolist()
    [0.5, -1.0]
    """

    __slots__ = ("parts", "plan", "scheme")

    def __init__(
        self, name: str, scheme: Scheme, plan: Plan, parts: Mapping[str, WeightTensor]
    ) -> None:
        key = parts[scheme.parts[0].role]
        file = key._file
        super().__init__(
            name, key.info, file, scheme.name, data=key._data if file is None else None
        )
        self.scheme = scheme.name
        self.plan = plan
        self.parts: Mapping[str, WeightTensor] = MappingProxyType(dict(parts))

    @property
    def shape(self) -> tuple[int, ...]:
        """The logical element shape."""
        return self.plan.shape

    @property
    def byte_length(self) -> int:
        """The bytes of every part together."""
        return sum(p.byte_length for p in self.parts.values())

    @property
    def dtype(self) -> np.dtype[Any]:
        """The reference's own output dtype (what :meth:`numpy` returns)."""
        return as_dtype(self.plan.native)

    def _block(self) -> None:
        return None

    def _foreign(self) -> None:
        return None

    def payload(self) -> Payload:
        """TYPE: a logical tensor has no one payload; its parts do."""
        roles = ", ".join(self.parts)
        raise KilnError(
            "TYPE",
            f"tensor {self.name!r}: expected one payload, found a {self.scheme} weight stored "
            f"as {len(self.parts)} tensors ({roles}): its bytes are t.parts[role].payload(), "
            "its values t.dequantize()",
        )

    def rows(self, r0: int, r1: int, dtype: Any = None) -> np.ndarray:
        """Rows ``[r0, r1)`` of the first axis, dequantized to ``dtype`` (one of
        :data:`OUTPUT_DTYPES`; None: :attr:`dtype`): a new array of shape
        ``(r1 - r0, *shape[1:])``.  Bounded memory for any tensor size is
        a loop over row ranges (:func:`row_chunks`).  The parts are read as
        each part's :meth:`~WeightTensor.numpy` reads them (views of the mapped
        file); :meth:`rows_of` decodes parts read some other way."""
        arrays = {role: part.numpy() for role, part in self.parts.items()}
        return self.rows_of(arrays, r0, r1, dtype)

    def rows_of(
        self, arrays: Mapping[str, np.ndarray], r0: int, r1: int, dtype: Any = None
    ) -> np.ndarray:
        """:meth:`rows` decoded from ``arrays``, the parts' elements by role, as
        each part's :meth:`~WeightTensor.numpy` gives them (however they were
        read: a writer reads them with ``readinto``, never mapping the file).

        Raises
        ------
        KilnError
            TYPE when the roles are not :attr:`parts`' or an array's dtype is
            not its part's; SHAPE when an array's shape is not its part's, or
            numpy cannot make the rows' array (an empty tensor's other
            dimensions too large for ``dtype``); the scheme's own errors,
            naming the tensor.
        IndexError
            For rows outside the first axis.

        Examples
        --------
        >>> import numpy as np
        >>> from kiln_np._core.payload import payload_info
        >>> w = WeightTensor("q.weight", payload_info("f8e4m3", (2, 2)), None, "F8_E4M3",
        ...                  data=memoryview(bytes(4)))
        >>> s = WeightTensor("q.weight_scale_inv", payload_info("f32", (1, 1)), None, "F32",
        ...                  data=memoryview(bytes(4)))
        >>> (t,) = logical_tensors({"q.weight": w, "q.weight_scale_inv": s}, {})
        >>> codes = np.array([[0x38, 0xC0], [0x40, 0x00]], np.uint8).view(w.info.dtype)
        >>> scale = np.array([[0.5]], np.float32)
        >>> t.rows_of({"weight": codes, "scale": scale}, 0, 2, "float32").tolist()
        [[0.5, -1.0], [1.0, 0.0]]
        """
        out = self._output(dtype)
        n = self.shape[0] if self.shape else 1
        if not (0 <= r0 <= r1 <= n):
            raise IndexError(f"rows [{r0}, {r1}) of a first axis of {n}")
        want = (r1 - r0, *self.shape[1:]) if self.shape else ()
        check_representable(want, out.itemsize, f"tensor {self.name!r} as {out}: ")
        checked = self._checked(arrays)
        scheme = scheme_named(self.scheme)
        try:
            values = scheme.decode(self.plan, checked, r0, r1, out)
        except KilnError as exc:
            raise exc.prefixed(f"tensor {self.name!r}: ") from None
        if values.dtype != out or values.shape != want:
            raise AssertionError(
                f"{self.scheme} decode gave {values.dtype} {values.shape}, expected {out} {want}"
            )
        return values

    def _checked(self, arrays: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        """``arrays`` when they are the parts' elements as the parts describe them
        (every role, each array of its part's dtype and decoded shape): ``decode``
        trusts those facts, its plan having checked them on the headers."""
        if not isinstance(arrays, Mapping) or set(arrays) != set(self.parts):
            found = (
                f"roles {', '.join(sorted(map(str, arrays))) or '(none)'}"
                if isinstance(arrays, Mapping)
                else show_value(arrays)
            )
            raise KilnError(
                "TYPE",
                f"tensor {self.name!r}: expected the arrays of its parts by role "
                f"({', '.join(self.parts)}), found {found}",
            )
        for role, part in self.parts.items():
            a = arrays[role]
            info = part.info
            if not isinstance(a, np.ndarray) or a.dtype != info.dtype:
                found = a.dtype.name if isinstance(a, np.ndarray) else show_value(a)
                raise KilnError(
                    "TYPE",
                    f"tensor {self.name!r}: expected part {role} ({part.name!r}) as a "
                    f"{info.dtype.name} array, found {found}",
                )
            if a.shape != info.decoded_shape:
                raise KilnError(
                    "SHAPE",
                    f"tensor {self.name!r}: expected part {role} ({part.name!r}) of shape "
                    f"{info.decoded_shape}, found {a.shape}",
                )
        return arrays

    def dequantize(self, dtype: Any = None) -> np.ndarray:
        """Every value, as :attr:`dtype` or as ``dtype`` (float32, bfloat16 or
        float16), computed as the scheme's reference computes it: a new array.

        Raises
        ------
        KilnError
            TYPE for another dtype; the parts' own errors (a file replaced,
            cut short) prefixed with the tensor's name.
        """
        return self.rows(0, self.shape[0] if self.shape else 1, dtype)

    def numpy(self) -> np.ndarray:
        """:meth:`dequantize` to the reference's own output dtype."""
        return self.dequantize()

    def _output(self, dtype: Any) -> np.dtype[Any]:
        if dtype is None:
            return self.dtype
        found = as_dtype(dtype)
        if found.name not in OUTPUT_DTYPES or not found.isnative:
            raise KilnError(
                "TYPE",
                f"tensor {self.name!r}: expected a dtype of {', '.join(OUTPUT_DTYPES)} to "
                f"dequantize {self.scheme} to, found {found.name}",
            )
        return found

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if copy is False:
            raise ValueError(
                f"a {self.scheme} weight dequantizes into a new array: copy=False is impossible"
            )
        if dtype is None or as_dtype(dtype).name in OUTPUT_DTYPES:
            return self.dequantize(dtype)
        wanted = as_dtype(dtype)
        check_representable(self.shape, wanted.itemsize, f"tensor {self.name!r} as {wanted}: ")
        return self.dequantize().astype(wanted)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_logical, (self.name, self.scheme, self.plan, dict(self.parts)))

    def _described_parts(self) -> str:
        return ", ".join(
            f"{role} {p.format_dtype} {p.info.shape}" for role, p in self.parts.items()
        )

    def __repr__(self) -> str:
        return (
            f"LogicalTensor({self.name!r}, {self.scheme}, shape {self.shape}, "
            f"{self.dtype.name}, parts: {self._described_parts()}; {self.byte_length} bytes)"
        )

    def _html_rows(self) -> list[tuple[str, str]]:
        parts = [
            (f"part {r}", f"{p.name}: {p.format_dtype} {p.info.shape}")
            for r, p in self.parts.items()
        ]
        return [
            ("name", self.name),
            ("scheme", self.scheme),
            ("shape", str(self.shape)),
            ("values", self.dtype.name),
            *parts,
            ("bytes", f"{self.byte_length:,} ({human_bytes(self.byte_length)})"),
        ]


def _logical(
    name: str, scheme: str, plan: Plan, parts: Mapping[str, WeightTensor]
) -> LogicalTensor:
    return LogicalTensor(name, scheme_named(scheme), plan, parts)


def row_chunks(
    t: LogicalTensor,
    dtype: Any = None,
    elements: int = ROW_CHUNK,
    arrays: Mapping[str, np.ndarray] | None = None,
) -> Iterator[np.ndarray]:
    """``t``'s values, whole rows of its first axis at a time, about ``elements``
    values a chunk (at least one row): what writers and statistics read.  With
    ``arrays`` (the parts' elements by role), decoded from them
    (:meth:`LogicalTensor.rows_of`); else from the parts (:meth:`LogicalTensor.rows`).

    >>> from kiln_np._core.payload import payload_info
    >>> w = WeightTensor("q.weight", payload_info("f8e4m3", (4, 2)), None, "F8_E4M3",
    ...                  data=memoryview(bytes(8)))
    >>> s = WeightTensor("q.weight_scale_inv", payload_info("f32", (1, 1)), None, "F32",
    ...                  data=memoryview(bytes(4)))
    >>> (t,) = logical_tensors({"q.weight": w, "q.weight_scale_inv": s}, {})
    >>> [c.shape for c in row_chunks(t, "bfloat16", elements=4)]
    [(2, 2), (2, 2)]
    """
    n = t.shape[0] if t.shape else 1
    per_row = math.prod(t.shape[1:]) if t.shape else 1
    step = max(1, elements // max(per_row, 1))
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        yield t.rows(r0, r1, dtype) if arrays is None else t.rows_of(arrays, r0, r1, dtype)


def read_config(path: str) -> tuple[str | None, Mapping[str, Any] | None]:
    """The ``config.json`` beside the checkpoint at ``path`` (in the directory
    ``path``, or beside the file): ``(its path, its object)``, or ``(None, None)``
    when there is none.

    Raises
    ------
    KilnError
        TYPE when it is not a regular file, is over :data:`CONFIG_LIMIT` bytes,
        is not UTF-8 JSON, is not an object, or its ``quantization_config`` is
        present and not an object.

    >>> read_config("/nonexistent/model.safetensors")
    (None, None)
    """
    where, found = _json_beside(path, CONFIG)
    if where is None or found is None:
        return None, None
    quantization = found.get("quantization_config")
    if quantization is not None and not isinstance(quantization, dict):
        raise KilnError(
            "TYPE",
            f"{where!r}: expected quantization_config to be an object, found "
            f"{type(quantization).__name__}",
        )
    return where, found


def read_generation_config(path: str) -> tuple[str | None, Mapping[str, Any] | None]:
    """The ``generation_config.json`` beside the checkpoint at ``path``: ``(its
    path, its object)``, or ``(None, None)`` when there is none; read as strictly
    as :func:`read_config` (TYPE).

    >>> read_generation_config("/nonexistent/model.safetensors")
    (None, None)
    """
    return _json_beside(path, GENERATION_CONFIG)


HF_QUANT_CONFIG = "hf_quant_config.json"
"""What NVIDIA ModelOpt's Hugging Face export writes beside the weights (before, and
besides, a ``quantization_config`` in ``config.json``): ``{"producer": ...,
"quantization": {"quant_algo": "NVFP4", "group_size": 16, ...}}``."""


def modelopt_quantization(path: str) -> Mapping[str, Any] | None:
    """The ``quantization`` of the :data:`HF_QUANT_CONFIG` beside ``path`` as a
    ``quantization_config`` (``quant_method`` ``"modelopt"``), or None when there is
    no such file; read as strictly as :func:`read_config` (TYPE), and TYPE when it
    has no ``quantization`` object.

    >>> modelopt_quantization("/nonexistent/model.safetensors") is None
    True
    """
    where, found = _json_beside(path, HF_QUANT_CONFIG)
    if where is None or found is None:
        return None
    quantization = found.get("quantization")
    if not isinstance(quantization, dict):
        raise KilnError(
            "TYPE",
            f"{where!r}: expected a 'quantization' object, found "
            f"{type(quantization).__name__ if 'quantization' in found else 'none'}",
        )
    return {**quantization, "quant_method": "modelopt"}


def beside(path: str, name: str) -> str:
    """The path of the file ``name`` beside the checkpoint at ``path`` (in the
    directory ``path``, or beside the file).

    >>> beside("/m/model.safetensors", "config.json")
    '/m/config.json'
    """
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    return os.path.join(folder, name)


def _json_beside(path: str, name: str) -> tuple[str | None, dict[str, Any] | None]:
    """The JSON object file ``name`` beside ``path``: ``(where, object)``, or
    ``(None, None)`` when there is none; TYPE as :func:`read_config` says."""
    if is_url(path):  # not read beside a URL: logical(config) is the door
        return None, None
    where = beside(path, name)
    if not os.path.lexists(where):
        return None, None
    try:
        with open_regular_raw(where) as f:
            # as many bytes as it holds (read(n) allocates n first), one more to see it grow
            raw = f.read(min(os.fstat(f.fileno()).st_size, CONFIG_LIMIT) + 1)
    except OSError as exc:
        raise KilnError("TYPE", f"{where!r}: cannot read it: {exc.strerror or exc}") from None
    if raw is None or len(raw) > CONFIG_LIMIT:
        raise KilnError(
            "TYPE", f"{where!r}: expected a config of at most {CONFIG_LIMIT} bytes, found more"
        )
    # the package's one strict parser: nesting capped (never a RecursionError), duplicate
    # keys refused; NaN and Infinity as Python's json (which writes these files) reads them
    found = parse_json(raw, f"{where!r}: ", serde=False, constants=True)
    if not isinstance(found, dict):
        raise KilnError("TYPE", f"{where!r}: expected a JSON object, found {type(found).__name__}")
    return where, found


MAX_SETTING = 2**31 - 1
"""The largest block or group size a ``quantization_config`` may give: what the
producers' kernels take (a C ``int``), far above any real one (128)."""

_TEXT_SETTINGS = (
    "quant_method",
    "format",
    "checkpoint_format",
    "quant_algo",
    "version",
    "bnb_4bit_quant_type",
)
_FLAG_SETTINGS = ("load_in_4bit", "_load_in_4bit")
_INT_SETTINGS = {"bits": (1, 64), "group_size": (-1, MAX_SETTING)}


def check_settings(config: Mapping[str, Any], source: str = "quantization_config") -> None:
    """TYPE unless every setting of ``config`` the schemes read is of its type and
    range (or absent, or null), naming ``source`` (``"'m/config.json':
    quantization_config"``) and the key: text where text is compared (a list for
    ``quant_method`` or ``format`` would be unhashable), booleans, integers in
    their ranges (a ``group_size`` of 2**70 would overflow the kernels), and
    ``config_groups`` as objects of the same.  Checked once, where the config is
    read, before any scheme reads it.

    >>> check_settings({"quant_method": "gptq", "bits": 4, "group_size": 128})
    >>> check_settings({"quant_method": ["gptq"]})
    Traceback (most recent call last):
    ...
    kiln_np.KilnError: TYPE: quantization_config quant_method: expected text, found list ['gptq']
    """
    _check_level(config, source)
    groups = config.get("config_groups")
    if groups is None:
        return
    if not isinstance(groups, Mapping):
        raise _setting_error(source, "config_groups", "an object", groups)
    for name, group in groups.items():
        where = f"{source} config_groups.{name}"
        if not isinstance(group, Mapping):
            raise KilnError("TYPE", f"{where}: expected an object, found {show_value(group)}")
        _check_level(group, where)
        weights = group.get("weights")
        if weights is not None and not isinstance(weights, Mapping):
            raise _setting_error(where, "weights", "an object", weights)
        _check_level(weights or {}, f"{where}.weights")


def _check_level(config: Mapping[str, Any], source: str) -> None:
    for key in _TEXT_SETTINGS:
        value = config.get(key)
        if value is not None and not isinstance(value, str):
            raise _setting_error(source, key, "text", value)
    for key in _FLAG_SETTINGS:
        value = config.get(key)
        if value is not None and not isinstance(value, bool):
            raise _setting_error(source, key, "true or false", value)
    for key, (low, high) in _INT_SETTINGS.items():
        value = config.get(key)
        if value is not None and (type(value) is not int or not low <= value <= high):
            raise _setting_error(source, key, f"an integer from {low} to {high}", value)


def _setting_error(source: str, key: str, expected: str, found: object) -> KilnError:
    return KilnError("TYPE", f"{source} {key}: expected {expected}, found {show_value(found)}")


def configured_schemes(
    config: Mapping[str, Any], source: str = "quantization_config"
) -> tuple[Scheme, ...]:
    """The schemes a ``quantization_config`` names (every scheme for ``{}``).

    Raises
    ------
    KilnError
        TYPE when a setting is not of its type or range (:func:`check_settings`,
        naming ``source`` and the key), when it names a ``quant_method`` no
        scheme reads, or a scheme's method with a configuration none of them
        reads.
    """
    schemes = table.SCHEMES  # read at call time: the table is data
    if not config:
        return schemes
    check_settings(config, source)
    method = config.get("quant_method")
    named = tuple(s for s in schemes if method in s.methods)
    chosen = tuple(s for s in named if s.configured(config))
    if not chosen:
        known = sorted({m for s in schemes for m in s.methods})
        what = "whose configuration no scheme reads" if named else "which no scheme reads"
        raise KilnError(
            "TYPE",
            f"expected a quantization_config of a known scheme (quant_method one of "
            f"{', '.join(map(repr, known)) or 'none'}), found quant_method {method!r}, {what}; "
            "pass config=False to recognise the parts by their names and types alone",
        )
    return chosen


def _facts(t: WeightTensor) -> Facts:
    return Facts(t.name, part_type(t), t.info.shape, partial(read_part, t, f"tensor {t.name!r}: "))


def read_part(t: WeightTensor, where: str = "") -> np.ndarray:
    """``t``'s elements as :meth:`WeightTensor.numpy` gives them: a new array of
    its bytes read from its file with ``readinto``, never mapped (a map would
    hold the whole file until the weights close, and a file cut short under it
    is SIGBUS); for bytes held in memory, ``t.numpy()`` itself.  What the writers
    read a logical tensor's parts with, and the plans their small parts.

    Raises
    ------
    KilnError
        TYPE when the file was replaced or modified since it was opened; LENGTH
        when it holds fewer bytes, or shrinks while it is read; ``where``
        (``"tensor 'w': "``) goes first.

    >>> from kiln_np._core.payload import payload_info
    >>> t = WeightTensor("s", payload_info("f32", (1,)), None, "F32",
    ...                  data=memoryview(np.float32([0.5]).tobytes()))
    >>> read_part(t).tolist()
    [0.5]
    """
    file = mapped_file(t)
    if file is None:
        return t.numpy()
    info = t.info
    raw = np.empty(info.byte_length, np.uint8)
    try:
        with file.opened(info.offset + info.byte_length) as f:
            f.seek(info.offset)
            got = read_all(f, raw.data)
    except KilnError as exc:  # replaced, modified or cut since it was opened
        raise exc.prefixed(where) from None
    if got < raw.size:
        raise info.length_error(got, f"{where}{file.path!r} shrank while it was read: ")
    return to_numpy(info.code, raw, info.shape, info.layout)


def _group(
    name: str,
    t: WeightTensor,
    scheme: Scheme,
    tensors: Mapping[str, WeightTensor],
    strict: bool,
) -> dict[str, WeightTensor] | None:
    """The parts of the group ``t`` keys for ``scheme``, by role; None when ``t``
    is not such a key (or, not ``strict``, has none of the other parts)."""
    key = scheme.parts[0]
    if not name.endswith(key.suffix) or part_type(t) not in key.types:
        return None
    base = name[: len(name) - len(key.suffix)]
    found = {key.role: t}
    missing = []
    for part in scheme.parts[1:]:
        other = tensors.get(base + part.suffix)
        if other is None:
            if not part.optional:
                missing.append(base + part.suffix)
            continue
        if part_type(other) not in part.types:
            if not strict and len(found) == 1:
                return None
            raise KilnError(
                "TYPE",
                f"tensor {base + scheme.logical!r} ({scheme.name}): expected part "
                f"{other.name!r} of type {' or '.join(sorted(part.types))}, found "
                f"{part_type(other)}",
            )
        found[part.role] = other
    if missing:
        if not strict and len(found) == 1:
            return None
        raise KilnError(
            "SHAPE",
            f"tensor {base + scheme.logical!r} ({scheme.name}): expected its parts "
            f"{', '.join(base + p.suffix for p in scheme.parts if not p.optional)}, "
            f"found no {', '.join(map(repr, missing))}",
        )
    return found


def logical_tensors(
    tensors: Mapping[str, WeightTensor],
    config: Mapping[str, Any],
    source: str = "quantization_config",
) -> list[WeightTensor]:
    """``tensors`` with each scheme's parts as one :class:`LogicalTensor`, in file
    order (a logical tensor where its first part stood); the others as they
    are.  ``config`` is the ``quantization_config`` (``{}`` for none), ``source``
    what its errors call it (the file it was read from, and its key).

    Raises
    ------
    KilnError
        A missing part, a part of the wrong type, a part with no key (with a
        config), or the scheme's own rule (shapes that disagree, a block size
        that does not divide), naming the logical tensor.
    """
    strict = bool(config)
    schemes = configured_schemes(config, source)
    member: dict[str, LogicalTensor] = {}
    for name, t in tensors.items():
        if name in member:
            continue
        for scheme in schemes:
            parts = _group(name, t, scheme, tensors, strict)
            if parts is None:
                continue
            taken = [p.name for p in parts.values() if p.name in member]
            if taken:
                raise KilnError(
                    "TYPE",
                    f"tensor {taken[0]!r}: expected it in one logical tensor, found it a part "
                    f"of {member[taken[0]].name!r} and of a {scheme.name} weight keyed by "
                    f"{name!r}",
                )
            facts = {r: _facts(p) for r, p in parts.items()}
            if not strict and not scheme.claims(facts):
                continue  # the shapes say another row's (GPTQ's parts against AWQ's)
            base = name[: len(name) - len(scheme.parts[0].suffix)]
            logical = base + scheme.logical
            plan = scheme.plan(logical, facts, config)
            names = {p.name for p in parts.values()}
            if logical != name and logical in tensors and logical not in names:
                raise KilnError(
                    "TYPE",
                    f"tensor {logical!r}: expected one tensor of that name, found a stored "
                    f"tensor and the {scheme.name} weight its parts make",
                )
            made = LogicalTensor(logical, scheme, plan, parts)
            for p in parts.values():
                member[p.name] = made
            break
    if strict:
        _no_orphans(tensors, schemes, member)
    out: list[WeightTensor] = []
    seen: set[str] = set()
    for name, t in tensors.items():
        owner = member.get(name)
        if owner is None:
            out.append(t)
        elif owner.name not in seen:
            seen.add(owner.name)
            out.append(owner)
    return out


def _no_orphans(
    tensors: Mapping[str, WeightTensor],
    schemes: tuple[Scheme, ...],
    member: Mapping[str, LogicalTensor],
) -> None:
    """With a config: a tensor named and typed as a non-key part of a configured
    scheme belongs to a group; SHAPE naming it when it does not."""
    for name, t in tensors.items():
        if name in member:
            continue
        for scheme in schemes:
            for part in scheme.parts[1:]:
                if name.endswith(part.suffix) and part_type(t) in part.types:
                    key = name[: len(name) - len(part.suffix)] + scheme.parts[0].suffix
                    raise KilnError(
                        "SHAPE",
                        f"tensor {name!r}: expected the {part.role} of a {scheme.name} "
                        f"weight keyed by {key!r}, found no such tensor",
                    )
