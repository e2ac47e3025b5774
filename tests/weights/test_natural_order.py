"""The one natural name order (``kiln_np._weights.summary.natural_key``) that
``kiln-np ls``/``stats``, ``describe(weights, sort=...)`` and the summary's name
tree share, and :func:`ordered`."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kiln_np import KilnError
from kiln_np._weights.summary import ORDERS, natural_key, ordered, summarize


@given(st.lists(st.integers(0, 10**60), max_size=30))
def test_digit_runs_compare_as_numbers(layers: list[int]) -> None:
    names = [f"model.layers.{n}.mlp.weight" for n in layers]
    by_number = [f"model.layers.{n}.mlp.weight" for n in sorted(layers)]
    assert sorted(names, key=natural_key) == by_number


@given(st.lists(st.text(alphabet="ab.019_", max_size=12), unique=True, max_size=20))
def test_a_total_order_whatever_the_input_order(names: list[str]) -> None:
    """Distinct names never tie (``l.01`` and ``l.1`` fall back to the name), so
    the order does not depend on the order given."""
    shuffled = names[:]
    random.Random(len(names)).shuffle(shuffled)
    assert sorted(shuffled, key=natural_key) == sorted(names, key=natural_key)
    assert len({natural_key(n) for n in names}) == len(names)


def test_a_layers_tensors_stand_together() -> None:
    names = [
        "blk.10.attn_q.weight",
        "blk.2.ffn_up.weight",
        "output.weight",
        "blk.2.attn_q.weight",
        "blk.1.attn_q.weight",
        "blk.10.ffn_up.weight",
        "blk.02.x",
        "token_embd.weight",
    ]
    assert sorted(names, key=natural_key) == [
        "blk.1.attn_q.weight",
        "blk.2.attn_q.weight",
        "blk.2.ffn_up.weight",
        "blk.02.x",
        "blk.10.attn_q.weight",
        "blk.10.ffn_up.weight",
        "output.weight",
        "token_embd.weight",
    ]


def test_a_run_longer_than_python_converts_is_still_a_number() -> None:
    """Python refuses int() of more than 4300 digits: a hostile name's run is
    compared without one."""
    huge = "9" * 5000
    names = [f"l.{huge}.w", "l.10.w", f"l.1{huge}.w", "l.2.w", f"l.000{huge}.w"]
    assert sorted(names, key=natural_key) == [
        "l.2.w",
        "l.10.w",
        f"l.000{huge}.w",
        f"l.{huge}.w",
        f"l.1{huge}.w",
    ]


def test_the_tree_of_a_hostile_layer_index() -> None:
    """The summary's tree orders its numeric parts by the same key: a 5000-digit
    layer index is a row of its own, after the small ones, not a ValueError."""
    huge = "1" * 5000
    tensors = [
        SimpleNamespace(name=f"l.{n}.w", shape=(4,), byte_length=8, format_dtype="F16")
        for n in (huge, "3", "2", "10")
    ]
    tree = summarize(tensors, format="x", path="x").tree
    assert [r.name for r in tree] == ["l", "2-3", "w", "10.w", f"{huge}.w"]


def _listed(*rows: tuple[str, int, str]) -> list[SimpleNamespace]:
    return [SimpleNamespace(name=n, byte_length=b, format_dtype=d) for n, b, d in rows]


def test_ordered_ties_go_in_natural_name_order() -> None:
    ts = _listed(("b.10", 4, "Q8_0"), ("b.9", 4, "Q4_K"), ("a", 2, "Q4_K"), ("b.2", 8, "F16"))
    assert [t.name for t in ordered(ts, "size")] == ["b.2", "b.9", "b.10", "a"]
    assert [t.name for t in ordered(ts, "type")] == ["b.2", "a", "b.9", "b.10"]
    assert [t.name for t in ordered(ts, "name")] == ["a", "b.2", "b.9", "b.10"]
    assert [t.name for t in ordered(iter(ts), "file")] == ["b.10", "b.9", "a", "b.2"]


@pytest.mark.parametrize("sort", ["", "Name", "bytes", None, 3, ("name",)])
def test_ordered_refuses_other_orders(sort: object) -> None:
    with pytest.raises(KilnError, match=f"expected sort= among {', '.join(ORDERS)}") as info:
        ordered([], sort)  # type: ignore[arg-type]
    assert info.value.kind == "SHAPE"
