"""Where a release's `MasterKey` comes from.

Noise streams are keyed by (master key, release id, table, noise partition),
so a re-run of a release id must use the same key: re-emission then redraws
identical noise instead of a second, independent (and privacy-costly) draw.
The key is therefore persistent: the environment variable
``DP_PIPELINE_MASTER_KEY`` (64 hex digits) if set, otherwise the spec's
``run.key_file``, created on first use from the OS CSPRNG with mode 0600 in
a folder created with mode 0700. As ssh does with private keys, an existing
key file is refused when its group or others may read or write it, or when
another user owns it: such a key may be known (or planted) by someone else.
The key's bytes are never printed; only its public fingerprint is.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from dp_pipeline.randomness import MasterKey

__all__ = ["ENVIRONMENT_VARIABLE", "KeyFileError", "check_key_file", "load_or_create_master_key"]


class KeyFileError(ValueError):
    """A key file that may be known to someone else (its message says how to fix it)."""


def check_key_file(path: Path) -> None:
    """Refuse a key file readable or writable by group/others, or owned by another user."""
    status = path.stat()
    if not stat.S_ISREG(status.st_mode):
        raise KeyFileError(f"master key file {str(path)!r} is not a regular file")
    loose = stat.S_IMODE(status.st_mode) & 0o077
    if loose:
        raise KeyFileError(
            f"master key file {str(path)!r} has mode {stat.S_IMODE(status.st_mode):04o}: "
            "its group or others may read or change it, so the key may be known to "
            f"someone else; fix it with: chmod 600 {path}"
        )
    if hasattr(os, "geteuid") and status.st_uid != os.geteuid():
        raise KeyFileError(
            f"master key file {str(path)!r} is owned by user id {status.st_uid}, not by "
            f"the user running the release ({os.geteuid()}); a key another user controls "
            f"may be known to them; use your own key file (chown, or a new --key-file)"
        )


ENVIRONMENT_VARIABLE = "DP_PIPELINE_MASTER_KEY"


def load_or_create_master_key(key_file: str | os.PathLike[str], progress=None) -> MasterKey:
    """The master key from ``$DP_PIPELINE_MASTER_KEY``, else ``key_file`` (created if absent)."""
    if os.environ.get(ENVIRONMENT_VARIABLE):
        return MasterKey.from_env(ENVIRONMENT_VARIABLE)
    path = Path(key_file)
    if path.exists():
        check_key_file(path)
        return MasterKey.from_file(path)
    if not path.parent.exists():
        path.parent.mkdir(mode=0o700, parents=True)
        os.chmod(path.parent, 0o700)  # the mode argument is filtered by the umask
    key = MasterKey.generate()
    # O_EXCL: two first runs racing cannot each write a different key.
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        check_key_file(path)
        return MasterKey.from_file(path)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(_hex(key) + "\n")
    if progress is not None:
        progress(
            f"created a new master key at {path} (fingerprint {key.fingerprint}); keep it "
            "secret and backed up: re-running a release id needs the same key"
        )
    return key


def _hex(key: MasterKey) -> str:
    # The only place the key's bytes leave memory: into its own 0600 file.
    return key._key.hex()
