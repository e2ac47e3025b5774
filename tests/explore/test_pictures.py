"""Pictures of a checkpoint: names read as (stack, layer, role), the per-layer
heatmap (its image data, its log scale, its labels inside the picture), the
histogram grid and ``kiln_np.plot_histograms`` on safetensors and GGUF files."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np
import pytest
from _helpers import available, load_script, needs, optional

import kiln_np
from kiln_np import KilnError
from kiln_np._explore import heatmap_figure, histogram_grid, layer_grid, layer_role

if TYPE_CHECKING:
    import matplotlib
    import matplotlib.colors
    import matplotlib.text
    from matplotlib.figure import Figure
else:
    matplotlib = optional("matplotlib", "colors", "text")

if available("matplotlib"):
    matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _close_figures() -> Any:
    yield
    if available("matplotlib"):  # the tests of names and folds draw nothing
        import matplotlib.pyplot as plt

        plt.close("all")


# -- names ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # Hugging Face llama
        ("model.layers.10.self_attn.q_proj.weight", ("model.layers", 10, "self_attn.q_proj")),
        ("model.layers.0.input_layernorm.weight", ("model.layers", 0, "input_layernorm")),
        # GGUF
        ("blk.3.ffn_down.weight", ("blk", 3, "ffn_down")),
        ("blk.31.attn_q.bias", ("blk", 31, "attn_q.bias")),
        ("blk.0.ffn_down_exps.weight", ("blk", 0, "ffn_down_exps")),
        # GPT-2: the bias is its own role, only a trailing .weight is dropped
        ("transformer.h.0.attn.c_attn.weight", ("transformer.h", 0, "attn.c_attn")),
        ("transformer.h.0.attn.c_attn.bias", ("transformer.h", 0, "attn.c_attn.bias")),
        ("transformer.h.11.ln_1.weight", ("transformer.h", 11, "ln_1")),
        # BERT
        (
            "encoder.layer.2.attention.self.query.weight",
            ("encoder.layer", 2, "attention.self.query"),
        ),
        (
            "bert.encoder.layer.7.output.LayerNorm.bias",
            ("bert.encoder.layer", 7, "output.LayerNorm.bias"),
        ),
        # mixture of experts: the expert index folds into '*'
        (
            "model.layers.3.mlp.experts.7.down_proj.weight",
            ("model.layers", 3, "mlp.experts.*.down_proj"),
        ),
        (
            "model.layers.3.block_sparse_moe.experts.127.w1.weight",
            ("model.layers", 3, "block_sparse_moe.experts.*.w1"),
        ),
        # a vision tower and a text model: two stacks
        (
            "vision_tower.vision_model.encoder.layers.4.mlp.fc1.weight",
            ("vision_tower.vision_model.encoder.layers", 4, "mlp.fc1"),
        ),
        (
            "language_model.model.layers.4.mlp.up_proj.weight",
            ("language_model.model.layers", 4, "mlp.up_proj"),
        ),
        # a name that is only .weight after the layer keeps it; one ending at the layer
        ("layers.5.weight", ("layers", 5, "weight")),
        ("h.2", ("h", 2, "(layer)")),
        # no layer index
        ("model.embed_tokens.weight", None),
        ("lm_head.weight", None),
        ("token_embd.weight", None),
        ("conv1.weight", None),  # digits inside a component are no layer index
        ("model.layers.x٣.weight", None),  # nor are non-ASCII digits
    ],
)  # fmt: skip
def test_layer_role_reads_every_naming_family(
    name: str, expected: tuple[str, int, str] | None
) -> None:
    assert layer_role(name) == expected


def test_layer_grid_sorts_layers_as_numbers_and_keeps_roles_in_first_seen_order() -> None:
    names = [
        "model.embed_tokens.weight",
        "model.layers.10.mlp.up.weight",
        "model.layers.2.attn.q.weight",
        "model.layers.9.mlp.up.weight",
        "model.layers.2.mlp.up.weight",
    ]
    grids = layer_grid(names, [9.0, 1.0, 2.0, 3.0, 4.0])
    assert list(grids) == ["model.layers"]
    grid = grids["model.layers"]
    assert grid.layers == (2, 9, 10)
    assert grid.roles == ("mlp.up", "attn.q")
    assert grid.values.filled(0).tolist() == [[4.0, 2.0], [3.0, 0.0], [1.0, 0.0]]
    assert grid.values.mask.tolist() == [[False, False], [False, True], [False, True]]
    assert grid.counts.tolist() == [[1, 1], [1, 0], [1, 0]]


def test_layer_grid_masks_none_nan_and_with_positive_zero_and_negative() -> None:
    names = [f"blk.{i}.w.weight" for i in range(5)]
    values = [None, float("nan"), 0.0, -1.0, float("inf")]
    assert np.ma.getmaskarray(layer_grid(names, values)["blk"].values)[:, 0].tolist() == [
        True,
        True,
        False,
        False,
        True,
    ]
    assert layer_grid(names, values, positive=True)["blk"].values.mask.all()


@needs("matplotlib")
def test_layer_grid_folds_experts_into_their_largest_value() -> None:
    names = [
        f"model.layers.{layer}.mlp.experts.{e}.down.weight" for layer in (0, 1) for e in range(128)
    ]
    values: list[float | None] = [float(e) for e in range(128)] + [None] * 127 + [0.5]
    values[5] = float("nan")  # one expert with no value: the others still count
    grid = layer_grid(names, values)["model.layers"]
    assert grid.roles == ("mlp.experts.*.down",)
    assert grid.values.tolist() == [[127.0], [0.5]]
    assert grid.counts.tolist() == [[128], [128]]
    assert grid.folded() == [128]


def test_layer_grid_gives_one_grid_per_stack_in_first_seen_order() -> None:
    names = [
        "language_model.model.layers.0.mlp.up_proj.weight",
        "vision_tower.encoder.layers.0.mlp.fc1.weight",
        "vision_tower.encoder.layers.1.mlp.fc1.weight",
        "language_model.model.layers.1.mlp.up_proj.weight",
    ]
    grids = layer_grid(names, [1.0, 2.0, 3.0, 4.0])
    assert list(grids) == ["language_model.model.layers", "vision_tower.encoder.layers"]
    assert grids["vision_tower.encoder.layers"].values.tolist() == [[2.0], [3.0]]
    assert grids["language_model.model.layers"].roles == ("mlp.up_proj",)


@needs("matplotlib")
def test_layer_grid_refuses_unaligned_values() -> None:
    with pytest.raises(KilnError, match="one value per tensor name, found 2 names and 1 values"):
        layer_grid(["blk.0.a", "blk.1.a"], [1.0])


# -- the heatmap -------------------------------------------------------------------------------


def texts_outside(fig: Figure) -> list[str]:
    """The visible, non-empty texts of ``fig`` that stick out of the saved picture."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    box = fig.bbox
    # Tick labels of ticks outside an axis's view are kept but not drawn.
    undrawn = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
                if (
                    not low - 1e-9 * abs(high - low)
                    <= tick.get_loc()
                    <= high + 1e-9 * abs(high - low)
                ):
                    undrawn |= {id(tick.label1), id(tick.label2)}
    out = []
    for text in fig.findobj(matplotlib.text.Text):
        assert isinstance(text, matplotlib.text.Text)
        if not text.get_visible() or not text.get_text() or id(text) in undrawn:
            continue
        extent = text.get_window_extent(renderer)
        if (
            extent.x0 < box.x0 - 1
            or extent.y0 < box.y0 - 1
            or extent.x1 > box.x1 + 1
            or extent.y1 > box.y1 + 1
        ):
            out.append(text.get_text())
    return out


def image_data(ax: Any) -> np.ma.MaskedArray:
    """The values the heatmap panel ``ax`` shows."""
    data = ax.images[0].get_array()
    assert isinstance(data, np.ma.MaskedArray)
    return data


def big_checkpoint() -> tuple[list[str], list[float | None]]:
    """80 layers of 30 roles with long names; some cells missing, zero or NaN."""
    rng = np.random.default_rng(4)
    roles = [f"block_sparse_mixture_component_{i:02d}.projection_matrix_part" for i in range(30)]
    names = [
        f"model.language_model.layers.{layer}.{r}.weight" for layer in range(80) for r in roles
    ]
    values: list[float | None] = [float(v) for v in rng.lognormal(-3, 1, len(names))]
    values[0] = 0.0  # layer 0, role 0
    values[31] = None  # layer 1, role 1
    values[62] = float("nan")  # layer 2, role 2
    del names[93], values[93]  # layer 3, role 3: no tensor
    return names, values


@needs("matplotlib")
def test_heatmap_image_is_the_grid_with_blank_cells_on_a_log_scale() -> None:
    names, values = big_checkpoint()
    fig = heatmap_figure(names, values, label="std (log scale)")
    ax, bar = fig.axes
    data = image_data(ax)
    assert data.shape == (80, 30)
    masked = [(int(r), int(c)) for r, c in zip(*np.nonzero(np.ma.getmaskarray(data)), strict=True)]
    assert masked == [(0, 0), (1, 1), (2, 2), (3, 3)]
    expected = np.array([v if v is not None else 0.0 for v in values[:93]] + [0.0] + values[93:])
    assert data.filled(0).ravel().tolist() == np.where(np.isnan(expected), 0.0, expected).tolist()
    norm = ax.images[0].norm
    assert isinstance(norm, matplotlib.colors.LogNorm)
    positive = [v for v in values if v is not None and v > 0]
    assert (norm.vmin, norm.vmax) == (min(positive), max(positive))
    assert bar.get_ylabel() == "std (log scale)"
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == (
        "role",
        "layer",
        "model.language_model.layers",
    )
    assert fig.get_suptitle() == "std (log scale) by layer and role"
    assert "blank: no tensor, or a value that is zero, negative, NaN or infinite" in (
        fig.get_supxlabel()
    )


@needs("matplotlib")
def test_heatmap_labels_stay_inside_the_picture_and_layer_ticks_thin_out() -> None:
    names, values = big_checkpoint()
    fig = heatmap_figure(names, values, label="absmax (log scale)", title="absmax")
    assert texts_outside(fig) == []
    ax = fig.axes[0]
    layer_labels = [t.get_text() for t in ax.get_yticklabels()]
    assert layer_labels == [str(n) for n in range(0, 80, 4)]  # 20 labels, not 80
    roles = [t.get_text() for t in ax.get_xticklabels()]
    assert len(roles) == 30
    assert all(len(r) == 40 for r in roles)  # long roles shortened in the middle
    assert roles[7] == "block_sparse_mixture…jection_matrix_part"
    assert {t.get_rotation() for t in ax.get_xticklabels()} == {90.0}


@needs("matplotlib")
def test_heatmap_folds_experts_and_says_so() -> None:
    names = [
        f"model.layers.{layer}.mlp.experts.{e}.down_proj.weight"
        for layer in range(2)
        for e in range(128)
    ]
    names += ["model.layers.0.self_attn.q_proj.weight", "model.layers.1.self_attn.q_proj.weight"]
    values = [1.0 + e for _ in range(2) for e in range(128)] + [0.5, 0.25]
    fig = heatmap_figure(names, values, label="std")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        "mlp.experts.*.down_proj (max of 128)",
        "self_attn.q_proj",
    ]
    assert image_data(ax).tolist() == [[128.0, 0.5], [128.0, 0.25]]
    # Issue 37: the caption says what this picture shows; no cell is blank here.
    assert fig.get_supxlabel().splitlines() == [
        "(max of n): the largest of n tensors folded into one role",
    ]
    assert texts_outside(fig) == []


@needs("matplotlib")
def test_heatmap_caption_says_only_what_the_picture_shows() -> None:
    names = [f"blk.{i}.{r}.weight" for i in range(2) for r in ("attn_q", "ffn_up")]
    full = heatmap_figure(names, [1.0, 2.0, 3.0, 4.0], label="std")
    assert full.get_supxlabel() == ""  # no blank cell, nothing folded
    blank = heatmap_figure(names, [1.0, 2.0, 0.0, 4.0], label="std")
    assert blank.get_supxlabel() == (
        "blank: no tensor, or a value that is zero, negative, NaN or infinite"
    )


@needs("matplotlib")
def test_heatmap_draws_each_stack_on_one_colour_scale_or_the_stack_asked_for() -> None:
    names = [
        "vision.layers.0.fc.weight",
        "vision.layers.1.fc.weight",
        "text.layers.0.up.weight",
        "text.layers.0.down.weight",
    ]
    fig = heatmap_figure(names, [1.0, 2.0, 0.1, 0.2], label="std")
    vision, text, bar = fig.axes
    assert (vision.get_title(), text.get_title(), bar.get_ylabel()) == (
        "vision.layers",
        "text.layers",
        "std",
    )
    assert vision.images[0].norm is text.images[0].norm
    assert (vision.images[0].norm.vmin, vision.images[0].norm.vmax) == (0.1, 2.0)
    assert image_data(text).tolist() == [[0.1, 0.2]]
    assert texts_outside(fig) == []
    only = heatmap_figure(names, [1.0, 2.0, 0.1, 0.2], label="std", stack="text.layers")
    assert [ax.get_title() for ax in only.axes] == ["text.layers", ""]
    with pytest.raises(
        KilnError,
        match=r"stack of layers among the names \('vision.layers', 'text.layers'\), found 'nope'",
    ):
        heatmap_figure(names, [1.0, 2.0, 0.1, 0.2], label="std", stack="nope")


@needs("matplotlib")
def test_heatmap_of_nothing_positive_says_so_in_its_panel() -> None:
    fig = heatmap_figure(["blk.0.a.weight", "blk.1.a.weight"], [0.0, None], label="std")
    (ax,) = fig.axes
    assert len(ax.images) == 0
    assert [t.get_text() for t in ax.texts] == ["nothing to draw on a log scale: no positive value"]
    fig = heatmap_figure(["embed.weight"], [1.0], label="std", title="t")
    assert [t.get_text() for t in fig.axes[0].texts] == [
        "nothing to draw on a log scale: no tensor name with a layer index"
    ]
    assert fig.get_suptitle() == "t"
    fig = heatmap_figure(["a.0.w", "b.0.w"], [0.5, 0.0], label="std")  # stack b: no panel
    assert [ax.get_title() for ax in fig.axes] == ["a", ""]


@needs("matplotlib")
def test_heatmap_of_one_value_still_has_a_colour_range() -> None:
    fig = heatmap_figure(["blk.0.a.weight"], [0.5], label="std")
    norm = fig.axes[0].images[0].norm
    assert (norm.vmin, norm.vmax) == (0.25, 1.0)
    fig.canvas.draw()


@needs("matplotlib")
@pytest.mark.parametrize("suffix", ["png", "svg"])
def test_pictures_save_as_png_and_svg(tmp_path: Path, suffix: str) -> None:
    names, values = big_checkpoint()
    path = tmp_path / f"heatmap.{suffix}"
    heatmap_figure(names, values, label="std (log scale)").savefig(path)
    head = path.read_bytes()[:64]
    assert head.startswith(b"\x89PNG") if suffix == "png" else b"<?xml" in head
    items = [("w", kiln_np.describe(np.arange(8, dtype=np.float32)))]
    grid = tmp_path / f"grid.{suffix}"
    histogram_grid(items).savefig(grid)
    assert grid.stat().st_size > 1000


# -- histograms ------------------------------------------------------------------------------


@needs("matplotlib")
def test_histogram_grid_draws_one_titled_panel_per_tensor() -> None:
    rng = np.random.default_rng(1)
    long_name = "model.language_model.layers.12.self_attn.q_proj.weight"
    q8 = kiln_np.gguf.quantize(rng.standard_normal((2, 32)).astype(np.float32), "q8_0")
    items = [
        (long_name, kiln_np.describe(rng.standard_normal((4, 8)).astype(ml_dtypes.bfloat16))),
        ("fp8", kiln_np.describe(rng.standard_normal(64).astype(ml_dtypes.float8_e4m3fn))),
        ("ids", kiln_np.describe(np.arange(6, dtype=np.int32))),
        ("q", kiln_np.describe(q8)),
        ("fp4", kiln_np.describe(np.array([0.5, -6.0], ml_dtypes.float4_e2m1fn))),
    ]
    fig = histogram_grid(items, columns=2, log=False)
    axes = fig.axes
    assert [ax.get_title() for ax in axes] == [
        "…model.layers.12.self_attn.q_proj.weight\nbf16, 4x8",
        "fp8\nf8e4m3, 64",
        "ids\ni32, 6",
        "q\nQ8_0, 2x32",
        "fp4\ne2m1, 2",
    ]
    specs = [ax.get_subplotspec() for ax in axes]
    assert [s.get_geometry()[:2] for s in specs if s is not None] == [(3, 2)] * 5
    assert [len(ax.patches) > 0 for ax in axes] == [True, True, False, True, True]
    assert [t.get_text() for t in axes[2].texts] == [
        "i32: no histogram (32- and 64-bit integers have none)"
    ]
    assert axes[0].get_yscale() == "linear"
    assert len(axes[1].get_xticklabels()) <= 8  # 16 pattern labels thinned for a small panel
    assert texts_outside(fig) == []


@needs("matplotlib")
def test_histogram_grid_keeps_the_exponent_ends_when_thinning() -> None:
    values = np.concatenate([2.0 ** np.arange(-30, 30), [0.0, np.inf]]).astype(np.float32)
    fig = histogram_grid([("w", kiln_np.describe(values))])
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert len(labels) <= 10
    assert labels[0] == "$2^{-30}$"
    assert labels[-2:] == ["0/sub", "inf/nan"]
    assert fig.axes[0].get_yscale() == "log"


@needs("matplotlib")
def test_histogram_grid_of_nothing_and_bad_columns() -> None:
    fig = histogram_grid([])
    assert [t.get_text() for t in fig.axes[0].texts] == ["no tensors to draw"]
    with pytest.raises(KilnError, match="expected columns to be an integer >= 1, found 0"):
        histogram_grid([], columns=0)


@needs("matplotlib")
def test_plot_histograms_on_safetensors_in_file_order_with_the_limit_noted(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    tensors: dict[str, np.ndarray] = {
        f"model.layers.{i}.mlp.up.weight": np.full((4, 4), i + 1, np.float16) for i in range(6)
    }
    tensors["model.norm.weight"] = np.ones(4, np.float32)
    kiln_np.save_weights(path, tensors, format="safetensors")
    with kiln_np.open_weights(path) as w:
        fig = kiln_np.plot_histograms(w, "*.mlp.*", limit=4)
        assert fig.get_suptitle() == "*.mlp.*: 4 of 6 tensors (2 more left out: limit=4)"
        titles = [ax.get_title().split("\n")[0] for ax in fig.axes]
        assert titles == list(w.select("*.mlp.*"))[:4]
        assert fig.axes[0].get_yscale() == "log"
        every = kiln_np.plot_histograms(w, exclude="*.up.*", limit=None, log=False)
        assert every.get_suptitle() == "m.safetensors: 1 of 1 tensors"
        assert [ax.get_title() for ax in every.axes] == ["model.norm.weight\nf32, 4"]
        assert every.axes[0].get_yscale() == "linear"
        with pytest.raises(KilnError, match="expected limit to be an integer >= 1, found 0"):
            kiln_np.plot_histograms(w, limit=0)
        with pytest.raises(KilnError, match="expected str patterns"):
            kiln_np.plot_histograms(w, 3)  # type: ignore[arg-type]
    with pytest.raises(KilnError, match="plot_histograms: expected Weights, found dict"):
        kiln_np.plot_histograms(tensors)  # type: ignore[arg-type]


@needs("matplotlib")
def test_plot_histograms_on_a_quantized_gguf(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    floats = rng.standard_normal((4, 256)).astype(np.float32)
    path = tmp_path / "m.gguf"
    kiln_np.save_weights(
        path,
        {
            "blk.0.attn_q.weight": kiln_np.gguf.quantize(floats, "q4_k"),
            "blk.0.ffn_down.weight": kiln_np.gguf.quantize(floats, "q8_0"),
            "blk.0.attn_norm.weight": floats[0],
        },
        format="gguf",
    )
    with kiln_np.open_weights(path) as w:
        fig = kiln_np.plot_histograms(w, "blk.0.*", exclude="*norm*", limit=1)
        assert fig.get_suptitle() == "blk.0.*: 1 of 2 tensors (1 more left out: limit=1)"
        (ax,) = fig.axes
        assert ax.get_title() == "blk.0.attn_q.weight\nQ4_K, 4x256"
        expected = kiln_np.describe(w["blk.0.attn_q.weight"])
        assert isinstance(expected, kiln_np.QuantizedDescription)
        assert expected.values.exponents is not None
        bars = [round(p.get_height()) for p in ax.patches]  # type: ignore[attr-defined]
        assert sorted(b for b in bars if b) == sorted(
            int(c) for c in expected.values.exponents if c
        )
    out = tmp_path / "q.png"
    fig.savefig(out)
    assert out.stat().st_size > 1000


@needs("matplotlib")
def test_the_docs_picture_script_runs(tmp_path: Path) -> None:
    script = load_script(ROOT / "docs" / "images" / "make_pictures.py")
    written = script.main(tmp_path)
    assert [p.name for p in written] == ["heatmap.png", "histograms.png", "values.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in written)


@needs("matplotlib")
def test_the_inside_check_finds_a_label_outside() -> None:
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(3, 2))
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.text(0.5, 0.5, "in here", transform=ax.transAxes)
    ax.text(1.5, 0.5, "out here", transform=ax.transAxes)
    assert texts_outside(fig) == ["out here"]


@needs("matplotlib")
def test_hostile_names_are_drawn_as_their_escapes(tmp_path: Path) -> None:
    """A name with bytes that are not UTF-8 (a lone surrogate) or a control
    character: matplotlib cannot draw them (TypeError, a missing-glyph warning,
    which the suite's filterwarnings=error fails on); the pictures show escapes."""
    bad = ["blk.0.\udcff.weight", "blk.0.a\x1bb.weight", "blk.1.\udcff.weight"]
    fig = heatmap_figure(bad, [1.0, 2.0, 3.0], label="std")
    fig.savefig(tmp_path / "h.png")
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels == ["\\udcff", "a\\x1bb"]
    d = kiln_np.describe(np.ones(4, np.float32))
    grid = histogram_grid([(bad[0], d), (bad[1], d)])
    grid.savefig(tmp_path / "g.png")
    assert [ax.get_title().split("\n")[0] for ax in grid.axes] == [
        "blk.0.\\udcff.weight",
        "blk.0.a\\x1bb.weight",
    ]
