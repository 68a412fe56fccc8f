"""The file systems a release can be published to, behind one small interface.

A local output folder (no ``scheme://``) is written as it always was: a hidden
folder renamed into place (`dp_pipeline.release.publish.outputs`). Any other
output (``viewfs://``, ``hdfs://``, ``s3a://``, ``abfss://``, ``gs://``,
``file://``) is written through one of two implementations of
`ReleaseFileSystem`, each bound to the output's root URI and addressed by paths
relative to it, by the protocol of `dp_pipeline.release.publish.remote` (a
hidden folder made final by one rename where `ReleaseFileSystem.renames_atomically`,
else by copying its files):

- `HadoopFileSystem`: the Hadoop ``FileSystem`` of a classic Spark session (the
  JVM through py4j, with the session's Hadoop configuration: mount tables,
  credentials providers), so every scheme the session can write;
- `ArrowFileSystem`: ``pyarrow.fs`` for the schemes it supports (``file``, ``s3``,
  ``gs``, ``hdfs`` with libhdfs, ``abfs``), used without a classic session (the
  pandas engine, Spark Connect).

`open_filesystem` picks one or raises `OutputLocationError` (one line naming
the output and the fix). Messages and errors never quote a URI's user
information (`display_uri`) nor an underlying exception's text, which can hold
credentials: a refused login or permission, a missing folder and an unreachable
store are named by their kind with the fix (`output_failure_rule`, the rules of
an input's failures: a Python error's class and number, a Java exception's
causes), any other failure by the exception's class name.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import secrets
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from urllib.parse import urlsplit

from dp_pipeline.engines.spark.session.failures import Py4JError, Py4JJavaError
from dp_pipeline.errors import DPValueError
from dp_pipeline.release.sources.failures import output_failure_rule
from dp_pipeline.release.uris import display_uri, is_uri, join_uri, split_uri

__all__ = [
    "ArrowFileSystem",
    "HadoopFileSystem",
    "OutputLocationError",
    "ReleaseFileSystem",
    "display_uri",
    "has_jvm",
    "is_uri",
    "join_uri",
    "open_filesystem",
    "probe_write",
    "split_uri",
]

# The schemes whose Hadoop FileSystem renames a folder atomically (a viewfs path is
# resolved to its mount link's target first).
_ATOMIC_RENAME_SCHEMES = frozenset({"hdfs", "file"})

# Bytes moved per call between Python and the file system (py4j or Arrow).
CHUNK_BYTES = 4 << 20


class OutputLocationError(DPValueError):
    """The output location cannot be used: nothing was reserved or published there.

    ``rule`` is the kind of failure with its fix (`output_failure_rule`: refused
    credentials, no such folder, an unreachable store) when the file system's error
    showed one, else None.
    """

    def __init__(self, message: str, rule: str | None = None) -> None:
        super().__init__(message)
        self.rule = rule


# The operations in which a missing file or folder means the output's parent or bucket
# is missing (elsewhere it is the caller's to name).
_CREATING = frozenset({"open", "opening", "creating", "writing"})


def _failed(what: str, where: str, error: BaseException) -> OutputLocationError:
    """``what`` on ``where`` failed with ``error``: its class, and its kind with the fix when
    it shows one (`output_failure_rule`); never its text (it can quote credentials)."""
    shown = display_uri(where)
    kind = type(error).__name__
    if isinstance(error, Py4JJavaError):
        with contextlib.suppress(Exception):
            kind = error.java_exception.getClass().getSimpleName()
    scheme = urlsplit(str(where)).scheme.lower()
    rule = output_failure_rule(error, scheme, creating=what in _CREATING)
    if rule is not None:
        return OutputLocationError(
            f"{what} {shown!r} failed on its file system ({kind}): {rule}", rule
        )
    return OutputLocationError(f"{what} {shown!r} failed on its file system ({kind})")


def has_jvm(spark) -> bool:
    """Whether ``spark`` is a classic session whose JVM (and Hadoop FileSystem) is reachable."""
    return spark is not None and getattr(spark, "_jsc", None) is not None


class ReleaseFileSystem(ABC):
    """Files under one root URI, by relative ``/``-separated path.

    ``write_bytes`` replaces a file whole; ``list`` names a folder's entries
    (none for a missing folder); ``delete`` removes a file or a folder and what it
    holds; ``mkdirs(owner_only=True)`` makes a folder only its owner can read
    where the file system has permissions (object stores have none),
    ``make_plain`` gives it a new folder's default permissions; ``rename``
    moves a folder to a path that does not exist, ``copy`` copies one file.
    """

    root: str

    @abstractmethod
    def write_bytes(self, path: str, data: bytes | Iterable[bytes]) -> None: ...

    @abstractmethod
    def read_chunks(self, path: str) -> Iterator[bytes]: ...

    def read_bytes(self, path: str) -> bytes:
        return b"".join(self.read_chunks(path))

    @abstractmethod
    def list(self, path: str) -> list[str]: ...

    @abstractmethod
    def exists(self, path: str) -> bool: ...

    @abstractmethod
    def delete(self, path: str) -> None: ...

    @abstractmethod
    def mkdirs(self, path: str, owner_only: bool = False) -> None: ...

    @abstractmethod
    def make_plain(self, path: str) -> None: ...

    @abstractmethod
    def renames_atomically(self) -> bool:
        """Whether renaming a folder of the root to a sibling is one atomic step
        (readers see the old name or the new one, never a part)."""

    @abstractmethod
    def rename(self, source: str, target: str) -> None:
        """Rename the folder ``source`` to ``target``, which must not exist."""

    @abstractmethod
    def copy(self, source: str, target: str) -> None:
        """Copy the file ``source`` to ``target`` (replaced whole)."""

    def _refuse_existing(self, target: str) -> None:
        if self.exists(target):
            raise OutputLocationError(
                f"renaming to {self.where(target)!r}: it exists (written meanwhile by "
                "someone else); it is left as it is"
            )

    def close(self) -> None:
        """Release what the implementation holds (a private Hadoop FileSystem instance).

        Nothing by default: a pyarrow file system holds nothing to release.
        """
        return None

    def where(self, path: str = "") -> str:
        """The URI of ``path``, as messages show it (no user information)."""
        return display_uri(join_uri(self.root, path) if path else self.root)


def _chunks(data: bytes | Iterable[bytes]) -> Iterator[bytes]:
    if isinstance(data, bytes | bytearray | memoryview):
        view = memoryview(data)
        for start in range(0, len(view), CHUNK_BYTES):
            yield bytes(view[start : start + CHUNK_BYTES])
    else:
        yield from data


class HadoopFileSystem(ReleaseFileSystem):
    """The Hadoop FileSystem of ``root`` in a classic Spark session (py4j).

    A private instance (``FileSystem.newInstance``) with checksum files off: the
    session's cached instances are left as they are, and a local target of a
    mount table holds exactly the release's files (no ``.crc`` companions).
    """

    def __init__(self, spark, root: str) -> None:
        self.root = str(root).rstrip("/")
        jvm = spark._jvm
        self._jvm = jvm
        # A copy of the session's configuration in which a local target (``file://``,
        # also under a viewfs mount) is the raw local file system, never the session's
        # cached checksumming one: the folder then holds exactly the release's files.
        self._conf = jvm.org.apache.hadoop.conf.Configuration(spark._jsc.hadoopConfiguration())
        self._conf.set("fs.file.impl", "org.apache.hadoop.fs.RawLocalFileSystem")
        self._conf.set("fs.file.impl.disable.cache", "true")
        self._Path = jvm.org.apache.hadoop.fs.Path
        self._permission = jvm.org.apache.hadoop.fs.permission.FsPermission
        root_path = self._Path(self.root)
        self._fs = self._call(
            "open",
            self.root,
            lambda: jvm.org.apache.hadoop.fs.FileSystem.newInstance(root_path.toUri(), self._conf),
        )
        self._fs.setWriteChecksum(False)
        self._fs.setVerifyChecksum(False)

    def _call(self, what: str, where: str, action):
        # py4j's error text carries the Java message and stack, which can quote
        # credentials from the configuration or the URI: only its kind is kept.
        try:
            return action()
        except Py4JError as error:
            failure = _failed(what, where, error)
        raise failure from None

    def _path(self, path: str):
        return self._Path(join_uri(self.root, path) if path else self.root)

    def write_bytes(self, path: str, data: bytes | Iterable[bytes]) -> None:
        target = self._path(path)
        where = join_uri(self.root, path)

        def write():
            stream = self._fs.create(target, True)
            try:
                for chunk in _chunks(data):
                    stream.write(bytearray(chunk))
            finally:
                stream.close()

        self._call("writing", where, write)

    def read_chunks(self, path: str) -> Iterator[bytes]:
        where = join_uri(self.root, path)
        stream = self._call("reading", where, lambda: self._fs.open(self._path(path)))
        try:
            while chunk := self._call("reading", where, lambda: stream.readNBytes(CHUNK_BYTES)):
                yield bytes(chunk)
        finally:
            stream.close()

    def list(self, path: str) -> list[str]:
        target = self._path(path)

        def names():
            if not self._fs.exists(target):
                return []
            return sorted(s.getPath().getName() for s in self._fs.listStatus(target))

        return self._call("listing", join_uri(self.root, path), names)

    def exists(self, path: str) -> bool:
        target = self._path(path)
        where = join_uri(self.root, path)
        return bool(self._call("checking", where, lambda: self._fs.exists(target)))

    def delete(self, path: str) -> None:
        target = self._path(path)
        self._call("deleting", join_uri(self.root, path), lambda: self._fs.delete(target, True))

    def mkdirs(self, path: str, owner_only: bool = False) -> None:
        target = self._path(path)
        where = join_uri(self.root, path)
        self._call("creating", where, lambda: self._fs.mkdirs(target))
        if owner_only:
            self._set_permission(target, where, self._permission("700"))

    def make_plain(self, path: str) -> None:
        mode = self._permission.getDirDefault().applyUMask(self._permission.getUMask(self._conf))
        self._set_permission(self._path(path), join_uri(self.root, path), mode)

    def renames_atomically(self) -> bool:
        """HDFS (also behind a viewfs mount link) and local targets rename a folder in
        one step; object-store connectors (``s3a``, ``gs``, ``abfss``) copy its files."""
        root = self._path("")
        where = self.root
        resolved = self._call("resolving", where, lambda: self._fs.resolvePath(root))
        scheme = str(resolved.toUri().getScheme() or "").lower()
        return scheme in _ATOMIC_RENAME_SCHEMES

    def rename(self, source: str, target: str) -> None:
        self._refuse_existing(target)
        old, new = self._path(source), self._path(target)
        where = join_uri(self.root, target)
        if not self._call("renaming to", where, lambda: self._fs.rename(old, new)):
            raise OutputLocationError(
                f"renaming to {display_uri(where)!r} failed on its file system (refused)"
            )

    def copy(self, source: str, target: str) -> None:
        old, new = self._path(source), self._path(target)
        utilities = self._jvm.org.apache.hadoop.fs.FileUtil
        where = join_uri(self.root, target)

        def copy():
            return utilities.copy(self._fs, old, self._fs, new, False, True, self._conf)

        if not self._call("copying to", where, copy):
            raise OutputLocationError(
                f"copying to {display_uri(where)!r} failed on its file system (refused)"
            )

    def _set_permission(self, target, where: str, mode) -> None:
        from py4j.protocol import Py4JJavaError

        try:
            self._fs.setPermission(target, mode)
        except Py4JJavaError as error:
            # Object stores have no permissions: their folders are governed by the bucket.
            kind = error.java_exception.getClass().getSimpleName()
            if kind != "UnsupportedOperationException":
                raise OutputLocationError(
                    f"setting the permissions of {display_uri(where)!r} failed on its file "
                    f"system ({kind})"
                ) from None

    def close(self) -> None:
        # Closing a private instance: a failure there has nothing to report.
        with contextlib.suppress(Exception):
            self._fs.close()


class ArrowFileSystem(ReleaseFileSystem):
    """``pyarrow.fs`` for ``root`` (``file``, ``s3``, ``gs``, ``hdfs`` with libhdfs, ``abfs``)."""

    def __init__(self, root: str) -> None:
        from pyarrow import fs as arrow_fs

        self.root = str(root).rstrip("/")
        self._arrow = arrow_fs
        try:
            self._fs, self._base = arrow_fs.FileSystem.from_uri(self.root)
        except Exception as error:  # its text may quote the URI's secrets
            failure = _failed("opening", self.root, error)
            raise failure from None

    def _path(self, path: str) -> str:
        return posixpath.join(self._base, path) if path else self._base

    def _call(self, what: str, path: str, action):
        try:
            return action()
        except Exception as error:  # its text may quote the URI's secrets
            failure = _failed(what, join_uri(self.root, path) if path else self.root, error)
        raise failure from None

    def write_bytes(self, path: str, data: bytes | Iterable[bytes]) -> None:
        def write():
            with self._fs.open_output_stream(self._path(path), compression=None) as stream:
                for chunk in _chunks(data):
                    stream.write(chunk)

        self._call("writing", path, write)

    def read_chunks(self, path: str) -> Iterator[bytes]:
        stream = self._call(
            "reading", path, lambda: self._fs.open_input_stream(self._path(path), compression=None)
        )
        with stream:
            while chunk := self._call("reading", path, lambda: stream.read(CHUNK_BYTES)):
                yield chunk

    def _info(self, path: str):
        return self._fs.get_file_info(self._path(path))

    def list(self, path: str) -> list[str]:
        def names():
            if self._info(path).type != self._arrow.FileType.Directory:
                return []
            selector = self._arrow.FileSelector(self._path(path))
            return sorted(posixpath.basename(i.path) for i in self._fs.get_file_info(selector))

        return self._call("listing", path, names)

    def exists(self, path: str) -> bool:
        return self._call(
            "checking", path, lambda: self._info(path).type != self._arrow.FileType.NotFound
        )

    def delete(self, path: str) -> None:
        def delete():
            kind = self._info(path).type
            if kind == self._arrow.FileType.Directory:
                self._fs.delete_dir(self._path(path))
            elif kind != self._arrow.FileType.NotFound:
                self._fs.delete_file(self._path(path))

        self._call("deleting", path, delete)

    def mkdirs(self, path: str, owner_only: bool = False) -> None:
        self._call("creating", path, lambda: self._fs.create_dir(self._path(path)))
        if owner_only:
            self._chmod(path, 0o700)

    def make_plain(self, path: str) -> None:
        self._chmod(path, None)

    def renames_atomically(self) -> bool:
        """A local or HDFS (libhdfs) folder is renamed in one step; object stores copy."""
        return isinstance(self._fs, self._arrow.LocalFileSystem | self._arrow.HadoopFileSystem)

    def rename(self, source: str, target: str) -> None:
        self._refuse_existing(target)
        self._call(
            "renaming to", target, lambda: self._fs.move(self._path(source), self._path(target))
        )

    def copy(self, source: str, target: str) -> None:
        self._call(
            "copying to", target, lambda: self._fs.copy_file(self._path(source), self._path(target))
        )

    def _chmod(self, path: str, mode: int | None) -> None:
        # pyarrow.fs has no permissions; a local target gets them through os.
        if isinstance(self._fs, self._arrow.LocalFileSystem):
            if mode is None:
                umask = os.umask(0o077)
                os.umask(umask)
                mode = 0o777 & ~umask
            self._call("setting the permissions of", path, lambda: os.chmod(self._path(path), mode))


def open_filesystem(root: str, spark=None) -> ReleaseFileSystem:
    """The file system of the output ``root`` (a URI): the session's Hadoop FileSystem
    when ``spark`` is a classic session, else ``pyarrow.fs``; `OutputLocationError`
    (one line: the output and the fix) when neither can write it."""
    try:
        if has_jvm(spark):
            return HadoopFileSystem(spark, root)
    except OutputLocationError as error:
        if error.rule is not None:
            raise _output_error(display_uri(root), error.rule, error.rule) from None
        raise OutputLocationError(
            f"output.dir = {display_uri(root)!r} (or --output): the session has no file system "
            f"for it ({error}); check the URI's scheme and host, and the session's Hadoop "
            "configuration (spark.hadoop.* settings: mount tables, connectors), or name "
            "another output"
        ) from None
    scheme = urlsplit(str(root)).scheme.lower()
    if scheme not in ("file", "s3", "gs", "gcs", "hdfs", "abfs", "abfss"):
        where = "a Spark Connect session" if spark is not None else "the pandas engine"
        raise OutputLocationError(
            f"output.dir = {display_uri(root)!r} (or --output): {scheme}:// is written through "
            f"a classic Spark session's Hadoop file system, which {where} does not have; run "
            "with a classic session (--engine spark without a remote) or publish to a local "
            "folder or an s3://, gs://, hdfs:// or abfs:// output"
        )
    try:
        return ArrowFileSystem(root)
    except OutputLocationError as error:
        if error.rule is not None:
            raise _output_error(display_uri(root), error.rule, error.rule) from None
        raise OutputLocationError(
            f"output.dir = {display_uri(root)!r} (or --output): pyarrow cannot open it "
            f"({error}); check the URI and the file system's settings, or name another output"
        ) from None


def probe_write(filesystem: ReleaseFileSystem) -> None:
    """Create and delete a small hidden file at the root (`OutputLocationError` if either fails)."""
    name = f".dp-release-probe-{secrets.token_hex(8)}"
    try:
        filesystem.mkdirs("")
        filesystem.write_bytes(name, b"probe\n")
        filesystem.delete(name)
    except OutputLocationError as error:
        if error.rule is not None:
            raise _output_error(
                filesystem.where(),
                "cannot be written (a probe file could not be created and deleted there): "
                + error.rule,
                error.rule,
            ) from None
        raise OutputLocationError(
            f"output.dir = {filesystem.where()!r} (or --output): cannot be written (a probe "
            f"file could not be created and deleted there: {error}); grant this job write "
            "access there or name another output"
        ) from None


def _output_error(shown: str, what: str, rule: str) -> OutputLocationError:
    """The one line naming the output (``shown``: no user information), what failed and
    the rule's fix."""
    return OutputLocationError(f"output.dir = {shown!r} (or --output): {what}", rule)
