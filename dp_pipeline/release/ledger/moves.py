"""The ledger's moves of a reservation along the release protocol (`dp_pipeline.release.protocol`).

Every move (`advance`, `mark_publishing`, `commit`, `commit_returned`) checks, in its
write transaction, the run token and the identity digest of the `Reservation` it is
given: a run whose reservation was aborted, taken over or reserved again by another run
moves nothing. Which moves are allowed is the protocol's rule (`check_move`): states only
go forward, and a resumed run repeating an earlier step changes nothing. `abort` is
allowed only in state ``reserved`` (nothing read), only while the release id's lease
(`dp_pipeline.release.ledger.lease`) is free (no run of it is alive), and only while no
hidden folder of its output exists.

Guarantee: no move returns a spend once data may have been read (state past reserved).
"""

from __future__ import annotations

import json
from pathlib import Path

from dp_pipeline.errors import InternalError, LedgerError
from dp_pipeline.release.ledger.records import Reservation, canonical_json, now_text
from dp_pipeline.release.protocol import (
    State,
    check_move,
    may_abort,
    refused_move,
    row_state,
)
from dp_pipeline.release.publication_rules import check_same_bytes, hidden_folders

__all__ = ["LedgerMoves"]


class LedgerMoves:
    """The moves of `dp_pipeline.release.ledger.store.Ledger` (a mixin: it uses the
    ledger's ``_write``, ``_check_lease``, ``lease``, ``entry`` and ``location``)."""

    def _move(self, reservation: Reservation, work, action: str) -> None:
        """``work`` in one write transaction on the row of ``reservation``, while this run
        still holds the release id's lease (`Ledger._write` checks the population's rows)."""
        self._check_lease(reservation.release_id)
        self._write(
            work,
            action=action,
            population=reservation.population,
            release_id=reservation.release_id,
        )

    def advance(self, reservation: Reservation, state: str) -> None:
        """Record that the run holding ``reservation`` reaches ``state`` ("reading", "noised").

        Set "reading" just before the engine reads rows: from then on the run
        is charged (`abort` refuses it). States only move forward; a resumed
        run repeating an earlier step leaves the later state in place. "refused"
        (from reading or noised: refused after reading, still charged) goes back
        to "reading" when the id is run again.
        """
        if state not in ("reading", "noised", "refused"):
            raise InternalError(f"advance: state {state!r} is not 'reading', 'noised' or 'refused'")

        def work(connection) -> None:
            current = row_state(self._held(connection, reservation, f"moving to {state}"))
            if not check_move(current, state, reservation.release_id):
                return  # already there or past: a resumed run repeating a step
            connection.execute(
                "UPDATE releases SET state = ? WHERE release_id = ?",
                (state, reservation.release_id),
            )

        self._move(reservation, work, f"recording state {state} of {reservation.release_id!r}")

    def mark_publishing(self, reservation: Reservation, manifest: dict, engine: str) -> None:
        """Record, before the output is moved into place, that publication starts, and its bytes.

        ``manifest`` (`dp_pipeline.release.publish.manifest`) holds every output file's
        SHA-256; ``engine`` made them. From then on the reservation can only be
        committed: a crash between the move and the commit leaves a release
        that `abort` refuses and that a re-run of the same identity finishes,
        with the same bytes (other bytes are refused: `check_same_bytes`).
        """

        def work(connection) -> None:
            row = self._held(connection, reservation, "publishing")
            check_move(row_state(row), State.PUBLISHING, reservation.release_id)
            recorded = None if row["manifest"] is None else json.loads(row["manifest"])
            check_same_bytes(reservation.release_id, recorded, manifest, row["engine"], engine)
            connection.execute(
                "UPDATE releases SET state = 'publishing', "
                "published_at = COALESCE(published_at, ?), manifest = ?, engine = ? "
                "WHERE release_id = ?",
                (
                    now_text(),
                    canonical_json(manifest),
                    row["engine"] if recorded is not None else engine,
                    reservation.release_id,
                ),
            )

        self._move(reservation, work, f"recording the publication of {reservation.release_id!r}")

    def commit(self, reservation: Reservation, output: str | None = None) -> None:
        """Mark the release committed: its outputs, recorded by `mark_publishing`, are in place."""

        def work(connection) -> None:
            row = self._held(connection, reservation, "committing", committed_ok=True)
            if not check_move(row_state(row), State.COMMITTED, reservation.release_id):
                return  # committed already
            if row["manifest"] is None:  # a legacy row published without its digests
                raise refused_move(row_state(row), State.COMMITTED, reservation.release_id)
            connection.execute(
                "UPDATE releases SET status = 'committed', state = 'committed', "
                "finished_at = ?, output = COALESCE(?, output) WHERE release_id = ?",
                (now_text(), output, reservation.release_id),
            )

        self._move(reservation, work, f"committing {reservation.release_id!r}")

    def commit_returned(self, reservation: Reservation, manifest: dict, engine: str) -> None:
        """Record a result handed to the caller in memory: from ``reading`` through
        ``noised`` and ``publishing`` to ``committed`` in one transaction.

        For a `dp_pipeline.Session` query, whose noisy result is returned, never
        written: nothing can happen between those states that a crash could leave
        half done, so one transaction records them all (the spend stood from
        ``reading`` on, as for any run).
        """

        def work(connection) -> None:
            row = self._held(connection, reservation, "committing")
            check_move(row_state(row), State.COMMITTED, reservation.release_id, returned=True)
            connection.execute(
                "UPDATE releases SET status = 'committed', state = 'committed', "
                "published_at = ?, finished_at = ?, manifest = ?, engine = ? "
                "WHERE release_id = ?",
                (now_text(), now_text(), canonical_json(manifest), engine, reservation.release_id),
            )

        self._move(reservation, work, f"committing {reservation.release_id!r}")

    def _held(self, connection, reservation: Reservation, action: str, committed_ok=False):
        """The row of ``reservation``, if the run holding it still holds it; else refuse."""
        release_id = reservation.release_id
        row = connection.execute(
            "SELECT * FROM releases WHERE release_id = ?", (release_id,)
        ).fetchone()
        if row is None:
            raise LedgerError(f"release id {release_id!r} is not in the ledger {self.location}")
        recorded = json.loads(row["identity"]).get("digest") if row["identity"] else None
        open_states = (State.RESERVED, State.COMMITTED) if committed_ok else (State.RESERVED,)
        if row["status"] not in open_states:
            problem = f"it is {row_state(row)}"
        elif reservation.token is None or row["token"] != reservation.token:
            problem = (
                "another run holds it now (it was aborted and reserved again, or resumed "
                "by a later run of the same release id)"
            )
        elif recorded != reservation.digest:
            problem = "the ledger records another identity (spec, input or key) for it"
        else:
            return row
        raise LedgerError(
            f"release id {release_id!r}: {action} refused, because this run no longer holds "
            f"its reservation: {problem}. This run publishes nothing; check the ledger "
            "(dp-release ledger) before running it again"
        )

    def abort(self, release_id: str) -> None:
        """Mark a reserved release aborted: nothing was read, its spend is returned.

        Refused while a run of it may be alive (its `lease` is held), once its
        run started reading data (state past ``reserved``: once data is read,
        the run is charged), once its publication started or while its output
        folder exists (a published release may have been read, and aborting it
        would let the same id run again on other data), and while a hidden
        folder of its output exists (what an interrupted run wrote).
        """
        with self.lease(release_id, "aborting it"):
            entry = self.entry(release_id)  # a release id's population never changes
            self._write(
                lambda connection: self._abort(connection, release_id),
                action=f"aborting {release_id!r}",
                population=None if entry is None else entry.population,
                release_id=release_id,
            )

    def _abort(self, connection, release_id: str) -> None:
        row = connection.execute(
            "SELECT * FROM releases WHERE release_id = ?", (release_id,)
        ).fetchone()
        if row is None:
            raise LedgerError(f"release id {release_id!r} is not in the ledger {self.location}")
        if row["status"] == State.ABORTED:
            return
        if row["status"] != State.RESERVED:
            raise LedgerError(
                f"release id {release_id!r} is {row['status']}; only a reserved release "
                "can become aborted"
            )
        state = row_state(row)
        output = None if row["output"] is None else Path(row["output"])
        finish = (
            " Finish it instead: run the same spec again on the same input with the same "
            "key (dp-release run SPEC); the run resumes the reservation with the same "
            "noise, re-emits the identical release and commits it, with no new spend"
        )
        if state == State.PUBLISHING or (output is not None and output.exists()):
            raise LedgerError(
                f"release id {release_id!r} cannot be aborted: its output "
                f"{row['output']!r} was published"
                + (f" at {row['published_at']}" if row["published_at"] else "")
                + " and may have been read, so its spend stands."
                + finish
            )
        if not may_abort(state):
            raise LedgerError(
                f"release id {release_id!r} cannot be aborted: its run reached state "
                f"{state!r}, so it may have read the input data, and once data is read "
                "the run is charged; its spend stands." + finish
            )
        hidden = [] if output is None else hidden_folders(output)
        if hidden:
            raise LedgerError(
                f"release id {release_id!r} cannot be aborted: hidden folder(s) "
                f"{', '.join(repr(str(path)) for path in hidden)} of its output exist, "
                "written by a run that may have read the input data; its spend "
                "stands." + finish + " (the run removes them)"
            )
        connection.execute(
            "UPDATE releases SET status = 'aborted', state = 'aborted', token = NULL, "
            "finished_at = ? WHERE release_id = ?",
            (now_text(), release_id),
        )
