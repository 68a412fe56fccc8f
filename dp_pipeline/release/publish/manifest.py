"""Release folders: their hidden names, the manifest written last, and what may be replaced.

A release is written into a hidden, owner-only sibling of its final folder,
``out/.<release id>.tmp-<pid>-<token>/`` (an earlier copy being replaced is
renamed to ``.<release id>.old-<pid>-<token>``). ``manifest.json`` is written
last: every other file's SHA-256 and size, the release id and the release's
digest (`dp_pipeline.release.ledger.identity`). A folder without a manifest, or whose
files are not exactly the manifest's, is not a release: readers and later runs
trust a release folder only through its manifest (where no atomic rename
exists, as on object stores, the manifest copied last into the final folder is
the commit point for readers: `dp_pipeline.release.publish.remote`).

The ledger records the manifest when publication starts, so a release id
re-emits the same bytes or nothing (`check_same_bytes`), and a folder at the
final location is replaced only by the same release's bytes (`check_replaceable`);
any other folder there (a user's) is never deleted. Names are matched exactly:
the hidden folders of release ``x`` are never those of ``x.y``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from dp_pipeline.errors import PublicationError
from dp_pipeline.release.publication_rules import (
    check_same_bytes,
    hidden_folders,
    hidden_name,
    is_hidden_name,
)

__all__ = [
    "MANIFEST_FORMAT",
    "MANIFEST_NAME",
    "PublicationError",
    "check_replaceable",
    "check_same_bytes",
    "hidden_folders",
    "hidden_name",
    "is_hidden_name",
    "read_manifest",
    "write_manifest",
]

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = 1
_FORMAT = MANIFEST_FORMAT
_CHUNK = 1 << 20


def _file_entry(path: Path) -> dict:
    """SHA-256 and size of ``path``, read once; the file is also flushed to disk."""
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
        os.fsync(handle.fileno())
    return {"sha256": digest.hexdigest(), "bytes": size}


def write_manifest(
    folder: Path, release_id: str, release_digest: str, made_by: dict | None = None
) -> dict:
    """Hash every file of ``folder`` and write ``manifest.json`` last; return the manifest.

    Every file is read once (and flushed to disk: the manifest pass is also the
    durability pass before publication). Sub-folders are not part of a release.
    ``made_by`` (the engine and versions that made the files,
    `dp_pipeline.release.reemit.made_by`) is recorded beside them when given.
    """
    files = {}
    for path in sorted(folder.iterdir()):
        if path.name != MANIFEST_NAME and path.is_file():
            files[path.name] = _file_entry(path)
    manifest = {
        "format": _FORMAT,
        "release_id": release_id,
        "release_digest": release_digest,
        "files": files,
    }
    if made_by is not None:
        manifest["made_by"] = made_by
    target = folder / MANIFEST_NAME
    with target.open("w") as handle:
        handle.write(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    return manifest


def read_manifest(folder: Path) -> dict | None:
    """The manifest of ``folder`` if it is a release folder (its files exactly the manifest's).

    Returns None when the folder has no readable manifest or holds other entries
    than the manifest names (a user's folder, a half-written copy).
    """
    try:
        manifest = json.loads((folder / MANIFEST_NAME).read_text())
        files = manifest["files"]
        if manifest.get("format") != _FORMAT or not isinstance(files, dict):
            return None
        entries = {path.name for path in folder.iterdir()}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if entries != {*files, MANIFEST_NAME}:
        return None
    return manifest


def check_replaceable(
    final: Path, release_id: str, release_digest: str | None = None, files=None
) -> None:
    """Refuse unless ``final`` is absent or an earlier copy of the same release.

    An earlier copy has a manifest of the same release id (and, when given,
    the same release digest) and no file the manifest does not name; with
    ``files`` (the new manifest's entries) its files must also be the same
    bytes. Anything else at ``final`` is someone's folder and is never deleted.
    """
    if not os.path.lexists(final):
        return
    manifest = read_manifest(final) if final.is_dir() and not final.is_symlink() else None
    same = (
        manifest is not None
        and manifest.get("release_id") == release_id
        and release_digest in (None, manifest.get("release_digest"))
        and (files is None or manifest["files"] == files)
    )
    if not same:
        raise PublicationError(
            f"release {release_id!r}: the output folder {str(final)!r} exists and is not an "
            f"earlier copy of this release (no {MANIFEST_NAME} of this release, other "
            "files, or other bytes); it is left as it is and nothing was published there. "
            "Move it away or set another output folder (run --output DIR), then run the "
            "same release id again"
        )
