"""Validated DP selection queries (quantile, median, top-k), shared by both engines.

A query is built and checked whole before any data is read (bad input raises
naming the argument, the value and the rule; nothing is drawn). The engines
(``df.dp.quantile / median / top_k`` in `dp_pipeline.engines.pandas.aggregate`,
`dp_pipeline.selection.spark`) only compute the utilities' inputs:

- quantile / median: the number of values at each grid position
  (`dp_pipeline.query.quantile_grid.quantile_positions`, the same IEEE expression in
  both engines); the driver then runs `select_quantile`.
- top-k: the bounded per-candidate counts of the count engine (a `QuerySpec`
  ``count by [column]`` over the candidate domain, so privacy units,
  ``max_candidates`` / ``max_per_candidate`` bounding and invalid-row rules
  are the count engine's). ``peeling`` runs on the true bounded counts;
  ``one_shot`` is the count engine's noisy count release (discrete Laplace
  at `one_shot_scale`), of which the top k are post-processing.

Randomness: the exponential mechanism draws from
``derive_stream(key, release_id, table, "selection", statistic)``; the
one-shot noise uses the count engine's per-partition streams. A fixed key,
release id and table therefore give the same result on both engines.

The result is a small pandas DataFrame whose ``attrs["dp"]`` is a
`SelectionInfo` (mechanism, pure ε, margin, diagnostics: publish only
``public_summary()``, never the diagnostics).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pandas as pd

from dp_pipeline.accounting import margin_of_error
from dp_pipeline.digest import digest_of
from dp_pipeline.mechanisms import BaseTwoExponential, DiscreteLaplace
from dp_pipeline.mechanisms.registry import mechanism_to_dict
from dp_pipeline.query.diagnostics import Diagnostics
from dp_pipeline.query.domain import DEFAULT_CELL_LIMIT
from dp_pipeline.query.quantile_grid import (
    TOP_K_METHODS,
    check_positive_int,
    check_value_bounds,
    quantile_candidates,
    quantile_positions,
)
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.randomness import MasterKey, SecureStream, derive_stream
from dp_pipeline.rational import exact_rational, positive_rational
from dp_pipeline.selection.algorithms import (
    checked_quantile_mechanism,
    one_shot_scale,
    one_shot_top_k,
    peel_top_k,
    quantile_rank_error_bound,
    select_quantile,
    top_k_mechanism,
)
from dp_pipeline.selection.info import SelectionInfo

__all__ = ["QuantileQuery", "TopKQuery"]

_ON_INVALID = ("drop", "error")


def _check_common(key, release_id, table, on_invalid, confidence) -> Fraction:
    if not isinstance(key, MasterKey):
        raise TypeError(f"key must be a dp_pipeline MasterKey, got {type(key).__name__}")
    for name, value in (("release_id", release_id), ("table", table)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    if on_invalid not in _ON_INVALID:
        raise ValueError(f"on_invalid must be one of {_ON_INVALID}, got {on_invalid!r}")
    confidence = exact_rational(confidence, "confidence")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return confidence


@dataclass(frozen=True)
class QuantileQuery:
    """A validated DP quantile (or median) of one numeric column; rows are the privacy units.

    Each row contributes one value (no ``privacy_unit``: use one row per
    person). Candidates: the public grid ``lo, lo + g, ... <= hi``. Mechanism:
    `BaseTwoExponential` with Δu = 1, not monotone (``ε = 2·η·ln2``), see
    `dp_pipeline.selection.algorithms`.
    """

    statistic: str
    column: str
    q: Fraction
    bounds: tuple[Fraction, Fraction]
    granularity: Fraction
    candidates: tuple[Fraction, ...]
    mechanism: BaseTwoExponential
    key: MasterKey
    release_id: str
    table: str
    on_invalid: str
    confidence: Fraction

    @classmethod
    def build(
        cls,
        statistic: str,
        *,
        column,
        q,
        bounds,
        granularity,
        epsilon,
        key,
        release_id,
        table,
        on_invalid="drop",
        confidence=Fraction(95, 100),
    ) -> QuantileQuery:
        """Validate everything that does not need the data; raise before any work.

        ``epsilon`` is a target ε (the mechanism's `pure_epsilon` is what is
        spent, never more) or a ready `BaseTwoExponential` (Δu >= 1, not monotone).
        """
        if statistic not in ("quantile", "median"):
            raise ValueError(f"statistic must be 'quantile' or 'median', got {statistic!r}")
        if not isinstance(column, str) or not column:
            raise TypeError(f"column must be a column name, got {column!r}")
        q_exact = exact_rational(q, "q")
        if not 0 <= q_exact <= 1:
            raise ValueError(f"q must be in [0, 1], got {q!r}")
        low, high = check_value_bounds(bounds)
        step = positive_rational(granularity, "granularity")
        candidates = tuple(quantile_candidates((low, high), step))
        mechanism = checked_quantile_mechanism(epsilon)
        confidence = _check_common(key, release_id, table, on_invalid, confidence)
        return cls(
            statistic=statistic,
            column=column,
            q=q_exact,
            bounds=(low, high),
            granularity=step,
            candidates=candidates,
            mechanism=mechanism,
            key=key,
            release_id=release_id,
            table=table,
            on_invalid=on_invalid,
            confidence=confidence,
        )

    def canonical(self) -> dict:
        """Every parameter that can change the selected value (not the key or the names)."""
        return {
            "statistic": self.statistic,
            "column": self.column,
            "q": str(self.q),
            "bounds": [str(self.bounds[0]), str(self.bounds[1])],
            "granularity": str(self.granularity),
            "mechanism": mechanism_to_dict(self.mechanism),
        }

    @property
    def labels(self) -> tuple[str | int, ...]:
        """(release id, table, "selection", statistic, query digest): what is measured."""
        measured = digest_of(self.canonical())
        return (self.release_id, self.table, "selection", self.statistic, measured)

    def stream(self) -> SecureStream:
        return derive_stream(self.key, *self.labels)

    def positions(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Grid position of each finite value and the out-of-bounds mask (`quantile_positions`)."""
        return quantile_positions(values, self.bounds, self.granularity)

    def info(self) -> SelectionInfo:
        beta = 1 - self.confidence
        return SelectionInfo(
            statistic=self.statistic,
            method="exponential",
            mechanism=self.mechanism,
            runs=1,
            sensitivity=(1,),
            epsilon=self.mechanism.pure_epsilon,
            candidates=len(self.candidates),
            margin_of_error=quantile_rank_error_bound(self.mechanism, len(self.candidates), beta),
            confidence=self.confidence,
        )

    def release(self, bucket_counts: np.ndarray, diagnostics: Diagnostics) -> pd.DataFrame:
        """Run the mechanism on the driver; the one-row result with ``attrs["dp"]``."""
        index = select_quantile(
            bucket_counts, self.q, list(self.candidates), self.mechanism, self.stream()
        )
        chosen = self.candidates[index]
        integer_grid = all(c.denominator == 1 for c in (self.bounds[0], self.granularity))
        value = int(chosen) if integer_grid else float(chosen)
        frame = pd.DataFrame(
            {
                "quantile": np.array([float(self.q)]),
                self.column: np.array([value], dtype=np.int64 if integer_grid else np.float64),
            }
        )
        frame.attrs["dp"] = self.info().with_diagnostics(diagnostics)
        return frame


@dataclass(frozen=True)
class TopKQuery:
    """A validated DP top-k over a public candidate list of one column.

    ``counts`` is the count engine's `QuerySpec` (``count by [column]``,
    domain = candidates; ``max_candidates`` = ``max_cells``,
    ``max_per_candidate`` = ``max_per_cell``); its noise is the one-shot
    discrete Laplace (used only by ``method="one_shot"``). ``mechanism`` is
    the per-round `BaseTwoExponential` (peeling) or that discrete Laplace.
    """

    column: str
    k: int
    method: str
    counts: QuerySpec
    mechanism: BaseTwoExponential | DiscreteLaplace
    epsilon: Fraction

    @classmethod
    def build(
        cls,
        *,
        column,
        k,
        candidates,
        epsilon,
        key,
        release_id,
        table,
        method="peeling",
        privacy_unit=None,
        max_candidates=1,
        max_per_candidate=1,
        neighbouring="add_remove",
        on_invalid="drop",
        cell_limit=DEFAULT_CELL_LIMIT,
        confidence=Fraction(95, 100),
    ) -> TopKQuery:
        """Validate everything that does not need the data; raise before any work."""
        if not isinstance(column, str) or not column:
            raise TypeError(f"column must be a column name, got {column!r}")
        check_positive_int(k, "k")
        if method not in TOP_K_METHODS:
            raise ValueError(f"method must be one of {TOP_K_METHODS}, got {method!r}")
        epsilon = positive_rational(epsilon, "epsilon")
        if isinstance(candidates, list | tuple | range) and len(candidates) == 0:
            raise ValueError(
                f"candidates for column {column!r} is empty: top-k needs at least one candidate"
            )
        spec = QuerySpec.build(
            "count",
            by=[column],
            domains={column: candidates},
            noise=DiscreteLaplace(1),
            key=key,
            release_id=release_id,
            table=table,
            privacy_unit=privacy_unit,
            max_cells=max_candidates,
            max_per_cell=max_per_candidate,
            neighbouring=neighbouring,
            on_invalid=on_invalid,
            cell_limit=cell_limit,
            confidence=confidence,
        )
        if k > spec.cells.total:
            raise ValueError(
                f"k = {k} is larger than the number of candidates ({spec.cells.total})"
            )
        l1 = sum(spec.count_sensitivity())
        noise = DiscreteLaplace(one_shot_scale(epsilon, l1))
        spec = dataclasses.replace(spec, noise=noise)
        if method == "peeling":
            mechanism = top_k_mechanism(
                epsilon,
                k,
                utility_sensitivity=spec.effective_max_per_cell,
                monotone=spec.neighbouring == "add_remove",
            )
        else:
            mechanism = noise
        return cls(
            column=column, k=k, method=method, counts=spec, mechanism=mechanism, epsilon=epsilon
        )

    def stream(self) -> SecureStream:
        """The peeling stream: labelled by the names, then what is measured (a digest)."""
        spec = self.counts
        measured = {
            "counts": spec.digest,
            "column": self.column,
            "k": self.k,
            "method": self.method,
            "mechanism": mechanism_to_dict(self.mechanism),
        }
        return derive_stream(
            spec.master_key(),
            spec.release_id,
            spec.table,
            spec.release_digest,
            "selection",
            "top_k",
            digest_of(measured),
        )

    def labels(self) -> list:
        """The candidates in cell-index order (the order of the count arrays)."""
        cells = self.counts.cells
        (values,) = cells.decode(np.arange(cells.total, dtype=np.int64))
        return [v.item() if isinstance(v, np.generic) else v for v in values]

    def info(self) -> SelectionInfo:
        spec = self.counts
        if self.method == "peeling":
            return SelectionInfo(
                statistic="top_k",
                method="peeling",
                mechanism=self.mechanism,
                runs=self.k,
                sensitivity=(1,),
                epsilon=self.k * self.mechanism.pure_epsilon,
                candidates=spec.cells.total,
                margin_of_error=None,
                confidence=spec.confidence,
            )
        sensitivity = spec.count_sensitivity()
        return SelectionInfo(
            statistic="top_k",
            method="one_shot",
            mechanism=self.mechanism,
            runs=1,
            sensitivity=sensitivity,
            epsilon=Fraction(sum(sensitivity)) / self.mechanism.scale,
            candidates=spec.cells.total,
            margin_of_error=margin_of_error(self.mechanism, confidence=spec.confidence),
            confidence=spec.confidence,
        )

    def select(self, counts: np.ndarray) -> list[int]:
        """Indices chosen from the true bounded counts (peeling) or the noisy counts (one-shot)."""
        if self.method == "peeling":
            return peel_top_k(counts, self.k, self.mechanism, self.stream())
        return one_shot_top_k(counts, self.k)

    def release(self, counts: np.ndarray, diagnostics: Diagnostics) -> pd.DataFrame:
        """Select on the driver; the k-row result (rank, column[, noisy count]) with attrs."""
        counts = np.asarray(counts, dtype=np.int64)
        chosen = self.select(counts)
        labels = self.labels()
        columns: dict[str, object] = {
            "rank": np.arange(1, self.k + 1, dtype=np.int64),
            self.column: [labels[i] for i in chosen],
        }
        if self.method == "one_shot":
            columns["count"] = counts[chosen]  # noisy: free post-processing
        frame = pd.DataFrame(columns)
        frame.attrs["dp"] = self.info().with_diagnostics(diagnostics)
        return frame
