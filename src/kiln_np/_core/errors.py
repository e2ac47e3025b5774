"""The one exception type kiln_np raises for bad input.

``KilnError`` subclasses :class:`ValueError` (the cbor2 pattern: one root that
is also the matching built-in) and carries what went wrong as attributes, so a
caller can branch on ``kind`` and report ``expected``/``found`` without parsing
the message.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["ErrorKind", "KilnError"]

ErrorKind = Literal["TYPE", "LENGTH", "SHAPE"]
_KINDS: frozenset[str] = frozenset({"TYPE", "LENGTH", "SHAPE"})


class KilnError(ValueError):
    """A payload, code, layout, shape or array that Kiln does not allow.

    Parameters
    ----------
    kind : {"TYPE", "LENGTH", "SHAPE"}
        ``TYPE``: a rejected or reserved code, a missing or misplaced layout, a
        bad bool byte, a nonzero padding nibble, an unsupported dtype.
        ``LENGTH``: a byte count other than exactly ``byte_length``.
        ``SHAPE``: a malformed shape.
    message : str
        What was expected and what was found; kept as ``.message`` (``str(e)``
        is ``f"{kind}: {message}"``).
    code, shape, expected, found, index
        Whatever of these the failing check knew; ``None`` otherwise.
        ``expected``/``found`` are byte counts for LENGTH errors and wire
        values (ints, shown in hex in the message) for content errors;
        ``index`` is the flat C-order element index of the first bad element.

    Examples
    --------
    >>> import kiln_np
    >>> try:
    ...     kiln_np.to_numpy(2, b"\\x00" * 7, (2,))
    ... except kiln_np.KilnError as e:
    ...     print(e.kind, e.expected, e.found)
    LENGTH 8 7
    """

    kind: ErrorKind

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        code: int | None = None,
        shape: tuple[int, ...] | None = None,
        expected: object = None,
        found: object = None,
        index: int | None = None,
    ) -> None:
        if kind not in _KINDS:
            raise AssertionError(f"KilnError kind must be one of {sorted(_KINDS)}, got {kind!r}")
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message
        self.code = code
        self.shape = shape
        self.expected = expected
        self.found = found
        self.index = index

    def prefixed(
        self, prefix: str, *, code: int | None = None, shape: tuple[int, ...] | None = None
    ) -> KilnError:
        """The same error with ``prefix`` before its message: a caller that knows
        more context (the code, the shape, the tensor) re-raises it with that.
        ``code`` and ``shape`` replace the attributes when given."""
        return self._with_notes(
            KilnError(
                self.kind,
                prefix + self.message,
                code=self.code if code is None else code,
                shape=self.shape if shape is None else shape,
                expected=self.expected,
                found=self.found,
                index=self.index,
            )
        )

    def shifted(self, by: int, where: str = "") -> KilnError:
        """The same content error with its element index moved by ``by``.

        A caller that checked a slice (a chunk of a stream, the rows of a lazy
        read) re-aims the error at the element's index in the whole payload;
        ``where`` (``"in chunk 3 (from row 96)"``) is added after the index.
        The message's ``at element N`` is the one place the index is shown.
        """
        if self.index is None:
            return self
        index = self.index + by
        old, new = f"at element {self.index}", f"at element {index}"
        message = self.message.replace(old, new + (f" of the payload, {where}" if where else ""), 1)
        return self._with_notes(
            KilnError(
                self.kind,
                message,
                code=self.code,
                shape=self.shape,
                expected=self.expected,
                found=self.found,
                index=index,
            )
        )

    def _with_notes(self, other: KilnError) -> KilnError:
        notes = getattr(self, "__notes__", None)
        if notes:
            other.__notes__ = list(notes)
        return other

    def __reduce__(self) -> tuple[object, ...]:
        # Keep the attributes and any notes across pickling (multiprocessing, dask).
        return (
            _rebuild,
            (
                self.kind,
                self.message,
                self.code,
                self.shape,
                self.expected,
                self.found,
                self.index,
                list(getattr(self, "__notes__", ())),
            ),
        )


def _rebuild(
    kind: ErrorKind,
    message: str,
    code: int | None,
    shape: tuple[int, ...] | None,
    expected: object,
    found: object,
    index: int | None,
    notes: list[str] | None = None,
) -> KilnError:
    err = KilnError(
        kind, message, code=code, shape=shape, expected=expected, found=found, index=index
    )
    if notes:
        err.__notes__ = list(notes)  # add_note() is 3.11+; the attribute works on 3.10
    return err


KilnError.__module__ = "kiln_np"
