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

A GGML type applies to a float tensor (f32, f16, bf16, or f64, rounded to f32 to
nearest even first, as llama.cpp's converters do) of two dims or more whose rows
(the innermost dim) are a whole number of the type's blocks; every other tensor
keeps its type, with the reason :func:`decide` gives.  A float type applies to a
float tensor of any shape: widening is exact, narrowing rounds to nearest even
(as ggml's converters do; past the type's range: infinity); a NaN is refused
(its payload bits are not kept alike by every converter).  GGML blocks keep
their type whatever the policy says: kiln_np does not requantize.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from typing import Final, final

from kiln_np._core.checks import set_module, show_value
from kiln_np._core.errors import KilnError
from kiln_np._core.payload import PayloadInfo
from kiln_np._core.table import Code
from kiln_np._quants.blocks import BLOCKS, Block
from kiln_np._quants.elements import element_of
from kiln_np._quants.quantize import ENCODERS, refusal

__all__ = ["FLOAT_TARGETS", "QuantizePolicy", "Target", "as_policy", "decide"]

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


@set_module("kiln_np")
@final
class QuantizePolicy:
    """Which type each tensor is written as, by name: ``save_weights(...,
    quantize=)`` and ``kiln-np convert --quantize`` take one (or its string).

    ``rules`` are ``(pattern, type)`` pairs tried in order, the first whose
    glob (:func:`fnmatch.fnmatchcase`, case-sensitive, against the whole name)
    matches giving the type; ``default`` is the type of a tensor none matches
    (None: it keeps its type).  Types are GGML types kiln_np quantizes to
    (``"Q8_0"``, ``"q4_k"``: any case) or ``"f32"``, ``"f16"``, ``"bf16"``;
    they are kept in canonical spelling (GGML types upper case, float types
    lower case).  :meth:`parse` reads the string grammar (``kiln_np._convert.policy``
    documents it); ``str()`` gives it back.

    Raises
    ------
    KilnError
        TYPE for a type it cannot write (an unknown name, an IQ1/IQ2/IQ3 type,
        which needs an importance matrix), an empty or malformed pattern, a
        pattern given twice, a rule that is not a pair of strings.

    Examples
    --------
    >>> p = QuantizePolicy.parse("q8_0, *norm*=f32")
    >>> p
    QuantizePolicy('*norm*=f32,Q8_0')
    >>> p.rules, p.default
    ((('*norm*', 'f32'),), 'Q8_0')
    >>> p.type_for("blk.0.attn_norm.weight"), p.type_for("blk.0.attn_q.weight")
    ('f32', 'Q8_0')
    >>> QuantizePolicy([("*.ffn_down.*", "Q8_0")]).type_for("output.weight") is None
    True
    >>> QuantizePolicy(default="q8_0") == QuantizePolicy.parse("Q8_0")
    True
    """

    __slots__ = ("_default", "_rules")

    def __init__(self, rules: Iterable[tuple[str, str]] = (), default: str | None = None) -> None:
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
        self._default = None if default is None else _type(default, "the default type: ")

    @classmethod
    def parse(cls, text: str) -> QuantizePolicy:
        """The policy a string of the grammar spells: ``"q4_k,*.ffn_down.*=q6_k"``.

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
                default = _type(entry, where)
                continue
            if "=" in type_:
                raise KilnError(
                    "TYPE", f"{where}expected PATTERN=TYPE with one '=', found {entry.count('=')}"
                )
            rules.append(_rule(pattern.strip(), type_.strip(), where, seen))
        return cls(rules, default)

    @property
    def rules(self) -> tuple[tuple[str, str], ...]:
        """The ``(pattern, type)`` pairs, in the order they are tried."""
        return self._rules

    @property
    def default(self) -> str | None:
        """The type of a tensor no pattern matches, or None (it keeps its type)."""
        return self._default

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
        return f"QuantizePolicy({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, QuantizePolicy):
            return NotImplemented
        return (self._rules, self._default) == (other._rules, other._default)

    def __hash__(self) -> int:
        return hash((self._rules, self._default))


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
