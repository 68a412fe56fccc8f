"""The identity of a release: a digest of everything that can change a published number.

A release is a value: its canonical spec (every table with its keys, the
domains of those keys in their declared order, statistic, value column,
bounds, granularity, contribution bounds, quantile level, k and method; the
privacy unit, the neighbouring relation, the noise family and partitions, the
budget and the planned mechanisms; the hierarchy's levels and the content
digest of its mapping, and the post-processing section), the Spark SQL settings that
can change a number (`dp_pipeline.release.spec.spark_conf.identity_settings`: never a
performance, file system or credential setting), the keyed fingerprint of exactly the
files the engine reads, and the public fingerprint of the master key. Output
folder, engine and Spark master are not part of it: every engine publishes
the same numbers for the same identity. ``input.on_invalid = "error"`` enters
it through the plan: the noisy invalid-row count is one more planned mechanism
(`dp_pipeline.release.tables.invalid_rows`), so a release with it has another identity
than the same release under ``"drop"``; its threshold only decides, from that
accounted count, whether the release is published.

The identity is kept part by part (one SHA-256 per part), so that the ledger
can say which parts differ when a release id is run again with another spec
or input, and its digest (over the parts) labels every noise stream of the
release: two different releases never share noise, even across ledgers.
Every part is public (the fingerprint is a keyed HMAC), so the identity may
be stored and printed.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from fractions import Fraction
from typing import Any

from dp_pipeline.digest import digest_of
from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.release.spec.model import ReleaseSpec, TableSpec
from dp_pipeline.release.spec.spark_conf import identity_settings

__all__ = ["ReleaseIdentity", "release_identity"]

_VERSION = 1


def _exact(value: Any) -> Any:
    if isinstance(value, Fraction):
        return f"{value.numerator}/{value.denominator}"
    if isinstance(value, tuple | list):
        return [_exact(v) for v in value]
    return value


def _domain(declared: range | tuple) -> dict:
    if isinstance(declared, range):
        return {"range": [declared.start, declared.stop, declared.step]}
    return {"values": [_exact(v) for v in declared]}


_TABLE_FIELDS = {
    "statistic": ("statistic",),
    "keys": ("keys",),
    "value column": ("value",),
    "bounds": ("lower", "upper", "granularity"),
    "contribution bounds": ("max_cells", "max_per_cell"),
    "noise share": ("share", "sigma2"),
    "selection parameters": ("q", "k", "method"),
}


def _table_parts(position: int, table: TableSpec, spec: ReleaseSpec) -> dict[str, Any]:
    name = f"table {table.name!r}"
    known = {f for group in _TABLE_FIELDS.values() for f in group} | {"name", "cells"}
    missing = {f.name for f in fields(TableSpec)} - known
    if missing:  # a new TableSpec field must be given a part here, never left out
        raise DPTypeError(f"release identity: TableSpec fields {sorted(missing)} have no part")
    parts: dict[str, Any] = {f"{name} position": position}
    for label, names in _TABLE_FIELDS.items():
        parts[f"{name} {label}"] = {field: _exact(getattr(table, field)) for field in names}
    for key in table.keys:
        if key in spec.key_selections:  # its released keys are the selection's output
            parts[f"{name} key selection of {key!r}"] = spec.key_selections[key].to_dict()
        else:
            parts[f"{name} domain of {key!r}"] = _domain(spec.domains[key])
    return parts


@dataclass(frozen=True)
class ReleaseIdentity:
    """A release's identity: its id, one digest per part, and the digest of all parts."""

    release_id: str
    parts: dict[str, str]
    digest: str

    def differences(self, other: ReleaseIdentity) -> list[str]:
        """The parts (in this identity's order, then new ones) that differ from ``other``."""
        changed = [
            f"{part} {'is absent now' if part not in other.parts else 'changed'}"
            for part, value in self.parts.items()
            if other.parts.get(part) != value
        ]
        changed += [f"{part} is new" for part in other.parts if part not in self.parts]
        return changed or ["the identity format"]

    def to_dict(self) -> dict:
        return {
            "version": _VERSION,
            "release_id": self.release_id,
            "parts": dict(self.parts),
            "digest": self.digest,
        }

    @classmethod
    def of_parts(cls, release_id: str, described: dict[str, Any]) -> ReleaseIdentity:
        """The identity made of the given parts (each any JSON value)."""
        parts = {name: digest_of(value) for name, value in described.items()}
        return cls(release_id, parts, digest_of([_VERSION, parts]))

    @classmethod
    def from_dict(cls, data: dict) -> ReleaseIdentity:
        """The identity `to_dict` wrote; its digest is recomputed and must match."""
        if not isinstance(data, dict) or data.get("version") != _VERSION:
            raise DPValueError("a release identity needs version 1 and its parts")
        parts = {str(k): str(v) for k, v in data["parts"].items()}
        identity = cls(str(data["release_id"]), parts, digest_of([_VERSION, parts]))
        if identity.digest != data.get("digest"):
            raise DPValueError(f"release identity of {identity.release_id!r} is corrupt")
        return identity


def release_identity(
    spec: ReleaseSpec,
    mechanisms: dict,
    input_fingerprint: str,
    key_fingerprint: str,
) -> ReleaseIdentity:
    """The identity of ``spec`` run with the planned ``mechanisms`` on the fingerprinted input.

    ``mechanisms`` is the plan's accountant state (`PrivacyAccountant.to_dict`):
    a change of calibration is a change of release even when the spec is not.
    """
    described: dict[str, Any] = {
        "noise": {
            "family": spec.noise,
            "partitions": spec.noise_partitions,
            "neighbouring": spec.neighbouring,
        },
        "privacy unit": {"column": spec.privacy_unit},
        "budget": None if spec.budget is None else spec.budget.to_dict(),
        "planned mechanisms": mechanisms,
        "table list": [table.name for table in spec.tables],
    }
    for position, table in enumerate(spec.tables):
        described.update(_table_parts(position, table, spec))
    # Present only when declared, so a release without them keeps its identity (and noise).
    if spec.hierarchy is not None:
        described["hierarchy"] = {
            "levels": list(spec.hierarchy.levels),
            "mapping content": spec.hierarchy.digest,
        }
    if spec.postprocess is not None:
        described["post-processing"] = spec.postprocess.to_dict()
    described["input format"] = spec.input_format
    settings = identity_settings(spec.spark_conf)
    if settings:  # only Spark SQL settings that can change a number; never a credential
        described["spark settings"] = settings
    described["input data"] = input_fingerprint
    described["master key"] = key_fingerprint
    return ReleaseIdentity.of_parts(spec.release_id, described)
