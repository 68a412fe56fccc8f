"""A release spec: the TOML file read, checked field by field, and frozen as values.

`load_spec` and `parse_spec` (`spec.load`) are the entry points; `spec.model`
holds the values, the other modules each read one part of the file.
"""

from dp_pipeline.release.spec.load import load_spec, parse_spec
from dp_pipeline.release.spec.model import ReleaseSpec, SpecError

__all__ = ["ReleaseSpec", "SpecError", "load_spec", "parse_spec"]
