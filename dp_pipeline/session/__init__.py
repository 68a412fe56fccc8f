"""A privacy budget for notebooks and jobs: `Session`, its `Budget`, and what it reports.

``Session(key=..., population=..., privacy_unit=..., budget=Budget(...))`` runs the
``df.dp`` verbs on pandas and Spark DataFrames, records each query in the budget ledger
before reading the data, and reports ``spent`` / ``remaining`` as the accountant's
(lower, upper) bounds (`dp_pipeline.session.session`).
"""

from dp_pipeline.session.budget import Budget, SpendBounds
from dp_pipeline.session.session import QueryCost, QueryRecord, Session

__all__ = ["Budget", "QueryCost", "QueryRecord", "Session", "SpendBounds"]
