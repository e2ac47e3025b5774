"""One bad payload, one error: every entry point words it the same way.

Each case is a payload one byte short, one byte long, or with a shape numpy
cannot represent.  ``to_numpy`` on the bytes is the reference; every other
entry point that sees the same payload (from a file in its exact mode, where
bytes after the payload are otherwise allowed) must raise the same kind with
the same ``expected``/``found`` and the same message after its own prefix (a
file's ``'path' at offset N: ``, the command line's ``kiln-np: KIND: ``).  The
check order is the same everywhere too: SHAPE (representability included)
before LENGTH, so an unrepresentable shape is SHAPE although its few bytes are
also the wrong length.
"""

# dask ships only partial annotations.
# mypy: disable-error-code="no-untyped-call"

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import pytest
from _helpers import needs, optional, run_command

import kiln_np
import kiln_np.onnx
from kiln_np import KilnError, Layout, cli

if TYPE_CHECKING:
    import dask
else:
    dask = optional("dask")


class Case(NamedTuple):
    code: int
    shape: tuple[int, ...]
    size: int  # bytes in the buffer, or in the file
    kind: str
    layout: Layout | None = None

    @property
    def long(self) -> bool:
        return self.kind == "LENGTH" and self.size > kiln_np.byte_length(
            self.code, self.shape, self.layout
        )

    def cli_args(self) -> list[str]:
        shape = ",".join(map(str, self.shape)) or "()"
        layout = (
            []
            if self.layout is None
            else ["--layout", f"{self.layout.name}:{self.layout.block_size}"]
        )
        return ["--code", str(self.code), "--shape", shape, *layout]


COMPLEX64 = Layout("onnx.complex64", 8)  # foreign types the ONNX bridge carries too
FNUZ = Layout("onnx.float8e4m3fnuz", 1)

CASES = {
    "f32-short": Case(2, (2, 3), 23, "LENGTH"),
    "f32-long": Case(2, (2, 3), 25, "LENGTH"),
    "f64-unrepresentable": Case(1, (2**62, 4), 7, "SHAPE"),
    # Variants: an odd 4-bit count (a rule with a ceiling), an opaque layout, an
    # opaque shape whose block axis would make 65 dimensions, a long scalar.
    "u4-odd-short": Case(17, (5,), 2, "LENGTH"),
    "u4-odd-long": Case(17, (5,), 4, "LENGTH"),
    "opaque-short": Case(0x4F0E, (3,), 23, "LENGTH", COMPLEX64),
    "opaque-rank-64": Case(0x4F12, (1,) * 64, 1, "SHAPE", FNUZ),
    "bf16-scalar-long": Case(4, (), 3, "LENGTH"),
}


@pytest.fixture(params=list(CASES))
def case(request: pytest.FixtureRequest) -> Case:
    return CASES[request.param]


def reference(case: Case) -> KilnError:
    with pytest.raises(KilnError) as info:
        kiln_np.to_numpy(case.code, bytes(case.size), case.shape, case.layout)
    assert info.value.kind == case.kind
    return info.value


def assert_same(got: KilnError, want: KilnError, prefix: str) -> None:
    """``got`` is ``want`` seen through another door that adds ``prefix``."""
    assert (got.kind, got.expected, got.found) == (want.kind, want.expected, want.found)
    assert (got.code, got.shape) == (want.code, want.shape)
    assert got.message == prefix + want.message


def payload_file(tmp_path: Path, case: Case) -> Path:
    path = tmp_path / "p.kiln"
    path.write_bytes(bytes(case.size))
    return path


def file_prefix(path: Path, case: Case) -> str:
    """A LENGTH message names the file and offset first; SHAPE is found from the
    shape alone, before any file is looked at."""
    return f"{str(path)!r} at offset 0: " if case.kind == "LENGTH" else ""


def _dask_from_payload(path: Path, case: Case) -> Any:
    import kiln_np.dask  # the optional door imports dask: only where the test needs it

    with dask.config.set(scheduler="sync"):
        return kiln_np.dask.from_payload(
            path, case.code, case.shape, layout=case.layout, exact=True
        )


FILE_DOORS: dict[str, Callable[[Path, Case], Any]] = {
    "open_payload": lambda p, c: kiln_np.open_payload(
        p, c.code, c.shape, layout=c.layout, exact=True
    ),
    "LazyPayload": lambda p, c: kiln_np.LazyPayload(
        p, c.code, c.shape, layout=c.layout, exact=True
    ),
    "dask.from_payload": _dask_from_payload,
}


@pytest.mark.parametrize(
    "door",
    [pytest.param(d, marks=needs("dask") if d.startswith("dask") else ()) for d in FILE_DOORS],
)
def test_file_entry_points_match_to_numpy(tmp_path: Path, case: Case, door: str) -> None:
    want = reference(case)
    path = payload_file(tmp_path, case)
    with pytest.raises(KilnError) as info:
        FILE_DOORS[door](path, case)
    assert_same(info.value, want, file_prefix(path, case))


def test_default_mode_differs_only_for_bytes_after_the_payload(tmp_path: Path, case: Case) -> None:
    path = payload_file(tmp_path, case)
    if case.long:  # allowed and never read
        opened = kiln_np.open_payload(path, case.code, case.shape, layout=case.layout)
        assert opened.shape == case.shape + (
            () if case.layout is None else (case.layout.block_size,)
        )
        return
    with pytest.raises(KilnError) as info:
        kiln_np.open_payload(path, case.code, case.shape, layout=case.layout)
    assert_same(info.value, reference(case), file_prefix(path, case))


def test_onnx_bridge_matches_to_numpy(case: Case) -> None:
    want = reference(case)
    with pytest.raises(KilnError) as info:
        kiln_np.onnx.from_kiln(case.code, bytes(case.size), case.shape, case.layout)
    assert_same(info.value, want, "")


# inspect allows (and reports) bytes after the payload: the long cases are decode's.
CLI_CASES = [
    (name, command)
    for name in CASES
    for command in ("decode", "inspect")
    if command == "decode" or not CASES[name].long
]


@pytest.mark.parametrize(("name", "command"), CLI_CASES)
def test_command_line_matches_to_numpy(
    tmp_path: Path, name: str, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    case = CASES[name]
    want = reference(case)
    path = payload_file(tmp_path, case)
    argv = [command, str(path), *case.cli_args()]
    if command == "decode":
        argv.append(str(tmp_path / "out.npy"))
    assert cli.main(argv) == 2
    prefix = file_prefix(path, case)
    assert capsys.readouterr().err == f"kiln-np: {want.kind}: {prefix}{want.message}\n"
    with pytest.raises(KilnError) as info:
        run_command(*argv)
    assert_same(info.value, want, prefix)
    assert not (tmp_path / "out.npy").exists()
