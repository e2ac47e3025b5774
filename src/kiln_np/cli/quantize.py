"""llama-quantize's flags on ``kiln-np convert --quantize FTYPE``: the arguments,
the policy they make with ``--quantize`` (``--tensor-type-file`` and ``--imatrix``
read, a flag without ``--quantize`` USAGE) and the totals in llama-quantize's
words."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from kiln_np._convert.plan import OptionsError
from kiln_np._convert.policy import QuantizePolicy
from kiln_np._files.io import open_regular
from kiln_np.gguf import Imatrix, read_imatrix

from .errors import CliError, file_error

__all__ = ["add_mix_flags", "llama_totals", "quantize_policy"]

_TENSOR_TYPE_FILE_MAX = 1 << 20
"""The most bytes a ``--tensor-type-file`` may hold (a long list is a few KiB)."""


def _tensor_type_file(path: str) -> list[str]:
    """The ``PATTERN=TYPE`` entries of a ``--tensor-type-file``, separated by
    spaces or newlines as llama-quantize reads them."""
    try:
        with open_regular(path) as f:
            body = f.read(_TENSOR_TYPE_FILE_MAX + 1)
    except OSError as exc:
        raise file_error("read", path, exc) from exc
    if len(body) > _TENSOR_TYPE_FILE_MAX:
        raise CliError(
            "USAGE",
            f"--tensor-type-file {path!r}: expected at most {_TENSOR_TYPE_FILE_MAX} bytes of "
            "PATTERN=TYPE entries, found more",
        )
    try:
        return body.decode("utf-8").split()
    except UnicodeDecodeError:
        raise CliError(
            "USAGE", f"--tensor-type-file {path!r}: expected UTF-8 text, found other bytes"
        ) from None


_MIX_FLAGS = (
    "pure",
    "output_tensor_type",
    "token_embedding_type",
    "leave_output_tensor",
    "allow_requantize",
    "keep_split",
)


def _layers(text: str) -> list[int]:
    """``--prune-layers``' comma-separated layer numbers.

    >>> _layers("1,3")
    [1, 3]
    """
    parts = text.split(",")
    if not all(p.isascii() and p.isdecimal() and len(p) < 10 for p in parts):
        raise argparse.ArgumentTypeError(f"expected layer numbers such as 1,3, found {text!r}")
    return [int(p) for p in parts]


_SELECTS = {"--include-weights": "include_weights", "--exclude-weights": "exclude_weights"}


def _imatrix(args: argparse.Namespace) -> Imatrix | None:
    """``--imatrix FILE`` read with ``--include-weights`` / ``--exclude-weights``
    (the path as typed: what ``quantize.imatrix.file`` records); USAGE for those
    without it, or both, FILE for a file that cannot be read."""
    include, exclude = args.include_weights or [], args.exclude_weights or []
    if args.imatrix is None:
        if include or exclude:
            flag = "--include-weights" if include else "--exclude-weights"
            raise CliError("USAGE", f"{flag}: it selects entries of --imatrix FILE, not given")
        return None
    try:
        return read_imatrix(args.imatrix, include=include, exclude=exclude)
    except OptionsError as exc:
        raise CliError(exc.cli_kind, exc.usage) from None
    except OSError as exc:
        raise file_error("read", args.imatrix, exc) from exc


def quantize_policy(args: argparse.Namespace) -> QuantizePolicy | str | None:
    """``--quantize`` with llama-quantize's flags, or USAGE for a flag without it."""
    tensor_types = list(args.tensor_type or [])
    if args.tensor_type_file is not None:
        tensor_types += _tensor_type_file(args.tensor_type_file)
    flags: dict[str, Any] = {name: getattr(args, name) for name in _MIX_FLAGS}
    flags["tensor_types"] = tensor_types
    flags["override_kv"] = list(args.override_kv or [])
    flags["prune_layers"] = args.prune_layers or []
    flags["imatrix"] = args.imatrix
    given = [f"--{k.replace('_', '-')}" for k, v in flags.items() if v not in (None, False, [])]
    given += [f for f, v in _SELECTS.items() if getattr(args, v)]
    quantize: str | None = args.quantize
    if not given:
        return quantize
    if quantize is None:
        raise CliError(
            "USAGE",
            f"{', '.join(given)}: llama-quantize's flags need --quantize with a file type "
            "(Q4_K_M, q8_0, ...)",
        )
    flags["imatrix"] = _imatrix(args)
    return QuantizePolicy.parse(quantize, **flags)


def llama_totals(totals: Mapping[str, Any]) -> str:
    """The totals as ``llama-quantize`` prints them: MiB to 2 places, bits per
    weight over every element.

    >>> llama_totals({"source_bytes": 3 << 20, "target_bytes": 1 << 20, "elements": 1 << 20})
    'llama-quantize: model size = 3.00 MiB (24.00 BPW), quant size = 1.00 MiB (8.00 BPW)'
    """
    n = max(totals["elements"], 1)
    size = [totals["source_bytes"], totals["target_bytes"]]
    mib, bpw = [f"{b / 1024 / 1024:.2f}" for b in size], [f"{b * 8 / n:.2f}" for b in size]
    return (
        f"llama-quantize: model size = {mib[0]} MiB ({bpw[0]} BPW), "
        f"quant size = {mib[1]} MiB ({bpw[1]} BPW)"
    )


def add_mix_flags(parser: argparse.ArgumentParser) -> None:
    """``--quantize`` and llama-quantize's flags, a group of ``convert``'s arguments."""
    parser.add_argument(
        "--quantize",
        metavar="POLICY",
        help="quantize float tensors to GGML blocks (GGUF, kiln), byte for byte as llama.cpp: "
        "a llama-quantize file type (Q4_K_M, q4_k, q8_0, IQ4_XS, f16, COPY, ...: each tensor "
        "gets the type llama-quantize's mix gives it), a GGML type no file type is named "
        "after (nvfp4, mxfp4: every tensor it can), and comma-separated PATTERN=TYPE globs "
        "over it, the first matching winning: 'q4_k_m,*.ffn_down.*=q6_k'; tensors that keep "
        "their type are listed on stderr",
    )
    mix = parser.add_argument_group(
        "llama-quantize's flags (with --quantize FTYPE, a llama-quantize file type)"
    )
    mix.add_argument(
        "--pure",
        action="store_true",
        help="no mix: every tensor llama.cpp quantizes gets the file type's own type",
    )
    mix.add_argument("--output-tensor-type", metavar="TYPE", help="the GGML type of output.weight")
    mix.add_argument(
        "--token-embedding-type", metavar="TYPE", help="the GGML type of the token embeddings"
    )
    mix.add_argument(
        "--tensor-type",
        metavar="PATTERN=TYPE",
        action="append",
        help="the type of the tensors whose name the pattern (lower-cased, an ECMAScript "
        "regular expression, searched) matches, where the file type quantizes; repeatable",
    )
    mix.add_argument(
        "--tensor-type-file",
        metavar="FILE",
        help="--tensor-type entries read from FILE, separated by spaces or newlines",
    )
    mix.add_argument(
        "--leave-output-tensor",
        action="store_true",
        help="keep output.weight's type",
    )
    mix.add_argument(
        "--allow-requantize",
        action="store_true",
        help="requantize GGML blocks whose type the file type changes (decoded to float32, "
        "then quantized, as llama-quantize does; refused without it)",
    )
    mix.add_argument(
        "--keep-split",
        action="store_true",
        help="write a split GGUF as the same splits, its tensors in the input's order",
    )
    mix.add_argument(
        "--prune-layers",
        metavar="L0,L1,...",
        type=_layers,
        help="leave these layers out, renumbering the later ones and the block count",
    )
    mix.add_argument(
        "--imatrix",
        metavar="FILE",
        help="an importance matrix (llama-imatrix's GGUF or legacy .dat): each tensor with "
        "an entry is quantized with its weights, as llama-quantize --imatrix; the file "
        "records FILE as typed (quantize.imatrix.file)",
    )
    mix.add_argument(
        "--include-weights",
        metavar="NAME",
        action="append",
        help="use only the imatrix entries whose names contain NAME; repeatable",
    )
    mix.add_argument(
        "--exclude-weights",
        metavar="NAME",
        action="append",
        help="leave out the imatrix entries whose names contain NAME; repeatable; not with "
        "--include-weights",
    )
    mix.add_argument(
        "--override-kv",
        metavar="KEY=TYPE:VALUE",
        action="append",
        help="set a metadata key after the file type's (TYPE int (written uint32), float, "
        "bool, str); repeatable",
    )
