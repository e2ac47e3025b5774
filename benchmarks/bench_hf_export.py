"""``kiln-np convert MODEL.gguf DIR --to hf --dequantize bf16``: a Q4_K_M GGUF of a
model of more than 1 GiB of weights back to a bf16 Hugging Face directory.

Run from the repository root (transformers, torch and accelerate installed for
the comparison; without them it is left out)::

    python benchmarks/bench_hf_export.py               # 10 layers: 1.16 GB of bf16 weights
    python benchmarks/bench_hf_export.py --layers 2 --rounds 1

Writes a llama-architecture GGUF of random bf16 weights (hidden 2048, 16 heads
of 128, 4 KV heads, feed-forward 5632, a 32000-token vocabulary, untied), makes
its Q4_K_M file with ``kiln-np convert --quantize Q4_K_M`` (llama-quantize's
file), then per round, each in a child process of its own (its seconds and its
peak resident memory, ``VmHWM``):

- ``kiln-np convert Q4_K_M.gguf DIR --to hf --dequantize bf16``;
- the baseline: ``kiln_np.gguf.dequantize`` of every tensor to bf16 (a float
  one cast; each result dropped before the next) plus ``shutil.copyfile`` of the written
  ``model.safetensors``: the least a conversion does, compute the values and
  write them;
- once, beside it: transformers' ``AutoModelForCausalLM.from_pretrained(DIR,
  gguf_file=..., dtype=torch.bfloat16)`` then ``save_pretrained`` (transformers 5
  refuses to save a model it loaded from a GGUF, dequantized or not: its GGUF
  quantizer is dropped first, the least a user has to do).

Issue 40's targets: export / baseline <= 1.3, transformers / export >= 5, the
export's peak resident memory <= the largest tensor written + 128 MiB (the
interpreter, numpy and ml_dtypes included).  The exit status is 1 when a target
is missed.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cpu_pressure, describe_machine, markdown_table

import kiln_np

TIME_TARGET = 1.3
SPEEDUP_TARGET = 5.0
PEAK_SLACK = 128 << 20
HIDDEN, HEADS, KV_HEADS, FF, VOCAB = 2048, 16, 4, 5632, 32000


def source_gguf(path: Path, layers: int) -> None:
    """A llama GGUF of random bf16 weights (float32 norms), as the converter writes one."""
    import ml_dtypes

    rng = np.random.default_rng(0)
    head = HIDDEN // HEADS

    def matrix(rows: int, cols: int) -> np.ndarray:
        values = rng.standard_normal((rows, cols), np.float32) / np.float32(cols**0.5)
        return values.astype(ml_dtypes.bfloat16)

    def norm() -> np.ndarray:
        return (1 + 0.1 * rng.standard_normal(HIDDEN, np.float32)).astype(np.float32)

    tensors: dict[str, np.ndarray] = {
        "token_embd.weight": matrix(VOCAB, HIDDEN),
        "output.weight": matrix(VOCAB, HIDDEN),
        "output_norm.weight": norm(),
    }
    for i in range(layers):
        tensors |= {
            f"blk.{i}.attn_norm.weight": norm(),
            f"blk.{i}.attn_q.weight": matrix(HEADS * head, HIDDEN),
            f"blk.{i}.attn_k.weight": matrix(KV_HEADS * head, HIDDEN),
            f"blk.{i}.attn_v.weight": matrix(KV_HEADS * head, HIDDEN),
            f"blk.{i}.attn_output.weight": matrix(HIDDEN, HEADS * head),
            f"blk.{i}.ffn_norm.weight": norm(),
            f"blk.{i}.ffn_gate.weight": matrix(FF, HIDDEN),
            f"blk.{i}.ffn_up.weight": matrix(FF, HIDDEN),
            f"blk.{i}.ffn_down.weight": matrix(HIDDEN, FF),
        }
    meta = {
        "general.architecture": "llama",
        "general.name": "bench-llama",
        "general.file_type": 32,
        "llama.block_count": layers,
        "llama.context_length": 4096,
        "llama.embedding_length": HIDDEN,
        "llama.feed_forward_length": FF,
        "llama.attention.head_count": HEADS,
        "llama.attention.head_count_kv": KV_HEADS,
        "llama.rope.freq_base": np.float32(500000.0),
        "llama.attention.layer_norm_rms_epsilon": np.float32(1e-5),
        "llama.attention.key_length": head,
        "llama.attention.value_length": head,
        "llama.vocab_size": VOCAB,
        "llama.rope.dimension_count": head,
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
    }
    kiln_np.save_weights(path, tensors, format="gguf", metadata=meta)


def child(what: str, src: str, out: str) -> None:
    """One measured run, in this process: print its seconds and peak RSS as JSON."""
    start = time.perf_counter()
    if what == "kiln":
        from kiln_np.cli import main

        if main(["convert", src, out, "--to", "hf", "--dequantize", "bf16"]) != 0:
            raise SystemExit("kiln-np convert failed")
    elif what == "baseline":
        import ml_dtypes

        from kiln_np.gguf import dequantize

        with kiln_np.open_weights(src) as weights:
            for tensor in weights.values():
                values = (
                    dequantize(tensor, dtype="bfloat16")
                    if tensor.layout is not None
                    else np.asarray(tensor).astype(ml_dtypes.bfloat16)
                )
                del values
        shutil.copyfile(Path(out) / "model.safetensors", Path(out) / "copy.safetensors")
    else:
        import torch
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(
            str(Path(src).parent), gguf_file=Path(src).name, dtype=torch.bfloat16
        )
        # transformers 5 refuses to save a model loaded from a GGUF ("quantized with
        # gguf and is not serializable") even dequantized: drop its quantizer first
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(out)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "peak": _high_water()}))


def _high_water() -> int:
    """This process's peak resident memory in bytes: ``VmHWM`` (its own address
    space's; ``ru_maxrss`` would count the parent's peak before ``exec``)."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) << 10
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10  # not Linux: KiB too


def _run(what: str, src: Path, out: Path) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", what, str(src), str(out)]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{what} failed:\n{done.stderr[-2000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=10, help="transformer blocks (10)")
    parser.add_argument("--rounds", type=int, default=3, help="timing rounds (3)")
    parser.add_argument("--dir", default=None, help="where the files go")
    parser.add_argument("--child", nargs=3, metavar=("WHAT", "SRC", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    print(describe_machine(), "cpu pressure (avg60)", cpu_pressure())
    work = Path(tempfile.mkdtemp(prefix="kiln-bench-hf-", dir=args.dir))
    bf16, q4, out = work / "bf16.gguf", work / "q4_k_m.gguf", work / "hf"
    try:
        source_gguf(bf16, args.layers)
        with kiln_np.open_weights(bf16) as w:
            kiln_np.save_weights(q4, w, format="gguf", quantize="Q4_K_M", metadata=w.metadata)
            weights = sum(t.byte_length for t in w.values())
            largest = max(t.size for t in w.values()) * 2  # written as bf16
        bf16.unlink()
        runs: dict[str, list[dict[str, Any]]] = {"kiln": [], "baseline": []}
        for _ in range(args.rounds):
            shutil.rmtree(out, ignore_errors=True)
            runs["kiln"].append(_run("kiln", q4, out))
            runs["baseline"].append(_run("baseline", q4, out))
            (out / "copy.safetensors").unlink()
        theirs = None
        try:
            import transformers  # noqa: F401
        except ImportError:
            print("transformers is not installed: its figures are left out")
        else:
            theirs = _run("transformers", q4, work / "theirs")
        written = sum(p.stat().st_size for p in out.iterdir())
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def median(name: str, key: str) -> float:
        return float(statistics.median(r[key] for r in runs[name]))

    ratio = statistics.median(
        k["seconds"] / b["seconds"] for k, b in zip(runs["kiln"], runs["baseline"], strict=True)
    )
    bound = largest + PEAK_SLACK
    peak = median("kiln", "peak")
    rows: list[list[object]] = [
        ["kiln-np convert --to hf --dequantize bf16", f"{median('kiln', 'seconds'):.2f} s",
         f"{ratio:.2f} x the baseline", f"<= {TIME_TARGET}"],
        ["baseline: dequantize every tensor + copyfile", f"{median('baseline', 'seconds'):.2f} s",
         "", ""],
        ["peak RSS of kiln-np", f"{peak / 2**20:.0f} MiB", f"{peak / bound:.2f} x the bound",
         "<= 1.0"],
    ]  # fmt: skip
    met = ratio <= TIME_TARGET and peak <= bound
    if theirs is not None:
        speedup = theirs["seconds"] / median("kiln", "seconds")
        rows += [
            ["transformers from_pretrained(gguf_file=) + save_pretrained",
             f"{theirs['seconds']:.2f} s", f"kiln-np {speedup:.1f}x faster",
             f">= {SPEEDUP_TARGET}"],
            ["peak RSS of transformers", f"{theirs['peak'] / 2**20:.0f} MiB", "", ""],
        ]  # fmt: skip
        met = met and speedup >= SPEEDUP_TARGET
    print(
        f"\nQ4_K_M of {weights / 2**30:.2f} GiB of bf16 weights ({args.layers} layers) -> "
        f"{written / 2**30:.2f} GiB bf16 directory; largest tensor {largest / 2**20:.0f} MiB "
        f"(peak bound: largest + 128 MiB = {bound / 2**20:.0f} MiB)\n"
    )
    print(markdown_table(["what", "median", "ratio", "target"], rows))
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
