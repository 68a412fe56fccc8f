"""The release id's run lease, taken before the engine starts.

A second run of a release id that a live run holds is answered ``busy`` (exit 8)
at once: the lease is taken after the plan, the ledger's location and the key
are checked, and before the engine opens the input (a Spark JVM started and the
input fingerprinted take tens of seconds, and reveal nothing the refusal needs).
The run keeps it until it returns, so no other run of the id and no abort
overlaps it (`dp_pipeline.release.ledger.lease`).

A server ledger's lease is its advisory lock (`Ledger.lease`); a SQLite ledger's
is the OS lock beside the file, taken without opening (or creating) the ledger
itself, so a run refused before its reservation leaves no new ledger behind.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from dp_pipeline.release.keys import private_folder
from dp_pipeline.release.ledger.lease import RunLease, lease_path
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.ledger_location import ledger_location

__all__ = ["held_lease"]


@contextmanager
def held_lease(release_id: str, ledger_path: str, server: Ledger | None) -> Iterator[None]:
    """Hold ``release_id``'s lease on the ledger at ``ledger_path`` (``server`` when it is a
    server ledger, already opened); raises `LeaseHeldError` when a run holds it."""
    if server is not None:
        with server.lease(release_id):
            yield
        return
    path = ledger_location(ledger_path).path
    private_folder(path.parent)  # the ledger's folder, as the ledger itself makes it
    with RunLease(lease_path(path, release_id), release_id, "running it"):
        yield
