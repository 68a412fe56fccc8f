"""Where a release's `MasterKey` comes from.

Noise streams are keyed by (master key, release id, table, noise partition),
so a re-run of a release id must use the same key: re-emission then redraws
identical noise instead of a second, independent (and privacy-costly) draw.
The key is therefore persistent: the environment variable
``DP_PIPELINE_MASTER_KEY`` (64 hex digits) if set, otherwise the spec's
``run.key_file`` (by default ``master.key`` in the dp_pipeline home,
`dp_pipeline.release.locations`), created on first use from the OS CSPRNG with
mode 0600 in a folder created with mode 0700 (every folder created on the way,
whatever the umask; `private_folder` also makes the ledger's folder). A key is
never created for a ledger that already records releases: those were made under
another key, and a new one would let the same release ids draw other noise. As
ssh does with private keys, an existing key file is refused when its group or
others may read or write it, or when another user owns it: such a key may be
known (or planted) by someone else. A weak key from the file or the environment
(all zeros, a repeated pattern, a counter: `MasterKey.weakness`) is refused
too, since it may be guessed and its public fingerprint would identify it.
The key's bytes are never printed; only its public fingerprint is.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from dp_pipeline.errors import KeyFileError
from dp_pipeline.randomness import MasterKey
from dp_pipeline.release.home_registry import check_new_key
from dp_pipeline.release.private_folders import private_folder

__all__ = [
    "ENVIRONMENT_VARIABLE",
    "KeyFileError",
    "check_key_file",
    "create_key_file",
    "load_or_create_master_key",
    "private_folder",
]


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


def load_or_create_master_key(
    key_file: str | os.PathLike[str], progress=None, *, ledger_with_releases: str | None = None
) -> MasterKey:
    """The master key from ``$DP_PIPELINE_MASTER_KEY``, else ``key_file`` (created if absent).

    Raises `KeyFileError` for a key file others may know and for a weak key
    (`MasterKey.weakness`) from either place; the message never holds the key.
    ``ledger_with_releases``: the ledger the run will use, when it already records
    releases; then a missing key file is refused (`KeyFileError` naming both), never
    created beside it. A key is not created either while a known home of the user holds
    a key bound to a ledger with releases (`FreshHomeError`,
    `dp_pipeline.release.home_registry`).
    """
    if os.environ.get(ENVIRONMENT_VARIABLE):
        return _read(MasterKey.from_env, ENVIRONMENT_VARIABLE, f"${ENVIRONMENT_VARIABLE}")
    path = Path(key_file)
    if path.exists():
        check_key_file(path)
        return _read(MasterKey.from_file, path, f"master key file {str(path)!r}")
    if ledger_with_releases is not None:
        raise KeyFileError(
            f"run.key_file: no master key at {str(path)!r}, but the ledger "
            f"{ledger_with_releases!r} already records releases, made under a master key; "
            "a new key is not created beside it. Give the key those releases used "
            f"(--key-file PATH, run.key_file or ${ENVIRONMENT_VARIABLE}), or use a new "
            "ledger (--ledger PATH) for a new key"
        )
    check_new_key(path)  # no fresh key (a fresh cap) beside another home's used one
    try:
        key = create_key_file(path)
    except FileExistsError:  # written meanwhile by a run racing this one
        check_key_file(path)
        return _read(MasterKey.from_file, path, f"master key file {str(path)!r}")
    if progress is not None:
        progress(
            f"created a new master key at {path} (fingerprint {key.fingerprint}); keep it "
            "secret and backed up: re-running a release id needs the same key"
        )
    return key


def create_key_file(path: str | os.PathLike[str]) -> MasterKey:
    """A new random key written to ``path`` (mode 0600, its missing folders 0700).

    Raises ``FileExistsError`` if ``path`` exists: a key file is never overwritten (the
    releases made under it could no longer be re-run or audited). ``O_EXCL``: two runs
    racing cannot each write a different key.
    """
    path = Path(path)
    private_folder(path.parent)
    key = MasterKey.generate()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.fchmod(descriptor, 0o600)  # the mode argument is filtered by the umask
    with os.fdopen(descriptor, "w") as handle:
        handle.write(_hex(key) + "\n")
    return key


def _read(reader, source, where: str) -> MasterKey:
    """The key ``reader(source)`` gives, refused (`KeyFileError`) if unreadable or weak."""
    try:
        key = reader(source)
    except ValueError as error:  # its message names the format, never the content
        raise KeyFileError(f"{error}; write 64 hex digits (a 32-byte key)") from None
    reason = key.weakness()
    if reason is not None:
        raise KeyFileError(
            f"the master key in {where} is weak: {reason}, so it may be guessed (a "
            "placeholder such as all zeros or a repeated word). Use a key drawn at "
            'random, e.g. python -c "import secrets; print(secrets.token_hex(32))", or '
            "remove it to have dp-release create one"
        )
    return key


def _hex(key: MasterKey) -> str:
    # The only place the key's bytes leave memory: into its own 0600 file.
    return key._key.hex()
