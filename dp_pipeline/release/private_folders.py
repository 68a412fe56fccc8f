"""Owner-only folders: every folder dp_pipeline creates for a key, a ledger or a record.

A leaf module (standard library only), so that the modules that keep private files
(`dp_pipeline.release.keys`, the ledger's backends, the registry of homes) share one rule
without importing one another.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["private_folder"]


def private_folder(folder: str | os.PathLike[str]) -> Path:
    """``folder``, creating it and every missing parent with mode 0700 (owner only).

    ``mkdir``'s mode is filtered by the umask, and ``parents=True`` gives the parents
    the default mode, so each folder created here is made and then set to 0700. An
    existing folder is left as it is.
    """
    folder = Path(folder)
    missing = []
    for path in (folder, *folder.parents):
        if path.exists():
            break
        missing.append(path)
    for path in reversed(missing):
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:  # created meanwhile by another run
            continue
        os.chmod(path, 0o700)
    return folder
