"""Spark settings of a release: ``[run.spark_conf]`` in the spec and ``dp-release run --conf``.

Settings are ``KEY = VALUE`` pairs as ``spark-submit --conf`` takes them; a TOML
key written without quotes (``spark.sql.ansi.enabled = true`` under
``[run.spark_conf]``) is a nested table, read back as the dotted key. A session
the release starts gets them all; a session already running gets those Spark
lets a running session change (`dp_pipeline.release.tables.on_spark`).

A spec is hostile input: its settings are limited to an allowlist of settings
that load and run no code (`dp_pipeline.release.spec.spark_allowlist`); the
operator's ``--conf`` takes any setting (the operator owns the machine).

``spark.master`` is refused: the master is ``run.master`` / ``--master``, so one
field decides it. Keys that look like credentials (`is_secret`) are never printed,
logged, reported or put in the identity: their values appear nowhere but in the
session's configuration (`SparkConf` keeps them out of its repr).

The release's identity records the settings that can change a published number
for the same input bytes (`identity_settings`): Spark SQL settings (``spark.sql.*``)
other than the performance settings of `PERFORMANCE_ONLY`, e.g. ``spark.sql.ansi.enabled``,
``spark.sql.caseSensitive``, the readers' options. File system settings
(``spark.hadoop.*``: where the bytes are, how to reach them) are not recorded: the
bytes themselves are fingerprinted. Cluster resources (``spark.executor.*``,
``spark.driver.*``) cannot change a released number (the noise is keyed per
partition, not per task).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from dp_pipeline.release.spec.fields import show_value
from dp_pipeline.release.spec.spark_allowlist import spec_setting_problem

__all__ = [
    "PERFORMANCE_ONLY",
    "SparkConf",
    "conf_problems",
    "identity_settings",
    "is_secret",
    "parse_conf_arguments",
    "read_spark_conf",
]

_SECRET = re.compile(r"secret|password|passwd|token|credential|key|auth|signature", re.I)
_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-/:]*$")
# Spark SQL settings that decide only how fast a plan runs, never what it computes.
PERFORMANCE_ONLY = (
    "spark.sql.shuffle.partitions",
    "spark.sql.adaptive.",
    "spark.sql.autoBroadcastJoinThreshold",
    "spark.sql.files.maxPartitionBytes",
    "spark.sql.files.openCostInBytes",
    "spark.sql.files.minPartitionNum",
    "spark.sql.execution.arrow.maxRecordsPerBatch",
    "spark.sql.execution.arrow.pyspark.enabled",
    "spark.sql.broadcastTimeout",
    "spark.sql.codegen.",
    "spark.sql.inMemoryColumnarStorage.",
    "spark.sql.warehouse.dir",  # where a catalog table is: its files are fingerprinted
)


def is_secret(key: str) -> bool:
    """Whether a setting's key looks like a credential (its value is never shown)."""
    return bool(_SECRET.search(key))


@dataclass(frozen=True)
class SparkConf:
    """Spark settings as (key, value) pairs, in key order; secret values never in its repr."""

    pairs: tuple[tuple[str, str], ...] = ()

    def as_dict(self) -> dict[str, str]:
        return dict(self.pairs)

    def merged(self, other: SparkConf) -> SparkConf:
        """These settings overridden by ``other``'s (the command line over the spec)."""
        return SparkConf(tuple(sorted({**self.as_dict(), **other.as_dict()}.items())))

    def described(self) -> str:
        """The keys, for progress lines (values never: a value may be a credential)."""
        return ", ".join(key for key, _ in self.pairs)

    def __repr__(self) -> str:
        shown = {k: "<secret>" if is_secret(k) else v for k, v in self.pairs}
        return f"SparkConf({shown})"

    def __bool__(self) -> bool:
        return bool(self.pairs)


def _flattened(section: dict, prefix: str = "") -> list[tuple[str, Any]]:
    pairs = []
    for key, value in section.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict):
            pairs.extend(_flattened(value, name))
        else:
            pairs.append((name, value))
    return pairs


def _value_text(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return str(value)
    return None


def conf_problems(key: str, value: str, where: str) -> list[str]:
    """The rules one setting breaks (``where`` names the field or flag), never its value."""
    shown = f"{where} {key!r}"
    if not _KEY.match(key):
        return [f"{shown}: not a Spark setting's key (letters, digits, '.', '_', '-', '/', ':')"]
    if key == "spark.master":
        return [
            f"{shown}: the master is set by run.master (or --master), not as a setting; "
            "move it there"
        ]
    if "\n" in value or "\x00" in value:
        return [f"{shown}: the value holds a line break or NUL character"]
    return []


def read_spark_conf(raw: Any, problems: list[str]) -> SparkConf:
    """``[run.spark_conf]``: string, integer or boolean values, nested keys joined by dots.

    Only the settings of the allowlist (`dp_pipeline.release.spec.spark_allowlist`):
    a spec's settings never make Spark run code the spec's author chose.
    """
    if not isinstance(raw, dict):
        problems.append(
            f"run.spark_conf = {show_value(raw)}: must be a table of Spark settings, e.g. "
            '[run.spark_conf] with "spark.sql.session.timeZone" = "UTC"'
        )
        return SparkConf()
    pairs = {}
    for key, value in _flattened(raw):
        text = _value_text(value)
        if text is None:
            shown = "a value" if is_secret(key) else show_value(value)
            problems.append(
                f"run.spark_conf {key!r} = {shown}: must be a string, an integer or true/false"
            )
            continue
        found = conf_problems(key, text, "run.spark_conf")
        if not found:
            # The spec's author may not run code: only the allowlist's settings.
            refused = spec_setting_problem(key, text)
            found = [] if refused is None else [refused]
        problems.extend(found)
        if not found:
            pairs[key] = text
    return SparkConf(tuple(sorted(pairs.items())))


def parse_conf_arguments(arguments: list[str] | None, problems: list[str]) -> SparkConf:
    """``--conf KEY=VALUE`` arguments (repeated); each bad one appends a problem."""
    pairs = {}
    for argument in arguments or ():
        key, equals, value = argument.partition("=")
        key = key.strip()
        if not equals or not key:
            problems.append(
                "--conf: takes KEY=VALUE (as spark-submit does), e.g. --conf "
                "spark.sql.session.timeZone=UTC; one argument has no '=' after a key"
            )
            continue
        found = conf_problems(key, value, "--conf")
        problems.extend(found)
        if not found:
            pairs[key] = value
    return SparkConf(tuple(sorted(pairs.items())))


def identity_settings(conf: SparkConf) -> dict[str, str]:
    """The settings that can change a released number (see the module doc), for the identity."""
    return {
        key: value
        for key, value in conf.pairs
        if key.startswith("spark.sql.")
        and not is_secret(key)
        and not any(
            key == rule or (rule.endswith(".") and key.startswith(rule))
            for rule in PERFORMANCE_ONLY
        )
    }
