"""Shared test configuration: hypothesis profiles, the kernels' thread ranges, and
the remote tests' servers on the loopback (``http``: the byte-range HTTP server of
a test's ``tmp_path``; ``s3``: moto's S3 server, as the ``storage_options`` that
reach it).

``ci`` (the default) is derandomized so CI runs are repeatable; ``dev`` explores
more examples.  Choose with ``HYPOTHESIS_PROFILE=dev``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _helpers import OPTIONAL, available, skip_reason
from _remote_server import RangeServer, moto_s3, serving
from hypothesis import HealthCheck, settings

from kiln_np._kernels import nibbles as _nibbles
from kiln_np._kernels import pool as _pool

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile("dev", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    """Thread ranges from 8 lanes on chunks and compiled granules of 4 lanes, the
    numpy unpack's gather below 2 lanes: every range boundary within a few bytes."""
    monkeypatch.setattr(_nibbles, "SMALL_LANES", 2)
    for name, value in [
        ("CHUNK_LANES", 4),
        ("THREAD_MIN_LANES", 8),
        ("COMPILED_GRANULE", 4),
        ("COMPILED_THREAD_MIN_LANES", 8),
    ]:
        monkeypatch.setattr(_pool, name, value)


@pytest.fixture(params=[1, 2, 3, 5], ids=lambda k: f"{k}threads")
def threads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """The test runs with each of these thread counts."""
    k: int = request.param
    monkeypatch.setattr(_pool, "_threads", lambda: k)
    return k


# `>>> import a, b as c` or `>>> from a.b import c` (or after `...`): the modules named
_DOCTEST_IMPORT = re.compile(r"^\s*(?:>>>|\.\.\.)\s+(?:import\s+([^#;\n]+)|from\s+([\w.]+))", re.M)


def _doctest_imports(text: str) -> set[str]:
    """The top-level packages a page's examples import."""
    found = set()
    for listed, source in _DOCTEST_IMPORT.findall(text):
        for name in [source] if source else listed.split(","):
            found.add(name.split()[0].partition(".")[0])
    return found


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A Markdown page's doctests (``--doctest-glob=*.md`` over docs/ and README.md)
    run as one item: where the page imports an optional package that is missing, the
    item skips, naming it, instead of failing on the import."""
    for item in items:
        path = Path(str(item.path))
        if path.suffix != ".md":  # a page of docs/ or README.md: its doctests
            continue
        wanted = _doctest_imports(path.read_text())
        missing = sorted(m for m in wanted & OPTIONAL.keys() if not available(m))
        if missing:
            why = "; ".join(skip_reason(m) for m in missing)
            item.add_marker(pytest.mark.skip(reason=f"{path.name}: {why}"))


@pytest.fixture
def http(tmp_path: Path) -> Iterator[RangeServer]:
    with serving(tmp_path) as server:
        yield server


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    with moto_s3(monkeypatch) as endpoint:
        yield {"endpoint_url": endpoint, "key": "testing", "secret": "testing"}
