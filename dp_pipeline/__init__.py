"""dp_pipeline: exact, differentially private tables from pandas and PySpark.

The root exports the mechanisms, the master key, the accountant and the
release entry points; ``import dp_pipeline`` also registers the ``df.dp``
accessor on pandas DataFrames. The Spark functions are in `dp_pipeline.spark`
(PySpark optional); keyed streams in `dp_pipeline.randomness`.
"""

from dp_pipeline import accessor as _accessor  # noqa: F401  (registers df.dp)
from dp_pipeline.accounting import PrivacyAccountant
from dp_pipeline.mechanisms import BaseTwoExponential, DiscreteGaussian, DiscreteLaplace
from dp_pipeline.randomness import MasterKey
from dp_pipeline.release.plan import plan_release
from dp_pipeline.release.run import run_release
from dp_pipeline.release.spec import load_spec

__all__ = [
    "BaseTwoExponential",
    "DiscreteGaussian",
    "DiscreteLaplace",
    "MasterKey",
    "PrivacyAccountant",
    "load_spec",
    "plan_release",
    "run_release",
]

__version__ = "0.1.0"
