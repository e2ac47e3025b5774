"""Build script: the optional C kernels and one startup file; all metadata lives in
pyproject.toml.

``kiln_np-zarr.pth`` goes beside the package in site-packages (``build_py`` copies
it to the top of the wheel): its one line imports ``_kiln_np_zarr_hook``, which
registers kiln_np's Zarr data types once zarr-python 3.1.0-3.4.0 is imported (the
module says why).  An editable install (``pip install -e``) has no such file; there
zarr-python finds the types through the ``zarr.buffer`` entry point only, on its
group door (docs/interop.md, "zarr-python versions").

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

import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

KERNELS = "src/kiln_np/_kernels/"
STARTUP = "src/kiln_np-zarr.pth"


class BuildExt(build_ext):
    """build_ext with the one floating-point flag the compiler in use spells its way."""

    def build_extensions(self) -> None:
        flag = "/fp:precise" if self.compiler.compiler_type == "msvc" else "-ffp-contract=off"
        for ext in self.extensions:
            ext.extra_compile_args = [*ext.extra_compile_args, flag]
        super().build_extensions()


class BuildPy(build_py):
    """build_py that also puts the startup file at the top of the build (site-packages)."""

    def run(self) -> None:
        super().run()
        self.copy_file(STARTUP, os.path.join(self.build_lib, os.path.basename(STARTUP)))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [
            *super().get_outputs(include_bytecode),
            os.path.join(self.build_lib, os.path.basename(STARTUP)),
        ]


setup(
    cmdclass={"build_ext": BuildExt, "build_py": BuildPy},
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
                    "ggml_quant_grid.c",
                    "ggml_quant_iq1.c",
                    "ggml_quant_iq2.c",
                    "ggml_quant_iq3.c",
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
                KERNELS + "ggml_quant_grid.h",
                KERNELS + "ggml_quant_qkx.h",
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
