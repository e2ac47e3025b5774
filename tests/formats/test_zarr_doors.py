"""zarr-python's own doors on arrays kiln_np wrote, in a process that never names
kiln_np (issue 37): ``zarr.open_array(path)`` and ``zarr.open(path)`` as well as
``zarr.open_group(path)[name]``.

zarr-python 3.1.0-3.4.0 never loads ``zarr.data_type`` entry points; the startup
hook ``kiln_np-zarr.pth`` (``_kiln_np_zarr_hook``) registers kiln_np's types once
zarr is imported.  Each child process here starts with ``-S`` (no site-packages
processing, so no installed ``.pth`` of any package runs) and this process's
``sys.path``: the same kiln_np, zarr and distribution metadata (entry points).
"With the hook", its code begins with the ``.pth`` file's one line, as ``site``
runs it at every interpreter start of an install; without it, the direct doors
fail on those zarr-python versions, which shows the test can fail.
"""

from __future__ import annotations

import doctest
import json
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from _helpers import needs

import _kiln_np_zarr_hook
import kiln_np
from _kiln_np_zarr_hook import needs_registering

pytestmark = needs("zarr")

PTH = Path(_kiln_np_zarr_hook.__file__).with_name("kiln_np-zarr.pth")
"""Beside the hook: src/ in a source tree, site-packages in an install."""

_CHILD = """\
{startup}
import json, sys
started = sorted(m for m in sys.modules if m.split('.')[0] in ('kiln_np', 'numpy', 'zarr'))
import zarr
imported = sorted(m for m in sys.modules if m.split('.')[0] in ('kiln_np', 'ml_dtypes'))
path, names = sys.argv[1], json.loads(sys.argv[2])
doors = {{
    'open_array': lambda name: zarr.open_array(path + '/' + name, mode='r'),
    'open': lambda name: zarr.open(path + '/' + name, mode='r'),
    'open_group': lambda name: zarr.open_group(path, mode='r')[name],
}}
found = {{}}
for door, open_ in doors.items():  # the direct doors first: the group door loads a plugin
    try:
        arrays = {{n: open_(n)[...] for n in names}}
        found[door] = {{n: [str(a.dtype), a.tobytes().hex()] for n, a in arrays.items()}}
    except ValueError as exc:
        found[door] = str(exc)
hooks = [type(f).__name__ for f in sys.meta_path if type(f).__name__ == '_AfterZarr']
result = {{'started': started, 'imported': imported, 'hooks': hooks, 'found': found}}
print(json.dumps(dict(result, zarr=zarr.__version__)))
"""


def _startup_line() -> str:
    """The line ``site`` executes of ``kiln_np-zarr.pth``: its one import."""
    lines = [line for line in PTH.read_text().splitlines() if line.startswith("import ")]
    assert lines == ["import _kiln_np_zarr_hook; _kiln_np_zarr_hook.install()"]
    return lines[0]


def _run(path: Path, names: list[str], *, hook: bool) -> dict[str, object]:
    code = _CHILD.format(startup=_startup_line() if hook else "")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    done = subprocess.run(
        [sys.executable, "-S", "-c", code, str(path), json.dumps(names)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=path.parent,
        timeout=300,
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    path = tmp_path_factory.mktemp("doors") / "g.zarr"
    tensors = {
        "bf16": np.array([[1.5, -0.0], [np.inf, 3.0]], ml_dtypes.bfloat16),
        "fp8": np.array([448.0, -2.0, 0.0], ml_dtypes.float8_e4m3fn),
        "u4": np.array([1, 15, 0], ml_dtypes.uint4),
        "f32": np.array([1.0, -2.0], np.float32),
    }
    kiln_np.save_weights(path, tensors, format="zarr")
    return path, tensors


def test_the_direct_doors_read_what_kiln_np_wrote(
    group: tuple[Path, dict[str, np.ndarray]],
) -> None:
    path, tensors = group
    result = _run(path, list(tensors), hook=True)
    assert result["started"] == []  # the startup line imports no kiln_np, numpy or zarr
    assert result["imported"] == []  # nor does import zarr: the first lookup does
    assert result["hooks"] == []  # it left the import system once zarr was imported
    expected = {name: [a.dtype.name, a.tobytes().hex()] for name, a in tensors.items()}
    assert result["found"] == dict.fromkeys(("open_array", "open", "open_group"), expected)


def test_without_the_hook_only_the_group_door_reads_on_those_versions(
    group: tuple[Path, dict[str, np.ndarray]],
) -> None:
    path, tensors = group
    result = _run(path, list(tensors), hook=False)
    found = result["found"]
    assert isinstance(found, dict)
    expected = {name: [a.dtype.name, a.tobytes().hex()] for name, a in tensors.items()}
    assert found["open_group"] == expected  # the zarr.buffer entry point's door
    if needs_registering(str(result["zarr"])):
        missing = "No Zarr data type found that matches 'bfloat16'"
        assert found["open_array"] == found["open"] == missing
    else:  # zarr-python 3.4.1 and newer load the zarr.data_type entry points
        assert found["open_array"] == found["open"] == expected


def test_the_hook_module_examples() -> None:
    failed, attempted = doctest.testmod(_kiln_np_zarr_hook, optionflags=doctest.ELLIPSIS)
    assert (failed, attempted) == (0, 1)
