"""Tensor names read as (stack, layer, role): the grid a per-layer heatmap draws.

A transformer checkpoint repeats one block of tensors per layer, and every
family spells it ``<stack>.<layer index>.<role>``: ``model.layers.10.self_attn.q_proj.weight``
(Hugging Face llama), ``blk.3.ffn_down.weight`` (GGUF), ``transformer.h.0.attn.c_attn.weight``
(GPT-2), ``encoder.layer.2.attention.self.query.weight`` (BERT).  :func:`layer_role`
splits a name at its first all-digit component: the components before it are the
stack, the number is the layer, the rest is the role with a trailing ``.weight``
dropped (``.bias`` and every other suffix are kept, so a bias is its own role).

Mixture-of-experts checkpoints number their experts inside the layer
(``model.layers.3.mlp.experts.7.down_proj.weight``).  A role keeps no second
number: each later all-digit component becomes ``*`` (``mlp.experts.*.down_proj``),
so 128 experts make one column of a heatmap, not 128.  :func:`layer_grid` folds
the tensors that share a cell into their maximum (the std or absmax of the worst
expert) and counts them.

A checkpoint may hold several stacks (a vision tower and a text model, an encoder
and a decoder): :func:`layer_grid` returns one :class:`LayerGrid` per stack, in the
order the stacks first appear.  Pure: no matplotlib here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kiln_np._core.errors import KilnError

__all__ = ["LayerGrid", "layer_grid", "layer_role"]


def layer_role(name: str) -> tuple[str, int, str] | None:
    """The (stack, layer index, role) of a tensor name, or None when it has no
    layer index.

    Examples
    --------
    >>> layer_role("model.layers.10.self_attn.q_proj.weight")
    ('model.layers', 10, 'self_attn.q_proj')
    >>> layer_role("blk.3.ffn_down.weight"), layer_role("blk.3.attn_q.bias")
    (('blk', 3, 'ffn_down'), ('blk', 3, 'attn_q.bias'))
    >>> layer_role("model.layers.3.mlp.experts.7.down_proj.weight")
    ('model.layers', 3, 'mlp.experts.*.down_proj')
    >>> layer_role("model.embed_tokens.weight") is None
    True
    >>> layer_role("h." + "9" * 5000 + ".w") is None
    True
    """
    parts = name.split(".")
    # A layer index is a run of at most 18 digits (an int64); a longer run (a
    # hostile name: Python refuses int() of over 4300 digits) is no index.
    at = next(
        (
            i
            for i, part in enumerate(parts)
            if part.isascii() and part.isdigit() and len(part) <= 18
        ),
        None,
    )
    if at is None:
        return None
    rest = parts[at + 1 :]
    if len(rest) > 1 and rest[-1] == "weight":
        rest = rest[:-1]
    role = ".".join("*" if part.isascii() and part.isdigit() else part for part in rest)
    return ".".join(parts[:at]), int(parts[at]), role or "(layer)"


@dataclass(frozen=True, eq=False)
class LayerGrid:
    """One stack's values by layer (rows) and role (columns).

    Attributes
    ----------
    stack : str
        The names' common prefix before the layer index (``'model.layers'``).
    layers : tuple of int
        The layer indices that occur, sorted as numbers (9 before 10).
    roles : tuple of str
        The roles, in the order they first occur in the names.
    values : numpy.ma.MaskedArray
        float64, shape ``(len(layers), len(roles))``: the cell's value, the
        largest when several tensors fold into it (the experts of a
        mixture-of-experts layer); masked where no tensor has a finite value
        (none at all, ``None`` or NaN), and where ``positive`` was asked and no
        value is above zero.
    counts : numpy.ndarray
        int64, the same shape: how many tensors fell into each cell (values or
        not).
    """

    stack: str
    layers: tuple[int, ...]
    roles: tuple[str, ...]
    values: np.ma.MaskedArray
    counts: np.ndarray

    def folded(self) -> list[int]:
        """The most tensors one cell of each role holds (1 for a plain role, the
        number of experts for ``mlp.experts.*.down_proj``).

        >>> grid = layer_grid(["h.0.a.weight", "h.0.e.0.w", "h.0.e.1.w"], [1.0, 2.0, 3.0])
        >>> grid["h"].roles, grid["h"].folded()
        (('a', 'e.*.w'), [1, 2])
        """
        return [int(n) for n in self.counts.max(axis=0, initial=0).tolist()]


def layer_grid(
    names: Sequence[str], values: Sequence[float | None], *, positive: bool = False
) -> dict[str, LayerGrid]:
    """One :class:`LayerGrid` per stack of layers among ``names``, in the order
    the stacks first occur; names with no layer index are left out.

    Parameters
    ----------
    names : sequence of str
        Tensor names.
    values : sequence of float or None
        One value per name (its std, its absmax, ...); ``None`` for none.
    positive : bool
        Also leave out values that are not above zero (a log scale has no
        place for them).

    Raises
    ------
    KilnError
        SHAPE when ``names`` and ``values`` differ in length.

    Examples
    --------
    >>> names = ["blk.10.attn_q.weight", "blk.9.attn_q.weight", "blk.9.ffn_up.weight"]
    >>> grid = layer_grid(names, [0.5, 0.25, None])["blk"]
    >>> grid.layers, grid.roles
    ((9, 10), ('attn_q', 'ffn_up'))
    >>> grid.values.filled(-1).tolist()
    [[0.25, -1.0], [0.5, -1.0]]
    """
    if len(names) != len(values):
        raise KilnError(
            "SHAPE",
            f"expected one value per tensor name, found {len(names)} names and "
            f"{len(values)} values",
        )
    # stack -> role -> layer -> (largest value or None, tensors)
    cells: dict[str, dict[str, dict[int, tuple[float | None, int]]]] = {}
    for name, value in zip(names, values, strict=True):
        where = layer_role(name)
        if where is None:
            continue
        stack, layer, role = where
        kept = None if value is None else float(value)
        if kept is not None and (not math.isfinite(kept) or (positive and kept <= 0)):
            kept = None
        by_layer = cells.setdefault(stack, {}).setdefault(role, {})
        best, count = by_layer.get(layer, (None, 0))
        if kept is not None and (best is None or kept > best):
            best = kept
        by_layer[layer] = (best, count + 1)
    grids: dict[str, LayerGrid] = {}
    for stack, roles in cells.items():
        layers = sorted({layer for by_layer in roles.values() for layer in by_layer})
        row = {layer: i for i, layer in enumerate(layers)}
        data = np.zeros((len(layers), len(roles)))
        mask = np.ones(data.shape, dtype=bool)
        counts = np.zeros(data.shape, dtype=np.int64)
        for column, by_layer in enumerate(roles.values()):
            for layer, (best, count) in by_layer.items():
                counts[row[layer], column] = count
                if best is not None:
                    data[row[layer], column] = best
                    mask[row[layer], column] = False
        grids[stack] = LayerGrid(
            stack, tuple(layers), tuple(roles), np.ma.MaskedArray(data, mask), counts
        )
    return grids
