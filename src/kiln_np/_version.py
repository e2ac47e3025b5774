"""The package version, in a module of its own so that every layer (the command
line's ``--version`` among them) can read it without importing the public face,
and the build reads it statically (pyproject.toml: ``attr``)."""

__version__ = "0.1.0"
