"""What the ledger stores and returns, and the rules it applies to a row before writing one.

The run's states, the `Reservation` and `LedgerEntry`
records, the ledger's errors, and `check_reuse`: a release id is single-use,
re-run only with the same identity (same canonical spec, same input bytes,
same key), because the same noise on other data, or other noise on the same
data, reveals the truth.

A release's row moves along the release protocol (`dp_pipeline.release.protocol`:
its states, allowed moves, and `row_state`, the one reader of the ``state`` and
``status`` columns).
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dp_pipeline.errors import BudgetExceededError, ReleaseIdReuseError
from dp_pipeline.release.ledger.budget import (
    LedgerError,
)
from dp_pipeline.release.ledger.identity import ReleaseIdentity
from dp_pipeline.release.protocol import row_state

__all__ = [
    "BudgetExceededError",
    "InputReuseError",
    "LedgerEntry",
    "ReleaseIdReuseError",
    "Reservation",
    "canonical_json",
    "check_reuse",
    "entry_from_row",
    "now_text",
    "owner",
]


class InputReuseError(LedgerError):
    """An input already recorded under another population with the same privacy unit."""


def now_text() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def canonical_json(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Reservation:
    """The outcome of `Ledger.reserve`.

    ``outcome`` is "reserved" (new spend recorded), "resumed" (a stale
    reservation of the same id, data and plan is taken over, no new spend) or
    "already_committed" (same id, data and plan: re-emit without new spend).
    ``token`` is this run's token (None for a committed release: nothing to
    hold), ``digest`` the release identity's digest; `Ledger` moves the row on
    only for the run holding both. ``state`` is the row's state when reserved,
    ``manifest`` and ``engine`` what the ledger recorded at publication (the
    bytes a re-run must reproduce).
    """

    release_id: str
    population: str
    outcome: str
    guarantee: dict
    cumulative: dict
    cap: dict
    reserved_at: str
    remaining: str
    token: str | None = None
    digest: str | None = None
    state: str = "reserved"
    manifest: dict | None = None
    engine: str | None = None


@dataclass(frozen=True)
class LedgerEntry:
    release_id: str
    population: str
    status: str
    fingerprint: str
    guarantee: dict
    cumulative: dict
    reserved_at: str
    finished_at: str | None
    owner: str
    output: str | None
    accountant: dict
    identity: dict | None = None
    published_at: str | None = None
    state: str | None = None
    engine: str | None = None
    manifest: dict | None = None
    input_override: list | None = None


def check_reuse(existing, population, fingerprint, state_text, identity) -> str | None:
    """How a run of ``identity`` may use the existing row of its release id, or refuse.

    Returns "resumed" (a reservation of the same identity, no new spend),
    "already_committed" (re-emission, no new spend) or None (an aborted id,
    reserved afresh). Raises `ReleaseIdReuseError` for any other identity.
    """
    release_id = existing["release_id"]
    if existing["population"] != population:
        raise ReleaseIdReuseError(
            f"release id {release_id!r} was already used for population "
            f"{existing['population']!r}; release ids are single-use, choose a new one"
        )
    if existing["status"] == "aborted":
        return None  # nothing was published under an aborted id: reserve it afresh
    if existing["identity"] is None:
        raise ReleaseIdReuseError(
            f"release id {release_id!r} is {existing['status']} in a ledger entry that "
            "records no release digest, so this run cannot be proven to be the same "
            "release; use a new release id"
        )
    try:
        recorded = ReleaseIdentity.from_dict(json.loads(existing["identity"]))
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ReleaseIdReuseError(
            f"release id {release_id!r}: the ledger records a corrupt identity for it (its "
            "parts do not match its digest), so no run can be proven to be the same release; "
            "use a new release id and check who can write the ledger"
        ) from None
    if recorded.digest != identity.digest:
        differences = "; ".join(recorded.differences(identity))
        raise ReleaseIdReuseError(
            f"release id {release_id!r} is {existing['status']} with another spec, input or "
            f"key; these parts differ: {differences}. The same release id must always "
            "publish the same release (other noise on the same data, or the same noise on "
            "other data, reveals the exact values). Use a new release id."
        )
    if existing["fingerprint"] != fingerprint:
        raise ReleaseIdReuseError(
            f"release id {release_id!r} is {existing['status']} on different input data "
            "(fingerprint mismatch); re-using its noise on other data would reveal the "
            "difference between the two inputs. Use a new release id."
        )
    if existing["accountant"] != state_text:
        raise ReleaseIdReuseError(
            f"release id {release_id!r} is {existing['status']} with a different plan "
            "(mechanisms or noise scales changed); drawing the same noise streams at a "
            "different scale is a new release. Use a new release id."
        )
    if existing["status"] == "committed":
        if existing["manifest"] is None:
            raise ReleaseIdReuseError(
                f"release id {release_id!r} was committed by a version that recorded no "
                "digests of its files, so a re-run cannot be proven to publish the same "
                "bytes; its published copy stands. Use a new release id for a new release"
            )
        return "already_committed"
    return "resumed"


def entry_from_row(row) -> LedgerEntry:
    """The entry of a ledger row (``sqlite3.Row`` or a dict: columns by name)."""
    return LedgerEntry(
        release_id=row["release_id"],
        population=row["population"],
        status=row["status"],
        fingerprint=row["fingerprint"],
        guarantee=json.loads(row["guarantee"]),
        cumulative=json.loads(row["cumulative"]),
        reserved_at=row["reserved_at"],
        finished_at=row["finished_at"],
        owner=row["owner"],
        output=row["output"],
        accountant=json.loads(row["accountant"]),
        identity=None if row["identity"] is None else json.loads(row["identity"]),
        published_at=row["published_at"],
        state=row_state(row),
        engine=row["engine"],
        manifest=None if row["manifest"] is None else json.loads(row["manifest"]),
        input_override=(
            None if row["input_override"] is None else json.loads(row["input_override"])
        ),
    )


def owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"
