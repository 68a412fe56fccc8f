"""The Spark engine: ``df.transform(dp_count(...))``, ``dp_sum``, ``dp_mean``, ``dp_var``,
``dp_std``; the selections ``dp_quantile``, ``dp_median``, ``dp_top_k``; `local_session`.

Every function has the call shape of its ``df.dp`` twin without the DataFrame: the value
column positional (``dp_sum("income", bounds=...)`` as ``df.dp.sum("income", bounds=...)``,
``dp_quantile("income", "1/4", ...)``, ``dp_top_k("region", 3, ...)``), the same names and
defaults, and the same release for the same key and labels. Each returns a query to apply
with ``df.transform(query)``; nothing is read until then.

Aggregation and contribution bounding run in Spark SQL (no row-at-a-time
Python UDF): cell indexes are arithmetic on the key columns (integer ranges) or
a broadcast join (explicit lists), bounding uses window functions ranked by the
keyed hashes of `dp_pipeline.engines.bounding`, and one ``groupBy`` produces the true
aggregate of every non-empty cell. Noise is a grouped ``applyInArrow`` over the
declared noise partitions running the shared `dp_pipeline.udfs` code, which
also completes the domain (every declared cell, zero counts included), so the
release is bit-identical to the pandas engine's and independent of executors,
cores, shuffle partitions and task retries.

Every function names its privacy unit: ``privacy_unit="person_id"``, or
``privacy_unit=None`` for a per-record guarantee; a call without it is refused.

Calling a query on a DataFrame runs the aggregation eagerly (one Spark job:
the aggregate is persisted and the diagnostics collected), so bad data raises
at ``transform`` time with ``on_invalid="error"``; the noisy DataFrame is lazy.
A selection (`SparkDPSelection`) reads the DataFrame at ``transform`` time too (one
Spark job of bounded counts per candidate), chooses on the driver and returns its few
rows as a Spark DataFrame.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame

from dp_pipeline.engines.backend import noisy_tables

# The Spark engine's lower-level steps (true aggregates -> noisy cells) stay importable here
# (re-exported by name, outside __all__).
from dp_pipeline.engines.spark.noise import DRIVER_NOISE_CELLS as DRIVER_NOISE_CELLS
from dp_pipeline.engines.spark.noise import collect_noisy_cells as collect_noisy_cells
from dp_pipeline.engines.spark.noise import noisy_cells as noisy_cells
from dp_pipeline.engines.spark.noise import noisy_table as noisy_table
from dp_pipeline.engines.spark.session.start import local_session
from dp_pipeline.engines.spark_sql.variance import SparkDPVariance
from dp_pipeline.errors import InternalError
from dp_pipeline.from_data.plan import PlannedStatistic, plan_statistic
from dp_pipeline.from_data.spark import SelectedVariance, select_rows
from dp_pipeline.platform.java import ensure_java as ensure_java
from dp_pipeline.query.cost import ReleaseInfo, release_info
from dp_pipeline.query.diagnostics import Diagnostics
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.query.variance import VARIANCE_STATISTICS, VarianceSpec
from dp_pipeline.selection.info import SelectionInfo
from dp_pipeline.selection.query import QuantileQuery, TopKQuery
from dp_pipeline.selection.spark import run_quantile_spark, run_top_k_spark
from dp_pipeline.surface.verbs import VERBS, Surface, method_of

# The public functions; the engine's lower-level steps imported above (DRIVER_NOISE_CELLS,
# collect_noisy_cells, noisy_cells, noisy_table, ensure_java) and run_spark stay importable
# from here for code that used them, outside the public list.
__all__ = [
    "SparkDPQuery",
    "SparkDPSelection",
    "SparkDPVariance",
    "dp_count",
    "dp_mean",
    "dp_median",
    "dp_quantile",
    "dp_std",
    "dp_sum",
    "dp_top_k",
    "dp_var",
    "local_session",
    "run_queries",
]


def run_queries(
    df: DataFrame,
    specs: Sequence[QuerySpec],
    *,
    wrap_udf: Callable[[Callable], Callable] | None = None,
) -> list[tuple[DataFrame, Diagnostics]]:
    """Bound, aggregate and noise several queries over ``df`` in one pass.

    Returns a list of (lazy noisy DataFrame, diagnostics), one per query, in
    order. The rows are read and bounded once for all queries
    (`dp_pipeline.engines.backend.noisy_tables`); each query's release is identical
    to running it alone, and to the pandas engine's. Queries must share the
    privacy unit column and have distinct (release_id, table) stream labels.
    ``wrap_udf`` wraps the noise function (tests use it to inject a one-time
    task failure).
    """
    return noisy_tables(df, specs, wrap_udf=wrap_udf)


def run_spark(
    df: DataFrame,
    spec: QuerySpec,
    *,
    wrap_udf: Callable[[Callable], Callable] | None = None,
) -> tuple[DataFrame, Diagnostics]:
    """Bound, aggregate and noise ``df`` per ``spec``: (lazy noisy DataFrame, diagnostics).

    ``wrap_udf`` wraps the noise function (tests use it to inject a one-time task failure).
    """
    return run_queries(df, [spec], wrap_udf=wrap_udf)[0]


class SparkDPQuery:
    """A DP aggregation to apply with ``df.transform(query)``.

    ``query(df)`` returns the noisy DataFrame (one row per declared cell; key
    columns with their input types, then the value columns). After a call,
    ``query.diagnostics`` holds that run's `Diagnostics` (not private: never
    publish). ``query.info`` is the `ReleaseInfo` (mechanisms, sensitivity,
    ρ, ε at δ, margins of error), known before any data is read.

    With a key selected from the data (``domains={key: FROM_DATA}``), ``planned`` holds
    the selection (`dp_pipeline.from_data.plan`) and ``spec`` is the statistic over its
    stand-in domain (what is costed); a call first selects the keys (streamed), then
    releases one row per released cell, and ``info`` then shows the keys kept.
    """

    def __init__(self, spec: QuerySpec, planned: PlannedStatistic | None = None) -> None:
        self.spec = spec
        self.diagnostics: Diagnostics | None = None
        self._planned = planned
        self._info: ReleaseInfo | None = None if planned is None else planned.info

    @property
    def info(self) -> ReleaseInfo:
        if self._info is None:
            self._info = release_info(self.spec)
        if self.diagnostics is not None:
            return self._info.with_diagnostics(self.diagnostics)
        return self._info

    def run(self, df: DataFrame) -> tuple[DataFrame, Diagnostics]:
        """(noisy DataFrame, diagnostics). With a key selected from the data, its released
        keys first (streamed), then the statistic on their rows; ``info`` then shows the
        keys kept."""
        if self._planned is None or self._planned.selection is None:
            noisy, diagnostics = run_spark(df, self.spec)
            self.diagnostics = diagnostics
            return noisy, diagnostics
        selected = select_rows(df, self._planned)
        noisy, diagnostics = run_spark(selected.rows, selected.spec)  # type: ignore[arg-type]
        self._info, self.diagnostics = selected.info, diagnostics
        return selected.finish(noisy), diagnostics

    def __call__(self, df: DataFrame) -> DataFrame:
        return self.run(df)[0]

    def __repr__(self) -> str:
        selection = None if self._planned is None else self._planned.selection
        cells = (
            f"{self.spec.cells.total} cells"
            if selection is None
            else f"keys of {selection.column!r} selected from the data"
        )
        return (
            f"SparkDPQuery({self.spec.statistic} by {list(self.spec.cells.columns)}, "
            f"{cells}, table={self.spec.table!r})"
        )


# Each function's runnable example (tests/unit/api/test_docstring_examples.py runs them): a query
# is built, and its cost known, before any Spark session or data.
_SETUP = """
Example:

    >>> from dp_pipeline import MasterKey
    >>> from dp_pipeline.spark import {name}
    >>> labels = dict(key=MasterKey(), release_id="example", privacy_unit="person_id")
"""
_EXAMPLES = {
    "count": """
    >>> query = dp_count(by="sex", domains={"sex": ["F", "M"]}, epsilon=1, table="t", **labels)
    >>> query.info.epsilon <= 1
    True
    >>> # counts = people.transform(query): one row per declared cell
""",
    "sum": """
    >>> query = dp_sum("age", bounds=(0, 100), by="sex", domains={"sex": ["F", "M"]},
    ...                epsilon=1, table="t", **labels)
    >>> query.info.epsilon <= 1
    True
""",
    "mean": """
    >>> query = dp_mean("age", bounds=(0, 100), by="sex", domains={"sex": ["F", "M"]},
    ...                 epsilon=1, table="t", **labels)
    >>> sorted(query.info.margin_of_error)
    ['count', 'sum']
""",
    "var": """
    >>> query = dp_var("age", bounds=(0, 100), by="sex", domains={"sex": ["F", "M"]},
    ...                epsilon=1, table="t", **labels)
    >>> sorted(query.info.budget_split)  # three noisy aggregates, a third of ρ each
    ['centered_sum', 'centered_sum_of_squares', 'count']
""",
    "std": """
    >>> query = dp_std("age", bounds=(0, 100), by="sex", domains={"sex": ["F", "M"]},
    ...                epsilon=1, table="t", **labels)
    >>> query.info.epsilon <= 1
    True
""",
    "quantile": """
    >>> query = dp_quantile("age", "1/4", bounds=(0, 100), granularity=1, epsilon=1,
    ...                     table="t", **labels)
    >>> query.info.epsilon <= 1
    True
    >>> # quartile = people.transform(query): columns quantile, age
""",
    "median": """
    >>> query = dp_median("age", bounds=(0, 100), granularity=1, epsilon=1, table="t", **labels)
    >>> query
    SparkDPSelection(median of 'age', table='t')
""",
    "top_k": """
    >>> query = dp_top_k("sex", 1, candidates=["F", "M"], epsilon=1, table="t", **labels)
    >>> query.info.runs
    1
""",
}


class SparkDPSelection:
    """A DP selection (quantile, median, top-k) to apply with ``df.transform(selection)``.

    ``selection(df)`` reads ``df`` (one Spark job: each unit's rows bounded by the count
    engine's keyed rule, then the counts per group and candidate), selects on the driver
    from the query's keyed stream, and returns the selection as a small Spark DataFrame:
    the rows ``df.dp.quantile`` / ``median`` / ``top_k`` return for the same key and
    labels. ``selection.info`` is the `SelectionInfo` (mechanism, pure ε, margin), known
    before any data is read; after a call it also holds that run's `Diagnostics`
    (``selection.diagnostics``; not private: never publish them).
    """

    def __init__(self, query: QuantileQuery | TopKQuery) -> None:
        self.query = query
        self.diagnostics: Diagnostics | None = None

    @property
    def info(self) -> SelectionInfo:
        info = self.query.info()
        if self.diagnostics is not None:
            return info.with_diagnostics(self.diagnostics)
        return info

    def collect(self, df: DataFrame) -> pd.DataFrame:
        """The selection of ``df`` as a pandas DataFrame on the driver, with ``attrs["dp"]``
        as ``df.dp`` gives it."""
        if isinstance(self.query, QuantileQuery):
            result = run_quantile_spark(df, self.query)
        else:
            result = run_top_k_spark(df, self.query)
        self.diagnostics = result.attrs["dp"].info.diagnostics
        return result

    def run(self, df: DataFrame) -> tuple[DataFrame, Diagnostics]:
        """(the selection as a Spark DataFrame, diagnostics)."""
        result = self.collect(df)
        rows = pd.DataFrame(result)  # the rows only: attrs stay with this query
        rows.attrs = {}
        return df.sparkSession.createDataFrame(rows), result.attrs["dp"].info.diagnostics

    def __call__(self, df: DataFrame) -> DataFrame:
        return self.run(df)[0]

    def __repr__(self) -> str:
        return (
            f"SparkDPSelection({self.info.statistic} of {self.query.column!r}, "
            f"table={self.query.context.table!r})"
        )


SURFACE = Surface(
    name="dp_{}",
    call="df.transform(dp_{verb}({{}}))",
    module=__name__,
    returns=SparkDPQuery,
    returns_text=(
        "a SparkDPQuery: a DataFrame -> DataFrame function for df.transform; the same inputs "
        "as df.dp give a bit-identical release."
    ),
    selection_returns=SparkDPSelection,
    selection_returns_text=(
        "a SparkDPSelection: a DataFrame -> DataFrame function for df.transform (its .info "
        "the SelectionInfo); the same inputs as df.dp give the same selection."
    ),
    verb_returns={
        statistic: (
            SparkDPVariance,
            "a SparkDPVariance: a DataFrame -> DataFrame function for df.transform (its .info "
            "the ReleaseInfo of its three noisy aggregates); the same inputs as df.dp give "
            "the same release.",
        )
        for statistic in VARIANCE_STATISTICS
    },
    examples={
        statistic: _SETUP.format(name=f"dp_{statistic}") + example
        for statistic, example in _EXAMPLES.items()
    },
)


def _query(
    statistic: str, arguments: dict[str, Any]
) -> SparkDPQuery | SparkDPSelection | SparkDPVariance:
    """The query ``dp_<statistic>(**arguments)`` returns (nothing read yet)."""
    if statistic in VARIANCE_STATISTICS or statistic in ("count", "sum", "mean"):
        planned = plan_statistic(statistic, arguments)
        if isinstance(planned.spec, VarianceSpec):
            if planned.selection is None:
                return SparkDPVariance(planned.spec)
            return SelectedVariance(planned)
        return SparkDPQuery(planned.spec, planned)
    if statistic == "top_k":
        return SparkDPSelection(TopKQuery.build(**arguments))
    if statistic in ("quantile", "median"):
        if statistic == "median":
            arguments["q"] = Fraction(1, 2)
        return SparkDPSelection(QuantileQuery.build(statistic, **arguments))
    raise InternalError(f"no Spark verb {statistic!r}")


def _function(statistic: str) -> Callable[..., Any]:
    return method_of(VERBS[statistic], SURFACE, lambda **arguments: _query(statistic, arguments))


dp_count = _function("count")
dp_sum = _function("sum")
dp_mean = _function("mean")
dp_var = _function("var")
dp_std = _function("std")
dp_quantile = _function("quantile")
dp_median = _function("median")
dp_top_k = _function("top_k")
