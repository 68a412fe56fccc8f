"""The library's version, importable without loading the package's public surface."""

__version__ = "0.1.0"
