"""Files: the I/O primitives every file output and input goes through (``io``), a
payload's checked chunks (``chunks``), payload files read (``payload``:
``open_payload``, ``LazyPayload``) and written (``saving``: ``save_payload``), and
``.npy`` headers (``npy``).

They import the core, the kernels and the codec; no format adapter.
"""
