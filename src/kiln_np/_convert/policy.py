"""What ``quantize=`` means: :class:`QuantizePolicy`, a map of tensor-name patterns
to the type each tensor is written as, and :func:`decide`, which says for one
tensor whether it is quantized, stored as another float type, or keeps its type
(and why).

The grammar (``kiln-np convert --quantize`` and ``save_weights(quantize=...)``)::

    policy  := entry ("," entry)*
    entry   := PATTERN "=" TYPE  |  TYPE

- Around each entry, pattern and type, spaces are dropped; an empty entry (``,,``,
  a trailing comma) is an error.
- ``PATTERN`` is a glob matched against the whole tensor name, case-sensitively
  (:func:`fnmatch.fnmatchcase`): ``*`` matches any run of characters, dots
  included, ``?`` one character, ``[seq]`` / ``[!seq]`` one of (not of) a set.
  It cannot hold ``,`` or ``=``; a ``[`` that no ``]`` closes is an error (write
  ``[[]`` for a literal ``[``).  The same pattern twice is an error (the second
  could never match).
- ``TYPE``, in any case, is a GGML type kiln_np quantizes to
  (``kiln_np._quants.quantize.ENCODERS``: ``q8_0``, ``q4_k``, ...) or a float
  type, ``f32``, ``f16`` or ``bf16``.
- Patterns are tried in order and the first that matches gives the type; the
  bare ``TYPE`` (at most one, anywhere in the string) is the default for a
  tensor no pattern matches; without one, such a tensor keeps its type.

**One meaning of a type name.**  A bare default that names a llama-quantize
file type (``Q4_K_M``, ``q4_k``, ``q8_0``, ``IQ4_XS``, ``f16``, ``COPY``: the
names of ``kiln_np._quants.filetypes.OPTIONS``) is that file type's *mix*, as
every llama.cpp user means it: each tensor gets the type llama.cpp's
``llama-quantize`` gives it (:func:`mix_decisions`, over all the tensors at once,
with the model's GGUF metadata); the ``PATTERN=TYPE`` entries override it per
tensor as ``--tensor-type`` does (only where the file type would quantize the
tensor; a row that is not whole blocks of the type still falls back as
llama.cpp's does), and the flags of ``llama-quantize`` apply (``pure``,
``output_tensor_type``, ``token_embedding_type``, ``tensor_types``,
``leave_output_tensor``).  ``pure=True`` gives every tensor llama.cpp
quantizes the default's own type (``Q4_K`` for ``Q4_K_M``).  A bare GGML type
with no file type of its name (``nvfp4``, ``mxfp4``), or no bare type at all,
keeps the rules below: the type applies to every tensor it can.

Without a file type, a GGML type applies to a float tensor (f32, f16, bf16, or
f64, rounded to f32 to nearest even first, as llama.cpp's converters do) of two
dims or more whose rows (the innermost dim) are a whole number of the type's
blocks; every other tensor keeps its type, with the reason :func:`decide` gives.
A float type applies to a float tensor of any shape: widening is exact,
narrowing rounds to nearest even (as ggml's converters do; past the type's
range: infinity); a NaN is refused (its payload bits are not kept alike by every
converter).  GGML blocks keep
their type whatever the policy says: kiln_np does not requantize.
"""

from __future__ import annotations

import copy
import fnmatch
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, NamedTuple, final

import numpy as np

from kiln_np._core.checks import check_path, set_module, show_value
from kiln_np._core.errors import KilnError
from kiln_np._core.payload import PayloadInfo
from kiln_np._core.table import Code
from kiln_np._quants.blocks import BLOCKS, Block
from kiln_np._quants.elements import element_of
from kiln_np._quants.filetypes import OPTIONS, FileType
from kiln_np._quants.mix import (
    Choice,
    MixTensor,
    choose_types,
    counted_layers,
    imatrix_name,
    llama_order_key,
    model_facts,
)
from kiln_np._quants.quantize import ENCODERS, IGNORES_IMATRIX, WEIGHTED_KERNELS, refusal

from .imatrix import Imatrix, checked_imatrix, kept_entries, substrings, tensor_weights

__all__ = [
    "FLOAT_TARGETS",
    "Decision",
    "QuantizePolicy",
    "Target",
    "as_policy",
    "decide",
    "generic_rules",
    "mix_decisions",
]

FLOAT_TARGETS: Final = {"f32": Code.F32, "f16": Code.F16, "bf16": Code.BF16}
"""The float types a policy stores tensors as, by the name it spells them with."""
_FLOAT_SOURCES = (Code.F32, Code.F16, Code.BF16, Code.F64)

Target = Block | Code
"""What a tensor becomes: GGML blocks of a type, or a float type."""


def _type(text: str, where: str) -> str:
    """The canonical spelling of the policy type ``text`` (``"Q8_0"``, ``"f16"``),
    or TYPE saying what was expected."""
    lowered = text.lower()
    if lowered in FLOAT_TARGETS:
        return lowered
    upper = text.upper()
    if upper in ENCODERS:
        return upper
    why = f"found {text!r}: {refusal(upper)}" if upper in BLOCKS else f"found {text!r}"
    raise KilnError(
        "TYPE",
        f"{where}expected a type to quantize to, in any case: a GGML type "
        f"({', '.join(ENCODERS)}) or a float type ({', '.join(FLOAT_TARGETS)}); {why}",
    )


def _check_pattern(pattern: str, where: str) -> None:
    """TYPE for an empty pattern or one with a ``[`` that no ``]`` closes."""
    if not pattern:
        raise KilnError("TYPE", f"{where}expected PATTERN=TYPE with a pattern, found none")
    i = 0
    while i < len(pattern):
        if pattern[i] == "[":
            j = i + 1
            j += j < len(pattern) and pattern[j] == "!"
            j += j < len(pattern) and pattern[j] == "]"  # a leading ] is a member
            close = pattern.find("]", j)
            if close < 0:
                raise KilnError(
                    "TYPE",
                    f"{where}expected a pattern whose every '[' a ']' closes (write '[[]' "
                    f"for a literal '['), found {pattern!r}",
                )
            i = close
        i += 1


def _rule(pattern: str, type_: str, where: str, seen: set[str]) -> tuple[str, str]:
    """One checked ``(pattern, type)`` rule, ``pattern`` added to ``seen``."""
    _check_pattern(pattern, where)
    if pattern in seen:
        raise KilnError(
            "TYPE",
            f"{where}expected each pattern once (the first match wins, so a second "
            f"{pattern!r} never would), found it twice",
        )
    seen.add(pattern)
    return pattern, _type(type_, where)


def _default(text: str, where: str) -> str:
    """The canonical spelling of a bare default: a llama-quantize file type's
    name upper case (``"Q4_K_M"``, ``"F16"``), else a policy type (:func:`_type`)."""
    return text.upper() if text.upper() in OPTIONS else _type(text, where)


@set_module("kiln_np")
@final
class QuantizePolicy:
    """Which type each tensor is written as, by name: ``save_weights(...,
    quantize=)`` and ``kiln-np convert --quantize`` take one (or its string).

    ``default`` is a llama-quantize file type (``"Q4_K_M"``, ``"q8_0"``,
    ``"f16"``: :attr:`file_type`), whose mix gives each tensor the type
    llama.cpp's ``llama-quantize`` gives it; or a GGML type with no file type
    of its name (``"nvfp4"``, ``"mxfp4"``), given to every tensor it can be.
    ``rules`` are ``(pattern, type)`` pairs tried in order, the first whose
    glob (:func:`fnmatch.fnmatchcase`, case-sensitive, against the whole name)
    matches giving the type (over a file type's mix, as ``--tensor-type``
    does).  Types are GGML types kiln_np quantizes to (``"Q8_0"``,
    ``"q4_k"``: any case) or ``"f32"``, ``"f16"``, ``"bf16"``; they are kept
    in canonical spelling (GGML types and file types upper case, float types
    lower case).  :meth:`parse` reads the string grammar
    (``kiln_np._convert.policy`` documents it); ``str()`` gives it back.

    The keywords are ``llama-quantize``'s flags, for a file type only:
    ``pure`` (``--pure``), ``output_tensor_type``, ``token_embedding_type``
    (GGML type names), ``tensor_types`` (``--tensor-type`` entries,
    ``"PATTERN=TYPE"``: the pattern lower-cased and searched as a regular
    expression, tried after ``rules``), ``leave_output_tensor``, ``prune_layers``,
    ``override_kv`` (``"KEY=TYPE:VALUE"``), ``allow_requantize`` (GGML blocks whose
    type the mix changes are decoded to float32 and quantized, as llama-quantize's
    ``--allow-requantize`` does; TYPE without it), ``keep_split`` (a split GGUF
    written as the same splits, its tensors in the input's order, as
    ``--keep-split`` writes it).

    ``imatrix`` is ``--imatrix``: an importance matrix's file (a path, read by
    :func:`~kiln_np.save_weights`, :func:`~kiln_np.gguf.save_gguf` and
    ``kiln-np convert`` when they plan the conversion, with
    :func:`~kiln_np.gguf.read_imatrix`) or what ``read_imatrix`` returned; each
    tensor with an entry is quantized with its weights, as ``llama-quantize
    --imatrix`` quantizes it, and the mixes' rules see an importance matrix when
    an entry is kept.  ``include_weights`` and ``exclude_weights`` (substrings of
    entry names, a str or several, not both) are ``--include-weights`` and
    ``--exclude-weights``.  A GGUF written records it as llama-quantize does:
    ``quantize.imatrix.file`` is the path as given (an :class:`Imatrix`'s
    ``path``: the path ``read_imatrix`` was given), cut to 127 bytes.

    Raises
    ------
    KilnError
        TYPE for a type it cannot write (an unknown name; without ``imatrix``,
        IQ2_XXS, IQ2_XS or IQ1_S, which need an importance matrix), an empty or malformed pattern, a
        pattern given twice, a rule that is not a pair of strings, a flag
        without a file type, a flag's malformed type or pattern, an ``imatrix``
        that is neither a path nor an :class:`Imatrix` (or one with a non-finite
        weight), ``include_weights`` with ``exclude_weights``, either without
        ``imatrix``.

    Examples
    --------
    >>> p = QuantizePolicy.parse("q8_0, *norm*=f32")
    >>> p
    QuantizePolicy('*norm*=f32,Q8_0')
    >>> p.rules, p.default, p.file_type.number
    ((('*norm*', 'f32'),), 'Q8_0', 7)
    >>> p.type_for("blk.0.attn_norm.weight"), p.type_for("blk.0.attn_q.weight")
    ('f32', 'Q8_0')
    >>> QuantizePolicy([("*.ffn_down.*", "Q8_0")]).type_for("output.weight") is None
    True
    >>> QuantizePolicy(default="q4_k", pure=True)
    QuantizePolicy('Q4_K', pure=True)
    >>> QuantizePolicy.parse("nvfp4").file_type is None
    True
    """

    __slots__ = (
        "_default",
        "_exclude",
        "_flags",
        "_imatrix",
        "_include",
        "_keep_split",
        "_override_kv",
        "_rules",
    )

    def __init__(
        self,
        rules: Iterable[tuple[str, str]] = (),
        default: str | None = None,
        *,
        pure: bool = False,
        output_tensor_type: str | None = None,
        token_embedding_type: str | None = None,
        tensor_types: Iterable[str] = (),
        leave_output_tensor: bool = False,
        prune_layers: Iterable[int] = (),
        override_kv: Iterable[str] = (),
        allow_requantize: bool = False,
        keep_split: bool = False,
        imatrix: str | os.PathLike[str] | Imatrix | None = None,
        include_weights: str | Iterable[str] = (),
        exclude_weights: str | Iterable[str] = (),
    ) -> None:
        checked: list[tuple[str, str]] = []
        seen: set[str] = set()
        for rule in rules:
            if (
                not isinstance(rule, tuple)
                or len(rule) != 2
                or not all(isinstance(s, str) for s in rule)
            ):
                raise KilnError(
                    "TYPE",
                    f"expected rules as (pattern, type) pairs of str, found {show_value(rule)}",
                )
            pattern, type_ = rule
            checked.append(_rule(pattern, type_, f"policy rule {rule!r}: ", seen))
        if default is not None and not isinstance(default, str):
            raise KilnError(
                "TYPE", f"expected the default type as a str or None, found {show_value(default)}"
            )
        self._rules = tuple(checked)
        self._default = None if default is None else _default(default, "the default type: ")
        if isinstance(tensor_types, str):
            tensor_types = [tensor_types]  # choose_types refuses it, naming the string
        flags: dict[str, Any] = {
            "pure": bool(pure),
            "output_tensor_type": output_tensor_type,
            "token_embedding_type": token_embedding_type,
            "tensor_types": tuple(tensor_types),
            "leave_output_tensor": bool(leave_output_tensor),
            "prune_layers": tuple(prune_layers),
            "allow_requantize": bool(allow_requantize),
        }
        if isinstance(override_kv, str):
            override_kv = [override_kv]
        self._override_kv = tuple(_kv_override(entry) for entry in override_kv)
        self._keep_split = bool(keep_split)
        self._include = substrings(include_weights, "include_weights")
        self._exclude = substrings(exclude_weights, "exclude_weights")
        self._imatrix = _imatrix(imatrix, self._include, self._exclude)
        given = {k: v for k, v in flags.items() if v not in (False, None, ())}
        given |= {"override_kv": True} if self._override_kv else {}
        given |= {"keep_split": True} if self._keep_split else {}
        given |= {"imatrix": True} if self._imatrix is not None else {}
        if given and self.file_type is None:
            raise KilnError(
                "TYPE",
                f"expected a llama-quantize file type as the default for "
                f"{', '.join(given)} (Q4_K_M, q8_0, ...), found "
                f"{'no default' if self._default is None else repr(self._default)}",
            )
        if self._default is not None and self.file_type is not None:  # checked on no tensor
            choose_types(self._default, [], {}, name_types=self._rules, **flags)
            flags["output_tensor_type"] = _upper(output_tensor_type)
            flags["token_embedding_type"] = _upper(token_embedding_type)
            flags["prune_layers"] = tuple(sorted({int(p) for p in flags["prune_layers"]}))
        self._flags = flags

    @classmethod
    def parse(cls, text: str, **flags: Any) -> QuantizePolicy:
        """The policy a string of the grammar spells: ``"q4_k,*.ffn_down.*=q6_k"``;
        ``flags`` are the constructor's keywords.

        Raises
        ------
        KilnError
            TYPE for an empty entry, an entry with more than one ``=``, two bare
            types, and what the constructor refuses; the message names the entry.

        >>> QuantizePolicy.parse("*.attn_v.*=q8_0").rules
        (('*.attn_v.*', 'Q8_0'),)
        """
        if not isinstance(text, str):
            raise KilnError("TYPE", f"expected a policy string, found {show_value(text)}")
        rules: list[tuple[str, str]] = []
        seen: set[str] = set()
        default: str | None = None
        for number, raw in enumerate(text.split(","), 1):
            entry = raw.strip()
            where = f"policy entry {number} ({entry!r}): "
            if not entry:
                raise KilnError(
                    "TYPE",
                    f"policy entry {number}: expected TYPE or PATTERN=TYPE between commas, "
                    f"found an empty entry in {text!r}",
                )
            pattern, eq, type_ = entry.partition("=")
            if not eq:
                if default is not None:
                    raise KilnError(
                        "TYPE",
                        f"{where}expected at most one bare TYPE (the default), found a second "
                        f"after {default!r}",
                    )
                default = _default(entry, where)
                continue
            if "=" in type_:
                raise KilnError(
                    "TYPE", f"{where}expected PATTERN=TYPE with one '=', found {entry.count('=')}"
                )
            rules.append(_rule(pattern.strip(), type_.strip(), where, seen))
        return cls(rules, default, **flags)

    @property
    def rules(self) -> tuple[tuple[str, str], ...]:
        """The ``(pattern, type)`` pairs, in the order they are tried."""
        return self._rules

    @property
    def default(self) -> str | None:
        """The type of a tensor no pattern matches, or None (it keeps its type)."""
        return self._default

    @property
    def file_type(self) -> FileType | None:
        """The llama-quantize file type :attr:`default` names (its mix chooses
        each tensor's type), or None.

        >>> QuantizePolicy.parse("q4_k").file_type.option
        'Q4_K_M'
        """
        return None if self._default is None else OPTIONS.get(self._default)

    @property
    def flags(self) -> dict[str, Any]:
        """``llama-quantize``'s flags, as :func:`~kiln_np._quants.mix.choose_types`
        takes them: ``pure``, ``output_tensor_type``, ``token_embedding_type``
        (upper case, or None), ``tensor_types``, ``leave_output_tensor``,
        ``prune_layers`` (sorted).

        >>> QuantizePolicy.parse("q8_0", pure=True).flags["pure"]
        True
        """
        return dict(self._flags)

    @property
    def override_kv(self) -> tuple[tuple[str, str, Any], ...]:
        """``--override-kv`` entries as ``(key, GGUF type, value)``, in order:
        ``int`` as ``uint32`` of its absolute value (as llama-quantize writes it),
        ``float`` as ``float32``, ``bool``, ``str``.

        >>> QuantizePolicy.parse("q8_0", override_kv=["a.b=int:-3"]).override_kv
        (('a.b', 'uint32', 3),)
        """
        return self._override_kv

    @property
    def keep_split(self) -> bool:
        """``--keep-split``: a split GGUF is written as the same splits, its
        tensors in the input's order.

        >>> QuantizePolicy.parse("q8_0", keep_split=True).keep_split
        True
        """
        return self._keep_split

    @property
    def imatrix(self) -> str | Imatrix | None:
        """``--imatrix``: the importance matrix's path as given (read when a
        conversion is planned), the :class:`Imatrix` read (its entries those
        :attr:`include_weights` / :attr:`exclude_weights` keep), or None.

        >>> QuantizePolicy.parse("q4_k_m", imatrix="m.imatrix.gguf").imatrix
        'm.imatrix.gguf'
        """
        return self._imatrix

    @property
    def include_weights(self) -> tuple[str, ...]:
        """``--include-weights``: the substrings of the entry names kept.

        >>> QuantizePolicy.parse("q4_k_m", imatrix="i.gguf", include_weights="attn").include_weights
        ('attn',)
        """
        return self._include

    @property
    def exclude_weights(self) -> tuple[str, ...]:
        """``--exclude-weights``: the substrings of the entry names dropped."""
        return self._exclude

    def with_imatrix(self, imatrix: Imatrix) -> QuantizePolicy:
        """This policy with ``imatrix`` (what :func:`~kiln_np.gguf.read_imatrix`
        read of :attr:`imatrix`'s path) in place of the path, its entries those
        :attr:`include_weights` / :attr:`exclude_weights` keep.

        >>> from kiln_np.gguf import Imatrix
        >>> p = QuantizePolicy.parse("q4_k_m", imatrix="i.gguf")
        >>> p.with_imatrix(Imatrix("i.gguf", "gguf", (), 1, 512, {}, 0)).imatrix.format
        'gguf'
        """
        clone = copy.copy(self)
        clone._imatrix = _imatrix(imatrix, self._include, self._exclude)
        return clone

    def type_for(self, name: str) -> str | None:
        """The type the policy asks for tensor ``name``: the first matching rule's,
        else the default (None when there is none)."""
        for pattern, type_ in self._rules:
            if fnmatch.fnmatchcase(name, pattern):
                return type_
        return self._default

    def __str__(self) -> str:
        parts = [f"{p}={t}" for p, t in self._rules]
        return ",".join(parts if self._default is None else [*parts, self._default])

    def __repr__(self) -> str:
        given = [f"{k}={v!r}" for k, v in self._flags.items() if v not in (False, None, ())]
        entries = [f"{k}={t}:{v}" for k, t, v in self._override_kv]
        given += [f"override_kv={entries!r}"] if entries else []
        given += ["keep_split=True"] if self._keep_split else []
        if self._imatrix is not None:
            path = self._imatrix if isinstance(self._imatrix, str) else self._imatrix.path
            given += [f"imatrix={path!r}"]
        given += [f"include_weights={list(self._include)!r}"] if self._include else []
        given += [f"exclude_weights={list(self._exclude)!r}"] if self._exclude else []
        return f"QuantizePolicy({', '.join([repr(str(self)), *given])})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, QuantizePolicy):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple[object, ...]:
        flags = tuple(self._flags.items())
        # an Imatrix holds arrays: the same one, not an equal one
        imatrix = self._imatrix if not isinstance(self._imatrix, Imatrix) else id(self._imatrix)
        matrix = imatrix, self._include, self._exclude
        return self._rules, self._default, flags, self._override_kv, self._keep_split, matrix


def _imatrix(
    value: object, include: tuple[str, ...], exclude: tuple[str, ...]
) -> str | Imatrix | None:
    """``imatrix=`` checked: a path as a str, an :class:`Imatrix` with the entries
    ``include``/``exclude`` keep; TYPE for either of those without an imatrix, or
    both at once."""
    if include and exclude:
        raise KilnError(
            "TYPE",
            "expected include_weights or exclude_weights, not both (llama-quantize refuses "
            "--include-weights with --exclude-weights)",
        )
    if value is None:
        if include or exclude:
            raise KilnError(
                "TYPE",
                f"expected imatrix= (--imatrix FILE) with "
                f"{'include_weights' if include else 'exclude_weights'}, found no imatrix",
            )
        return None
    if isinstance(value, (str, os.PathLike)):
        return check_path(value)
    return kept_entries(checked_imatrix(value, "imatrix"), include, exclude)


_KV_TYPES: Final = {"int": "uint32", "float": "float32", "bool": "bool", "str": "string"}


def _kv_override(entry: object) -> tuple[str, str, Any]:
    """One ``--override-kv KEY=TYPE:VALUE`` entry read as llama.cpp's
    ``string_parse_kv_override`` reads it (a key under 128 bytes; ``int``,
    ``float``, ``bool`` (``true``/``false``), ``str`` of at most 127 bytes), but
    strictly: a number must be all of the value.

    >>> _kv_override("general.name=str:tiny"), _kv_override("x=float:0.5")
    (('general.name', 'string', 'tiny'), ('x', 'float32', 0.5))
    """
    text = entry if isinstance(entry, str) else ""
    key, eq, rest = text.partition("=")
    kind, colon, value = rest.partition(":")
    where = f"override_kv entry {show_value(entry)}: "
    if not (isinstance(entry, str) and eq and colon and key and kind in _KV_TYPES):
        raise KilnError(
            "TYPE", f"{where}expected KEY=TYPE:VALUE, TYPE one of int, float, bool, str"
        )
    if len(key.encode("utf-8", "surrogateescape")) >= 128:
        raise KilnError("TYPE", f"{where}expected a key of at most 127 bytes")
    parsed: Any = value
    try:
        if kind == "int":
            parsed = abs(int(value, 10)) % 2**32  # gguf_set_val_u32((uint32_t) abs(...))
        elif kind == "float":
            parsed = float(value)
    except ValueError:
        raise KilnError("TYPE", f"{where}expected a decimal {kind}, found {value!r}") from None
    if kind == "bool":
        if value not in ("true", "false"):
            raise KilnError("TYPE", f"{where}expected true or false, found {value!r}")
        parsed = value == "true"
    if kind == "str" and len(value.encode("utf-8", "surrogateescape")) > 127:
        raise KilnError("TYPE", f"{where}expected a value of at most 127 bytes")
    return key, _KV_TYPES[kind], parsed


def _upper(name: str | None) -> str | None:
    return None if name is None else name.upper()


def as_policy(quantize: object, option: str = "quantize") -> QuantizePolicy | None:
    """``quantize`` as a policy: a :class:`QuantizePolicy` as it is, a string
    parsed, None as None; TYPE naming ``option`` for anything else.

    >>> as_policy("Q8_0").default, as_policy(None)
    ('Q8_0', None)
    """
    if quantize is None or isinstance(quantize, QuantizePolicy):
        return quantize
    if isinstance(quantize, str):
        return QuantizePolicy.parse(quantize)
    raise KilnError(
        "TYPE",
        f"expected {option} as a policy string ('q8_0', 'q4_k,*norm*=f32') or a "
        f"kiln_np.QuantizePolicy, found {show_value(quantize)}",
    )


def decide(policy: QuantizePolicy, name: str, info: PayloadInfo) -> Target | str | None:
    """What tensor ``name`` described by ``info`` becomes under ``policy``: a
    :class:`Block` type to quantize to, a float :class:`Code` to store as, None
    when it is written as it is because that is what was asked (a float type it
    already has), or a str: why it keeps its type although the policy named it
    (or named nothing for it).

    >>> from kiln_np import payload_info
    >>> p = QuantizePolicy.parse("q8_0,*norm=f32")
    >>> decide(p, "w", payload_info("f16", (4, 64))).name
    'Q8_0'
    >>> decide(p, "w", payload_info("f32", (64,)))
    'a 1-D tensor: Q8_0 quantizes rows of two dims or more'
    >>> decide(p, "w", payload_info("f32", (4, 40)))
    'rows of 40 elements are not a whole number of Q8_0 blocks (32 elements each)'
    >>> decide(p, "w", payload_info("i32", (4, 64)))
    'i32 is not a float type: Q8_0 quantizes f32, f16, bf16 and f64 tensors'
    >>> decide(p, "attn_norm", payload_info("f16", (64,)))
    <Code.F32: 2>
    """
    asked = policy.type_for(name)
    kind = info.element.name  # the code's short name, or the layout's
    if asked is None:
        return "no pattern of the policy matches it and it has no default type"
    if info.layout is not None and element_of(info.code, info.layout).kind == "ggml":
        return f"already GGML {info.layout.name[5:].upper()} blocks (kiln_np does not requantize)"
    if info.code not in _FLOAT_SOURCES:
        does = "is stored as" if asked in FLOAT_TARGETS else "quantizes"
        return f"{kind} is not a float type: {asked} {does} f32, f16, bf16 and f64 tensors"
    if asked in FLOAT_TARGETS:
        target = FLOAT_TARGETS[asked]
        return None if target == info.code else target
    block = BLOCKS[asked]
    if len(info.shape) < 2:
        return f"a {len(info.shape)}-D tensor: {asked} quantizes rows of two dims or more"
    if info.count == 0:
        return f"an empty tensor: {asked} has no blocks to write"
    row = info.shape[-1]
    if row % block.elements:
        return (
            f"rows of {row} elements are not a whole number of {asked} blocks "
            f"({block.elements} elements each)"
        )
    return block


_GGML_IDS: Final = {
    Code.F32: 0, Code.F16: 1, Code.BF16: 30, Code.F64: 28,
    Code.I8: 24, Code.I16: 25, Code.I32: 26, Code.I64: 27,
}  # fmt: skip
"""The Kiln codes of GGUF's plain types: their GGML type ids."""


class Decision(NamedTuple):
    """What one tensor becomes under a file type's mix: ``target`` as :func:`decide`
    gives it (a :class:`Block` type, a float :class:`Code`, None: written as it
    is, a str: why it keeps its type), ``rule``, what chose its type, and ``name``,
    its name in the output (``prune_layers`` renumbers layers; None: pruned).
    Under an importance matrix, ``weights`` are the tensor's importance weights
    (float32, a row per expert; None: quantized without) and ``imatrix`` says what
    the matrix gave it (:data:`IMATRIX_NOTES`; None for a tensor not quantized)."""

    target: Target | str | None
    rule: str
    name: str | None
    weights: np.ndarray | None = None
    imatrix: str | None = None


IMATRIX_NOTES: Final = {
    "weights": "quantized with its entry's weights",
    "ignored": "it has an entry, which its type ignores (as ggml's quantizer does)",
    "no entry": "the importance matrix has no entry of its size for it: quantized without",
}
"""What an importance matrix gives a quantized tensor (:attr:`Decision.imatrix`)."""


_KEPT = "kept: "  # the rule of a tensor llama.cpp does not quantize


def _ggml_view(info: PayloadInfo) -> tuple[int, tuple[int, ...]] | None:
    """The GGML type id and element shape of the tensor ``info`` describes, or
    None for a type GGUF has no id for."""
    if info.layout is None:
        type_id = next((i for code, i in _GGML_IDS.items() if code == info.code), None)
        return None if type_id is None else (type_id, info.shape)
    block = element_of(info.code, info.layout).decoded
    if block is None:
        return None
    shape = info.shape
    return block.type_id, (*shape[:-1], shape[-1] * block.elements) if shape else ()


def mix_decisions(
    policy: QuantizePolicy,
    tensors: Sequence[tuple[str, PayloadInfo]],
    metadata: Mapping[str, Any] | None,
) -> list[Decision]:
    """Each tensor's :class:`Decision` under the file type of ``policy`` (its
    :attr:`~QuantizePolicy.file_type`), chosen as ``llama-quantize`` chooses:
    over all the tensors at once, in llama.cpp's order, with the model's GGUF
    ``metadata`` (:func:`~kiln_np._quants.mix.choose_types`).  A tensor of a
    type GGUF has no id for keeps its type and counts for nothing.

    Raises
    ------
    KilnError
        What :func:`~kiln_np._quants.mix.choose_types` refuses (an importance
        matrix or an entry needed, an entry of the wrong size, a requantization,
        hostile metadata), and TYPE for a type the mix chooses that kiln_np cannot
        write (IQ2_XXS, IQ2_XS or IQ1_S, which ggml quantizes only with weights,
        given by a flag to the token embeddings or the output without an entry,
        which llama.cpp exempts from the importance matrix), and for a policy
        whose importance matrix is still a path (unread), naming the tensor.

    >>> from kiln_np import payload_info
    >>> ts = [("blk.0.ffn_down.weight", payload_info("f16", (256, 1408))),
    ...       ("blk.0.attn_norm.weight", payload_info("f32", (256,)))]
    >>> for d in mix_decisions(QuantizePolicy.parse("q4_k_m"), ts, None):
    ...     print(getattr(d.target, "name", d.target), "-", d.rule)
    Q8_0 - Q4_K_M rule for ffn_down: layer 0 of 1: use_more_bits; rows of 1408 are not ...
    Q4_K_M does not quantize it (1-D) - kept: 1-D
    """
    assert policy.default is not None  # a policy with a file type
    imatrix = policy.imatrix
    if isinstance(imatrix, str):
        raise KilnError(
            "TYPE",
            f"imatrix {imatrix!r}: expected an importance matrix read (kiln_np.gguf."
            "read_imatrix), found its path: pass imatrix=read_imatrix(path), or convert with "
            "kiln_np.save_weights, kiln_np.gguf.save_gguf or kiln-np convert, which read it",
        )
    kept = None if imatrix is None or not imatrix.entries else imatrix.entries
    sizes = None if kept is None else {name: e.weights.size for name, e in kept.items()}
    views = [_ggml_view(info) for _, info in tensors]
    mixed = [
        MixTensor(name, view[1], view[0])
        for (name, _), view in zip(tensors, views, strict=True)
        if view is not None
    ]
    if not policy.keep_split:  # llama.cpp's order; --keep-split keeps the files'
        mixed.sort(key=lambda t: llama_order_key(t.name))
    meta = {} if metadata is None else metadata
    choices = choose_types(
        policy.default, mixed, meta, name_types=policy.rules, imatrix=sizes, **policy.flags
    )
    by_name = {c.source: c for c in choices}
    out: list[Decision] = []
    for (name, info), view in zip(tensors, views, strict=True):
        if view is None:
            why = f"{info.element.name} has no GGML type: llama.cpp's mixes choose among GGUF's"
            out.append(Decision(why, "", name))
            continue
        c = by_name.get(name)
        if c is None:
            out.append(Decision(None, "--prune-layers", None))
            continue
        blocks = c.type_name in BLOCKS and c.type_id != view[0] and not c.rule.startswith(_KEPT)
        weights, note = _weights(kept, c, view[1]) if blocks else (None, None)
        target = _target(policy, name, info, view[0], c, weights is not None)
        if not isinstance(target, Block):  # not a float type: kept, saying why
            weights, note = None, None
        out.append(Decision(target, c.rule, c.name, weights, note))
    return out


def _weights(
    entries: Mapping[str, Any] | None, c: Choice, shape: tuple[int, ...]
) -> tuple[np.ndarray | None, str | None]:
    """The importance weights choice ``c`` quantizes a tensor of element ``shape``
    with, and what the importance matrix gave it (None, None without one)."""
    if entries is None:
        return None, None
    entry = entries.get(imatrix_name(c.name, c.source))
    weights = None if entry is None else tensor_weights(entry, c.source, shape)
    if weights is None:
        return None, "no entry"
    if c.type_name in IGNORES_IMATRIX:
        return None, "ignored"
    return weights, "weights"


def _target(
    policy: QuantizePolicy,
    name: str,
    info: PayloadInfo,
    type_id: int,
    c: Choice,
    weighted: bool = False,
) -> Target | str | None:
    """What tensor ``name`` (``info``, of GGML type ``type_id``) becomes under choice
    ``c`` (``weighted``: with importance weights)."""
    kind = info.element.name
    if c.rule.startswith(_KEPT):
        return f"{policy.default} does not quantize it ({c.rule.removeprefix('kept: ')})"
    if c.type_id == type_id:
        return None
    blocks = info.layout is not None and element_of(info.code, info.layout).decoded is not None
    if info.code not in _FLOAT_SOURCES and not blocks:  # GGML blocks: allow_requantize
        return f"{kind} is not a float type: {c.type_name} quantizes f32, f16, bf16 and f64 tensors"
    if c.type_name.lower() in FLOAT_TARGETS:
        return FLOAT_TARGETS[c.type_name.lower()]
    if c.type_name not in (WEIGHTED_KERNELS if weighted else ENCODERS):
        raise KilnError(
            "TYPE",
            f"tensor {name!r}: {c.rule} gives it {c.type_name}, which kiln_np cannot write: "
            f"{refusal(c.type_name)}",
        )
    return BLOCKS[c.type_name]


def generic_rules(names: Iterable[str], metadata: Mapping[str, Any] | None) -> str:
    """Why a file type's mix applies only llama.cpp's generic rules to the model
    of tensors ``names`` and GGUF ``metadata``, and which rules that leaves out
    ("" for a model llama.cpp would load: its architecture's rules apply).

    >>> generic_rules(["blk.0.w"], {"general.architecture": "llama", "llama.block_count": 1})
    ''
    >>> generic_rules(["blk.0.w"], None).split(" (")[0]
    "no 'general.architecture'"
    """
    meta = {} if metadata is None else metadata
    return model_facts(meta, counted_layers(names)).generic
