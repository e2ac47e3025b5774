"""``kiln-np convert DIR out.gguf --outtype bf16`` and ``--quantize Q4_K_M`` of a bf16
Hugging Face checkpoint of more than 1 GiB, beside llama.cpp's two tools.

Run from the repository root (torch, and llama.cpp's source tree and build)::

    python benchmarks/bench_hf_to_gguf.py \\
        --llama-cpp /work/llama/llama_cpp_python-0.3.36/vendor/llama.cpp \\
        --bin /work/llama/build/bin            # 10 layers: 1.16 GB of bf16 weights

Writes a llama checkpoint of random bf16 weights (hidden 2048, 16 heads of 128,
4 KV heads, feed-forward 5632, a 32000-token vocabulary, untied; llama's
SentencePiece tokenizer, ``tests/fixtures/tokenizers/llama-spm``), then per round, each in
a child process of its own (its seconds and peak resident memory, ``VmHWM``; for
``llama-quantize``, the child's ``ru_maxrss``):

- ``kiln-np convert DIR bf16.gguf --outtype bf16`` beside ``convert_hf_to_gguf.py
  --outtype bf16`` (run as ``tests/fixtures/hf/make_hf_models.py`` runs it);
- ``kiln-np convert DIR q.gguf --quantize q4_k_m`` beside the converter's
  ``--outtype f32`` followed by ``llama-quantize f32.gguf q.gguf Q4_K_M`` (their
  seconds summed, the larger peak).

Each pair of files is checked byte for byte, the tokenizer's keys included.
Issue 42's targets: each kiln-np time <= 0.5 x its two-tool path's, kiln-np's peak
<= the largest tensor + 128 MiB.  The exit status is 1 when a target is missed or a file differs.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import lzma
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

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "tests" / "fixtures" / "hf"
sys.path.insert(0, str(FIXTURES))

from make_hf_models import _CONVERT  # noqa: E402  the converter, as the fixtures ran it

TIME_TARGET = 0.5
PEAK_SLACK = 128 << 20
HIDDEN, HEADS, KV_HEADS, FF, VOCAB = 2048, 16, 4, 5632, 32000


def checkpoint(folder: Path, layers: int) -> int:
    """A llama checkpoint of random bf16 weights; returns its largest tensor's bytes."""
    import ml_dtypes

    rng = np.random.default_rng(0)

    def m(*shape: int) -> np.ndarray:
        values = rng.standard_normal(shape, np.float32) * np.float32(0.02)
        return values.astype(ml_dtypes.bfloat16)

    head = HIDDEN // HEADS
    tensors = {"lm_head.weight": m(VOCAB, HIDDEN), "model.embed_tokens.weight": m(VOCAB, HIDDEN)}
    tensors["model.norm.weight"] = m(HIDDEN)
    for i in range(layers):
        p = f"model.layers.{i}."
        tensors |= {
            p + "input_layernorm.weight": m(HIDDEN),
            p + "post_attention_layernorm.weight": m(HIDDEN),
            p + "self_attn.q_proj.weight": m(HEADS * head, HIDDEN),
            p + "self_attn.k_proj.weight": m(KV_HEADS * head, HIDDEN),
            p + "self_attn.v_proj.weight": m(KV_HEADS * head, HIDDEN),
            p + "self_attn.o_proj.weight": m(HIDDEN, HEADS * head),
            p + "mlp.gate_proj.weight": m(FF, HIDDEN),
            p + "mlp.up_proj.weight": m(FF, HIDDEN),
            p + "mlp.down_proj.weight": m(HIDDEN, FF),
        }
    folder.mkdir(parents=True)
    kiln_np.save_weights(
        folder / "model.safetensors", dict(sorted(tensors.items())), format="safetensors",
        metadata={"format": "pt"},
    )  # fmt: skip
    config = json.loads((FIXTURES / "llama_tied_f16" / "config.json").read_text())
    config |= {
        "hidden_size": HIDDEN, "intermediate_size": FF, "num_hidden_layers": layers,
        "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": head,
        "vocab_size": VOCAB, "tie_word_embeddings": False, "dtype": "bfloat16",
        "max_position_embeddings": 4096,
    }  # fmt: skip
    config |= {"bos_token_id": 1, "eos_token_id": 2}  # the tokenizer's <s> and </s>
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    spm = FIXTURES.parent / "tokenizers" / "llama-spm"
    (folder / "tokenizer.json").write_bytes(
        lzma.decompress((spm / "tokenizer.json.xz").read_bytes())
    )
    shutil.copy(spm / "tokenizer_config.json", folder)
    (folder / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 1, "eos_token_id": 2})
    )
    return max(t.nbytes for t in tensors.values())


def child(what: str, llama_cpp: str, bin_dir: str, src: str, out: str) -> None:
    """One measured run, in this process: print its seconds and peak RSS as JSON."""
    start = time.perf_counter()
    peak_children = 0
    if what in ("kiln-bf16", "kiln-q4"):
        from kiln_np.cli import main

        option = ["--outtype", "bf16"] if what == "kiln-bf16" else ["--quantize", "q4_k_m"]
        if main(["convert", src, out, *option, "--force"]) != 0:
            raise SystemExit("kiln-np convert failed")
    elif what == "converter-bf16":
        _convert(llama_cpp, src, out, "bf16")
    else:  # converter f32, then llama-quantize
        f32 = out + ".f32.gguf"
        _convert(llama_cpp, src, f32, "f32")
        cmd = [str(Path(bin_dir) / "llama-quantize"), f32, out, "Q4_K_M"]
        subprocess.run(cmd, check=True, capture_output=True)
        peak_children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss << 10
        Path(f32).unlink()
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "peak": max(_high_water(), peak_children)}))


def _convert(llama_cpp: str, src: str, out: str, outtype: str) -> None:
    """The converter in this process (its peak is this process's)."""
    sys.argv = ["-c", llama_cpp, src, "--outtype", outtype, "--outfile", out]
    exec(compile(_CONVERT, "convert", "exec"), {"__name__": "__convert__"})


def _high_water() -> int:
    """This process's peak resident memory in bytes (``VmHWM``)."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) << 10
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10


def _run(what: str, args: argparse.Namespace, src: Path, out: Path) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", what, str(args.llama_cpp), str(args.bin)]
    done = subprocess.run([*cmd, str(src), str(out)], check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{what} failed:\n{done.stderr[-2000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-cpp", type=Path, help="llama.cpp's source tree")
    parser.add_argument("--bin", type=Path, help="llama.cpp's built binaries")
    parser.add_argument("--layers", type=int, default=10, help="transformer blocks (10)")
    parser.add_argument("--rounds", type=int, default=1, help="timing rounds (1)")
    parser.add_argument("--dir", default=None, help="where the files go")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    print(describe_machine(), "cpu pressure (avg60)", cpu_pressure())
    work = Path(tempfile.mkdtemp(prefix="kiln-bench-hf2gguf-", dir=args.dir))
    src = work / "llama_big"
    runs: dict[str, list[dict[str, Any]]] = {}
    same = True
    try:
        largest = checkpoint(src, args.layers)
        weights = (src / "model.safetensors").stat().st_size
        for _ in range(args.rounds):
            for kind in ("bf16", "q4"):
                two = "converter-bf16" if kind == "bf16" else "converter-f32+llama-quantize"
                mine, theirs = work / f"kiln-{kind}.gguf", work / f"theirs-{kind}.gguf"
                runs.setdefault(f"kiln-{kind}", []).append(_run(f"kiln-{kind}", args, src, mine))
                runs.setdefault(two, []).append(_run(two, args, src, theirs))
                same = same and filecmp.cmp(mine, theirs, shallow=False)
                mine.unlink()
                theirs.unlink()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def median(name: str, key: str) -> float:
        return float(statistics.median(r[key] for r in runs[name]))

    bound = largest + PEAK_SLACK
    rows: list[list[object]] = []
    met = same
    for kind, two in (("bf16", "converter-bf16"), ("q4", "converter-f32+llama-quantize")):
        ratio = median(f"kiln-{kind}", "seconds") / median(two, "seconds")
        peak = median(f"kiln-{kind}", "peak")
        rows += [
            [f"kiln-np ({kind})", f"{median(f'kiln-{kind}', 'seconds'):.2f} s",
             f"{ratio:.2f} x", f"<= {TIME_TARGET}", f"{peak / 2**20:.0f} MiB"],
            [two, f"{median(two, 'seconds'):.2f} s", "", "",
             f"{median(two, 'peak') / 2**20:.0f} MiB"],
        ]  # fmt: skip
        met = met and ratio <= TIME_TARGET and peak <= bound
    print(
        f"\nbf16 checkpoint of {weights / 2**30:.2f} GiB ({args.layers} layers); largest tensor "
        f"{largest / 2**20:.0f} MiB (peak bound {bound / 2**20:.0f} MiB); files byte for "
        f"byte equal: {same}\n"
    )
    print(markdown_table(["what", "median", "ratio", "target", "peak RSS"], rows))
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
