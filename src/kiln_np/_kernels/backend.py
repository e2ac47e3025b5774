"""Which kernels run: the compiled extension (``kiln_np._kernels.native``) or the
numpy kernels.

Only ``kiln_np._kernels`` imports the extension: each compiled kernel is a row of
the kernel table (:mod:`kiln_np._kernels.dispatch`), which runs it only while
:data:`COMPILED` is true (read at call time as ``backend.COMPILED``, so tests and
benchmarks can switch it).  ``KILN_NP_PURE=1`` (read at import) turns the
compiled kernels off.
"""

from __future__ import annotations

import os

from kiln_np._core.checks import set_module

try:
    from kiln_np._kernels import native  # noqa: F401  (whether it loads is the question)
except ImportError:  # built without a C compiler: the numpy kernels
    BUILT = False
else:
    BUILT = True
"""Whether the compiled extension was built (and imports)."""

__all__ = ["BUILT", "COMPILED", "kernel_backend"]

COMPILED = BUILT and os.environ.get("KILN_NP_PURE", "").strip() in ("", "0")
"""Whether the compiled kernels run: built, and not turned off by ``KILN_NP_PURE``."""


@set_module("kiln_np")
def kernel_backend() -> str:
    """Which kernels kiln_np runs for 4-bit codes and byte checks.

    Returns
    -------
    str
        ``"compiled"``: the C extension ``kiln_np._kernels`` (built by
        ``pip install`` where a C compiler exists); ``"numpy"``: the portable
        numpy kernels, used when the extension was not built or the
        environment variable ``KILN_NP_PURE=1`` was set before import.
        Results are the same bytes and errors either way.

    Examples
    --------
    >>> kernel_backend() in ("compiled", "numpy")
    True
    """
    return "compiled" if COMPILED else "numpy"
