"""Files: the I/O primitives every file output and input goes through, payload files
(``open_payload``, ``LazyPayload``, ``save_payload``) and ``.npy`` headers.

They import the core, the kernels and the codec; no format adapter.
"""
