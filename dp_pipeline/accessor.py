"""``df.dp``: the pandas accessor, registered on DataFrame by ``import dp_pipeline``.

Thin shims over the query parameters (`dp_pipeline.query.spec.QuerySpec`,
`dp_pipeline.selection.query`): each method builds the query (the cost is known
before the data is touched), runs it on the pandas engine and attaches
``result.attrs["dp"]`` (a `dp_pipeline.query.cost.ReleaseInfo` with the
`Diagnostics`; not private: never publish them). Because pandas serialises
``attrs`` into Parquet metadata as JSON, ``to_parquet`` refuses a result that
still carries them; publish ``result.attrs["dp"].public_summary()`` and call
``result.attrs.clear()`` before writing.
"""

from __future__ import annotations

from fractions import Fraction

import pandas as pd

from dp_pipeline.engines.pandas.aggregate import run_pandas
from dp_pipeline.query.cost import release_info
from dp_pipeline.query.domain import DEFAULT_CELL_LIMIT
from dp_pipeline.query.spec import DEFAULT_NOISE_PARTITIONS, QuerySpec
from dp_pipeline.selection.pandas import run_quantile_pandas, run_top_k_pandas
from dp_pipeline.selection.query import QuantileQuery, TopKQuery

__all__ = ["DPAccessor"]

_COMMON_DOC = """
        Parameters (shared with `dp_pipeline.spark`): ``by`` key columns;
        ``domains`` {column: range or list}; ``noise`` a DiscreteGaussian or
        DiscreteLaplace; ``key`` a MasterKey; ``release_id`` and ``table`` name
        the noise streams together with what is measured (the statistic and a
        digest of the query): the same query under the same key and labels
        redraws the same noise, any other query draws independent noise (and
        spends its own budget); ``privacy_unit``
        (None: every row is a unit); ``max_cells`` and ``max_per_cell``
        contribution bounds; ``neighbouring`` "add_remove" or "replace";
        ``on_invalid`` "drop" (count in diagnostics) or "error";
        ``noise_partitions``; ``cell_limit``; ``confidence`` of the margins;
        ``delta`` at which ε is reported.
"""


@pd.api.extensions.register_dataframe_accessor("dp")
class DPAccessor:
    """``df.dp``: DP counts, sums and means over declared cells; DP quantiles and top-k."""

    def __init__(self, df: pd.DataFrame) -> None:
        self._df = df

    def _run(self, statistic: str, **params) -> pd.DataFrame:
        spec = QuerySpec.build(statistic, **params)
        info = release_info(spec)  # the cost is known before the data is touched
        result, diagnostics = run_pandas(self._df, spec)
        result.attrs["dp"] = info.with_diagnostics(diagnostics)
        return result

    def count(
        self,
        *,
        by,
        domains,
        noise,
        key,
        release_id: str,
        table: str,
        privacy_unit: str | None = None,
        max_cells: int = 1,
        max_per_cell: int = 1,
        neighbouring: str = "add_remove",
        on_invalid: str = "drop",
        noise_partitions: int = DEFAULT_NOISE_PARTITIONS,
        cell_limit: int = DEFAULT_CELL_LIMIT,
        confidence=Fraction(95, 100),
        delta=Fraction(1, 10**6),
    ) -> pd.DataFrame:
        """Noisy row count of every declared cell (zero counts included): columns by + count.

        Each unit changes at most ``max_cells`` counts by at most
        ``max_per_cell``; that sensitivity vector is what the accountant is told.
        """
        return self._run("count", **_params(locals()))

    def sum(
        self,
        column: str,
        *,
        bounds,
        by,
        domains,
        noise,
        key,
        release_id: str,
        table: str,
        granularity=1,
        privacy_unit: str | None = None,
        max_cells: int = 1,
        max_per_cell: int = 1,
        neighbouring: str = "add_remove",
        on_invalid: str = "drop",
        noise_partitions: int = DEFAULT_NOISE_PARTITIONS,
        cell_limit: int = DEFAULT_CELL_LIMIT,
        confidence=Fraction(95, 100),
        delta=Fraction(1, 10**6),
    ) -> pd.DataFrame:
        """Noisy sum of ``column`` per cell: by + sum.

        Values are clamped into ``bounds`` and rounded to multiples of
        ``granularity``; the noise is added to the integer sum in granularity units.
        """
        return self._run("sum", **_params(locals()))

    def mean(
        self,
        column: str,
        *,
        bounds,
        by,
        domains,
        noise,
        key,
        release_id: str,
        table: str,
        granularity=1,
        count_noise=None,
        privacy_unit: str | None = None,
        max_cells: int = 1,
        max_per_cell: int = 1,
        neighbouring: str = "add_remove",
        on_invalid: str = "drop",
        noise_partitions: int = DEFAULT_NOISE_PARTITIONS,
        cell_limit: int = DEFAULT_CELL_LIMIT,
        confidence=Fraction(95, 100),
        delta=Fraction(1, 10**6),
    ) -> pd.DataFrame:
        """Noisy sum, noisy count and mean = sum / max(count, 1) clipped into bounds.

        The budget is split between the sum (``noise``) and the count
        (``count_noise``, default the same mechanism); both are composed by the
        accountant and ``attrs["dp"].budget_split`` states each share of ρ.
        """
        return self._run("mean", **_params(locals()))

    count.__doc__ += _COMMON_DOC
    sum.__doc__ += _COMMON_DOC
    mean.__doc__ += _COMMON_DOC

    def quantile(
        self,
        column: str,
        q,
        *,
        bounds,
        granularity,
        epsilon,
        key,
        release_id: str,
        table: str,
        on_invalid: str = "drop",
        confidence=Fraction(95, 100),
    ) -> pd.DataFrame:
        """ε-DP ``q``-quantile of ``column`` (base-2 exponential mechanism): quantile, column.

        Candidates are the public grid ``lo, lo + granularity, ... <= hi`` of
        ``bounds``; values are clamped into ``bounds``; each row is one privacy
        unit (one value per person). ``epsilon`` is the target (the spent
        ``attrs["dp"].epsilon`` is the mechanism's pure ε, never above it) or a
        `BaseTwoExponential`. Null, NaN and ±inf values are dropped (counted in
        the diagnostics) or, with ``on_invalid="error"``, refused.
        ``attrs["dp"].margin_of_error`` is the rank error at ``confidence``.
        Reproducible: the draw comes from ``derive_stream(key, release_id,
        table, "selection", "quantile")``.
        """
        query = QuantileQuery.build(
            "quantile",
            column=column,
            q=q,
            bounds=bounds,
            granularity=granularity,
            epsilon=epsilon,
            key=key,
            release_id=release_id,
            table=table,
            on_invalid=on_invalid,
            confidence=confidence,
        )
        return run_quantile_pandas(self._df, query)

    def median(
        self,
        column: str,
        *,
        bounds,
        granularity,
        epsilon,
        key,
        release_id: str,
        table: str,
        on_invalid: str = "drop",
        confidence=Fraction(95, 100),
    ) -> pd.DataFrame:
        """`quantile` at q = 1/2 (its own stream label "median")."""
        query = QuantileQuery.build(
            "median",
            column=column,
            q=Fraction(1, 2),
            bounds=bounds,
            granularity=granularity,
            epsilon=epsilon,
            key=key,
            release_id=release_id,
            table=table,
            on_invalid=on_invalid,
            confidence=confidence,
        )
        return run_quantile_pandas(self._df, query)

    def top_k(
        self,
        column: str,
        k: int,
        *,
        candidates,
        epsilon,
        key,
        release_id: str,
        table: str,
        method: str = "peeling",
        privacy_unit: str | None = None,
        max_candidates: int = 1,
        max_per_candidate: int = 1,
        neighbouring: str = "add_remove",
        on_invalid: str = "drop",
        cell_limit: int = DEFAULT_CELL_LIMIT,
        confidence=Fraction(95, 100),
    ) -> pd.DataFrame:
        """ε-DP ``k`` most frequent ``column`` values among ``candidates``: rank, column[, count].

        ``candidates`` is the public domain (list or range); rows outside it
        are dropped (or refused). Each unit counts in at most ``max_candidates``
        candidates, at most ``max_per_candidate`` times each (enforced as in
        ``df.dp.count``). ``method="peeling"``: k exponential-mechanism rounds
        at ε/k; ``"one_shot"``: discrete Laplace noisy counts at scale Δ₁/ε
        and their top k (the winners' noisy counts are returned in ``count``).
        See `dp_pipeline.selection.algorithms` for when to prefer which.
        """
        query = TopKQuery.build(
            column=column,
            k=k,
            candidates=candidates,
            epsilon=epsilon,
            key=key,
            release_id=release_id,
            table=table,
            method=method,
            privacy_unit=privacy_unit,
            max_candidates=max_candidates,
            max_per_candidate=max_per_candidate,
            neighbouring=neighbouring,
            on_invalid=on_invalid,
            cell_limit=cell_limit,
            confidence=confidence,
        )
        return run_top_k_pandas(self._df, query)


def _params(local_vars: dict) -> dict:
    params = {k: v for k, v in local_vars.items() if k != "self"}
    return params
