"""The tensors of a weight file as one mapping: ``Weights`` (read-only, in file
order, owning the files' maps), its ``select`` views and its ``logical()`` view,
and what describes the model beside the tensors: a Hugging Face checkpoint's
``config.json`` and ``generation_config.json`` (read on first ask), llama.cpp's
file type of a GGUF file.

Opening reads headers only; each file is mapped on first use
(:mod:`kiln_np._weights.tensors`).  A :class:`Weights` pickles as its path and
the function of the format that opened it (handed down by that format, so this
module names none); a view pickles as the same view of the reopened file.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

from kiln_np._core.checks import set_module, show_value
from kiln_np._core.errors import KilnError

from .logical import (
    CONFIG,
    GENERATION_CONFIG,
    HF_QUANT_CONFIG,
    beside,
    logical_tensors,
    modelopt_quantization,
    read_config,
    read_generation_config,
)
from .mapped import MappedFile
from .remote import is_url
from .summary import Summary, human_bytes, human_count, summarize
from .tensors import WeightTensor

__all__ = ["Weights"]


@set_module("kiln_np")
class Weights(Mapping[str, WeightTensor]):
    """The tensors of a weight file: a read-only mapping of names, in file order.

    Returned by :func:`kiln_np.open_weights`.  A context manager: leaving it (or
    :meth:`close`) releases the file maps that no handed-out payload still
    uses; payloads already handed out stay valid until they are dropped, and
    no tensor hands out a new one.

    Attributes
    ----------
    format : str
        ``"safetensors"``, ``"gguf"``, ``"onnx"`` or ``"kiln"``.
    metadata : Mapping
        The file's metadata: safetensors' ``__metadata__`` (str to str); GGUF's
        key/values (see ``kiln_np.gguf``); a Kiln directory's, typed as it was
        saved; for ONNX the model's ``ir_version``, ``producer_name``,
        ``producer_version``, ``domain``, ``model_version``, ``opset_import``
        (domain to version) and ``metadata_props``.
    path : str
        What was opened (absolute).
    file_type : int or None
        llama.cpp's file type of the whole file, as a GGUF file's
        ``general.file_type`` gives it (15: mostly Q4_K_M; shown by
        :meth:`summary`, ``kiln-np ls`` and ``meta`` in llama.cpp's words,
        docs/explore.md, "llama.cpp's file types"); None for other formats and
        for a GGUF file without the key (or whose value is not an integer).

    Parameters
    ----------
    tensors : iterable of WeightTensor
        In file order; names must be unique (TYPE otherwise).
    format, metadata, path, file_type
        As the attributes.
    files : iterable of MappedFile
        The files the tensors map, closed by :meth:`close`.
    opener : callable
        The format's function that opens ``path`` again: what the mapping
        pickles as.
    hf_config : bool
        Whether the ``config.json`` and ``generation_config.json`` beside
        ``path`` describe these tensors (a Hugging Face checkpoint: the
        safetensors format says so); :attr:`config` and
        :attr:`generation_config` are then read on first ask.

    Examples
    --------
    >>> import os, tempfile, numpy as np, kiln_np
    >>> d = tempfile.mkdtemp()
    >>> tensors = {"b": np.zeros(2, np.int8), "a": np.ones((2, 2), np.float16)}
    >>> _ = kiln_np.save_weights(d + "/w", tensors, format="kiln", metadata={"step": 3})
    >>> with kiln_np.open_weights(d + "/w") as w:
    ...     print(w.format, list(w), dict(w.metadata), w["a"].shape)
    ...     print(list(w.select("a*", "b")), list(w.select(exclude="b")), w.parameters)
    kiln ['b', 'a'] {'step': 3} (2, 2)
    ['b', 'a'] ['a'] 6
    >>> import shutil; shutil.rmtree(d)
    """

    def __init__(
        self,
        tensors: Iterable[WeightTensor],
        *,
        format: str,
        metadata: Mapping[str, Any],
        path: str,
        files: Iterable[MappedFile] = (),
        opener: Callable[[str], Weights],
        hf_config: bool = False,
        file_type: int | None = None,
    ) -> None:
        by_name: dict[str, WeightTensor] = {}
        for tensor in tensors:
            if tensor.name in by_name:
                raise KilnError(
                    "TYPE", f"{path!r}: expected unique tensor names, found {tensor.name!r} twice"
                )
            by_name[tensor.name] = tensor
        self._tensors = by_name
        self._files = tuple(files)
        self.format = format
        # A format's own read-only mapping (GGUF's parses values lazily) is kept.
        self.metadata = MappingProxyType(metadata) if isinstance(metadata, dict) else metadata
        self.path = path if is_url(path) else os.path.realpath(path)
        self._opener = opener
        self._owns_files = True
        self._selection: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = ()
        self._plain: Weights | None = None  # set on a logical view: the stored tensors
        self._logical_config: Mapping[str, Any] | bool | None = None
        self._quantization: Mapping[str, Any] = MappingProxyType({})
        self._beside = _Beside(self.path if hf_config else None)
        self.file_type = file_type

    def __getitem__(self, name: str) -> WeightTensor:
        return self._tensors[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def __contains__(self, name: object) -> bool:
        return name in self._tensors

    @property
    def byte_length(self) -> int:
        """The payload bytes of every tensor together."""
        return sum(t.byte_length for t in self._tensors.values())

    @property
    def parameters(self) -> int:
        """The elements of every tensor together (:attr:`WeightTensor.size`)."""
        return sum(t.size for t in self._tensors.values())

    @property
    def config(self) -> Mapping[str, Any] | None:
        """The model's own description: the object of the ``config.json`` beside a
        Hugging Face checkpoint (safetensors: in its directory, or beside its
        file), read on first ask with the package's strict JSON parser (at most
        16 MiB); None when there is none, beside a URL, and for the formats
        whose metadata is their description (a GGUF file: its ``general.*``
        keys; see :attr:`metadata`).  A :meth:`logical` view's is the
        ``config.json`` it read for its ``quantization_config``.

        Raises
        ------
        KilnError
            TYPE, naming the file, when it is not a regular file, is over 16
            MiB, is not UTF-8 JSON, is not an object, or its
            ``quantization_config`` is present and not an object.
        """
        return self._beside.read(CONFIG)

    @property
    def config_path(self) -> str | None:
        """The path of the ``config.json`` :attr:`config` is read from (None when
        there is none); knowing it reads nothing."""
        return self._beside.where(CONFIG)

    @property
    def generation_config(self) -> Mapping[str, Any] | None:
        """The object of the ``generation_config.json`` beside a Hugging Face
        checkpoint (sampling defaults, special token ids), read as :attr:`config`
        is (TYPE as it says); None when there is none."""
        return self._beside.read(GENERATION_CONFIG)

    @property
    def generation_config_path(self) -> str | None:
        """The path of the ``generation_config.json`` :attr:`generation_config`
        is read from (None when there is none)."""
        return self._beside.where(GENERATION_CONFIG)

    def summary(self) -> Summary:
        """The checkpoint at a glance, from the headers alone: counts, bytes, bits
        per weight, a table by stored type, the largest tensor, a memory
        estimate and the tree of names (repeated layers folded).  Its ``str``
        fits 100 columns but for the lines naming a tensor (never cut); it
        renders as tables in a notebook; ``to_dict()`` is JSON-ready.
        See docs/explore.md, "Checkpoint summary"."""
        return summarize(
            self._tensors.values(), format=self.format, path=self.path, file_type=self.file_type
        )

    @property
    def plain(self) -> Weights:
        """The stored tensors: the mapping itself, or for a :meth:`logical` view the
        mapping it was made from (every part by its own name)."""
        return self if self._plain is None else self._plain

    @property
    def quantization(self) -> Mapping[str, Any]:
        """The ``quantization_config`` a :meth:`logical` view was made with (``{}``
        when none was used)."""
        return self._quantization

    def logical(self, config: Mapping[str, Any] | bool | None = None) -> Weights:
        """A view in which each quantization scheme's parts are one tensor.

        A checkpoint quantized as DeepSeek's FP8 block-scaled, NVFP4 (ModelOpt or
        compressed-tensors), compressed-tensors FP8 or int4, GPTQ, AWQ,
        bitsandbytes NF4/FP4 or gpt-oss MXFP4 stores each weight as several
        tensors; here each is a :class:`~kiln_np.LogicalTensor` under its
        logical name (``...q_proj.weight``), of its logical shape, whose
        ``dequantize(dtype)`` and ``numpy()`` compute its values as the
        producer's reference does, and which ``kiln_np.describe``,
        ``kiln_np.compare`` and ``save_weights(..., dequantize=...)`` read as
        values.  Every other tensor passes through; the parts stay in
        :attr:`plain`.  See docs/weights.md, "Quantization schemes".

        Parameters
        ----------
        config : mapping, bool or None
            None (the default): the ``quantization_config`` of the
            ``config.json`` beside the checkpoint, when there is one (never
            read beside a URL: pass its ``quantization_config``), names the
            scheme (or, without one, the ``quantization`` of NVIDIA ModelOpt's
            ``hf_quant_config.json``); else the parts are recognised by their
            names and types.
            A mapping: that ``quantization_config``.  False: names and types
            alone, whatever a ``config.json`` says.

        Returns
        -------
        Weights
            A view sharing this mapping's file maps, with :attr:`config` (the
            whole ``config.json`` object it read, or None) and
            :attr:`quantization`.  The view of a view is itself.

        Raises
        ------
        KilnError
            A group whose parts do not fit their scheme (a missing part, a
            part of the wrong type, shapes that disagree, a block size that
            does not divide): the message names the logical tensor and the
            rule.  TYPE for a ``config`` of another type, a malformed
            ``config.json`` or a ``quantization_config`` no scheme reads.
        """
        if self._plain is not None:
            return self
        if config is not None and not isinstance(config, (bool, Mapping)):
            raise KilnError(
                "TYPE",
                f"logical: expected config to be a mapping, False or None, found "
                f"{show_value(config)}",
            )
        where, found = (None, None) if config is False else read_config(self.path)
        source = "quantization_config"  # given by hand
        if config is True or config is None:
            chosen = (found or {}).get("quantization_config")
            if chosen:
                source = f"{where!r}: quantization_config"
            else:
                chosen = modelopt_quantization(self.path) or {}
                source = f"{beside(self.path, HF_QUANT_CONFIG)!r}: quantization"
        else:
            chosen = config or {}
        view = Weights(
            logical_tensors(self._tensors, chosen, source),
            format=self.format,
            metadata=self.metadata,
            path=self.path,
            opener=self._opener,
            file_type=self.file_type,
        )
        view._files = self._files
        view._owns_files = False
        view._plain = self
        view._logical_config = config
        view._quantization = MappingProxyType(dict(chosen))
        view._beside = self._beside.with_config(where, found)
        return view

    def select(self, *patterns: str, exclude: str | Iterable[str] = ()) -> Weights:
        """A view of the tensors whose names match.

        Parameters
        ----------
        *patterns : str
            Globs (:func:`fnmatch.fnmatchcase`: case-sensitive, against the
            whole name; ``*`` also crosses dots).  A name is kept when it
            matches any of them; with none, every name is.
        exclude : str or iterable of str
            Globs whose names are dropped, even when a pattern kept them.

        Returns
        -------
        Weights
            The matching tensors, in file order, with this mapping's format,
            metadata and path.  The view shares this mapping's tensors and
            file maps (nothing is reopened): closing the view releases nothing,
            and closing this mapping closes the view's tensors too.  It
            pickles as the same selection of the reopened file.

        Raises
        ------
        KilnError
            TYPE when a pattern is not a str.
        """
        excluded = (exclude,) if isinstance(exclude, str) else tuple(exclude)
        for pattern in (*patterns, *excluded):
            if not isinstance(pattern, str):
                raise KilnError(
                    "TYPE", f"select: expected str patterns, found {show_value(pattern)}"
                )
        kept = [
            t
            for name, t in self._tensors.items()
            if (not patterns or any(fnmatch.fnmatchcase(name, p) for p in patterns))
            and not any(fnmatch.fnmatchcase(name, p) for p in excluded)
        ]
        view = Weights(
            kept,
            format=self.format,
            metadata=self.metadata,
            path=self.path,
            opener=self._opener,
            file_type=self.file_type,
        )
        view._files = self._files
        view._owns_files = False
        view._selection = (*self._selection, (patterns, excluded))
        view._plain = self._plain
        view._logical_config = self._logical_config
        view._quantization = self._quantization
        view._beside = self._beside
        return view

    def close(self) -> None:
        """Release the file maps (those still used by a handed-out payload are
        released when it is dropped).  No tensor hands out a new payload after
        this, whether its file was mapped or not: :meth:`~WeightTensor.payload`
        raises ``ValueError``; payloads handed out before stay valid.  A view
        made by :meth:`select` owns no maps: closing it does nothing."""
        if self._owns_files:
            for file in self._files:
                file.close()

    def __enter__(self) -> Weights:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self) -> tuple[Any, ...]:
        if self._plain is not None:
            return (_relogical, (self._plain, self._logical_config, self._selection))
        if self._selection:
            return (_reselect, (self._opener, self.path, self._selection))
        return (self._opener, (self.path,))

    def __repr__(self) -> str:
        selected = (" logical" if self._plain is not None else "") + (
            " selected" if self._selection else ""
        )
        return (
            f"Weights({self.format!r}, {self.path!r}, {len(self)} tensors{selected}, "
            f"{human_count(self.parameters)} parameters, {human_bytes(self.byte_length)})"
        )

    def _repr_html_(self) -> str:
        return self.summary()._repr_html_()


class _Beside:
    """The JSON files beside a checkpoint that describe its model (``config.json``,
    ``generation_config.json``), each read on first ask and kept; shared by a
    mapping and its :meth:`~Weights.select` views.  ``path`` None: the format
    reads none."""

    def __init__(self, path: str | None) -> None:
        self.path = None if path is None or is_url(path) else path
        self._read: dict[str, tuple[str | None, Mapping[str, Any] | None]] = {}

    def with_config(self, where: str | None, found: Mapping[str, Any] | None) -> _Beside:
        """A copy whose ``config.json`` is the one a logical view read (or none)."""
        copy = _Beside(self.path)
        copy._read = {**self._read, CONFIG: (where, _proxy(found))}
        return copy

    def where(self, name: str) -> str | None:
        if name in self._read:
            return self._read[name][0]
        if self.path is None:
            return None
        where = beside(self.path, name)
        return where if os.path.lexists(where) else None

    def read(self, name: str) -> Mapping[str, Any] | None:
        if name not in self._read:
            where, found = None, None
            if self.path is not None:
                reader = read_config if name == CONFIG else read_generation_config
                where, found = reader(self.path)
            self._read[name] = (where, _proxy(found))
        return self._read[name][1]


def _proxy(found: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    return None if found is None else MappingProxyType(dict(found))


def _reselect(
    opener: Callable[[str], Weights],
    path: str,
    selection: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...],
) -> Weights:
    """A pickled view: the file reopened, the same selection made; the view
    owns the reopened maps."""
    view = opener(path)
    for patterns, excluded in selection:
        view = view.select(*patterns, exclude=excluded)
    view._owns_files = True
    return view


def _relogical(
    plain: Weights,
    config: Mapping[str, Any] | bool | None,
    selection: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...],
) -> Weights:
    """A pickled logical view: the same view of the unpickled plain mapping; the
    view owns the reopened maps."""
    view = plain.logical(config)
    for patterns, excluded in selection:
        view = view.select(*patterns, exclude=excluded)
    view._owns_files = True
    return view
