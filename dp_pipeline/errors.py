"""Exception types: one root, `DPError`, for every error dp_pipeline raises on purpose.

``except DPError`` catches them all. User errors are also the builtin they always were
(``ValueError``, ``TypeError``, ``KeyError``, ``RuntimeError``), so ``except ValueError``
keeps working: the classes defined next to the code that raises them inherit from
both, e.g. ``class SpecError(DPError, ValueError)``, and plain checks raise
`DPValueError` / `DPTypeError` / `DPKeyError` (and `DPRuntimeError` when the
environment cannot run a call). Their messages name the field, the
value and the rule.

`InternalError` is reserved for broken invariants: a bug in dp_pipeline, never the
user's input. Its message says so. It is raised explicitly, never via ``assert``
(asserts vanish under ``python -O``).

Every exception ``dp_pipeline`` exports is defined here (the modules that raise them
import them, and keep them importable under their old paths): `SpecError` (a bad spec,
refused before anything is read or reserved), `ChargedRunError` (a refusal decided after
the run read its input, so its spend stands: `InputReadError`, `InvalidRowsRefusedError`),
`PlanError`, `LedgerError` and its kinds (`BudgetExceededError`, `ReleaseIdReuseError`,
`LeaseHeldError`, `PublicationError`), `KeyFileError`, `InputChangedError`,
`EngineStoppedError`, `GridTooLargeError` and `PostprocessError`.
"""

from __future__ import annotations

REPORT_HINT = (
    "This is a bug in dp_pipeline, not in your spec or data; please report it to the "
    "dp_pipeline maintainers with this message, the dp_pipeline version and the spec "
    "(never the master key)."
)


class DPError(Exception):
    """The root of every exception dp_pipeline raises on purpose."""


class DPValueError(DPError, ValueError):
    """An argument or spec value breaks a rule (the message names it and the rule)."""


class DPTypeError(DPError, TypeError):
    """An argument has the wrong type (the message names it and the type wanted)."""


class DPKeyError(DPError, KeyError):
    """A name that must exist does not (a table, an environment variable)."""


class LedgerError(DPError, ValueError):
    """A release the ledger refuses (the message says why and what to do)."""


class PublicationError(LedgerError):
    """A release cannot be published where or as it would be: nothing was published."""


class DPRuntimeError(DPError, RuntimeError):
    """The environment cannot run the call (no Java runtime for Spark); the message says
    what to install or set."""


class SparkExecutorsError(DPRuntimeError):
    """The Spark executors' Python cannot run this dp_pipeline (without the package, or
    another version); raised before anything is reserved, the message names the fix."""


class DPFileNotFoundError(DPError, FileNotFoundError):
    """An input path does not exist or holds no data files (the message names the path)."""


class InternalError(DPError, RuntimeError):
    """An internal invariant failed. This is a bug in dp_pipeline; please report it."""

    def __init__(self, message: str) -> None:
        self.detail = message
        super().__init__(f"internal error: {message.rstrip('.')}. {REPORT_HINT}")

    def __reduce__(self):
        # Pickled (e.g. from a Spark worker) with the detail, so the hint is not doubled.
        return (type(self), (self.detail,))


class ProblemListError(DPError, ValueError):
    """One or more problems, each naming the field, flag or file and the rule; ``source``
    says where they are (the spec's file, "command line", an input)."""

    def __init__(self, problems: list[str], source: str = "spec") -> None:
        self.problems = list(problems)
        self.source = source
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{source}: {len(self.problems)} problem(s):\n{lines}")


class SpecError(ProblemListError):
    """A release spec broke one or more rules; ``problems`` lists each one. Raised before
    anything is read or reserved."""


class ChargedRunError(ProblemListError):
    """A refusal decided after the run read its input: nothing was published, and the
    reservation stays spent (data was read); the same release id reads again."""


class InputReadError(ChargedRunError):
    """A reader or engine failed on the input's contents: the file and the rule, nothing more.

    The readers' own errors quote the data (a ragged CSV row's whole record, the value
    a cast refused, line numbers); they are replaced by this one-line message and
    raised ``from None``, so neither the message nor the traceback the command line
    prints carries any of it. Raised after the reservation, the run stays charged.
    """

    def __init__(self, path: object, rule: str) -> None:
        super().__init__(
            [
                f"{rule}; the reader's own message is not shown because it can quote the "
                f"data; check the file with a tool the data's owner may use"
            ],
            source=f"input {str(path)!r}",
        )


class InvalidRowsRefusedError(ChargedRunError):
    """``on_invalid = "error"``: the noisy invalid-row count is above the threshold."""


class PlanError(DPError, ValueError):
    """The spec's noise parameters do not meet its budget (nothing was read or spent)."""


class BudgetExceededError(LedgerError):
    """The release would push its population's cumulative guarantee above the cap."""


class ReleaseIdReuseError(LedgerError):
    """A release id was already used on other data or with another plan."""


class LeaseHeldError(LedgerError):
    """Another process holds the release id's lease (a run of it may be alive)."""


class KeyFileError(DPError, ValueError):
    """A key file that may be known to someone else (its message says how to fix it)."""


class InputChangedError(DPError, RuntimeError):
    """The input's files or bytes changed between the start and the end of a run."""


class EngineStoppedError(DPError, RuntimeError):
    """The engine's session stopped under the run (its JVM killed or out of memory).

    One line: what happened, the fix, and whether the budget was reserved (then the
    same release id resumes it, charged once). Raised ``from None``: py4j's traceback
    says nothing of what happened.
    """


class GridTooLargeError(DPError, ValueError):
    """A grid PLD would need more than `MAX_GRID_POINTS` points (raised before allocating)."""


class PostprocessError(DPError, ValueError):
    """Bad input to the consistency step; the message names the table or field, value and rule."""
