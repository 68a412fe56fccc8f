"""Publishing to an output URI (viewfs, HDFS, object stores, ``file://``).

The release is made in a private local staging folder exactly as a local
release is (the same writers, so the same bytes; ``manifest.json`` last), then
published through a `ReleaseFileSystem` without ever showing a partial folder
at ``<output>/<release id>`` where the file system can rename a folder atomically:

1. every file is written into a hidden, owner-only (where the file system has
   permissions) sibling ``<output>/.<release id>.tmp-<pid>-<token>/``
   (`manifest.hidden_name`), ``manifest.json`` last;
2. the hidden folder is made final:

   - where a folder is renamed in one step (`ReleaseFileSystem.renames_atomically`:
     HDFS, a viewfs mount link onto HDFS or a local disk, ``file://``), it gets a
     new folder's permissions and is renamed to ``<output>/<release id>``, which
     readers see whole or not at all (a folder there that the marker below names,
     left by a killed copy or repair of this release, is removed first);
   - elsewhere (object stores: ``s3a``, ``gs``, ``abfss``, ``s3``), a hidden
     marker ``<output>/.<release id>.publishing`` (release id and digest) is
     written, the folder ``<output>/<release id>/`` is made owner-only where the
     file system has permissions, entries a killed run left there that the
     manifest does not name are removed, every file is copied from the hidden
     folder and ``manifest.json`` last: its presence, naming exactly the
     folder's files, is the commit point for readers (`read_remote_manifest`,
     `verified_files`); the folder then gets a new folder's permissions;
3. the hidden folder and the marker are removed.

The ledger records the manifest before step 1 and commits after step 3, so a
committed release id has its manifest in place. A run killed before the final
folder holds its manifest leaves nothing a reader trusts: a hidden folder
(removed by the next run of the id, which holds its lease:
`clean_remote_stale`), and on an object store a folder without a manifest
beside its marker, which lets the next run of the same release (same id and
digest) overwrite it; killed later, it leaves the complete release (and maybe
the hidden folder and the marker), which the next run checks, tidies and
commits. Any other folder at
``<output>/<release id>`` is refused, never deleted. A complete copy of the
same release is checked file by file against its manifest and not written
again; one whose files differ is repaired in place (the marker written and the
manifest removed first, so the copy is not trusted while only the files that
differ are written again, the manifest last).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from dp_pipeline.release.protocol import Checkpoint
from dp_pipeline.release.publish.filesystems import OutputLocationError, ReleaseFileSystem
from dp_pipeline.release.publish.manifest import (
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    PublicationError,
    hidden_name,
    is_hidden_name,
)

__all__ = [
    "RemoteReleaseDirectory",
    "check_remote_replaceable",
    "clean_remote_stale",
    "pending_name",
    "read_remote_manifest",
    "remote_hidden_folders",
    "verified_files",
]


def pending_name(release_id: str) -> str:
    """The hidden marker beside a release folder whose files are being copied or repaired
    in place (object stores, repairs): whose files the folder is about to hold."""
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


def remote_hidden_folders(filesystem: ReleaseFileSystem, release_id: str) -> list[str]:
    """The hidden folders (`manifest.hidden_name`) of exactly ``release_id`` at the root."""
    return [name for name in filesystem.list("") if is_hidden_name(name, release_id)]


def clean_remote_stale(filesystem: ReleaseFileSystem, release_id: str) -> list[str]:
    """Remove the hidden folders a killed run of exactly ``release_id`` left at the root;
    return their URIs (as messages show them).

    Call it only while holding the release id's lease: no live run owns them then.
    """
    removed = remote_hidden_folders(filesystem, release_id)
    for name in removed:
        filesystem.delete(name)
    return [filesystem.where(name) for name in removed]


class RemoteReleaseDirectory:
    """``with RemoteReleaseDirectory(fs, id, digest, staging) as folder:`` ...,
    ``.publish(manifest)``: the local staging folder is published to ``<root>/<id>/``.

    ``staging`` is a private local folder (the ledger's); the staging copy is
    ``staging/.<id>.tmp-<pid>-<token>`` (owner-only), removed on leaving the block,
    or by the next run of the id (`outputs.clean_stale`) after a kill. The hidden
    folder on the output, ``<root>/.<id>.tmp-<pid>-<token>``, is removed by
    `publish` once the release is final, on leaving the block after a failure, or
    by the next run of the id (`clean_remote_stale`) after a kill.
    """

    def __init__(
        self, filesystem: ReleaseFileSystem, release_id: str, digest: str, staging: Path
    ) -> None:
        self.filesystem = filesystem
        self.release_id = release_id
        self.digest = digest
        self.final = filesystem.where(release_id)
        token = secrets.token_hex(4)
        self.temporary = Path(staging) / hidden_name(release_id, "tmp", os.getpid(), token)
        self.hidden = hidden_name(release_id, "tmp", os.getpid(), token)
        self._hidden_made = False

    def __enter__(self) -> Path:
        self.temporary.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.temporary.mkdir(mode=0o700)
        os.chmod(self.temporary, 0o700)
        return self.temporary

    def check_replaceable(self, files: dict | None = None) -> None:
        check_remote_replaceable(self.filesystem, self.release_id, self.digest, files)

    def publish(
        self, manifest: dict, checkpoint: Callable[[Checkpoint], None] = lambda point: None
    ):
        """Publish the staged files (see the module doc); return the release's URI.

        ``checkpoint`` is called at each step (the crash tests stop there):
        "before_upload" (the hidden folder exists, empty), "mid_upload" after each
        file written into it, "after_hidden_manifest" (its manifest is written),
        "before_final" (just before the rename, or before the first copy with the
        marker written), "mid_copy" after each file copied to the final folder
        (object stores), "after_manifest" (the final folder holds its manifest; the
        hidden folder and the marker are not yet removed).
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
            if stale:
                self._repair(stale)
            elif fs.exists(pending_name(folder)):  # a copy killed after its manifest
                fs.make_plain(folder)
                fs.delete(pending_name(folder))
            return self.final
        hidden = self.hidden
        self._hidden_made = True
        fs.mkdirs(hidden, owner_only=True)
        checkpoint(Checkpoint.BEFORE_UPLOAD)
        for name in sorted(files):
            fs.write_bytes(f"{hidden}/{name}", _file_chunks(self.temporary / name))
            checkpoint(Checkpoint.MID_UPLOAD)
        fs.write_bytes(f"{hidden}/{MANIFEST_NAME}", (self.temporary / MANIFEST_NAME).read_bytes())
        checkpoint(Checkpoint.AFTER_HIDDEN_MANIFEST)
        if fs.renames_atomically():
            fs.make_plain(hidden)
            if fs.exists(folder):  # a killed copy or repair of this release (its marker)
                fs.delete(folder)
            checkpoint(Checkpoint.BEFORE_FINAL)
            fs.rename(hidden, folder)
        else:
            self._write_marker()
            fs.mkdirs(folder, owner_only=True)
            for name in fs.list(folder):
                if name not in files:  # a killed run's partial files or its manifest
                    fs.delete(f"{folder}/{name}")
            checkpoint(Checkpoint.BEFORE_FINAL)
            for name in sorted(files):
                fs.copy(f"{hidden}/{name}", f"{folder}/{name}")
                checkpoint(Checkpoint.MID_COPY)
            fs.copy(f"{hidden}/{MANIFEST_NAME}", f"{folder}/{MANIFEST_NAME}")
        if read_remote_manifest(fs, folder) != manifest:
            raise PublicationError(
                f"release {self.release_id!r}: {self.final!r} does not hold exactly the "
                f"release's files and {MANIFEST_NAME} after its publication (changed "
                "meanwhile by someone else); it is not committed. Run the same release id "
                "again once nothing else writes there"
            )
        checkpoint(Checkpoint.AFTER_MANIFEST)
        fs.make_plain(folder)
        fs.delete(hidden)
        self._hidden_made = False
        if fs.exists(pending_name(folder)):
            fs.delete(pending_name(folder))
        return self.final

    def _write_marker(self) -> None:
        marker = {"release_id": self.release_id, "release_digest": self.digest}
        data = json.dumps(marker, sort_keys=True).encode()
        self.filesystem.write_bytes(pending_name(self.release_id), data)

    def _repair(self, stale: list[str]) -> None:
        """Write again, in place, the files of a complete copy that differ from its manifest."""
        fs, folder = self.filesystem, self.release_id
        self._write_marker()
        fs.delete(f"{folder}/{MANIFEST_NAME}")  # not trusted while it is repaired
        fs.mkdirs(folder, owner_only=True)
        for name in stale:
            fs.write_bytes(f"{folder}/{name}", _file_chunks(self.temporary / name))
        fs.write_bytes(f"{folder}/{MANIFEST_NAME}", (self.temporary / MANIFEST_NAME).read_bytes())
        fs.make_plain(folder)
        fs.delete(pending_name(folder))

    def __exit__(self, kind, value, traceback) -> None:
        shutil.rmtree(self.temporary, ignore_errors=True)
        if self._hidden_made:  # a failure before the release was final
            with contextlib.suppress(OutputLocationError):
                self.filesystem.delete(self.hidden)


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
