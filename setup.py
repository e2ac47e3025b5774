"""Build script: only the optional C kernels; all metadata lives in pyproject.toml.

``kiln_np._kernels.native`` is an *optional* extension: where it cannot be compiled
(no C compiler, no Python headers) setuptools warns and the install goes on
without it, and kiln_np runs on its pure-numpy kernels (see
``kiln_np.kernel_backend()`` and docs/performance.md).

The GGML decoders and encoders (``ggml_*.c``) must compute in plain float32, one rounding per
operation, to give ggml's bits: GCC and clang contract ``a * b + c`` into a fused
multiply-add where the target has one (arm64, or x86-64 built for a newer CPU)
unless told not to, so every build passes ``-ffp-contract=off`` (MSVC:
``/fp:precise``, which does not contract).
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

KERNELS = "src/kiln_np/_kernels/"


class BuildExt(build_ext):
    """build_ext with the one floating-point flag the compiler in use spells its way."""

    def build_extensions(self) -> None:
        flag = "/fp:precise" if self.compiler.compiler_type == "msvc" else "-ffp-contract=off"
        for ext in self.extensions:
            ext.extra_compile_args = [*ext.extra_compile_args, flag]
        super().build_extensions()


setup(
    cmdclass={"build_ext": BuildExt},
    ext_modules=[
        Extension(
            "kiln_np._kernels.native",
            sources=[
                KERNELS + name
                for name in (
                    "native.c",
                    "ggml_basic.c",
                    "ggml_k.c",
                    "ggml_iq.c",
                    "ggml_quant_basic.c",
                    "ggml_quant_fp4.c",
                    "ggml_quant_iq4.c",
                    "ggml_quant_k_min.c",
                    "ggml_quant_k_sym.c",
                    "moments.c",
                    "differences.c",
                    "fp4.c",
                    "fp8.c",
                    "bnb.c",
                    "int4.c",
                )
            ],
            depends=[
                KERNELS + "ggml.h",
                KERNELS + "ggml_grids.h",
                KERNELS + "moments.h",
                KERNELS + "differences.h",
                KERNELS + "fp4.h",
                KERNELS + "fp8.h",
                KERNELS + "bnb.h",
                KERNELS + "int4.h",
            ],
            optional=True,
        )
    ],
)
