"""``df.dp``: the pandas accessor, registered on DataFrame by ``import dp_pipeline``.

Thin shims generated from the query parameters (`dp_pipeline.query.aggregations`,
`dp_pipeline.selection.parameters`, with `dp_pipeline.query.signatures`): each
method builds the query (the cost is known before the data is touched), runs it
on the pandas engine and attaches ``result.attrs["dp"]``, a
`dp_pipeline.query.result_info.ResultInfo`: the public summary of the
`dp_pipeline.query.cost.ReleaseInfo` (or `SelectionInfo`), which also shows the
run's `Diagnostics` in memory (not private: never publish them). Every way a
result leaves memory drops the diagnostics: ``to_parquet`` writes the public
summary as Parquet metadata, and ``copy``, ``to_pickle`` and ``pickle`` keep the
info without them.

Every call names its privacy unit: ``privacy_unit="person_id"`` (each unit
protected with all of its rows, bounded by ``max_cells`` / ``max_per_cell``) or
``privacy_unit=None`` (each row protected alone); a call without it is refused.

``dp_pipeline.dp(df)`` is the same accessor under a spelling type checkers follow
(pandas-stubs read ``df.dp`` as a column): ``dp(df).count(...)`` is ``df.dp.count(...)``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pandas as pd

from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.from_data.pandas import run_selected
from dp_pipeline.from_data.plan import plan_statistic
from dp_pipeline.query.cost import ReleaseInfo
from dp_pipeline.query.result_info import ResultInfo
from dp_pipeline.selection.info import SelectionInfo
from dp_pipeline.selection.pandas import run_quantile_pandas, run_top_k_pandas
from dp_pipeline.selection.query import QuantileQuery, TopKQuery
from dp_pipeline.surface.verbs import VERBS, Surface, method_of

__all__ = ["DPAccessor", "dp"]

# Each verb's runnable example (tests/unit/api/test_docstring_examples.py runs them); the noise is
# fresh under a new key, so they show what does not depend on it.
_SETUP = """
Example:

    >>> import pandas as pd
    >>> import dp_pipeline  # registers df.dp
    >>> from dp_pipeline import MasterKey
    >>> people = pd.DataFrame(
    ...     {"person_id": [1, 2, 3, 4], "sex": ["F", "M", "F", "F"], "age": [34, 51, 27, 62]}
    ... )
    >>> labels = dict(key=MasterKey(), release_id="example", privacy_unit="person_id")
"""
_BY_SEX = 'by="sex", domains={"sex": ["F", "M"]}'
_EXAMPLES = {
    "count": f"""
    >>> counts = people.dp.count({_BY_SEX}, epsilon=1, table="by_sex", **labels)
    >>> counts["sex"].tolist()  # every declared cell, zero counts included
    ['F', 'M']
    >>> counts.dp.info.epsilon <= 1
    True
""",
    "sum": f"""
    >>> totals = people.dp.sum("age", bounds=(0, 100), {_BY_SEX}, epsilon=1, table="t", **labels)
    >>> totals.columns.tolist()
    ['sex', 'sum']
""",
    "mean": f"""
    >>> means = people.dp.mean("age", bounds=(0, 100), {_BY_SEX}, epsilon=1, table="m", **labels)
    >>> means.columns.tolist()
    ['sex', 'sum', 'count', 'mean']
    >>> sorted(means.dp.margin_of_error)
    ['count', 'sum']
""",
    "var": f"""
    >>> spread = people.dp.var("age", bounds=(0, 100), {_BY_SEX}, epsilon=1, table="v", **labels)
    >>> spread.columns.tolist()
    ['sex', 'count', 'var']
    >>> len(spread.dp.info.events)  # the count, the centred sum, the centred squares
    3
""",
    "std": f"""
    >>> spread = people.dp.std("age", bounds=(0, 100), {_BY_SEX}, epsilon=1, table="s", **labels)
    >>> spread.columns.tolist()
    ['sex', 'count', 'std']
""",
    "quantile": """
    >>> q1 = people.dp.quantile("age", "1/4", bounds=(0, 100), granularity=1, epsilon=1,
    ...                         table="q1", **labels)
    >>> q1.columns.tolist()
    ['quantile', 'age']
    >>> q1.dp.info.epsilon <= 1  # the exponential mechanism's pure ε
    True
""",
    "median": """
    >>> median = people.dp.median("age", bounds=(0, 100), granularity=1, epsilon=1,
    ...                           table="median", **labels)
    >>> median["quantile"].tolist()
    [0.5]
""",
    "top_k": """
    >>> top = people.dp.top_k("sex", 1, candidates=["F", "M"], epsilon=1, table="top", **labels)
    >>> top.columns.tolist()
    ['rank', 'sex']
""",
}


SURFACE = Surface(
    name="{}",
    call="df.dp.{verb}({{}})",
    module=__name__,
    returns=pd.DataFrame,
    returns_text="a pandas DataFrame whose attrs['dp'] states what was spent (and diagnostics).",
    selection_returns=pd.DataFrame,
    selection_returns_text=(
        "a small pandas DataFrame whose attrs['dp'] is a SelectionInfo (mechanism, pure ε, "
        "margin; diagnostics: never publish them)."
    ),
    leading=("self",),
    examples={statistic: _SETUP + example for statistic, example in _EXAMPLES.items()},
)


@pd.api.extensions.register_dataframe_accessor("dp")
class DPAccessor:
    """``df.dp``: DP counts, sums, means, variances and standard deviations over declared
    cells; DP quantiles and top-k."""

    def __init__(self, df: pd.DataFrame) -> None:
        self._df = df

    @property
    def info(self) -> ReleaseInfo | SelectionInfo:
        """What this result spent and how precise it is: the info of ``attrs["dp"]`` of a
        ``df.dp`` result (a `ReleaseInfo`, or a `SelectionInfo` for quantile / median /
        top-k; its diagnostics only on the result itself, not on copies of it)."""
        info = self._df.attrs.get("dp")
        if isinstance(info, ResultInfo):
            return info.info
        if info is None:
            raise DPValueError(
                "this DataFrame carries no attrs['dp']: .dp.info and .dp.margin_of_error "
                "belong to the results of df.dp.count/sum/mean/var/std/quantile/median/top_k"
            )
        return info

    @property
    def margin_of_error(self) -> dict[str, int | Fraction] | int | None:
        """The result's margins at its confidence: {column: m} for a count, sum or mean
        (a mean's ``sum`` and ``count``; a variance's or std's ``count``, ``centered_sum``
        and ``centered_sum_of_squares``); a selection's rank error (None for peeling top-k)."""
        return self.info.margin_of_error

    def _run(self, statistic: str, arguments: dict[str, Any]) -> pd.DataFrame:
        if statistic in ("quantile", "median"):
            if statistic == "median":
                arguments["q"] = Fraction(1, 2)
            return run_quantile_pandas(self._df, QuantileQuery.build(statistic, **arguments))
        if statistic == "top_k":
            return run_top_k_pandas(self._df, TopKQuery.build(**arguments))
        # The cost (a key selection's included) is known before the data is touched.
        return run_selected(self._df, plan_statistic(statistic, arguments))


def _verb(statistic: str) -> Any:
    def run(self: DPAccessor, **arguments: Any) -> pd.DataFrame:
        return self._run(statistic, arguments)

    return method_of(VERBS[statistic], SURFACE, run)


for _statistic in VERBS:
    setattr(DPAccessor, _statistic, _verb(_statistic))


def dp(df: pd.DataFrame) -> DPAccessor:
    """``df.dp`` under a spelling type checkers follow: ``dp_pipeline.dp(df).sum(...)``
    runs ``df.dp.sum(...)`` (the same verbs, arguments and release)."""
    if not isinstance(df, pd.DataFrame):
        raise DPTypeError(
            f"dp_pipeline.dp(df) takes a pandas DataFrame, got {type(df).__name__}; for a "
            f"Spark DataFrame use df.transform(dp_pipeline.spark.dp_count(...)) (or dp_sum, "
            f"...), or session.count(df, ...)"
        )
    return DPAccessor(df)
