"""The release protocol in one place: its states, the moves allowed between them, its crash points.

A release's ledger row moves ``planned -> reserved -> reading -> noised -> publishing ->
committed``, or ``reserved -> aborted`` while nothing was read:

- **reserved**: the spend is recorded, nothing is read; only here may the operator abort.
- **reading**: set just before the engine reads rows. From here on the run is charged
  whatever happens: a failure never returns the budget, and the same release id
  resumes the reservation with the same noise.
- **noised**: the tables are noised; post-processing (no privacy cost) and the writer follow.
- **publishing**: the output's manifest (every file's SHA-256) is recorded before the
  folder is moved into place; from here on the release can only be committed, with
  the same bytes.
- **committed**: the release is published (or, for a `dp_pipeline.Session` query, its
  result handed to the caller in memory: ``reading -> committed`` in one transaction).
- **refused**: a refusal decided after reading (input changed, too many invalid rows,
  unreadable input): still charged; a re-run of the id reads again.

Guarantee. The moves only go forward: a run repeating an earlier step (a resumed run)
changes nothing, and no move returns a charged row to a state that could be aborted,
so a spend, once data may have been read, stands. The ledger (`release.ledger.moves`)
checks every move here (`check_move`) inside its write transaction.

The ledger stores two columns: ``state`` (one of `State`) and the coarse ``status``
(reserved, committed, aborted) that budget composition reads; every state before
committed counts as reserved. `row_state` is the one reader of the two.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from dp_pipeline.errors import LedgerError

__all__ = [
    "FORWARD",
    "HELD",
    "TRANSITIONS",
    "Checkpoint",
    "State",
    "check_move",
    "checkpoint",
    "may_abort",
    "refused_move",
    "row_state",
]


class State(StrEnum):
    """A release's state; the value is what the ledger's ``state`` column stores."""

    PLANNED = "planned"  # before the ledger: never stored
    RESERVED = "reserved"
    READING = "reading"
    NOISED = "noised"
    PUBLISHING = "publishing"
    COMMITTED = "committed"
    ABORTED = "aborted"
    REFUSED = "refused"


# The forward path a published release takes, in order.
FORWARD = (State.RESERVED, State.READING, State.NOISED, State.PUBLISHING, State.COMMITTED)

# The states in which a run holds the reservation (alive, or interrupted and resumable).
HELD = frozenset({State.RESERVED, State.READING, State.NOISED, State.PUBLISHING})

TRANSITIONS: Mapping[State, frozenset[State]] = {
    State.PLANNED: frozenset({State.RESERVED}),
    # Aborted only from reserved: once data may have been read, the spend stands.
    State.RESERVED: frozenset({State.READING, State.ABORTED}),
    # Committed from reading: a Session query's result returned in memory, one transaction.
    State.READING: frozenset({State.NOISED, State.REFUSED, State.COMMITTED}),
    State.NOISED: frozenset({State.PUBLISHING, State.REFUSED}),
    # Refused after reading stays charged; a re-run of the id reads again.
    State.REFUSED: frozenset({State.READING, State.NOISED, State.REFUSED}),
    # A resumed run re-records the same manifest (the same bytes) before committing.
    State.PUBLISHING: frozenset({State.PUBLISHING, State.COMMITTED}),
    State.COMMITTED: frozenset(),
    State.ABORTED: frozenset(),
}

# Why a move to each state is refused (the message's rule).
_RULES = {
    State.PUBLISHING: "only a noised release can be published",
    State.COMMITTED: (
        "only a release whose publication was recorded (mark_publishing) can be committed"
    ),
}
_RETURNED_RULE = "only a release that is reading can hand its result to the caller"


class Checkpoint(StrEnum):
    """Every named crash point of a run, in the order a run passes them."""

    MID_RESERVE = "mid_reserve"  # inside the reservation's transaction, not yet committed
    AFTER_RESERVE = "after_reserve"
    AFTER_NOISE = "after_noise"
    MID_TABLE = "mid_table"  # a row group of a table kept on Spark is written
    BEFORE_PUBLISH = "before_publish"  # outputs and manifest written, publication not recorded
    # The steps of an output URI's publication (`RemoteReleaseDirectory.publish`).
    BEFORE_UPLOAD = "before_upload"
    MID_UPLOAD = "mid_upload"
    AFTER_HIDDEN_MANIFEST = "after_hidden_manifest"
    BEFORE_FINAL = "before_final"
    MID_COPY = "mid_copy"
    AFTER_MANIFEST = "after_manifest"
    AFTER_PUBLISH = "after_publish"  # published, the ledger not yet committed


def checkpoint(point: Checkpoint) -> None:
    """A named point of the protocol; does nothing.

    The crash tests run the CLI in a child process that replaces this function
    (``protocol.checkpoint``; callers look it up on the module at each call) with
    one that stops or kills the process at ``point``.
    """


def row_state(row) -> str:
    """The state of a ledger row (columns by name), as stored (a `State`'s value); rows
    older than the ``state`` column get the most charged state their columns allow (a
    reserved row may have read data)."""
    if row["state"] is not None:
        return row["state"]
    if row["status"] != State.RESERVED:
        return State(row["status"]).value
    return (State.PUBLISHING if row["published_at"] is not None else State.READING).value


def may_abort(state: str) -> bool:
    """Whether a row in ``state`` may be aborted (nothing read: its spend may be returned)."""
    return State.ABORTED in TRANSITIONS[State(state)]


def refused_move(current: str, to: str, release_id: str) -> LedgerError:
    """The refusal of a move of ``release_id`` from ``current`` to publishing or committed."""
    return LedgerError(f"release id {release_id!r} is {State(current)}; {_RULES[State(to)]}")


def check_move(current: str, to: str, release_id: str, *, returned: bool = False) -> bool:
    """Check that release ``release_id`` may move from ``current`` to ``to``.

    Returns True when the move is to be written, False when the row is already at or
    past ``to`` on the forward path (a resumed run repeating a step: nothing changes).
    ``returned``: a Session query's result handed to the caller (reading -> committed).
    Raises `LedgerError` naming the current state and the rule otherwise.
    """
    current, to = State(current), State(to)
    if returned:
        if current is not State.READING or to is not State.COMMITTED:
            raise LedgerError(f"release id {release_id!r} is {current}; {_RETURNED_RULE}")
        return True
    if to in _RULES:  # publication and commit: only from the state just before, or again
        if current is to:  # publishing is re-recorded (the same bytes); committed stays
            return to in TRANSITIONS[to]
        if to not in TRANSITIONS[current] or current is not FORWARD[FORWARD.index(to) - 1]:
            raise refused_move(current, to, release_id)
        return True
    if State.REFUSED in (current, to):
        if to not in TRANSITIONS[current]:
            raise LedgerError(f"release id {release_id!r} is {current}")
        return True
    if current in FORWARD and FORWARD.index(current) >= FORWARD.index(to):
        return False
    if to not in TRANSITIONS[current]:
        raise LedgerError(
            f"release id {release_id!r} is {current}; it must be "
            f"{FORWARD[FORWARD.index(to) - 1]} before it is {to}"
        )
    return True
