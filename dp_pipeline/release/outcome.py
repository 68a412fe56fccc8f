"""What ``dp-release run`` tells a scheduler: one exit code per outcome, and one JSON line.

A scheduler (cron, Airflow, a shell loop) acts on the exit status alone: publish
downstream, treat as done, wait for next period, alert a person, or retry the
same command. Each status below is one outcome and one action; `EXIT_CODES` is
the table the help, docs/scheduling.md and the tests share.

The result line (``--json``) is one JSON object on stdout, printed last. It
holds the outcome, the release id, this release's planned spend (the
accountant's lower and upper bounds) and the population's cumulative spend
(what the ledger composed), the output folder and the ledger's location
without credentials: public figures of the plan and the ledger, nothing
computed from the data. A failure's line has the one-line message the run
printed on stderr (messages quote the spec, never the data).
"""

from __future__ import annotations

import json
import textwrap
from enum import IntEnum
from fractions import Fraction
from urllib.parse import urlsplit, urlunsplit

from dp_pipeline.errors import DPError, ProblemListError, SparkExecutorsError
from dp_pipeline.release.keys import KeyFileError
from dp_pipeline.release.ledger.budget import LedgerError
from dp_pipeline.release.ledger.lease import LeaseHeldError
from dp_pipeline.release.ledger.phrases import spend_points
from dp_pipeline.release.ledger.records import BudgetExceededError, ReleaseIdReuseError
from dp_pipeline.release.ledger_location import public_conninfo
from dp_pipeline.release.plan.release_plan import PlanError
from dp_pipeline.release.publish.manifest import PublicationError
from dp_pipeline.release.sources.source import InputChangedError, InputReadError
from dp_pipeline.release.spec.model import SpecError
from dp_pipeline.release.tables.invalid_rows import InvalidRowsRefusedError

__all__ = [
    "EXIT_CODES",
    "REFUSED_AFTER_READING",
    "ExitCode",
    "error_code",
    "error_line",
    "exit_code_table",
    "public_location",
    "result_line",
]


class ExitCode(IntEnum):
    """The exit status of ``dp-release`` (``run``; ``plan`` uses 0, 1, 2 and 4, ``ledger``
    0, 1 and 2)."""

    PUBLISHED = 0
    ERROR = 1
    SPEC_ERROR = 2
    ALREADY_COMMITTED = 3
    REFUSED_BUDGET = 4
    REFUSED_CHANGED = 5
    FAILED_RESUMABLE = 6
    REFUSED_INPUT = 7
    BUSY = 8

    @property
    def status(self) -> str:
        """The ``status`` of the result line: the name in lower case."""
        return self.name.lower()


# (what happened, what was spent, what to do next), per code.
EXIT_CODES: dict[ExitCode, tuple[str, str, str]] = {
    ExitCode.PUBLISHED: (
        "published and committed: a new release, or an interrupted run of it finished",
        "this release's budget (once)",
        "done",
    ),
    ExitCode.ERROR: (
        "an unexpected error before any reservation (a bug, its traceback on stderr; or "
        "the machine, e.g. the Spark JVM killed, named in one line)",
        "nothing",
        "alert a person",
    ),
    ExitCode.SPEC_ERROR: (
        "the spec, the command line, the key, the ledger's location, the output folder or "
        "the Spark executors' Python is wrong",
        "nothing: nothing was read or written",
        "fix what the message names",
    ),
    ExitCode.ALREADY_COMMITTED: (
        "the release id was already committed with this spec, input and key; its "
        "published copy was found intact, or the same bytes were re-emitted",
        "nothing",
        "done (treat as success)",
    ),
    ExitCode.REFUSED_BUDGET: (
        "refused: the release would take the population over its cap",
        "nothing: nothing was read",
        "do not retry; the message names the largest budget that fits",
    ),
    ExitCode.REFUSED_CHANGED: (
        "refused: the release id is recorded or published with another spec, input or "
        "key (or, committed, would be recomputed by another engine or version than made "
        "it, or with other bytes), or the input changed while the run read it",
        "nothing, or (input changed during the run) this release's budget",
        "run a new release id",
    ),
    ExitCode.FAILED_RESUMABLE: (
        "failed after the budget was reserved (the machine, the engine, the output)",
        "this release's budget, reserved",
        "run the same command again: it resumes with the same noise, no new spend",
    ),
    ExitCode.REFUSED_INPUT: (
        "refused after reading: the input cannot be read as the spec declares, or its "
        "noisy invalid-row count is above input.invalid_threshold",
        "this release's budget (the ledger records it as refused)",
        "fix the input and run a new release id (the same id gives the same answer)",
    ),
    ExitCode.BUSY: (
        "refused: a run of the same release id holds its lease (it may be alive); "
        "answered before the engine starts",
        "nothing",
        "retry later",
    ),
}


# Refusals decided after the run read the input: charged, and recorded in the ledger as
# state "refused" (not left "reading" as if the run were still alive).
REFUSED_AFTER_READING = (InputReadError, InvalidRowsRefusedError, InputChangedError)


def exit_code_table(markdown: bool = False) -> str:
    """`EXIT_CODES` as text: a Markdown table, or lines for ``--help``."""
    if markdown:
        lines = ["| code | status | what happened | spent | next |", "|---|---|---|---|---|"]
        lines += [
            f"| {code.value} | `{code.status}` | {happened} | {spent} | {action} |"
            for code, (happened, spent, action) in EXIT_CODES.items()
        ]
        return "\n".join(lines)
    return "\n".join(
        textwrap.fill(
            f"{code.value}  {code.status}: {happened}. Spent: {spent}. Next: {action}.",
            width=78,
            initial_indent="  ",
            subsequent_indent="      ",
        )
        for code, (happened, spent, action) in EXIT_CODES.items()
    )


def error_code(error: BaseException, reservation=None) -> ExitCode:
    """The exit code of a run that raised ``error``.

    ``reservation``: what the ledger gave the run (`RunTrace.reservation`), None if
    it failed before; then the budget is spent and the same release id resumes it.
    """
    if isinstance(error, BudgetExceededError):
        return ExitCode.REFUSED_BUDGET
    if isinstance(error, ReleaseIdReuseError | InputChangedError):
        return ExitCode.REFUSED_CHANGED
    if isinstance(error, LeaseHeldError):
        return ExitCode.BUSY
    if isinstance(error, InputReadError | InvalidRowsRefusedError):
        return ExitCode.REFUSED_INPUT
    committed = reservation is not None and reservation.outcome == "already_committed"
    if committed and isinstance(error, PublicationError):
        # A committed id whose run made other bytes than those published (another
        # engine or library version): the same command gives the same refusal.
        return ExitCode.REFUSED_CHANGED
    if reservation is not None:
        return ExitCode.FAILED_RESUMABLE
    if isinstance(
        error,
        SpecError | PlanError | KeyFileError | LedgerError | PublicationError | SparkExecutorsError,
    ):
        return ExitCode.SPEC_ERROR
    return ExitCode.ERROR


def error_line(error: BaseException) -> str:
    """The error's message on one line (a `SpecError`'s or `ChargedRunError`'s problems
    joined by "; ").

    An exception that is not dp_pipeline's own is named by its type only: its
    message comes from a library and may quote the data.
    """
    if isinstance(error, ProblemListError):
        return f"{error.source}: " + "; ".join(error.problems)
    if not isinstance(error, DPError):
        return f"unexpected {type(error).__name__} (its message is on stderr)"
    return " ".join(str(error).split())


def public_location(location: str) -> str:
    """A ledger's path or URL without credentials (user info, password, query); a libpq
    connection string reduced to its host, port and database."""
    if "://" not in location:
        try:
            return public_conninfo(location)
        except LedgerError:
            return "(a malformed connection string)"
    parts = urlsplit(location)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def _bounds(bound) -> dict:
    return {"lower": float(bound.lower), "upper": float(bound.upper), "method": bound.method}


def result_line(
    code: ExitCode,
    release_id: str | None,
    *,
    population: str | None = None,
    ledger: str | None = None,
    plan=None,
    reservation=None,
    output=None,
    message: str | None = None,
) -> str:
    """The ``--json`` line: one JSON object, keys sorted, no newline inside."""
    described: dict = {
        "status": code.status,
        "exit_code": int(code),
        "release_id": release_id,
        "population": population,
        "ledger": None if ledger is None else public_location(ledger),
    }
    if plan is not None:
        described["release_spend"] = {
            "rho": None if plan.rho is None else str(Fraction(plan.rho)),
            "delta": str(plan.report_delta),
            "epsilon": _bounds(plan.epsilon_tight),
        }
    if reservation is not None:
        described["cumulative"] = reservation.cumulative  # kept: ε at the cap's δ, δ at its ε
        # The same spend with the point of each figure, and as the printed phrase.
        described["cumulative_at_cap"] = spend_points(reservation.cumulative, reservation.cap)
        described["cap"] = reservation.cap
    if output is not None:
        described["output"] = str(output)
    if message is not None:
        described["message"] = message
    return json.dumps(described, sort_keys=True, default=str)
