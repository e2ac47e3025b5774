"""``kiln-np report`` in a real browser: headless Chromium (Debian's
``chromium`` and ``chromium-driver``) through selenium.

The page loads from ``file://`` with no console error (a blocked script or
request, a script error), is titled with the model, shows the tensor count and
parameter total, the model's config and llama.cpp's file type, its pictures
(heatmaps, histograms by exponent and by value) have a size, and clicking a
column header sorts the rows: numbers as numbers, both ways, empty and NaN cells
last.

Without Chromium or selenium the tests skip on a developer's machine and fail
in CI (the ``CI`` variable set), where ``.ci/run`` installs Chromium and the
``test`` extra selenium.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import ml_dtypes
import numpy as np
import pytest
from _helpers import llama_safetensors, quantized_gguf, run_command

import kiln_np

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1600",
)


def _missing(what: str) -> NoReturn:
    if os.environ.get("KILN_NP_REQUIRE_BROWSER"):
        # .ci/run sets it where the test extra is installed: there the browser test
        # must run (its runtime-only venv, with no selenium, unsets it).
        pytest.fail(f"{what}: CI must run the browser test (.ci/run installs it)")
    pytest.skip(f"{what}: apt-get install chromium chromium-driver; pip install -e '.[test]'")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One headless Chromium for the module, with a fresh profile and the
    browser's console log kept."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        _missing("chromium or chromedriver is not installed")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing("selenium is not installed")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    chrome = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    try:
        yield chrome
    finally:
        chrome.quit()


def _open(browser: Any, page: Path) -> list[dict[str, Any]]:
    """Load ``page``; the console's SEVERE entries while it loaded."""
    browser.get_log("browser")  # what came before
    browser.get(page.resolve().as_uri())
    assert browser.execute_script("return document.readyState") == "complete"
    log: list[dict[str, Any]] = browser.get_log("browser")
    return [entry for entry in log if entry["level"] == "SEVERE"]


def _text(browser: Any, ident: str) -> str:
    value: str = browser.execute_script(f"return document.getElementById('{ident}').textContent")
    return value


def _column(browser: Any, table: str, column: int) -> list[str]:
    cells: list[str] = browser.execute_script(
        "return Array.from(document.getElementById(arguments[0]).tBodies[0].rows,"
        " r => r.cells[arguments[1]].textContent)",
        table,
        column,
    )
    return cells


def _click(browser: Any, table: str, column: int) -> str:
    """Click a header cell; its ``aria-sort`` after."""
    from selenium.webdriver.common.by import By

    th = browser.find_elements(By.CSS_SELECTOR, f"#{table} thead th")[column]
    th.click()
    sort: str = th.get_attribute("aria-sort")
    return sort


def _pictures_have_a_size(browser: Any) -> int:
    """Every ``img`` and ``svg`` is decoded and laid out with a nonzero size;
    how many there are."""
    sizes: list[list[float]] = browser.execute_script(
        "return Array.from(document.querySelectorAll('img, svg'), e => {"
        " const r = e.getBoundingClientRect();"
        " return [r.width, r.height, e.naturalWidth === undefined ? 1 : e.naturalWidth]; })"
    )
    assert all(w > 0 and h > 0 and natural > 0 for w, h, natural in sizes), sizes
    return len(sizes)


def test_llama_report_loads_cleanly_and_shows_its_counts(browser: Any, tmp_path: Path) -> None:
    model = llama_safetensors(tmp_path / "llama.safetensors", metadata={"format": "pt"})
    page = tmp_path / "report.html"
    run_command("report", str(model), "-o", str(page))
    assert _open(browser, page) == []
    assert _text(browser, "tensor-count") == "30"
    assert _text(browser, "parameter-count") == "152,000"
    assert browser.title == "llama.safetensors - kiln-np report"
    # The script ran (the page's policy let it): every sortable header takes focus.
    assert browser.execute_script(
        "return Array.from(document.querySelectorAll('table.sortable th'), th => th.tabIndex)"
    ) == [0] * (5 + 13)  # the table by type, the statistics
    # Two heatmaps (std, absmax), the histograms by exponent and by value.
    assert _pictures_have_a_size(browser) == 4


def _shown(browser: Any, ident: str) -> bool:
    """Whether the element is laid out with a size (displayed, not hidden)."""
    size: list[float] = browser.execute_script(
        "const r = document.getElementById(arguments[0]).getBoundingClientRect();"
        " return [r.width, r.height];",
        ident,
    )
    return size[0] > 0 and size[1] > 0


def test_a_checkpoint_directory_shows_its_model_config_and_values(
    browser: Any, tmp_path: Path
) -> None:
    # Issue 37: the title is the model, its config has a section, values beside exponents.
    folder = tmp_path / "tiny-llama"
    model = llama_safetensors(tmp_path / "one.safetensors", layers=4)
    with kiln_np.open_weights(model) as w:
        kiln_np.save_weights(folder, w, format="safetensors", max_shard_size=100_000)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "x": "<i>"}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 3]}))
    page = tmp_path / "report.html"
    run_command("report", str(folder), "-o", str(page))
    assert _open(browser, page) == []
    assert browser.title == "tiny-llama: LlamaForCausalLM (llama) - kiln-np report"
    assert _text(browser, "tensor-count") == "39"
    for ident in ("config", "config-table", "generation-config-table", "values"):
        assert _shown(browser, ident), ident
    assert '"<i>"' in _text(browser, "config-table")  # the hostile value is text
    assert browser.execute_script("return document.querySelectorAll('i').length") == 0
    links = browser.execute_script(
        "return Array.from(document.querySelectorAll('nav a'), a => a.textContent)"
    )
    assert links == [
        "Summary", "Metadata", "Model config", "Tensor tree", "Statistics", "Heatmap",
        "Histograms", "Value histograms",
    ]  # fmt: skip
    assert "here model.layers.0-3, x4" in _text(browser, "tree")
    values = browser.execute_script(
        "return Array.from(document.querySelectorAll('#values img'), i => i.alt)"
    )
    assert values == ["value histograms of 12 tensors"]
    assert _pictures_have_a_size(browser) == 4


def test_quantized_gguf_report_loads_cleanly(browser: Any, tmp_path: Path) -> None:
    model = quantized_gguf(tmp_path / "q.gguf", name="Tiny Llama", file_type=7)
    page = tmp_path / "report.html"
    run_command("report", str(model), "-o", str(page))
    assert _open(browser, page) == []
    assert browser.title == "Tiny Llama: llama - kiln-np report"
    assert _text(browser, "file-type") == "Q8_0"
    assert _text(browser, "tensor-count") == "5"
    assert _text(browser, "parameter-count") == "8,384"
    assert "Q8_0" in _text(browser, "types")


def test_a_hostile_name_runs_nothing(browser: Any, tmp_path: Path) -> None:
    path = tmp_path / "hostile.safetensors"
    names = ["<script>document.title='owned'</script>", "</style><img src=x onerror=alert(1)>"]
    kiln_np.save_weights(path, {n: np.zeros(2, np.float32) for n in names}, format="safetensors")
    page = tmp_path / "report.html"
    kiln_np.report(path, page)
    assert _open(browser, page) == []
    assert browser.title == "hostile.safetensors - kiln-np report"
    # The pictures are the report's own histograms (no name has a layer index).
    sources = browser.execute_script("return Array.from(document.images, i => i.src)")
    assert [src[:22] for src in sources] == ["data:image/png;base64,"] * 2
    tree = _text(browser, "tree-table")
    assert all(name in tree for name in names)


def test_clicking_a_header_sorts_numbers_as_numbers(browser: Any, tmp_path: Path) -> None:
    # Types with 2, 10 and 1 tensors (lexicographic order would be 1, 10, 2) and
    # one type of no elements, whose bits/weight is "-".
    tensors: dict[str, np.ndarray] = {}
    for dtype, count in ((np.float32, 2), (np.float16, 10), (ml_dtypes.bfloat16, 1)):
        for i in range(count):
            tensors[f"{np.dtype(dtype).name}.{i}"] = np.zeros(3, dtype)
    tensors["empty"] = np.zeros(0, np.int8)
    path = tmp_path / "types.safetensors"
    kiln_np.save_weights(path, tensors, format="safetensors")
    page = tmp_path / "report.html"
    kiln_np.report(path, page)
    assert _open(browser, page) == []
    assert _column(browser, "types", 0) == ["F16", "F32", "BF16", "I8"]  # by bytes, as built
    assert _click(browser, "types", 1) == "ascending"
    assert _column(browser, "types", 1) == ["1", "1", "2", "10"]
    assert _column(browser, "types", 0) == ["BF16", "I8", "F32", "F16"]  # ties keep their order
    assert _click(browser, "types", 1) == "descending"
    assert _column(browser, "types", 1) == ["10", "2", "1", "1"]
    # bits/weight: I8 has none ("-"), last both ways.
    assert _click(browser, "types", 4) == "ascending"
    assert _column(browser, "types", 4) == ["16.00", "16.00", "32.00", "-"]
    assert _click(browser, "types", 4) == "descending"
    assert _column(browser, "types", 4) == ["32.00", "16.00", "16.00", "-"]
    # Clicking another header starts it ascending and clears the first one's mark.
    assert _click(browser, "types", 0) == "ascending"
    assert _column(browser, "types", 0) == ["BF16", "F16", "F32", "I8"]
    marks = browser.execute_script(
        "return Array.from(document.querySelectorAll('#types th'), th => th.ariaSort)"
    )
    assert marks == ["ascending", None, None, None, None]
    assert browser.get_log("browser") == []


def test_the_statistics_table_sorts(browser: Any, tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    tensors = {
        "blk.9.a": rng.standard_normal(9).astype(np.float32),  # std about 1
        "blk.9.b": (rng.standard_normal(100) * 10).astype(np.float32),  # about 10
        "blk.9.c": np.full(10, np.nan, np.float32),  # no finite value: std "-"
        "blk.10.a": np.zeros(10, np.float32),  # std 0
    }
    path = tmp_path / "stats.safetensors"
    kiln_np.save_weights(path, tensors, format="safetensors")
    page = tmp_path / "report.html"
    kiln_np.report(path, page)
    assert _open(browser, page) == []
    names = ["blk.9.a", "blk.9.b", "blk.9.c", "blk.10.a"]
    assert _column(browser, "stats", 0) == names
    # count: 9 < 10 < 100 as numbers (as text "10" < "100" < "9"); ties keep file order.
    assert _click(browser, "stats", 2) == "ascending"
    assert _column(browser, "stats", 2) == ["9", "10", "10", "100"]
    assert _column(browser, "stats", 0) == ["blk.9.a", "blk.9.c", "blk.10.a", "blk.9.b"]
    assert _click(browser, "stats", 2) == "descending"
    assert _column(browser, "stats", 2) == ["100", "10", "10", "9"]
    # std: the tensor with none ("-") last both ways.
    assert _click(browser, "stats", 6) == "ascending"
    assert _column(browser, "stats", 0) == ["blk.10.a", "blk.9.a", "blk.9.b", "blk.9.c"]
    assert _column(browser, "stats", 6)[3] == "-"
    assert _click(browser, "stats", 6) == "descending"
    assert _column(browser, "stats", 0) == ["blk.9.b", "blk.9.a", "blk.10.a", "blk.9.c"]
    # NaN counts: 10 first when descending.
    assert _click(browser, "stats", 9) == "ascending"
    assert _click(browser, "stats", 9) == "descending"
    assert _column(browser, "stats", 9) == ["10", "0", "0", "0"]
    # Names: layer indices as numbers, blk.9 before blk.10.
    assert _click(browser, "stats", 0) == "ascending"
    assert _column(browser, "stats", 0) == names
    assert _click(browser, "stats", 0) == "descending"
    assert _column(browser, "stats", 0) == names[::-1]
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
