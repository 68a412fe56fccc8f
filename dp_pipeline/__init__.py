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
here too.
"""

from dp_pipeline import accessor as _accessor  # noqa: F401  (registers df.dp)
from dp_pipeline.accounting import PrivacyAccountant
from dp_pipeline.accounting.pld_grid import GridTooLargeError
from dp_pipeline.errors import (
    DPError,
    DPFileNotFoundError,
    DPKeyError,
    DPRuntimeError,
    DPTypeError,
    DPValueError,
    InternalError,
)
from dp_pipeline.mechanisms import BaseTwoExponential, DiscreteGaussian, DiscreteLaplace
from dp_pipeline.postprocess.structure import PostprocessError
from dp_pipeline.randomness import MasterKey
from dp_pipeline.release.keys import KeyFileError
from dp_pipeline.release.ledger.budget import LedgerError
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

__all__ = [
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
    "load_spec",
    "plan_release",
    "run_release",
]

__version__ = "0.1.0"
