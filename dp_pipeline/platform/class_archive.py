"""An opt-in class-data-sharing archive for the driver JVM: Spark's classes loaded once.

Off unless ``DP_PIPELINE_CLASS_ARCHIVE=1`` (or ``on``, ``true``, ``yes``): the archive
writes some 145 MiB per Java runtime, PySpark version and class path into the
user's cache (up to four of them), and measured on the README's job it did not make
the whole command faster; on a busy machine it shortens a bare session's start.
docs/scheduling.md has the switch and a ``spark-defaults.conf`` recipe.

A local Spark driver loads some 15,000 classes at start-up (the JVM, Hadoop,
Spark SQL, Netty, Jackson), parsing and verifying each: on a 2-core host that is
about 2.5 s of a 7-8 s session start. Java's dynamic class-data sharing (JEP 350,
Java 13 and later) writes the classes a JVM loaded to an archive when it exits
(``-XX:ArchiveClassesAtExit``); a later JVM maps that archive instead of loading
them again (``-XX:SharedArchiveFile``).

The archive is a cache: it holds class metadata from the JDK and Spark's jars, no
data and no secrets. It lives in ``$XDG_CACHE_HOME/dp_pipeline`` (else
``~/.cache/dp_pipeline``), a folder private to the user (not used otherwise: the
archive's classes run in the driver), one file per Java runtime,
PySpark version and class path. The JVM checks the archive itself (runtime, class
path, header) and starts without it when it does not match; its messages about that
are off. The first driver JVM that finds no archive writes one as it exits (the JVMs
that start meanwhile start without it); a file left half-written by a killed JVM has
no header and is replaced. The folder keeps the four newest archives (a new one
replaces the oldest). Even when switched on, it is not used when the Spark settings
already choose the driver's class sharing, or a ``spark-defaults.conf`` sets the
driver's Java options (a setting here would replace them).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from pathlib import Path

from dp_pipeline.platform.java import private_cache_folder

__all__ = ["MAGIC", "SWITCH", "SWITCHED_ON", "driver_java_options"]

SWITCH = "DP_PIPELINE_CLASS_ARCHIVE"
# The switch's values that turn the archive on; anything else (unset included) leaves it off.
SWITCHED_ON = ("1", "on", "true", "yes")
OPTION = "spark.driver.extraJavaOptions"
# A dynamic archive's header starts with this magic number (little-endian: x86-64, ARM64).
MAGIC = (0xF00BABA8).to_bytes(4, "little")
# Class path settings: another class path is another archive.
_CLASS_PATH_SETTINGS = ("spark.jars", "spark.jars.packages", "spark.driver.extraClassPath")
_QUIET = "-XX:+VerifySharedSpaces -Xlog:cds*=off"
# A JVM writes its archive as it exits, in seconds; a header-less file older than this
# was left by a JVM killed while writing.
WRITING_SECONDS = 600
# Archives kept in the folder (the newest): one per Java runtime and class path in use.
KEPT = 4


def driver_java_options(settings: dict[str, str], java_home: str) -> str | None:
    """The driver's ``spark.driver.extraJavaOptions`` with the class archive's options.

    ``settings``: the session's Spark settings (the caller's included); ``java_home``:
    the runtime the driver starts on. None when the archive is not used (not switched on,
    the settings choose class sharing themselves, a defaults file sets the options,
    or no cache folder can be made): the settings are then left as they are. Only
    start-up time changes: the archive holds no data, and a JVM that rejects it runs
    as without it.
    """
    if os.environ.get(SWITCH, "").strip().lower() not in SWITCHED_ON:
        return None  # opt-in: no file in the user's cache unless asked for
    current = settings.get(OPTION, "")
    if "SharedArchiveFile" in current or "ArchiveClassesAtExit" in current or "-Xshare" in current:
        return None
    if not current and _defaults_set_java_options():
        return None
    archive = _archive_path(settings, java_home)
    if archive is None:
        return None
    state = _state(archive)
    if state == "busy":
        return None
    if state == "ready":
        verb = "SharedArchiveFile"
    else:
        verb = "ArchiveClassesAtExit"
        _remove_older(archive)
    return f"{current} -XX:{verb}={archive} {_QUIET}".strip()


def _remove_older(archive: Path) -> None:
    """Keep the `KEPT - 1` newest other archives beside the one about to be written: each
    virtual environment (each class path) has its own, some 150 MiB each."""
    others = []
    for path in archive.parent.glob("spark-driver-*.jsa"):
        with contextlib.suppress(OSError):
            if path != archive and not path.is_symlink():
                others.append((path.stat().st_mtime, path))
    for _, path in sorted(others, reverse=True)[KEPT - 1 :]:
        with contextlib.suppress(OSError):
            path.unlink()


def _archive_path(settings: dict[str, str], java_home: str) -> Path | None:
    import pyspark

    key = hashlib.sha256()
    release = Path(java_home, "release")
    key.update(os.path.realpath(java_home).encode())
    key.update(release.read_bytes() if release.is_file() else b"")
    key.update(pyspark.__version__.encode())
    jars = Path(pyspark.__file__).parent / "jars"
    names = sorted(p.name for p in jars.glob("*.jar")) if jars.is_dir() else []
    key.update("\0".join([str(jars), *names]).encode())
    for name in _CLASS_PATH_SETTINGS:
        key.update(f"\0{name}={settings.get(name, '')}".encode())
    folder = private_cache_folder()
    if folder is None:
        return None
    return folder / f"spark-driver-{key.hexdigest()[:16]}.jsa"


def _state(archive: Path) -> str:
    """``ready`` (the archive has its header), ``busy`` (a header-less file younger than
    `WRITING_SECONDS`: a JVM may still be writing it, the header last) or ``absent``
    (no file, or a header-less one older: its writer was killed; it is removed)."""
    if archive.is_symlink():
        return "busy"  # not ours to follow or to remove
    try:
        with open(archive, "rb") as file:
            head = file.read(len(MAGIC))
            age = time.time() - os.fstat(file.fileno()).st_mtime
    except OSError:
        return "absent"
    if head == MAGIC:
        return "ready"
    if age < WRITING_SECONDS:
        return "busy"
    with contextlib.suppress(OSError):
        archive.unlink()
    return "absent"


def _defaults_set_java_options() -> bool:
    """True if the ``spark-defaults.conf`` spark-submit reads sets the driver's options."""
    folder = os.environ.get("SPARK_CONF_DIR")
    if not folder:
        import pyspark

        home = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
        folder = os.path.join(home, "conf")
    defaults = Path(folder, "spark-defaults.conf")
    try:
        lines = defaults.read_text(errors="replace").splitlines()
    except OSError:
        return False
    return any(line.split(None, 1)[:1] == [OPTION] for line in lines)
