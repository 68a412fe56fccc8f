"""``df.dp``: the pandas accessor, registered on DataFrame by ``import dp_pipeline``.

Thin shims generated from the query parameters (`dp_pipeline.query.aggregations`,
`dp_pipeline.selection.parameters`, with `dp_pipeline.query.signatures`): each
method builds the query (the cost is known before the data is touched), runs it
on the pandas engine and attaches ``result.attrs["dp"]`` (a
`dp_pipeline.query.cost.ReleaseInfo` with the `Diagnostics`; not private: never
publish them). Because pandas serialises ``attrs`` into Parquet metadata as JSON,
``to_parquet`` refuses a result that still carries them; publish
``result.attrs["dp"].public_summary()`` and call ``result.attrs.clear()`` before
writing.
"""

from __future__ import annotations

from fractions import Fraction

import pandas as pd

from dp_pipeline.engines.backend import aggregate
from dp_pipeline.engines.pandas.aggregate import release_frame
from dp_pipeline.query.aggregations import AGGREGATIONS
from dp_pipeline.query.cost import release_info
from dp_pipeline.query.signatures import aggregation_signature, public_doc, shim
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.selection.pandas import run_quantile_pandas, run_top_k_pandas
from dp_pipeline.selection.query import QuantileQuery, TopKQuery
from dp_pipeline.selection.signatures import quantile_signature, selection_doc, top_k_signature

__all__ = ["DPAccessor"]

_RETURNS = "a pandas DataFrame whose attrs['dp'] states what was spent (and diagnostics)."


def _aggregation(statistic: str):
    positional = () if statistic == "count" else ("column",)
    signature = aggregation_signature(
        statistic, positional=positional, leading=("self",), returns=pd.DataFrame
    )
    doc = public_doc(AGGREGATIONS[statistic].__doc__, signature, _RETURNS)

    def run(self, **arguments):
        return self._run(statistic, arguments)

    return shim(statistic, signature, doc, run, __name__)


def _quantile(statistic: str):
    signature = quantile_signature(statistic, leading=("self",))

    def run(self, **arguments):
        if statistic == "median":
            arguments["q"] = Fraction(1, 2)
        return run_quantile_pandas(self._df, QuantileQuery.build(statistic, **arguments))

    return shim(statistic, signature, selection_doc(statistic, signature), run, __name__)


def _top_k():
    signature = top_k_signature(leading=("self",))

    def run(self, **arguments):
        return run_top_k_pandas(self._df, TopKQuery.build(**arguments))

    return shim("top_k", signature, selection_doc("top_k", signature), run, __name__)


@pd.api.extensions.register_dataframe_accessor("dp")
class DPAccessor:
    """``df.dp``: DP counts, sums and means over declared cells; DP quantiles and top-k."""

    def __init__(self, df: pd.DataFrame) -> None:
        self._df = df

    @property
    def info(self):
        """What this result spent and how precise it is: ``attrs["dp"]`` of a ``df.dp`` result
        (a `ReleaseInfo`, or a `SelectionInfo` for quantile / median / top-k)."""
        info = self._df.attrs.get("dp")
        if info is None:
            raise ValueError(
                "this DataFrame carries no attrs['dp']: .dp.info and .dp.margin_of_error "
                "belong to the results of df.dp.count/sum/mean/quantile/median/top_k"
            )
        return info

    @property
    def margin_of_error(self):
        """The result's margins at its confidence: {column: m} for a count, sum or mean
        (a mean's ``sum`` and ``count``); a selection's rank error (None for peeling top-k)."""
        return self.info.margin_of_error

    def _run(self, statistic: str, arguments: dict) -> pd.DataFrame:
        spec = QuerySpec.build(statistic, **arguments)
        info = release_info(spec)  # the cost is known before the data is touched
        (true,) = aggregate(self._df, [spec])
        result = release_frame(self._df, spec, true)
        result.attrs["dp"] = info.with_diagnostics(true.diagnostics)
        return result

    count = _aggregation("count")
    sum = _aggregation("sum")
    mean = _aggregation("mean")
    quantile = _quantile("quantile")
    median = _quantile("median")
    top_k = _top_k()
