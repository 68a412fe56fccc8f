"""dp_pipeline: exact, differentially private tables from pandas and PySpark.

The root exports the mechanisms, the master key, the accountant and the
release entry points, and `Session` with its `Budget` (a budget for notebooks and
jobs, recorded in the ledger); ``import dp_pipeline`` also registers the ``df.dp``
accessor on pandas DataFrames. The Spark functions are in `dp_pipeline.spark`
(PySpark optional), with the call shape of ``df.dp``; one mechanism's δ, ε and ρ, the
calibrations and margins of error in `dp_pipeline.accounting` (every ``delta`` a
`DeltaBound`, every ``epsilon`` an `EpsilonBound`); keyed streams in
`dp_pipeline.randomness`. Every exception
raised on purpose is a `DPError` (`dp_pipeline.errors`); the main kinds are exported
here too. ``dp_pipeline.dp(df)`` is ``df.dp`` under a spelling type checkers follow.

``import dp_pipeline`` loads only what ``df.dp`` needs: the release entry points, the
session, the accountant and the exceptions defined beside the release steps are loaded
on first use (PEP 562), so registering ``df.dp`` loads no Spark, PostgreSQL or report
module.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from dp_pipeline import accessor as _accessor  # noqa: F401  (registers df.dp)
from dp_pipeline.accessor import dp
from dp_pipeline.errors import (
    DPError,
    DPFileNotFoundError,
    DPKeyError,
    DPRuntimeError,
    DPTypeError,
    DPValueError,
    InternalError,
    LedgerError,
)
from dp_pipeline.mechanisms import BaseTwoExponential, DiscreteGaussian, DiscreteLaplace
from dp_pipeline.query.domain import FROM_DATA, FromData
from dp_pipeline.randomness import MasterKey

# Loaded on first use: name -> the modules that may define it, tried in order. An exception
# is looked up in dp_pipeline.errors first, where the exported ones are to be defined, then
# beside the code that raises it.
_ERRORS = "dp_pipeline.errors"
_LAZY: dict[str, tuple[str, ...]] = {
    "PrivacyAccountant": ("dp_pipeline.accounting",),
    "Budget": ("dp_pipeline.session",),
    "Session": ("dp_pipeline.session",),
    "default_key_file": ("dp_pipeline.release.locations",),
    "load_spec": ("dp_pipeline.release.spec.load",),
    "plan_release": ("dp_pipeline.release.plan.release_plan",),
    "run_release": ("dp_pipeline.release.run",),
    "BudgetExceededError": (_ERRORS, "dp_pipeline.release.ledger.records"),
    "EngineStoppedError": (_ERRORS, "dp_pipeline.release.sources.source"),
    "GridTooLargeError": (_ERRORS, "dp_pipeline.accounting.pld_grid"),
    "InputChangedError": (_ERRORS, "dp_pipeline.release.sources.source"),
    "InputReadError": (_ERRORS, "dp_pipeline.release.sources.source"),
    "InvalidRowsRefusedError": (_ERRORS, "dp_pipeline.release.tables.invalid_rows"),
    "KeyFileError": (_ERRORS, "dp_pipeline.release.keys"),
    "LeaseHeldError": (_ERRORS, "dp_pipeline.release.ledger.lease"),
    "PlanError": (_ERRORS, "dp_pipeline.release.plan.costs"),
    "PostprocessError": (_ERRORS, "dp_pipeline.postprocess.structure"),
    "PublicationError": (_ERRORS, "dp_pipeline.release.publish.manifest"),
    "ReleaseIdReuseError": (_ERRORS, "dp_pipeline.release.ledger.records"),
    "SpecError": (_ERRORS, "dp_pipeline.release.spec.model"),
}

if TYPE_CHECKING:  # what checkers see: the names themselves, with their types
    from dp_pipeline.accounting import PrivacyAccountant
    from dp_pipeline.accounting.pld_grid import GridTooLargeError
    from dp_pipeline.postprocess.structure import PostprocessError
    from dp_pipeline.release.keys import KeyFileError
    from dp_pipeline.release.ledger.lease import LeaseHeldError
    from dp_pipeline.release.ledger.records import BudgetExceededError, ReleaseIdReuseError
    from dp_pipeline.release.locations import default_key_file
    from dp_pipeline.release.plan.costs import PlanError
    from dp_pipeline.release.plan.release_plan import plan_release
    from dp_pipeline.release.publish.manifest import PublicationError
    from dp_pipeline.release.run import run_release
    from dp_pipeline.release.sources.source import (
        EngineStoppedError,
        InputChangedError,
        InputReadError,
    )
    from dp_pipeline.release.spec.load import load_spec
    from dp_pipeline.release.spec.model import SpecError
    from dp_pipeline.release.tables.invalid_rows import InvalidRowsRefusedError
    from dp_pipeline.session import Budget, Session
else:  # hidden from checkers, so that a misspelt name is still flagged

    def __getattr__(name: str) -> object:
        """A lazily exported name, imported on first use and kept (PEP 562)."""
        for module in _LAZY.get(name, ()):
            value = getattr(importlib.import_module(module), name, None)
            if value is not None:
                globals()[name] = value
                return value
        raise AttributeError(f"module 'dp_pipeline' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "FROM_DATA",
    "BaseTwoExponential",
    "Budget",
    "BudgetExceededError",
    "DPError",
    "DPFileNotFoundError",
    "DPKeyError",
    "DPRuntimeError",
    "DPTypeError",
    "DPValueError",
    "DiscreteGaussian",
    "DiscreteLaplace",
    "EngineStoppedError",
    "FromData",
    "GridTooLargeError",
    "InputChangedError",
    "InputReadError",
    "InternalError",
    "InvalidRowsRefusedError",
    "KeyFileError",
    "LeaseHeldError",
    "LedgerError",
    "MasterKey",
    "PlanError",
    "PostprocessError",
    "PrivacyAccountant",
    "PublicationError",
    "ReleaseIdReuseError",
    "Session",
    "SpecError",
    "default_key_file",
    "dp",
    "load_spec",
    "plan_release",
    "run_release",
]

from dp_pipeline.version import __version__ as __version__  # noqa: E402
