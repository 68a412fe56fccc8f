"""The Spark engine's private cache folder: start-up files that hold no data and no keys."""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["private_cache_folder"]


def private_cache_folder() -> Path | None:
    """``$XDG_CACHE_HOME/dp_pipeline`` (else ``~/.cache/dp_pipeline``), made with mode 0700.

    None unless it is a folder of this user's that no one else may write to: what it
    holds (the driver's class archive, its Java launcher) runs in the driver, which
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
