"""The 12 models of llama.cpp's ``tests/test-quant-type-selection.cpp``, as that
test sees them: architecture, the metadata the mixes read, and every matrix
tensor (name, shape).

The C++ test reads each model's GGUF header from Hugging Face
(``gguf_fetch_model_meta``); this machine has no network, so the inventories are
written here from each model's published configuration (hidden size, heads,
head size, feed-forward and expert sizes, vocabulary, which layers are dense,
linear-attention or Mamba) and the tensors llama.cpp's loader creates for its
architecture (``src/models/*.cpp``).  The numbers in each snapshot's header
(``# n_embd=..., n_layer=...``) agree with them, and
``tests/quants/test_mix_snapshots.py`` checks that every tensor a snapshot
names is here.  Tensors the snapshots cannot show (a 3-D expert tensor whose
rows are whole blocks keeps the default type in every section) follow the same
configuration.  Shapes are in numpy order (GGUF's ``ne`` reversed), 1-D tensors
left out: the C++ test drops every tensor ``tensor_allows_quantization`` refuses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

Ne = tuple[int, ...]  # GGML order: ne[0] (a row's length) first


@dataclass(frozen=True)
class SnapshotModel:
    schema: str  # the file name under tests/fixtures/llama_quant
    architecture: str
    n_layer: int
    n_head: int
    n_head_kv: int | list[int]
    n_expert: int
    layer: Callable[[int], Iterator[tuple[str, Ne]]]  # a block's matrices
    top: list[tuple[str, Ne]] = field(default_factory=list)  # token_embd, output

    @property
    def metadata(self) -> dict[str, object]:
        a = self.architecture
        meta: dict[str, object] = {
            "general.architecture": a,
            f"{a}.block_count": self.n_layer,
            f"{a}.attention.head_count": self.n_head,
            f"{a}.attention.head_count_kv": self.n_head_kv,
        }
        if self.n_expert:
            meta[f"{a}.expert_count"] = self.n_expert
        return meta

    def tensors(self) -> list[tuple[str, tuple[int, ...]]]:
        """Every matrix, ``(name, numpy shape)``, in no particular order."""
        found = [(name, ne[::-1]) for name, ne in self.top]
        for il in range(self.n_layer):
            found += [(f"blk.{il}.{name}", ne[::-1]) for name, ne in self.layer(il)]
        return found


def _attention(e: int, heads: int, kv: int, hd: int, q_gate: int = 1) -> Iterator[tuple[str, Ne]]:
    yield "attn_q.weight", (e, q_gate * heads * hd)
    yield "attn_k.weight", (e, kv * hd)
    yield "attn_v.weight", (e, kv * hd)
    yield "attn_output.weight", (heads * hd, e)


def _dense(e: int, ff: int, gate: bool = True) -> Iterator[tuple[str, Ne]]:
    if gate:
        yield "ffn_gate.weight", (e, ff)
    yield "ffn_up.weight", (e, ff)
    yield "ffn_down.weight", (ff, e)


def _experts(
    e: int, ff: int, n: int, shared_ff: int = 0, gate: bool = True
) -> Iterator[tuple[str, Ne]]:
    yield "ffn_gate_inp.weight", (e, n)
    if gate:
        yield "ffn_gate_exps.weight", (e, ff, n)
    yield "ffn_up_exps.weight", (e, ff, n)
    yield "ffn_down_exps.weight", (ff, e, n)
    if shared_ff:
        if gate:
            yield "ffn_gate_shexp.weight", (e, shared_ff)
        yield "ffn_up_shexp.weight", (e, shared_ff)
        yield "ffn_down_shexp.weight", (shared_ff, e)


def _vocab(e: int, n_vocab: int, tied: bool = False) -> list[tuple[str, Ne]]:
    names = ["token_embd.weight"] + ([] if tied else ["output.weight"])
    return [(name, (e, n_vocab)) for name in names]


def _llama_like(e: int, ff: int, heads: int, kv: int) -> Callable[[int], Iterator[tuple[str, Ne]]]:
    def layer(il: int) -> Iterator[tuple[str, Ne]]:
        yield from _attention(e, heads, kv, 128)
        yield from _dense(e, ff)

    return layer


def _gated_delta_net(
    e: int, k_heads: int, v_heads: int, split_ba: bool
) -> Iterator[tuple[str, Ne]]:
    """Qwen3-Next and Qwen3.5's linear-attention block (head size 128)."""
    key, value = k_heads * 128, v_heads * 128
    yield "attn_qkv.weight", (e, 2 * key + value)
    yield "attn_gate.weight", (e, value)
    if split_ba:
        yield "ssm_alpha.weight", (e, v_heads)
        yield "ssm_beta.weight", (e, v_heads)
    else:
        yield "ssm_ba.weight", (e, 2 * v_heads)
    yield "ssm_out.weight", (value, e)


def _qwen_hybrid(
    e: int,
    heads: int,
    kv: int,
    k_heads: int,
    v_heads: int,
    split_ba: bool,
    ffn: Callable[[], Iterator[tuple[str, Ne]]],
) -> Callable[[int], Iterator[tuple[str, Ne]]]:
    """Every fourth block full attention (query and its gate, head size 256)."""

    def layer(il: int) -> Iterator[tuple[str, Ne]]:
        if il % 4 == 3:
            yield from _attention(e, heads, kv, 256, q_gate=2)
        else:
            yield from _gated_delta_net(e, k_heads, v_heads, split_ba)
        yield from ffn()

    return layer


def _gemma3(il: int) -> Iterator[tuple[str, Ne]]:
    yield from _attention(2560, 8, 4, 256)
    yield from _dense(2560, 10240)


def _glm46v(il: int) -> Iterator[tuple[str, Ne]]:
    yield from _attention(4096, 96, 8, 128)
    if il < 1:  # first_k_dense_replace = 1
        yield from _dense(4096, 10944)
    else:
        yield from _experts(4096, 1408, 128, shared_ff=1408)


def _gpt_oss(il: int) -> Iterator[tuple[str, Ne]]:
    yield from _attention(2880, 64, 8, 64)
    yield from _experts(2880, 2880, 128)


_NEMOTRON_PATTERN = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
"""Nemotron-3-Nano-30B-A3B's ``hybrid_override_pattern``: Mamba-2, MoE, attention."""


def _nemotron(il: int) -> Iterator[tuple[str, Ne]]:
    kind, e = _NEMOTRON_PATTERN[il], 2688
    if kind == "M":  # 64 heads of 64, 8 groups of state 128
        yield "ssm_in.weight", (e, 2 * 4096 + 2 * 8 * 128 + 64)
        yield "ssm_out.weight", (4096, e)
    elif kind == "*":
        yield from _attention(e, 32, 2, 128)
    else:  # relu^2 experts: no gate
        yield from _experts(e, 1856, 128, shared_ff=3712, gate=False)


def _step35(il: int) -> Iterator[tuple[str, Ne]]:
    yield from _attention(4096, 64, 8, 128)
    yield "attn_gate.weight", (4096, 64)  # a gate per head
    if il < 3:
        yield from _dense(4096, 11264)
    else:
        yield from _experts(4096, 1280, 288, shared_ff=1280)


def _deepseek_v3(il: int) -> Iterator[tuple[str, Ne]]:
    """Multi-head latent attention with attn_kv_b split into k_b and v_b (per head)."""
    e, heads = 7168, 128
    yield "attn_q_a.weight", (e, 1536)
    yield "attn_q_b.weight", (1536, heads * (128 + 64))
    yield "attn_kv_a_mqa.weight", (e, 512 + 64)
    yield "attn_k_b.weight", (128, 512, heads)
    yield "attn_v_b.weight", (512, 128, heads)
    yield "attn_output.weight", (heads * 128, e)
    if il < 3:
        yield from _dense(e, 18432)
    else:
        yield from _experts(e, 2048, 256, shared_ff=2048)


MODELS: tuple[SnapshotModel, ...] = (
    SnapshotModel(
        "qwen3-0.6b", "qwen3", 28, 16, 8, 0, _llama_like(1024, 3072, 16, 8), _vocab(1024, 151936)
    ),
    SnapshotModel("glm-4.6v", "glm4moe", 46, 96, 8, 128, _glm46v, _vocab(4096, 151552)),
    SnapshotModel("step-3.5-flash", "step35", 45, 64, 8, 288, _step35, _vocab(4096, 128896)),
    SnapshotModel(
        "qwen3-coder-next",
        "qwen3next",
        48,
        16,
        2,
        512,
        _qwen_hybrid(2048, 16, 2, 16, 32, False, lambda: _experts(2048, 512, 512, 512)),
        _vocab(2048, 151936),
    ),
    SnapshotModel(
        "qwen3-14b", "qwen3", 40, 40, 8, 0, _llama_like(5120, 17408, 40, 8), _vocab(5120, 151936)
    ),
    SnapshotModel(
        "nvidia-nemotron-3-nano-30b-a3b",
        "nemotron_h_moe",
        52,
        32,
        [2 if kind == "*" else 0 for kind in _NEMOTRON_PATTERN],
        128,
        _nemotron,
        _vocab(2688, 131072),
    ),
    SnapshotModel("gpt-oss-120b", "gpt-oss", 36, 64, 8, 128, _gpt_oss, _vocab(2880, 201088)),
    SnapshotModel("gemma-3-4b-it", "gemma3", 34, 8, 4, 0, _gemma3, _vocab(2560, 262144, tied=True)),
    SnapshotModel(
        "meta-llama-3.1-70b-instruct",
        "llama",
        80,
        64,
        8,
        0,
        _llama_like(8192, 28672, 64, 8),
        _vocab(8192, 128256),
    ),
    SnapshotModel(
        "deepseek-v3.1", "deepseek2", 61, 128, 1, 256, _deepseek_v3, _vocab(7168, 129280)
    ),
    SnapshotModel(
        "qwen3.5-397b-a17b",
        "qwen35moe",
        60,
        32,
        2,
        512,
        _qwen_hybrid(4096, 32, 2, 16, 64, True, lambda: _experts(4096, 1024, 512, 1024)),
        _vocab(4096, 248320),
    ),
    SnapshotModel(
        "qwen3.6-27b",
        "qwen35",
        64,
        24,
        4,
        0,
        _qwen_hybrid(5120, 24, 4, 16, 48, True, lambda: _dense(5120, 17408)),
        _vocab(5120, 248320),
    ),
)
"""The models in ``model_specs`` order (Qwen3.5-397B-A17B, commented out there,
still has a snapshot; ``test-quant-type-selection`` skips it, we check it too)."""
