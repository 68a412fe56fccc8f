"""Which local paths may be a release's input: regular files, and folders of regular files.

A spec is hostile input and names its input; the engines read whatever the path
opens. Some paths are not data at all, and reading them is either endless (a
device such as ``/dev/zero``, a FIFO that blocks until someone writes to it, a
socket) or reads a secret as rows (``/proc/self/environ`` holds the process's
environment, ``$DP_PIPELINE_MASTER_KEY`` included; the master key file; the
dp_pipeline home, where the key and the ledger live). Such an input would be
reserved and then fail, charged again on every re-run, or worse read as data.
`special_input_problem` names the rule a path breaks, from its kind and where it
resolves (symbolic links followed, hard links to the key file recognised by
their inode), so the run refuses it before the reservation. Only the path's
metadata is looked at (``stat``, ``realpath``): no byte of it is read.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import unquote, urlparse

from dp_pipeline.errors import DPValueError
from dp_pipeline.release.locations import HOME_VARIABLE, dp_pipeline_home

__all__ = [
    "SYSTEM_FOLDERS",
    "special_input_problem",
    "special_inputs_problem",
    "special_location_problem",
]

# Kernel and device trees: their files are views of the running system, never data.
SYSTEM_FOLDERS = (Path("/proc"), Path("/sys"), Path("/dev"))
# A memory file system of regular files (a RAM disk for data and scratch folders).
_SHARED_MEMORY = Path("/dev/shm")

# What the home holds: the key, the ledger (and SQLite's side files), the key's binding.
_HOME_FILES = frozenset(
    {
        "master.key",
        "ledger.sqlite",
        "ledger.sqlite-wal",
        "ledger.sqlite-shm",
        "ledger.sqlite-journal",
        "bindings.json",
    }
)

_RULE = (
    "an input must be a regular file or a folder of regular files outside the system's "
    "/proc, /sys and /dev, the dp_pipeline home and the master key; give the path of the "
    "data file or folder (input.path or --input)"
)


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _home() -> Path | None:
    try:
        return Path(os.path.realpath(dp_pipeline_home()))
    except (DPValueError, RuntimeError):
        return None  # no home can be named (a relative variable): nothing lives there


def _same_file(path: Path, other: str | None) -> bool:
    if not other:
        return False
    try:
        mine, theirs = os.stat(path), os.stat(other)
    except OSError:
        return False
    return (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)


def special_input_problem(
    path: Path, key_file: str | None, ledger_file: str | None = None
) -> str | None:
    """What makes local ``path`` no input (see the module docstring), or None.

    ``key_file``: the run's master key file, ``ledger_file``: its SQLite ledger
    (each refused as an input, and so is any name of it: a symbolic or hard link).
    The home itself, a folder holding it and the home's own files are refused too;
    other files a user keeps in the home folder are not the home's. The returned line
    names no byte of the path, only its kind and the rule; a path that does not exist
    is no concern here.
    """
    resolved = Path(os.path.realpath(path))
    for folder in SYSTEM_FOLDERS:
        if _within(resolved, folder) and not _within(resolved, _SHARED_MEMORY):
            return f"it is under {folder}, the system's own files, not data; {_RULE}"
    home = _home()
    if home is not None and _within(home, resolved):
        return (
            f"it is (or holds) the dp_pipeline home (${HOME_VARIABLE}, default "
            f"~/.dp_pipeline), where the master key and the ledger live; {_RULE}"
        )
    if _same_file(resolved, key_file):
        return f"it is the master key file of this run (run.key_file or --key-file); {_RULE}"
    if _same_file(resolved, ledger_file):
        return f"it is the ledger of this run (--ledger); {_RULE}"
    if home is not None and resolved.parent == home and resolved.name in _HOME_FILES:
        return f"it is the dp_pipeline home's {resolved.name}, not data; {_RULE}"
    try:
        mode = os.stat(resolved).st_mode
    except OSError:
        return None  # missing: the existence check names it
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    kind = (
        "a FIFO (named pipe)"
        if stat.S_ISFIFO(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "a device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "not a regular file"
    )
    return f"it is {kind}, not a regular file; {_RULE}"


def special_location_problem(
    location: str, key_file: str | None, ledger_file: str | None = None
) -> str | None:
    """`special_input_problem` of an input as written: a local path or a ``file:`` URI
    (another scheme names no local file: None)."""
    if "://" in location or location.startswith("file:"):
        parsed = urlparse(location)
        if parsed.scheme != "file":
            return None
        location = unquote(parsed.path)
    return special_input_problem(Path(location), key_file, ledger_file)


def special_inputs_problem(
    files: Iterable[Path], key_file: str | None, ledger_file: str | None = None
) -> str | None:
    """`special_input_problem` of the first of an input's listed files that has one, or None.

    A folder's files are listed by the engine (symbolic links among them are
    followed when they are read, so each is checked where it resolves); the line
    names the file as listed, as every message about an input's file does.
    """
    for file in files:
        problem = special_input_problem(file, key_file, ledger_file)
        if problem is not None:
            return f"its file {str(file)!r}: {problem}"
    return None
