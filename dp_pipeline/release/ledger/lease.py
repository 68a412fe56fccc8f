"""A release id's run lease: an OS lock that shows the run owning a reservation is alive.

This is the lease of a SQLite ledger (one host); a server ledger's lease is an
advisory lock on the server (`dp_pipeline.release.ledger.postgres_backend.ServerLease`),
with the same meaning. A run holds an exclusive ``fcntl.flock`` on ``<ledger>.leases/<digest>.lock``
(the SHA-256 of the release id, so any id is a safe file name) from before it
reserves until it returns (the ledger's real path: a symbolic link to the ledger
reaches the same lease, `lease_path`). The kernel drops the lock when the process exits,
however it exits (SIGKILL and OOM kills included), so "the lease is free"
means "no process runs this release id now". `Ledger.abort` takes the same
lease before it aborts, so it can never abort a live run's reservation, and two
runs of one release id never overlap: the second is refused before it reads or
spends anything. The holder writes ``host:pid`` into the file for the message
a refused process prints (the ledger row records the same owner).

The lease folder is created owner-only (0700) and lease files 0600; they are
never deleted (deleting a lock file lets two processes lock two different
files of the same name).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from pathlib import Path

from dp_pipeline.errors import LeaseHeldError
from dp_pipeline.release.ledger.budget import LedgerError
from dp_pipeline.release.ledger.records import owner

__all__ = ["LeaseHeldError", "RunLease", "lease_path"]


def lease_path(ledger_path: Path, release_id: str) -> Path:
    """The lease file of ``release_id`` beside the ledger file at ``ledger_path``.

    Keyed by the file, not by the name it was reached under: the path is resolved
    (symbolic links of the file and its folders followed), so a link to the ledger
    finds the same lease. A ledger file with a second name (a hard link, which no
    path resolves) is refused with a `LedgerError`: its runs could hold two leases.
    """
    real = Path(os.path.realpath(ledger_path))
    try:
        links = os.stat(real).st_nlink
    except FileNotFoundError:
        links = 1  # not created yet: it will have one name
    if links > 1:
        raise LedgerError(
            f"ledger {str(ledger_path)!r}: the file has {links} names (hard links), so two "
            "runs reaching it by two names could not see each other's lease; keep one name "
            "(remove the other links) or use a symbolic link"
        )
    name = hashlib.sha256(release_id.encode()).hexdigest()[:32]
    return real.with_name(real.name + ".leases") / f"{name}.lock"


class RunLease:
    """``with RunLease(path, release_id, action):`` holds the lease or raises `LeaseHeldError`.

    Non-blocking: a held lease is refused at once (``action`` names what was
    refused, for the message).
    """

    def __init__(self, path: Path, release_id: str, action: str) -> None:
        self.path = path
        self.release_id = release_id
        self.action = action
        self._descriptor: int | None = None

    def __enter__(self) -> RunLease:
        if not self.path.parent.exists():
            self.path.parent.mkdir(mode=0o700, exist_ok=True)
            os.chmod(self.path.parent, 0o700)  # the mode argument is filtered by the umask
        descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(descriptor, 256, 0).decode(errors="replace").strip()
            os.close(descriptor)
            raise LeaseHeldError(
                f"release id {self.release_id!r}: {self.action} refused: process "
                f"{holder or '(unknown)'} holds the lease {str(self.path)!r} of this release "
                "id, so a run of it may be alive. Wait for that run to end, or stop it, "
                "then try again"
            ) from None
        except BaseException:
            os.close(descriptor)
            raise
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, owner().encode(), 0)
        self._descriptor = descriptor
        return self

    def check(self) -> None:
        """Nothing to check: the kernel holds the lock while this process lives."""

    def __exit__(self, kind, value, traceback) -> None:
        if self._descriptor is not None:
            # Closing the descriptor releases the lock.
            os.close(self._descriptor)
            self._descriptor = None
