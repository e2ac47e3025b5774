"""The kernels: bytes in, bytes out, near memory speed.

``native`` is the compiled extension (``native.c``, built when ``pip install`` finds a
C compiler); ``nibbles`` drives it, or its own numpy kernels, for 4-bit packing, bool
and padding checks and the block-scaled decode and repacking.  They import only
``kiln_np._core``.
"""
