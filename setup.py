"""Build script: only the optional C kernels; all metadata lives in pyproject.toml.

``kiln_np._kernels.native`` is an *optional* extension: where it cannot be compiled
(no C compiler, no Python headers) setuptools warns and the install goes on
without it, and kiln_np runs on its pure-numpy kernels (see
``kiln_np.kernel_backend()`` and docs/performance.md).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kiln_np._kernels.native",
            sources=["src/kiln_np/_kernels/native.c"],
            optional=True,
        )
    ]
)
