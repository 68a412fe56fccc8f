"""Publishing to a file system without an atomic rename (object stores, viewfs, HDFS).

The release is made in a private local staging folder exactly as a local
release is (the same writers, so the same bytes; ``manifest.json`` last), then
copied to ``<output>/<release id>/`` through a `ReleaseFileSystem`:

1. a hidden marker ``<output>/.<release id>.publishing`` (release id and digest)
   says whose files the folder is about to hold;
2. the folder is made owner-only where the file system has permissions, and
   every file is written (on a resume, over what a killed run left);
3. entries the manifest does not name are removed, and ``manifest.json`` is
   written last: its presence, naming exactly the folder's files, is the
   commit point for readers (`read_remote_manifest`, `verified_files`);
4. the folder gets a new folder's permissions and the marker is removed.

The ledger records the manifest before step 1 and commits after step 4, so a
committed release id has its manifest in place. A run killed at any step
leaves a folder without a manifest (never trusted) and the marker, which lets
the next run of the same release (same id and digest, holding the id's lease)
overwrite it; any other folder at ``<output>/<release id>`` is refused, never
deleted. A complete copy of the same release is checked file by file against
its manifest and only files that differ are written again (the manifest is
removed first, so the copy is not trusted while it is repaired).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from dp_pipeline.release.publish.filesystems import ReleaseFileSystem
from dp_pipeline.release.publish.manifest import (
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    PublicationError,
    hidden_name,
)

__all__ = [
    "RemoteReleaseDirectory",
    "check_remote_replaceable",
    "pending_name",
    "read_remote_manifest",
    "verified_files",
]


def pending_name(release_id: str) -> str:
    """The hidden marker beside a release folder whose files are being written."""
    return f".{release_id}.publishing"


def read_remote_manifest(filesystem: ReleaseFileSystem, folder: str) -> dict | None:
    """The manifest of ``folder`` if it names exactly the folder's files, else None."""
    try:
        entries = set(filesystem.list(folder))
        if MANIFEST_NAME not in entries:
            return None
        manifest = json.loads(filesystem.read_bytes(f"{folder}/{MANIFEST_NAME}"))
        files = manifest["files"]
        if manifest.get("format") != MANIFEST_FORMAT or not isinstance(files, dict):
            return None
    except (ValueError, KeyError, TypeError):
        return None
    if entries != {*files, MANIFEST_NAME}:
        return None
    return manifest


def _entry(chunks: Iterator[bytes]) -> dict:
    digest = hashlib.sha256()
    size = 0
    for chunk in chunks:
        digest.update(chunk)
        size += len(chunk)
    return {"sha256": digest.hexdigest(), "bytes": size}


def _pending(filesystem: ReleaseFileSystem, release_id: str) -> dict | None:
    try:
        if not filesystem.exists(pending_name(release_id)):
            return None
        marker = json.loads(filesystem.read_bytes(pending_name(release_id)))
    except ValueError:
        return None
    return marker if isinstance(marker, dict) else None


def check_remote_replaceable(
    filesystem: ReleaseFileSystem,
    release_id: str,
    release_digest: str | None = None,
    files: dict | None = None,
) -> None:
    """Refuse unless ``<root>/<release id>`` is absent, an earlier complete copy of this
    release (same id, digest and, with ``files``, the same bytes recorded), or what a
    killed run of this release left (its marker: same id and digest)."""
    if not filesystem.exists(release_id):
        return
    manifest = read_remote_manifest(filesystem, release_id)
    if manifest is not None:
        same = (
            manifest.get("release_id") == release_id
            and release_digest in (None, manifest.get("release_digest"))
            and (files is None or manifest["files"] == files)
        )
    else:
        marker = _pending(filesystem, release_id)
        same = (
            marker is not None
            and marker.get("release_id") == release_id
            and release_digest in (None, marker.get("release_digest"))
        )
    if not same:
        raise PublicationError(
            f"release {release_id!r}: the output folder {filesystem.where(release_id)!r} "
            f"exists and is not a copy of this release (no {MANIFEST_NAME} of this release "
            "and no marker of its interrupted publication, other files, or other bytes); "
            "it is left as it is and nothing was published there. Move it away or set "
            "another output (run --output URI), then run the same release id again"
        )


class RemoteReleaseDirectory:
    """``with RemoteReleaseDirectory(fs, id, digest, staging) as folder:`` ...,
    ``.publish(manifest)``: the local staging folder is copied to ``<root>/<id>/``.

    ``staging`` is a private local folder (the ledger's); the staging copy is
    ``staging/.<id>.tmp-<pid>-<token>`` (owner-only), removed on leaving the block,
    or by the next run of the id (`outputs.clean_stale`) after a kill.
    """

    def __init__(
        self, filesystem: ReleaseFileSystem, release_id: str, digest: str, staging: Path
    ) -> None:
        self.filesystem = filesystem
        self.release_id = release_id
        self.digest = digest
        self.final = filesystem.where(release_id)
        self.temporary = Path(staging) / hidden_name(
            release_id, "tmp", os.getpid(), secrets.token_hex(4)
        )

    def __enter__(self) -> Path:
        self.temporary.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.temporary.mkdir(mode=0o700)
        os.chmod(self.temporary, 0o700)
        return self.temporary

    def check_replaceable(self, files: dict | None = None) -> None:
        check_remote_replaceable(self.filesystem, self.release_id, self.digest, files)

    def publish(self, manifest: dict, checkpoint: Callable[[str], None] = lambda name: None):
        """Copy the staged files, ``manifest.json`` last (see the module doc); return the URI.

        ``checkpoint`` is called with "mid_upload" after each file is written and
        "after_manifest" once the manifest is in place (the crash tests stop there).
        """
        self.check_replaceable(manifest["files"])
        fs, folder, files = self.filesystem, self.release_id, manifest["files"]
        existing = read_remote_manifest(fs, folder)
        if existing == manifest:
            stale = [
                name
                for name, entry in sorted(files.items())
                if _entry(fs.read_chunks(f"{folder}/{name}")) != entry
            ]
            if not stale:
                if fs.exists(pending_name(folder)):  # killed after its manifest was written
                    fs.make_plain(folder)
                    fs.delete(pending_name(folder))
                return self.final
            fs.delete(f"{folder}/{MANIFEST_NAME}")  # not trusted while it is repaired
        else:
            stale = sorted(files)
        marker = {"release_id": self.release_id, "release_digest": self.digest}
        fs.write_bytes(pending_name(folder), json.dumps(marker, sort_keys=True).encode())
        fs.mkdirs(folder, owner_only=True)
        for name in stale:
            fs.write_bytes(f"{folder}/{name}", _file_chunks(self.temporary / name))
            checkpoint("mid_upload")
        for name in fs.list(folder):
            if name not in files:  # a killed run's partial or temporary files
                fs.delete(f"{folder}/{name}")
        fs.write_bytes(f"{folder}/{MANIFEST_NAME}", (self.temporary / MANIFEST_NAME).read_bytes())
        checkpoint("after_manifest")
        fs.make_plain(folder)
        fs.delete(pending_name(folder))
        return self.final

    def __exit__(self, kind, value, traceback) -> None:
        shutil.rmtree(self.temporary, ignore_errors=True)


def _file_chunks(path: Path, size: int = 4 << 20) -> Iterator[bytes]:
    with path.open("rb") as handle:
        while chunk := handle.read(size):
            yield chunk


def verified_files(filesystem: ReleaseFileSystem, folder: str, suffix: str) -> dict[str, bytes]:
    """The bytes of the files named ``*<suffix>`` of a complete release ``folder``, each
    checked against its manifest's SHA-256 (`PublicationError` otherwise)."""
    manifest = read_remote_manifest(filesystem, folder)
    if manifest is None:
        raise PublicationError(
            f"{filesystem.where(folder)!r} is not a complete release: it has no {MANIFEST_NAME} "
            "naming exactly its files (a folder written by an interrupted run, or not a release)"
        )
    contents = {}
    for name, entry in sorted(manifest["files"].items()):
        if not name.endswith(suffix):
            continue
        data = filesystem.read_bytes(f"{folder}/{name}")
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise PublicationError(
                f"{filesystem.where(f'{folder}/{name}')!r} differs from the release's "
                f"{MANIFEST_NAME}: the file was changed after publication; read the release "
                "from a trusted copy"
            )
        contents[name] = data
    return contents
