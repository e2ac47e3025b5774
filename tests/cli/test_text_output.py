"""Issue 36: what the text output of every command shows of a file's names.

Names are never cut (two tensors never read the same), and a name or a
metadata key holding ESC, BEL, CR, a C1 control, a format character or a lone
surrogate is shown as its escape (``\\x1b``, ``\\udcff``): nothing raw reaches
the terminal, and nothing fails to encode.  ``--json`` stays exact JSON.
"""

from __future__ import annotations

import ast
import io
import json
import os
import subprocess
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from _helpers import run_main

import kiln_np
from kiln_np.cli.output import Progress

# -- names never cut ---------------------------------------------------------------

# Cut from the left (stats), layers 3 and 13 read the same; cut from the right
# (diff, at 31 characters and '~'), the shared experts' two projections did.
_LONG = [
    "model.layers.3.mlp.experts.0.down_proj.weight_scale_inv",
    "model.layers.13.mlp.experts.0.down_proj.weight_scale_inv",
    "model.layers.3.mlp.shared_experts.down_proj.weight",
    "model.layers.3.mlp.shared_experts.gate_proj.weight",
]


def _long_files(tmp_path: Path) -> tuple[str, str]:
    tensors = {n: np.arange(4, dtype=np.float32) + i for i, n in enumerate(_LONG)}
    a = tmp_path / "a.safetensors"
    kiln_np.save_weights(a, tensors, format="safetensors")
    b = tmp_path / "b.safetensors"
    kiln_np.save_weights(b, {n: -v for n, v in tensors.items()}, format="safetensors")
    return str(a), str(b)


def _rows_naming(out: str, name: str) -> list[str]:
    return [line for line in out.splitlines() if line.split("  ")[0].rstrip() == name]


@pytest.mark.parametrize(
    "command",
    [
        ["stats", "{a}"],
        ["diff", "{a}", "{b}"],
        ["diff", "{a}", "{b}", "--all"],
        ["ls", "{a}"],
        ["convert", "{a}", "{out}", "--dry-run"],
    ],
    ids=["stats", "diff", "diff-all", "ls", "convert-dry-run"],
)
def test_every_table_shows_every_name_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    a, b = _long_files(tmp_path)
    out_path = str(tmp_path / "c.gguf")
    argv = [arg.format(a=a, b=b, out=out_path) for arg in command]
    status, out, err = run_main(capsys, *argv)
    assert (status, err) == (1 if command[0] == "diff" else 0, "")
    for name in _LONG:
        assert len(_rows_naming(out, name)) == 1, (name, out)
    assert "..." not in out
    assert "~" not in out


def test_stats_rows_of_layers_3_and_13_differ(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, _ = _long_files(tmp_path)
    out = run_main(capsys, "stats", a, "--sort", "file")[1]  # layers 3 and 13 side by side
    width = len(_LONG[1])  # the name column: the longest name
    assert out.splitlines()[1:4] == [
        f"{'name':<{width}}    type   count       min       max      mean       std  zeros nan/inf",
        f"{_LONG[0]:<{width}}     F32       4         0         3       1.5     1.118  25.0%"
        "       -",
        f"{_LONG[1]}     F32       4         1         4       2.5     1.118   0.0%       -",
    ]


def test_diff_rows_of_the_two_projections_differ(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = _long_files(tmp_path)
    lines = run_main(capsys, "diff", a, b)[1].splitlines()
    width = len(_LONG[1])
    figures = "2         -6.021  -1    "  # rel rmse, SNR dB, cosine: B is -A
    rest = "2 (0)         (0)    4 differ"  # max rel (at), first, notes
    assert lines[3:5] == [
        f"{_LONG[2]:<{width}}  DIFFERENT  7.348  {figures}  10 (3)        {rest}",
        f"{_LONG[3]:<{width}}  DIFFERENT  9.274  {figures}  12 (3)        {rest}",
    ]


def test_a_long_metadata_key_is_shown_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = "tokenizer.chat_template." + "very_long_part." * 8 + "end"  # 146 characters
    path = tmp_path / "m.safetensors"
    kiln_np.save_weights(
        path, {"w": np.ones(2, np.float32)}, format="safetensors", metadata={key: "x"}
    )
    lines = run_main(capsys, "meta", str(path))[1].splitlines()
    assert lines[2:] == [key, '     str   "x"']


# -- hostile names and keys ------------------------------------------------------

_NAMES = [
    "ok.weight",
    "esc\x1b[2J.weight",
    "bel\x07.w",
    "cr\rfake.w",
    "nl\nfake.w",
    "sur\udcff.w",
    "c1\x9b31m.w",
    "rtl\u202eexe.w",
]
_SHOWN = [
    "ok.weight",
    "esc\\x1b[2J.weight",
    "bel\\x07.w",
    "cr\\rfake.w",
    "nl\\nfake.w",
    "sur\\udcff.w",
    "c1\\x9b31m.w",
    "rtl\\u202eexe.w",
]
_KEYS = {"k\x1b]0;title\x07": "v\x1b[31m\x9b", "key\udcfe": "val\udcfd", "cr\rkey": 1}


def _hostile(tmp_path: Path) -> tuple[str, str]:
    """A Kiln directory (which keeps lone surrogates) and a safetensors file
    (which cannot hold them) whose names and metadata keys are hostile."""
    tensors = {n: np.arange(4, dtype=np.float32) + i for i, n in enumerate(_NAMES)}
    a = tmp_path / "a"
    kiln_np.save_weights(a, tensors, format="kiln", metadata=_KEYS)
    b = tmp_path / "b.safetensors"
    plain = {n: v * 2 for n, v in tensors.items() if "\udcff" not in n}
    kiln_np.save_weights(b, plain, format="safetensors", metadata={"k\x1b[2J": "v\x07"})
    return str(a), str(b)


def _raw(text: str) -> list[str]:
    """The characters a terminal would act on or that cannot be encoded:
    controls other than the line feed, format characters, lone surrogates."""
    return [c for c in text if c != "\n" and unicodedata.category(c) in ("Cc", "Cf", "Cs")]


_COMMANDS = [
    ["ls", "{a}"],
    ["ls", "{a}", "--bytes", "--include", "*.w"],
    ["stats", "{a}"],
    ["meta", "{a}"],
    ["meta", "{b}"],
    ["diff", "{a}", "{b}", "--all"],
    ["diff", "{a}", "{b}"],
    ["convert", "{a}", "{out}", "--dry-run"],
    ["inspect", "{a}", "--tensor", "esc\x1b[2J.weight"],
    ["inspect", "{a}", "--tensor", "missing\x1b[2J"],  # the error lists the names
    ["ls", "{a}", "--include", "none\x07"],  # TYPE, naming the pattern and the names
    ["convert", "{a}", "{a}/x\x1b.gguf"],  # FILE: the output is inside the input
]


@pytest.mark.parametrize("command", _COMMANDS, ids=lambda c: " ".join(c[:1] + c[3:4]))
def test_no_command_prints_a_raw_control_character(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    a, b = _hostile(tmp_path)
    argv = [arg.format(a=a, b=b, out=str(tmp_path / "c.gguf")) for arg in command]
    status, out, err = run_main(capsys, *argv)
    assert status in (0, 1, 2)
    assert (_raw(out), _raw(err)) == ([], [])
    assert (out + err).strip()


def test_names_and_keys_are_shown_as_their_escapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = _hostile(tmp_path)
    out = run_main(capsys, "ls", a, "--sort", "file")[1]
    width = max(map(len, _SHOWN))
    assert [line[:width].rstrip() for line in out.splitlines()[1:-1]] == _SHOWN
    out = run_main(capsys, "stats", a, "--sort", "file")[1]
    assert [line[:width].rstrip() for line in out.splitlines()[2:]] == _SHOWN
    out = run_main(capsys, "meta", a)[1]
    assert out.splitlines()[2:] == [
        'k\\x1b]0;title\\x07  str   "v\\u001b[31m\\x9b"',
        'key\\udcfe          str   "val\\udcfd"',
        "cr\\rkey            int   1",
    ]
    out = run_main(capsys, "diff", a, b)[1]
    assert out.splitlines()[1] == _SHOWN[5].ljust(width) + "  only in A"
    err = run_main(capsys, "inspect", a, "--tensor", "x")[2]
    assert "'esc\\x1b[2J.weight', 'bel\\x07.w', 'cr\\rfake.w'" in err


def test_json_stays_exact_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, _ = _hostile(tmp_path)
    out = run_main(capsys, "ls", a, "--json", "--sort", "file")[1]
    assert out.isascii()  # json.dumps escapes every control and surrogate itself
    assert [t["name"] for t in json.loads(out)["tensors"]] == _NAMES
    out = run_main(capsys, "meta", a, "--json")[1]
    assert [e["key"] for e in json.loads(out)["metadata"]] == list(_KEYS)


@pytest.mark.parametrize("command", [["ls"], ["stats"], ["meta"], ["diff", "{b}"]])
@pytest.mark.parametrize("encoding", ["utf-8", "ascii"])
def test_a_lone_surrogate_never_fails_to_encode(
    tmp_path: Path, command: list[str], encoding: str
) -> None:
    """A real process, its stdout a pipe of the terminal's encoding: before issue
    36 a name holding a lone surrogate was UnicodeEncodeError on ASCII (a
    traceback) and raw bytes on UTF-8."""
    a, b = _hostile(tmp_path)
    src = str(Path(kiln_np.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": src, "PYTHONIOENCODING": encoding}
    argv = [command[0], a, *(arg.format(b=b) for arg in command[1:])]
    done = subprocess.run(
        [sys.executable, "-m", "kiln_np.cli", *argv],
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr.decode(errors="replace")
    assert done.stderr == b""
    out = done.stdout.decode("ascii" if encoding == "ascii" else "utf-8")
    assert "\\udc" in out
    assert _raw(out) == []


def test_the_progress_label_is_escaped() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Terminal()
    with Progress(4, "stats a\x1b]0;x\x07", stream) as bar:
        bar.advance(4)
    assert stream.getvalue() == f"\rstats a\\x1b]0;x\\x07 [{'#' * 30}] 100.0%\n"


def test_every_line_of_the_command_line_goes_through_output() -> None:
    """``print`` and ``.write`` appear in ``cli/output.py`` alone (and writing
    a file's bytes in ``cli/files.py``): no command can forget the escaping."""
    folder = Path(kiln_np.__file__).parent / "cli"
    found = []
    for path in sorted(folder.glob("*.py")):
        if path.name == "output.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                func = node.func
                if isinstance(func, ast.Name) and func.id == "print":
                    found.append(f"{path.name}:{node.lineno} print")
                elif (
                    isinstance(func, ast.Attribute)
                    and func.attr in ("write", "writelines")
                    and path.name != "files.py"
                ):
                    found.append(f"{path.name}:{node.lineno} .{func.attr}")
    assert found == []
