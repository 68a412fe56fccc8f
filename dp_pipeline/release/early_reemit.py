"""Whether a Spark run is the retry of a committed release, decided before the engine starts.

A retry of a committed release id whose published copy is intact re-emits that
copy and computes nothing (`dp_pipeline.release.reemit.intact_copy`). On the Spark
engine the input is listed and fingerprinted by Spark, so the retry would start a
JVM (tens of seconds) only to find it has nothing to do. `committed_identity`
answers first, on the driver alone, for a local input and a local output folder:
the input's files are listed as Spark lists a local path (`spark_local_files`: a
file, a flat folder or a partitioned one),
fingerprinted with the same keyed fingerprint (`OpenedInput.fingerprints`: names
relative to the input, sizes, content digests), and the release's identity made
from it is compared with the identity and fingerprint the ledger records for the
committed release id.

Only an exact match re-emits before the engine starts, and only when the copy at
the output is intact. A match means the files read here are, name for name and
byte for byte, the files the release was computed from (the fingerprint is an
HMAC over their SHA-256 digests); the copy re-emitted is the bytes already
published, so nothing new is revealed. Anything else (no committed entry, another
identity, a copy missing or altered, an input listed here otherwise than Spark
listed it, a URI, a catalog table, a special file, a folder whose links loop) goes
the usual way through the engine, whose answers (exit 5 for another input, a
recompute of a damaged copy) are unchanged. No message here quotes the input.
"""

from __future__ import annotations

import os
from pathlib import Path

from dp_pipeline.release.input_kinds import special_inputs_problem
from dp_pipeline.release.ledger.identity import ReleaseIdentity, release_identity
from dp_pipeline.release.ledger.records import LedgerEntry
from dp_pipeline.release.sources.fingerprint import FileRangeError, local_path
from dp_pipeline.release.sources.source import OpenedInput
from dp_pipeline.release.spec.model import ReleaseSpec
from dp_pipeline.release.uris import is_uri

__all__ = ["committed_identity", "spark_local_files"]


def _hidden(name: str) -> bool:
    """Spark's rule for a name its file index skips (InMemoryFileIndex and Parquet's data
    paths): ``.name``, ``_name`` without ``=`` (``_x=1`` is a partition), ``*._COPYING_``."""
    return (
        name.startswith(".")
        or name.endswith("._COPYING_")
        or (name.startswith("_") and "=" not in name)
    )


def spark_local_files(location: str) -> tuple[Path, ...] | None:
    """The files Spark lists for the local input ``location``, sorted, or None when only
    Spark can say (left to the engine's path).

    A file is itself. A folder, its links followed and Spark's hidden names skipped:
    its own files when it has no subfolder, or every file of a partitioned tree (each
    subfolder ``name=value``, files only in the deepest ones), as Spark's file index
    lists them. None: no local path, no data file, a subfolder that is no partition
    (Spark reads only the top folder's files then), files beside partitions, or links
    that loop.
    """
    path = local_path(location)
    if path is None or not path.exists():
        return None
    if path.is_file():
        return (path,)
    found: list[Path] = []
    seen: set[tuple[int, int]] = set()
    for folder, folders, files in os.walk(path, followlinks=True):
        status = os.stat(folder)
        if (status.st_dev, status.st_ino) in seen:
            return None  # a link back up the tree: Spark's listing decides what it means
        seen.add((status.st_dev, status.st_ino))
        folders[:] = sorted(name for name in folders if not _hidden(name))
        if any("=" not in name for name in folders):
            return None  # not a partition: Spark's partition discovery decides
        data = [Path(folder) / name for name in files if not _hidden(name)]
        if data and folders:
            return None  # files beside partitions: Spark's partition discovery decides
        found.extend(data)
    return tuple(sorted(found)) or None


def committed_identity(
    spec: ReleaseSpec,
    mechanisms: dict,
    master,
    input_location: str | None,
    input_format: str,
    entry: LedgerEntry | None,
) -> tuple[ReleaseIdentity, tuple[str, str]] | None:
    """The identity and (fingerprint, content digest) of this run when it is a Spark run of
    the committed release ``entry`` records (same identity, same input fingerprint), read
    on the driver without starting the engine; None otherwise (see the module docstring).

    ``mechanisms`` is the plan's accountant state, ``input_location`` the input as
    written (a local path; None: a catalog table). Soundness: the fingerprint is
    `digests_fingerprint`'s keyed HMAC (collision resistant), so a match is the very
    files the release was made from; nothing here is output or logged.
    """
    if (
        spec.engine != "spark"
        or entry is None
        or entry.status != "committed"
        or entry.identity is None
        or input_location is None
        or is_uri(spec.output_dir)
    ):
        return None
    files = spark_local_files(input_location)
    if files is None or special_inputs_problem(files, spec.key_file, spec.ledger_path):
        return None  # the engine lists it and names any problem, as on a first run
    source = OpenedInput(
        Path(input_location), input_format, "spark", files, location=input_location
    )
    try:
        inputs = source.fingerprints(master)
    except (OSError, FileRangeError):
        return None  # changing under the run: the engine's path answers
    identity = release_identity(spec, mechanisms, inputs[0], master.fingerprint)
    try:
        recorded = ReleaseIdentity.from_dict(entry.identity)
    except (KeyError, TypeError, ValueError):
        return None
    if recorded.digest != identity.digest or entry.fingerprint != inputs[0]:
        return None
    return identity, inputs
