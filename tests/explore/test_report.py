"""``kiln_np.report`` and ``kiln-np report``: the HTML itself (sections, the
counts it shows, escaping, no network reference, one inline script that the
page's policy names), bounded tables, crash-safe writing, never over an input.
The page in a real browser: tests/cli/test_report_browser.py."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import struct
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from _helpers import (
    gguf_bytes,
    gguf_kv,
    llama_safetensors,
    needs,
    quantized_gguf,
    run_command,
    run_main,
)

import kiln_np
from kiln_np._explore import page as page_module
from kiln_np._explore import report as report_module

VOID = {"meta", "img", "br", "hr", "input", "link", "col", "wbr", "source", "area", "base"}


class Page(HTMLParser):
    """The tags, attributes, ids and text of a page; unclosed or misnested
    elements are recorded in ``errors``."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.text: dict[str, str] = {}  # id -> its text
        self.scripts: list[str] = []
        self._open_ids: list[tuple[str, int]] = []
        self._chunks: list[str] = []
        self._in_script = False
        self.feed(page)
        self.close()
        if self.stack:
            self.errors.append(f"unclosed: {self.stack}")

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag in VOID:
            return
        self.stack.append(tag)
        ident = dict(attrs).get("id")
        if ident:
            self._open_ids.append((ident, len(self.stack)))
            self.text[ident] = ""
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
            return
        while self._open_ids and self._open_ids[-1][1] == len(self.stack):
            self._open_ids.pop()
        self.stack.pop()
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts.append(data)
        for ident, _ in self._open_ids:
            self.text[ident] += data


def _policy(page: str) -> str:
    found = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page)
    assert found is not None
    return found[1]


def check_self_contained(page: str) -> Page:
    """What every report must be: well nested, no network reference, one
    inline script, named by its hash in the page's policy."""
    parsed = Page(page)
    assert parsed.errors == []
    assert "http:" not in page
    assert "https:" not in page
    assert "<link" not in page.lower()
    assert "@import" not in page
    assert "url(" not in page
    for tag, attrs in parsed.tags:
        for name in ("src", "href", "action", "srcset", "poster", "data"):
            value = attrs.get(name)
            assert value is None or value.startswith(("data:image/png;base64,", "#")), (tag, name)
        assert not any(a.startswith("on") for a in attrs), (tag, attrs)  # no inline handlers
    assert [t for t, _ in parsed.tags].count("script") == 1
    assert [t for t, a in parsed.tags if t == "script" and a] == []  # no src, no type
    (script,) = parsed.scripts
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assert _policy(page).split("; ") == [
        "default-src 'none'",
        "img-src data:",
        "style-src 'unsafe-inline'",
        f"script-src 'sha256-{digest}'",
    ]
    return parsed


@pytest.fixture
def llama(tmp_path: Path) -> Path:
    return llama_safetensors(
        tmp_path / "llama.safetensors",
        metadata={"format": "pt", "note": "</style><script>alert(2)</script>"},
    )


def _write(source: Path | kiln_np.Weights, out: Path, **options: object) -> str:
    written = kiln_np.report(source, out, **options)  # type: ignore[arg-type]
    assert written == str(out)
    return out.read_text(encoding="utf-8")


def test_llama_report_shows_counts_sections_and_tree(llama: Path, tmp_path: Path) -> None:
    page = _write(llama, tmp_path / "r.html")
    parsed = check_self_contained(page)
    # 1 embedding + 3 layers x (7 matrices + 2 norms) + norm + lm_head.
    assert parsed.text["tensor-count"] == "30"
    elements = 2 * 320 * 64 + 3 * (4096 + 2048 + 2048 + 4096 + 3 * 8192 + 128) + 64
    assert parsed.text["parameter-count"] == f"{elements:,}" == "152,000"
    ids = [a.get("id") for t, a in parsed.tags if t == "section"]
    assert ids == [
        "summary", "metadata", "tree", "statistics", "heatmap", "histograms", "values",
    ]  # fmt: skip
    assert "<title>llama.safetensors - kiln-np report</title>" in page
    # The three layers are identical in shape and type: one folded row.
    tree = parsed.text["tree-table"]
    assert "0-2" in tree
    assert "x3, 9 tensors each" in tree
    assert "layers.0" not in tree
    # One stored type: its row reads BF16, 30 tensors, 152,000 parameters, 296.9 KiB.
    assert parsed.text["types"].endswith("BF1630152,000296.9 KiB16.00")
    assert '"pt"' in parsed.text["metadata-table"]


@needs("matplotlib")
def test_names_and_metadata_are_text_never_markup(tmp_path: Path) -> None:
    hostile = {
        "<script>alert(1)</script>": np.zeros(2, np.float32),
        "</style><img src=x onerror=alert(3)>": np.zeros(2, np.float32),
        "a\"b'c&d\x1be": np.zeros(2, np.float32),
    }
    path = tmp_path / "hostile.safetensors"
    kiln_np.save_weights(
        path, hostile, format="safetensors", metadata={"</style>": "<!-- -->]]></textarea>"}
    )
    page = _write(path, tmp_path / "r.html")
    parsed = check_self_contained(page)
    assert page.count("<script") == 1
    assert page.count("</script>") == 1
    assert page.count("</style>") == 1
    # The histograms by exponent and by value (no name has a layer index: no heatmap).
    assert page.count("<img") == page.count('<img src="data:image/png;base64,') == 2
    assert "<!--" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;/style&gt;&lt;img src=x onerror=alert(3)&gt;" in page
    assert "a&quot;b&#x27;c&amp;d\\x1be" in page
    tree = parsed.text["tree-table"]
    assert "<script>alert(1)</script>" in tree  # the reader sees the name as it is
    assert "</style>" in parsed.text["metadata-table"]


def test_a_name_that_is_not_utf8_is_written_as_its_escape(tmp_path: Path) -> None:
    raw = b"blk.\xff.w"
    info = struct.pack(f"<Q{len(raw)}sIQIQ", len(raw), raw, 1, 2, 0, 0)
    data = gguf_bytes([gguf_kv("general.name", 8, struct.pack("<Q", 3) + b"<b>")], [info])
    path = tmp_path / "bytes.gguf"
    path.write_bytes(data + bytes(8))
    page = _write(path, tmp_path / "r.html")
    check_self_contained(page)
    assert "\\udcff" in page
    assert "&lt;b&gt;" in page


def test_a_quantized_gguf_report(tmp_path: Path) -> None:
    path = quantized_gguf(tmp_path / "q.gguf")
    parsed = check_self_contained(_write(path, tmp_path / "r.html"))
    assert parsed.text["tensor-count"] == "5"
    assert parsed.text["parameter-count"] == f"{2 * (4096 + 64) + 64:,}"
    types = parsed.text["types"]
    assert "Q8_0" in types
    assert "F32" in types
    assert "8.50" in types  # Q8_0: 34 bytes a block of 32
    assert "general.architecture" in parsed.text["metadata-table"]
    assert "0-1" in parsed.text["tree-table"]


def test_include_and_exclude_choose_the_tensors(llama: Path, tmp_path: Path) -> None:
    page = _write(llama, tmp_path / "r.html", include=["model.layers.*"], exclude=["*layernorm*"])
    parsed = check_self_contained(page)
    assert parsed.text["tensor-count"] == "21"
    assert parsed.text["subtitle"].endswith(
        "21 of 30 tensors: include 'model.layers.*', exclude '*layernorm*'"
    )
    assert "layernorm" not in parsed.text["tree-table"]


def test_tables_are_bounded_and_say_what_they_leave_out(tmp_path: Path) -> None:
    tensors = {f"t{i:03d}": np.zeros(1, np.float32) for i in range(40)}
    path = tmp_path / "many.safetensors"
    metadata = {f"k{i}": "v" for i in range(12)}
    kiln_np.save_weights(path, tensors, format="safetensors", metadata=metadata)
    page = _write(path, tmp_path / "r.html", max_rows=10)
    parsed = check_self_contained(page)
    assert parsed.text["tensor-count"] == "40"
    assert parsed.text["tree-table"].count("[1] F32") == 10
    assert "The first 10 of 40 rows are shown (30 left out)" in page
    assert "The first 10 of 12 rows are shown (2 left out)" in page
    assert "t009" in page
    assert "t010" not in page


def test_the_report_is_written_whole_or_not_at_all(
    llama: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "r.html"
    out.write_text("old")

    def broken(*args: object, **kwargs: object) -> str:
        raise RuntimeError("stop")

    monkeypatch.setattr(report_module, "report_html", broken)
    with pytest.raises(RuntimeError, match="stop"):
        kiln_np.report(llama, out)
    assert out.read_text() == "old"
    assert sorted(os.listdir(tmp_path)) == ["llama.safetensors", "r.html"]


def test_never_over_a_file_of_the_checkpoint(llama: Path, tmp_path: Path) -> None:
    before = llama.read_bytes()
    link = tmp_path / "link.html"
    os.link(llama, link)
    for out in (llama, link):
        with pytest.raises(kiln_np.KilnError, match=r"it is the file .* of the checkpoint") as e:
            kiln_np.report(llama, out)
        assert e.value.kind == "TYPE"
    # A Kiln directory: each payload file is an input too.
    folder = tmp_path / "w"
    kiln_np.save_weights(folder, {"a": np.ones(2, np.float32)}, format="kiln")
    (payload,) = [p for p in folder.iterdir() if p.suffix == ".kiln"]
    with pytest.raises(kiln_np.KilnError, match="of the checkpoint"):
        kiln_np.report(folder, payload)
    assert llama.read_bytes() == before
    with pytest.raises(kiln_np.KilnError, match="expected a regular file, found a directory"):
        kiln_np.report(llama, tmp_path)  # a directory is not replaced
    for odd in (3, b"m.gguf", [llama]):  # neither a path nor a Weights: TYPE, as every door
        with pytest.raises(kiln_np.KilnError, match=r"expected a path or a kiln_np\.Weights") as e:
            kiln_np.report(odd, tmp_path / "r.html")  # type: ignore[arg-type]
        assert e.value.kind == "TYPE"
    for bad_out in (3, b"r.html", None):  # nor is the output anything but a path
        with pytest.raises(kiln_np.KilnError, match=r"expected a str or os\.PathLike path") as e:
            kiln_np.report(llama, bad_out)  # type: ignore[arg-type]
        assert e.value.kind == "TYPE"
    assert not (tmp_path / "r.html").exists()


def test_an_opened_weights_stays_open(llama: Path, tmp_path: Path) -> None:
    with kiln_np.open_weights(llama) as w:
        page = _write(w, tmp_path / "r.html")
        assert float(np.asarray(w["model.norm.weight"]).astype(np.float32)[0]) == 1.0
    assert 'id="tensor-count">30<' in page


def test_the_report_is_the_same_every_time(llama: Path, tmp_path: Path) -> None:
    assert _write(llama, tmp_path / "a.html") == _write(llama, tmp_path / "b.html")


@needs("matplotlib")
def test_command_line_report(
    llama: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.html"
    status, stdout, stderr = run_main(capsys, "report", str(llama), "-o", str(out))
    assert (status, stderr) == (0, "")
    assert stdout.startswith(f"{out}: report of 30 tensors, ")
    assert stdout.endswith(" KiB\n")
    check_self_contained(out.read_text(encoding="utf-8"))
    status, stdout, _ = run_main(
        capsys, "report", str(llama), "-o", str(out), "--include", "lm_head*"
    )
    assert status == 0
    assert "report of 1 tensor," in stdout
    assert 'id="tensor-count">1<' in out.read_text(encoding="utf-8")


@needs("matplotlib")
def test_command_line_errors(
    llama: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, stderr = run_main(capsys, "report", str(llama), "-o", str(llama))
    assert status == 2
    assert stderr.startswith("kiln-np: FILE: cannot write")
    assert "it is the input file" in stderr
    status, _, stderr = run_main(capsys, "report", str(llama))
    assert status == 2
    assert "-o/--output" in stderr
    with pytest.raises(kiln_np.KilnError, match="expected a tensor selected by --include 'x'"):
        run_command("report", str(llama), "-o", str(tmp_path / "r.html"), "--include", "x")
    assert not (tmp_path / "r.html").exists()
    status, _, stderr = run_main(
        capsys, "report", str(llama), "-o", str(tmp_path / "no" / "r.html")
    )
    assert status == 2
    assert stderr.startswith("kiln-np: FILE: cannot write")


def test_without_matplotlib_the_page_says_so(
    llama: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    assert page_module.matplotlib_missing()
    out = tmp_path / "r.html"
    status, _, stderr = run_main(capsys, "report", str(llama), "-o", str(out))
    assert status == 0
    assert "the report leaves its pictures out: they need matplotlib" in stderr
    page = out.read_text(encoding="utf-8")
    check_self_contained(page)
    assert "<img" not in page
    for section in ("heatmap", "histograms", "values"):
        found = re.search(f'<section id="{section}">(.*?)</section>', page)
        assert found is not None
        assert "The pictures need matplotlib, which is not installed" in found[1]
    assert 'id="stats"' in page  # the statistics need no matplotlib


def _section(page: str, ident: str) -> str:
    found = re.search(f'<section id="{ident}">(.*?)</section>', page, re.S)
    assert found is not None, ident
    return found[1]


def _pngs(part: str) -> list[tuple[int, int, int, int]]:
    """(width, height) of each inline PNG as its tag says and as its data says."""
    found = []
    for data, width, height in re.findall(
        r'<img src="data:image/png;base64,([^"]+)" alt="[^"]*" width="(\d+)" height="(\d+)">',
        part,
    ):
        raw = base64.b64decode(data)
        assert raw[:8] == b"\x89PNG\r\n\x1a\n"
        w, h = struct.unpack(">II", raw[16:24])  # IHDR
        found.append((int(width), int(height), w, h))
    return found


@needs("matplotlib")
def test_statistics_heatmap_and_histograms(llama: Path, tmp_path: Path) -> None:
    page = _write(llama, tmp_path / "r.html")
    parsed = check_self_contained(page)
    stats = _section(page, "statistics")
    assert stats.count("<tr>") == 1 + 30
    assert "30 tensors. min, max, absmax" in stats
    assert 'class="bad"' not in stats
    heads = re.findall(r"<th[^>]*>([^<]*)</th>", stats)
    assert heads == [
        "name", "type", "count", "min", "max", "mean", "std", "absmax", "zeros",
        "NaN", "+inf", "-inf", "scales",
    ]  # fmt: skip
    numeric = re.findall(r"<th (data-numeric|class=\"text\")>", stats)
    assert numeric == ['class="text"'] * 2 + ["data-numeric"] * 10 + ['class="text"']
    # Each picture is as wide and tall as its tag says, in pixels.
    heatmaps = _pngs(_section(page, "heatmap"))
    assert len(heatmaps) == 2
    histograms = _pngs(_section(page, "histograms"))
    assert len(histograms) == 1
    for width, height, w, h in heatmaps + histograms:
        assert (width, height) == (w, h)
        assert w > 300
        assert h > 150
    values = _pngs(_section(page, "values"))
    assert len(values) == 1
    # Outside the layers: embedding, norm, lm_head; then layer 0's nine tensors.
    which = "The 3 tensors outside the layers and the 9 of layer 0 of model.layers: 12 of 12"
    assert f"{which}, counted exactly." in _section(page, "histograms")
    assert f"{which}. Each one's finite values in 64 equal bins" in _section(page, "values")
    assert parsed.text["subtitle"].startswith("safetensors - ")


@needs("matplotlib")
def test_nan_and_infinities_are_flagged(tmp_path: Path) -> None:
    x = np.array([1, np.nan, np.inf, -np.inf, np.nan], np.float32)
    path = tmp_path / "bad.safetensors"
    kiln_np.save_weights(
        path, {"blk.0.w": x, "blk.1.w": np.ones(5, np.float32)}, format="safetensors"
    )
    page = _write(path, tmp_path / "r.html")
    check_self_contained(page)
    stats = _section(page, "statistics")
    assert "2 tensors; 2 NaN and 2 infinite elements." in stats
    assert re.findall(r'<td data-v="(\d+)" class="bad">', stats) == ["2", "1", "1"]
    # Each has std 0 (one finite value; ones): nothing for a log scale, said; absmax 1.
    heatmap = _section(page, "heatmap")
    assert len(_pngs(heatmap)) == 1
    assert "No std is positive and finite: nothing to draw on a log scale." in heatmap


@needs("matplotlib")
def test_the_statistics_table_is_bounded(tmp_path: Path) -> None:
    tensors = {f"t{i:03d}": np.zeros(1, np.float32) for i in range(40)}
    path = tmp_path / "many.safetensors"
    kiln_np.save_weights(path, tensors, format="safetensors")
    page = _write(path, tmp_path / "r.html", max_rows=10, histograms=3)
    stats = _section(page, "statistics")
    assert stats.count("<tr>") == 1 + 10
    assert (
        "The first 10 of 40 tensors are shown (30 left out; every row: kiln-np stats PATH "
        "--json)." in stats
    )
    assert "No tensor name has a layer index" in _section(page, "heatmap")
    which = "The 40 tensors outside the layers: 3 of 40 (37 more left out)"
    assert f"{which}, counted exactly." in _section(page, "histograms")
    assert f"{which}. Each one" in _section(page, "values")


def test_a_quantized_tensor_has_its_scales(tmp_path: Path) -> None:
    page = _write(quantized_gguf(tmp_path / "q.gguf"), tmp_path / "r.html")
    stats = _section(page, "statistics")
    row = re.search(
        r'<tr><td class="name">blk\.<wbr>0\.<wbr>attn_q\.<wbr>weight</td>(.*?)</tr>', stats
    )
    assert row is not None
    assert "Q8_0" in row[1]
    assert ">d " in row[1]  # the range of the blocks' scale d
    assert len(_pngs(_section(page, "heatmap"))) == 2


def _hf_folder(tmp_path: Path) -> Path:
    """A sharded llama-like checkpoint directory with its config.json and
    generation_config.json (a hostile value in each)."""
    folder = tmp_path / "tiny-llama"
    model = llama_safetensors(tmp_path / "one.safetensors", layers=4)
    with kiln_np.open_weights(model) as w:
        kiln_np.save_weights(folder, w, format="safetensors", max_shard_size=100_000)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "num_hidden_layers": 4,
        "rope_scaling": None,
        "rms_norm_eps": 1e-05,
        "note": "</td><script>alert(4)</script>",
    }
    (folder / "config.json").write_text(json.dumps(config))
    generation = {"bos_token_id": 1, "eos_token_id": [2, 3], "x": "<b>"}
    (folder / "generation_config.json").write_text(json.dumps(generation))
    return folder


def test_a_checkpoint_directory_is_titled_with_its_model_and_shows_its_config(
    tmp_path: Path,
) -> None:
    # Issue 37 items 1 and 3: the title is the model, never model.safetensors.index.json;
    # the config has its own section; the tree's caption names this model's fold.
    folder = _hf_folder(tmp_path)
    page = _write(folder, tmp_path / "r.html")
    parsed = check_self_contained(page)
    assert "<title>tiny-llama: LlamaForCausalLM (llama) - kiln-np report</title>" in page
    assert "index.json -" not in page.split("</title>")[0]
    ids = [a.get("id") for t, a in parsed.tags if t == "section"]
    assert ids[:4] == ["summary", "metadata", "config", "tree"]
    assert '<a href="#config">Model config</a>' in page
    config = parsed.text["config-table"]
    assert "LlamaForCausalLM" in config
    assert "nullnull" in config.replace(" ", "")  # rope_scaling: type null, value null
    assert "</td><script>alert(4)</script>" in config  # text, never markup
    assert "&lt;/td&gt;&lt;script&gt;alert(4)" in page
    assert "&quot;&lt;b&gt;&quot;" in page  # generation_config.json's hostile value, escaped
    generation = parsed.text["generation-config-table"]
    assert "eos_token_id" in generation
    assert "2 items: 2, 3" in generation
    section = _section(page, "config")
    assert f"{folder / 'config.json'}: 6 keys" in section
    assert f"{folder / 'generation_config.json'}: 3 keys" in section
    assert "here model.layers.0-3, x4" in _section(page, "tree")
    assert "(0-31)" not in page
    # Never over the files that describe the model, which it reads.
    for name in ("config.json", "generation_config.json"):
        with pytest.raises(kiln_np.KilnError, match="of the checkpoint being reported"):
            kiln_np.report(folder, folder / name)


def test_without_a_config_there_is_no_config_section_and_the_tree_says_why(
    tmp_path: Path,
) -> None:
    path = tmp_path / "m.safetensors"
    kiln_np.save_weights(
        path, {"blk.0.a": np.ones(2, np.float32), "blk.1.b": np.ones(3, np.float32)},
        format="safetensors",
    )  # fmt: skip
    page = _write(path, tmp_path / "r.html")
    assert 'id="config"' not in page
    assert "no consecutive layers are identical here, so none fold" in _section(page, "tree")
    stats = _section(page, "statistics")
    assert "2 tensors. min, max" in stats
    assert "GGML" not in stats  # no quantized tensor: nothing said of them


def test_a_gguf_report_is_titled_with_its_name_and_shows_its_file_type(tmp_path: Path) -> None:
    path = quantized_gguf(tmp_path / "q.gguf", name="Tiny Llama", file_type=7)
    page = _write(path, tmp_path / "r.html")
    parsed = check_self_contained(page)
    assert "<title>Tiny Llama: llama - kiln-np report</title>" in page
    assert parsed.text["file-type"] == "Q8_0"
    assert "general.file_type 7" in _section(page, "summary")
    assert "7 (Q8_0)" in parsed.text["metadata-table"]
    assert 'id="config"' not in page
    stats = _section(page, "statistics")
    assert "A GGML quantized tensor or a quantization scheme" in stats
    one = _section(_write(quantized_gguf(tmp_path / "p.gguf"), tmp_path / "p.html"), "summary")
    assert 'id="file-type"' not in one  # a file that says no file type: no such fact
