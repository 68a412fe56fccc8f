"""A spec edited by the command line's flags, checked as the spec's own fields are."""

from __future__ import annotations

from dataclasses import replace

from dp_pipeline.release.spec.model import (
    ENGINES,
    INPUT_FORMATS,
    ReleaseSpec,
    SpecError,
    format_of_path,
)
from dp_pipeline.release.spec.spark_conf import SparkConf, parse_conf_arguments

__all__ = ["apply_overrides"]


def apply_overrides(spec: ReleaseSpec, **overrides) -> ReleaseSpec:
    """The spec with command-line overrides (None means keep the spec's value)."""
    if overrides.get("release_id"):
        spec = spec.with_release_id(overrides["release_id"])
    mapping = {
        "input_path": "input_path",
        "spark_conf": "spark_conf",
        "output_dir": "output_dir",
        "engine": "engine",
        "master": "master",
        "ledger_path": "ledger_path",
        "key_file": "key_file",
        "synthetic_persons": "synthetic_persons",
    }
    changes = {field: overrides[name] for name, field in mapping.items() if overrides.get(name)}
    if "input_path" in changes:
        changes["input_table"] = None  # --input replaces the spec's input, path or table
    if "spark_conf" in changes:
        conf = changes["spark_conf"]
        if not isinstance(conf, SparkConf):
            problems: list[str] = []
            conf = parse_conf_arguments(list(conf), problems)
            if problems:
                raise SpecError(problems, "command line")
        changes["spark_conf"] = spec.spark_conf.merged(conf)
    # A new input path brings its own format: --format, else what its name says
    # (``*.csv``, ``*.parquet``), else the spec's.
    if overrides.get("input_format"):
        if overrides["input_format"] not in INPUT_FORMATS:
            raise SpecError(
                [
                    f"--format {overrides['input_format']!r}: must be one of "
                    f"{', '.join(INPUT_FORMATS)}"
                ]
            )
        changes["input_format"] = overrides["input_format"]
    elif "input_path" in changes and format_of_path(changes["input_path"]):
        changes["input_format"] = format_of_path(changes["input_path"])
    if "engine" in changes and changes["engine"] not in ENGINES:
        raise SpecError([f"--engine {changes['engine']!r}: must be one of {', '.join(ENGINES)}"])
    if "synthetic_persons" in changes and changes["synthetic_persons"] < 1:
        raise SpecError([f"--persons {changes['synthetic_persons']}: must be >= 1"])
    return replace(spec, **changes) if changes else spec
