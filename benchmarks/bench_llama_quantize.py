"""A whole llama-quantize file type, kiln_np against llama-quantize (issue 38's target).

Run from the repository root, with a llama-quantize built as
``tests/fixtures/llama_quant/make_dry_runs.py`` says::

    python benchmarks/bench_llama_quantize.py --llama-quantize /work/llama/build/bin/llama-quantize
    python benchmarks/bench_llama_quantize.py --llama-quantize ... --ftype Q2_K --rounds 3
    python benchmarks/bench_llama_quantize.py --llama-quantize ... --ftype IQ2_XXS --imatrix

It writes an F16 llama of 124.7 M parameters (32000 x 768 embeddings and
output, 12 layers, feed-forward 2048, 12 heads over 4 key/value heads; normal
values, seeded) as GGUF, then, in alternating rounds, runs ``llama-quantize IN
OUT FTYPE THREADS`` and ``kiln-np convert IN OUT --quantize FTYPE`` (each a
fresh process, so both pay their start-up and read the file from the page
cache), with the same number of threads (``KILN_NP_NUM_THREADS``), and reports
the wall times, their ratio (target <= 0.5) and whether the two files are
byte-identical (the exit status is 1 when they are not).

``--imatrix`` (issue 39's targets: IQ2_XXS <= 1.0, Q4_K_M <= 0.5) gives both the
same importance matrix, written beside the model in ``llama-imatrix``'s GGUF
layout (the model has no vocabulary, so ``llama-imatrix`` cannot run it): an
entry for every matrix of the blocks, as ``llama-imatrix`` records them, its
sums seeded log-normal values over 17 chunks of 512 tokens.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cpu_pressure, describe_machine, markdown_table

import kiln_np

VOCAB, DIM, LAYERS, FFN, HEADS, KV = 32000, 768, 12, 2048, 12, 4


def write_llama(path: Path, seed: int = 0) -> int:
    """The F16 llama as GGUF; its parameter count."""
    rng = np.random.default_rng(seed)

    def matrix(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols), np.float32) * 0.02).astype(np.float16)

    kv_dim = DIM // HEADS * KV
    tensors: dict[str, np.ndarray] = {
        "token_embd.weight": matrix(VOCAB, DIM),
        "output_norm.weight": np.ones(DIM, np.float32),
        "output.weight": matrix(VOCAB, DIM),
    }
    for i in range(LAYERS):
        b = f"blk.{i}."
        tensors |= {
            b + "attn_norm.weight": np.ones(DIM, np.float32),
            b + "attn_q.weight": matrix(DIM, DIM),
            b + "attn_k.weight": matrix(kv_dim, DIM),
            b + "attn_v.weight": matrix(kv_dim, DIM),
            b + "attn_output.weight": matrix(DIM, DIM),
            b + "ffn_norm.weight": np.ones(DIM, np.float32),
            b + "ffn_gate.weight": matrix(FFN, DIM),
            b + "ffn_up.weight": matrix(FFN, DIM),
            b + "ffn_down.weight": matrix(DIM, FFN),
        }
    metadata = {
        "general.architecture": "llama",
        "llama.block_count": np.uint32(LAYERS),
        "llama.context_length": np.uint32(2048),
        "llama.embedding_length": np.uint32(DIM),
        "llama.feed_forward_length": np.uint32(FFN),
        "llama.attention.head_count": np.uint32(HEADS),
        "llama.attention.head_count_kv": np.uint32(KV),
        "llama.attention.layer_norm_rms_epsilon": np.float32(1e-5),
        "llama.vocab_size": np.uint32(VOCAB),
    }
    kiln_np.save_weights(path, tensors, format="gguf", metadata=metadata)
    return sum(t.size for t in tensors.values())


def write_imatrix(path: Path, seed: int = 1) -> None:
    """An importance matrix of the llama's block matrices, as llama-imatrix lays one
    out: ``general.type``, the three ``imatrix.*`` keys, ``NAME.in_sum2`` (1 x row
    length) and ``NAME.counts`` (1 x 1) per entry."""
    rng = np.random.default_rng(seed)
    rows = {"attn_q": DIM, "attn_k": DIM, "attn_v": DIM, "attn_output": DIM}
    rows |= {"ffn_gate": DIM, "ffn_up": DIM, "ffn_down": FFN}
    tokens = 17 * 512
    tensors: dict[str, np.ndarray] = {}
    for i in range(LAYERS):
        for name, row in rows.items():
            sums = rng.lognormal(0.0, 1.0, (1, row)) * tokens * 0.01
            tensors[f"blk.{i}.{name}.weight.in_sum2"] = sums.astype(np.float32)
            tensors[f"blk.{i}.{name}.weight.counts"] = np.full((1, 1), tokens, np.float32)
    metadata = {
        "general.type": "imatrix",
        "imatrix.datasets": ["synthetic"],
        "imatrix.chunk_count": np.uint32(17),
        "imatrix.chunk_size": np.uint32(512),
    }
    kiln_np.save_weights(path, tensors, format="gguf", metadata=metadata)


def _run(argv: list[str], env: dict[str, str]) -> float:
    """Wall seconds of one child process."""
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, env=env)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llama-quantize", required=True, help="the llama-quantize binary")
    parser.add_argument("--ftype", default="Q4_K_M", help="the file type (default Q4_K_M)")
    parser.add_argument("--threads", type=int, default=2, help="threads for both (default 2)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    parser.add_argument(
        "--imatrix", action="store_true", help="quantize both with the same importance matrix"
    )
    args = parser.parse_args(argv)
    env = {**os.environ, "KILN_NP_NUM_THREADS": str(args.threads)}
    src = Path(__file__).resolve().parents[1] / "src"
    env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")])
    with tempfile.TemporaryDirectory() as tmp:
        source, ours, theirs = (Path(tmp) / n for n in ("in.gguf", "kiln.gguf", "llama.gguf"))
        params = write_llama(source)
        flags = []
        if args.imatrix:
            write_imatrix(Path(tmp) / "imatrix.gguf")
            flags = ["--imatrix", str(Path(tmp) / "imatrix.gguf")]
        llama = [args.llama_quantize, *flags, str(source), str(theirs), args.ftype]
        llama += [str(args.threads)]
        kiln = [sys.executable, "-m", "kiln_np.cli", "convert", str(source), str(ours)]
        kiln += ["--quantize", args.ftype, *flags, "--force"]
        times: dict[str, list[float]] = {"llama-quantize": [], "kiln-np": []}
        for _ in range(args.rounds):
            times["llama-quantize"].append(_run(llama, env))
            times["kiln-np"].append(_run(kiln, env))
        same = filecmp.cmp(ours, theirs, shallow=False)
        size = source.stat().st_size
    best = {k: min(v) for k, v in times.items()}
    ratio = best["kiln-np"] / best["llama-quantize"]
    print(describe_machine(), f"CPU pressure {cpu_pressure()}")
    print(
        f"{args.ftype}{' with an importance matrix' * args.imatrix} of an F16 llama of "
        f"{params / 1e6:.1f} M parameters "
        f"({size / 2**20:.0f} MiB), {args.threads} threads, best of {args.rounds}; "
        f"byte-identical: {same}"
    )
    rows = [[k, f"{best[k]:.2f}", " ".join(f"{t:.2f}" for t in v)] for k, v in times.items()]
    print(markdown_table(["program", "best s", "rounds s"], rows))
    target = 1.0 if args.imatrix and args.ftype.upper() == "IQ2_XXS" else 0.5
    print(f"kiln-np / llama-quantize: {ratio:.2f} (target <= {target})")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
