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

The main subclasses live beside their checks and are re-exported from ``dp_pipeline``:
`dp_pipeline.release.spec.model.SpecError` (a bad spec; `InputReadError` and
`InvalidRowsRefusedError` are kinds of it), `dp_pipeline.release.plan.costs.PlanError`,
`LedgerError` (here, below both the ledger and the publishing step that raise its
kinds: `BudgetExceededError`, `ReleaseIdReuseError`, `LeaseHeldError`, `PublicationError`),
`dp_pipeline.release.keys.KeyFileError`, `dp_pipeline.release.sources.source.InputChangedError`
and `EngineStoppedError` (there too),
`dp_pipeline.accounting.pld_grid.GridTooLargeError` and
`dp_pipeline.postprocess.structure.PostprocessError`.
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
