"""Which files on a Hadoop file system may be a release's input: regular files, no links.

`dp_pipeline.release.input_kinds` refuses local inputs that are no data (devices, FIFOs,
``/proc``, the dp_pipeline home, the master key file, a link to one). An input named by
a URI (``viewfs://``, ``hdfs://``, ...) reaches its files through Hadoop, where the same
things can hide: a symbolic link on HDFS, or a viewfs mount (which a spec's
``[run.spark_conf]`` may declare) whose target is the local disk, where Hadoop's local
file system reports a FIFO, a device or a link to the key as a plain file.

Guarantee. `hadoop_kinds_problem` looks, for every listed file whose file system can hold
links or map onto the local disk (every scheme but the object stores of
`OBJECT_STORES`, whose listings hold objects only), at its Hadoop ``FileStatus``
(``getFileLinkStatus``: a symbolic link, or anything that is not a file, is refused) and
at where the file system resolves it (``resolvePath``: a ``file:`` target is checked by
`special_input_problem` as a local input is). Metadata only: no byte of a file is read.
It runs before the reservation; the line it returns names the file as listed and the
rule, never a file-system message.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from dp_pipeline.release.input_kinds import special_input_problem

__all__ = ["OBJECT_STORES", "hadoop_kinds_problem"]

# Object stores: no symbolic links, devices or mounts of the local disk, and a listing
# of objects only (each a file); checking each would cost one request per file.
OBJECT_STORES = frozenset(
    {"s3", "s3a", "s3n", "gs", "abfs", "abfss", "wasb", "wasbs", "oss", "cos", "cosn", "obs"}
)

_RULE = (
    "an input on a Hadoop file system must be regular files, not symbolic links or "
    "mounts of the system's /proc, /sys or /dev, the dp_pipeline home or the master key; "
    "give the path of the data file or folder (input.path or --input)"
)


def _problem(jvm: Any, conf: Any, uri: str, key_file, ledger_file) -> str | None:
    path = jvm.org.apache.hadoop.fs.Path(uri)
    system = path.getFileSystem(conf)
    status = system.getFileLinkStatus(path)
    if status.isSymlink():
        return f"it is a symbolic link on its file system; {_RULE}"
    if not status.isFile():
        return f"it is not a regular file on its file system; {_RULE}"
    target = system.resolvePath(path).toUri()
    if str(target.getScheme() or "") != "file":
        return None
    local = special_input_problem(Path(str(target.getPath())), key_file, ledger_file)
    return None if local is None else f"its file system maps it onto the local disk, where {local}"


def hadoop_kinds_problem(
    spark: Any, uris: Sequence[str], key_file: str | None, ledger_file: str | None = None
) -> tuple[str, str] | None:
    """The first of ``uris`` (listed by ``spark``) that is no input and what makes it so,
    or None.

    Local files (plain paths, ``file:`` URIs) and object stores are left to their own
    checks; so is a Spark Connect session (its client has no JVM: the server's file
    systems are out of its reach). Raises the JVM's error when a status cannot be read
    (the caller names it in one line).
    """
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return None
    conf = None
    for uri in uris:
        scheme = urlparse(uri).scheme.lower()
        if scheme in ("", "file") or scheme in OBJECT_STORES:
            continue
        if conf is None:  # the session's Hadoop settings, the spec's mounts included
            conf = spark._jsparkSession.sessionState().newHadoopConf()
        problem = _problem(jvm, conf, uri, key_file, ledger_file)
        if problem is not None:
            return uri, problem
    return None
