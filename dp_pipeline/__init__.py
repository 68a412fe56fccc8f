"""dp_pipeline: exact, differentially private tables from pandas and PySpark."""

from dp_pipeline.mechanisms import BaseTwoExponential, DiscreteGaussian, DiscreteLaplace
from dp_pipeline.randomness import MasterKey, SecureStream, derive_stream

__all__ = [
    "BaseTwoExponential",
    "DiscreteGaussian",
    "DiscreteLaplace",
    "MasterKey",
    "SecureStream",
    "derive_stream",
]

__version__ = "0.1.0"

# Registers the ``df.dp`` accessor on pandas DataFrames.
from dp_pipeline import accessor as _accessor  # noqa: F401
