"""Re-emitting a committed release, and what an earlier copy at the output must match.

A release id re-emits the bytes recorded at its first publication or nothing
(`dp_pipeline.release.publish.manifest.check_same_bytes`). This module makes
that hold before anything is computed or written:

- **What made the bytes.** Publication records, with the manifest, the engine
  and the versions that made the files (`made_by`: the engine, its library's
  version and dp_pipeline's). Another engine or version may parse or write the
  same input differently, and two copies with the same noise and other bytes
  give away their exact difference; so a re-emission that must recompute is
  refused before it reads a row or writes a file when any of them differs
  (`check_maker`, exit 5), naming the engine and version to use.
- **No recomputation when the published copy is intact.** A committed
  release whose folder at this run's output holds exactly the recorded files,
  each with its recorded SHA-256, is the re-emission: nothing is computed or
  written (`intact_copy`). Only a missing or altered copy is recomputed.
- **Earlier copies at the output, before the reservation.** A folder of this
  release id made from another identity (another spec, input or key) means the
  id is taken: refused as changed (exit 5, "use a new release id"), whatever
  the output location or ledger. A folder of the same identity that this
  ledger does not record (made under another ledger) would only be refused at
  publication, after the spend: it is refused first (`check_earlier_copy`).

Everything compared is public: release ids, digests of the identity and of
the published files, engine names and version strings. No message names a
table or file that differs (which one would depend on the data).
"""

from __future__ import annotations

import hashlib
import json
from importlib import metadata
from pathlib import Path

from dp_pipeline.release.ledger.identity import ReleaseIdentity
from dp_pipeline.release.ledger.records import LedgerEntry, ReleaseIdReuseError
from dp_pipeline.release.publish.filesystems import ReleaseFileSystem
from dp_pipeline.release.publish.manifest import MANIFEST_NAME, PublicationError, read_manifest
from dp_pipeline.release.publish.remote import read_remote_manifest

__all__ = [
    "EngineChangedError",
    "PublishedChangedError",
    "check_earlier_copy",
    "check_maker",
    "intact_copy",
    "made_by",
]

_ENGINE_LIBRARIES = {"pandas": "pandas", "spark": "pyspark"}
_REPORT = "privacy_report.json"


class PublishedChangedError(ReleaseIdReuseError):
    """The output holds this release id published with another identity: the id is taken."""


class EngineChangedError(ReleaseIdReuseError):
    """A committed release would be recomputed by another engine or version than made it."""


def _installed(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def made_by(engine: str) -> dict[str, str | None]:
    """The engine and versions that make a release's bytes (recorded at publication).

    Versions are the installed distributions' (what a deployed job runs), read
    without importing the engine (no JVM is started for it).
    """
    library = _installed(_ENGINE_LIBRARIES.get(engine, engine))
    return {"engine": engine, "engine_version": library, "dp_pipeline": _installed("dp-pipeline")}


def _described(maker: dict) -> str:
    version = maker.get("engine_version")
    text = f"the {maker.get('engine')} engine" + (f" {version}" if version else "")
    return text + (f" with dp_pipeline {maker['dp_pipeline']}" if maker.get("dp_pipeline") else "")


def check_maker(
    release_id: str, recorded: dict | None, recorded_engine: str | None, engine: str
) -> None:
    """Refuse (`EngineChangedError`) to recompute a committed release with another maker.

    ``recorded`` is the manifest the ledger recorded (its ``made_by``, absent in
    ledgers written before it was recorded: then only the engine is compared).
    Called before the run reads a row, so nothing is written when it refuses.
    """
    maker = (recorded or {}).get("made_by") or {"engine": recorded_engine}
    if maker.get("engine") is None:
        return  # nothing recorded to compare: the byte check at publication still holds
    now = made_by(engine)
    keys = [key for key in ("engine", "engine_version", "dp_pipeline") if key in maker]
    if all(maker[key] == now[key] for key in keys):
        return
    flag = f"--engine {maker['engine']}"
    raise EngineChangedError(
        f"release id {release_id!r} was published by {_described(maker)}; this run would "
        f"recompute it with {_described({k: now[k] for k in keys})}, which may make other "
        "bytes with the same noise, so nothing was read or written. The published copy is "
        "not at this run's output (or was altered): re-emit it where it was published, or "
        f"run this release id with {flag} and that version, or use a new release id"
    )


def _verified(files: dict, read) -> bool:
    """Whether every recorded file reads back with its recorded SHA-256 (``read(name)``)."""
    try:
        return all(
            hashlib.sha256(read(name)).hexdigest() == entry["sha256"]
            for name, entry in files.items()
        )
    except (OSError, PublicationError):
        return False


def intact_copy(
    recorded: dict | None, final: Path | None, filesystem: ReleaseFileSystem | None, release_id
) -> dict | None:
    """The published privacy report when this run's output holds the recorded release intact.

    ``final`` is a local release folder, or ``filesystem`` (with ``release_id``)
    an output URI's. Intact: its manifest names exactly the files the ledger
    recorded (``recorded["files"]``) and each reads back with its SHA-256. Else None
    (missing, partial or altered: the release is recomputed).
    """
    if recorded is None:
        return None
    files = recorded["files"]
    if final is not None:
        manifest = read_manifest(final) if final.is_dir() and not final.is_symlink() else None

        def read(name: str) -> bytes:
            return (final / name).read_bytes()
    else:
        manifest = read_remote_manifest(filesystem, release_id)

        def read(name: str) -> bytes:
            return filesystem.read_bytes(f"{release_id}/{name}")

    if manifest is None or manifest["files"] != files or not _verified(files, read):
        return None
    try:
        return json.loads(read(_REPORT)) if _REPORT in files else {}
    except (OSError, ValueError):
        return None


def _recorded_identity(entry: LedgerEntry | None, manifest: dict) -> ReleaseIdentity | None:
    """The identity this ledger records for the copy's release id, if it is the copy's."""
    try:
        recorded = ReleaseIdentity.from_dict(entry.identity)
    except (AttributeError, KeyError, TypeError, ValueError):  # no entry, or none recorded
        return None
    return recorded if recorded.digest == manifest.get("release_digest") else None


def check_earlier_copy(
    release_id: str,
    identity: ReleaseIdentity,
    entry: LedgerEntry | None,
    final: Path | None,
    filesystem: ReleaseFileSystem | None,
    where: str,
) -> None:
    """Refuse before the reservation an output copy of ``release_id`` this run cannot publish.

    A manifest of ``release_id`` with another release digest than ``identity``'s:
    `PublishedChangedError` (exit 5; the id was published with another spec, input or
    key, whichever ledger recorded it; the parts that differ are named when this
    ledger records that identity). The same digest while this ledger records no
    publication of the id (``entry``): the copy was made under another ledger, and
    publishing would be refused after the spend; `PublicationError` (exit 2), naming
    the ledger and the output to change. A recorded publication with other files is
    left to the re-emission's byte check (`check_same_bytes`).
    """
    if final is not None:
        manifest = read_manifest(final) if final.is_dir() and not final.is_symlink() else None
    else:
        manifest = read_remote_manifest(filesystem, release_id)
    if manifest is None or manifest.get("release_id") != release_id:
        return  # not a copy of this release: `check_replaceable` decides
    if manifest.get("release_digest") != identity.digest:
        recorded = _recorded_identity(entry, manifest)
        # In the ledger's words when it records the copy's identity (it names the parts).
        found = (
            f"is {entry.status} with another spec, input or key; these parts differ: "
            + "; ".join(recorded.differences(identity))
            + f"; its copy at {where!r} is left as it is"
            if recorded is not None
            else f"is already published at {where!r} with another spec, input or key (its "
            "manifest's release digest differs from this run's)"
        )
        raise PublishedChangedError(
            f"release id {release_id!r} {found}. The same release id must always publish "
            "the same release (other noise on the same data, or the same noise on other "
            "data, reveals the exact values), so nothing was reserved or written. Use a new "
            "release id."
        )
    if entry is None or entry.status == "aborted" or entry.manifest is None:
        raise PublicationError(
            f"release {release_id!r}: the output folder {where!r} holds a copy of this "
            f"release ({MANIFEST_NAME} of the same spec, input and key) that this ledger "
            "does not record: it was published under another ledger. Nothing was reserved "
            "or written; run with the ledger it was published under (--ledger or run.ledger), "
            "or set another output folder (run --output DIR)"
        )
