"""DP selection queries bound to their run context: `QuantileQuery`, `TopKQuery`.

What is computed is key-free (`dp_pipeline.selection.parameters`); this module
joins it to a `dp_pipeline.query.context.RunContext` (key, release id, table)
and runs the selection on the driver. The engines only compute the utilities'
inputs:

- quantile / median: the number of values at each (group, grid position) after each
  privacy unit's rows are bounded by the count engine's keyed rule (at most
  ``max_per_cell`` rows in each of at most ``max_cells`` groups; the position by
  `dp_pipeline.query.quantile_grid.quantile_positions`, the same IEEE expression in
  both engines); the driver then runs `select_quantile` once per declared group.
- top-k: the bounded per-candidate counts of the count engine (``counts``, a
  `QuerySpec`, so privacy units, bounding and invalid-row rules are the count
  engine's). ``peeling`` runs on the true bounded counts; ``one_shot`` is the
  count engine's noisy count release, of which the top k are post-processing.

Randomness: the exponential mechanism draws from
``derive_stream(key, release_id, table, "selection", statistic, query digest[, group])``; the
one-shot noise uses the count engine's per-partition streams. A fixed key,
release id and table therefore give the same result on both engines.

The result is a small pandas DataFrame whose ``attrs["dp"]`` is a
`dp_pipeline.query.result_info.ResultInfo` of its `SelectionInfo` (mechanism, pure ε,
margin; the diagnostics in memory only: copies, pickles and Parquet files of the
result keep the public summary).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np
import pandas as pd

from dp_pipeline.digest import digest_of
from dp_pipeline.engines.bounding import BoundingSalt
from dp_pipeline.errors import InternalError
from dp_pipeline.mechanisms import BaseTwoExponential, DiscreteLaplace
from dp_pipeline.mechanisms.registry import mechanism_to_dict
from dp_pipeline.query.aggregations import CountQuery
from dp_pipeline.query.context import RunContext
from dp_pipeline.query.diagnostics import Diagnostics
from dp_pipeline.query.result_info import attach_info
from dp_pipeline.query.signatures import require_explicit
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.randomness import SecureStream, derive_stream
from dp_pipeline.selection.algorithms import one_shot_top_k, peel_top_k, select_quantile
from dp_pipeline.selection.info import SelectionInfo
from dp_pipeline.selection.parameters import QuantileSelection, TopKSelection

__all__ = ["QuantileQuery", "TopKQuery"]

_CONTEXT_ARGUMENTS = ("key", "release_id", "table")


def _split_context(arguments: dict) -> RunContext:
    return RunContext.build(**{name: arguments.pop(name) for name in _CONTEXT_ARGUMENTS})


@dataclass(frozen=True)
class QuantileQuery:
    """A `QuantileSelection` in its run context: what both engines' quantiles run."""

    selection: QuantileSelection
    context: RunContext

    @classmethod
    def build(cls, statistic: str, **arguments) -> QuantileQuery:
        """`QuantileSelection.build`'s arguments plus key, release_id and table, validated;
        ``privacy_unit`` is required (``None``: per record)."""
        require_explicit(f'QuantileQuery.build("{statistic}", {{}})', arguments)
        context = _split_context(arguments)
        return cls(QuantileSelection.build(statistic, **arguments), context)

    @property
    def column(self) -> str:
        return self.selection.column

    @property
    def bounds(self) -> tuple[Fraction, Fraction]:
        return self.selection.bounds

    @property
    def granularity(self) -> Fraction:
        return self.selection.granularity

    @property
    def candidates(self) -> tuple[Fraction, ...]:
        return self.selection.candidates

    @property
    def on_invalid(self) -> str:
        return self.selection.on_invalid

    @property
    def mechanism(self) -> BaseTwoExponential:
        return self.selection.mechanism

    @property
    def labels(self) -> tuple[str | int, ...]:
        """(release id, table, "selection", statistic, query digest): what is measured."""
        measured = digest_of(self.selection.canonical())
        context = self.context
        return (context.release_id, context.table, "selection", self.selection.statistic, measured)

    def stream(self) -> SecureStream:
        return derive_stream(self.context.master_key(), *self.labels)

    def positions(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Grid position of each finite value and the out-of-bounds mask."""
        return self.selection.positions(values)

    def info(self) -> SelectionInfo:
        return self.selection.info()

    def groups_spec(self) -> QuerySpec:
        """A count over the groups in this context: how the engines code the group keys
        (null and out-of-domain keys) and check their types. Never noised."""
        selection = self.selection
        if selection.groups is None:
            raise InternalError("a quantile without groups has no group keys to code")
        counts = CountQuery(
            cells=selection.groups,
            noise=None,
            privacy_unit=selection.privacy_unit,
            max_cells=selection.max_cells,
            max_per_cell=selection.max_per_cell,
            neighbouring=selection.neighbouring,
            on_invalid=selection.on_invalid,
        )
        return QuerySpec(counts, self.context)

    def salt(self) -> BoundingSalt:
        """The keyed bounding rule's salt: the count engine's for this release id and table."""
        return BoundingSalt.derive(
            self.context.master_key(), self.context.release_id, self.context.table
        )

    def release(self, bucket_counts: np.ndarray, diagnostics: Diagnostics) -> pd.DataFrame:
        """Run the mechanism on the driver: one row per declared group, with ``attrs["dp"]``.

        ``bucket_counts`` has shape (groups, candidates): the bounded rows of each group
        at each grid position. Each group draws from its own stream (the labels and the
        group's cell index), so the groups' selections are independent.
        """
        selection = self.selection
        counts = np.asarray(bucket_counts, dtype=np.int64)
        shape = (selection.group_count, len(selection.candidates))
        if counts.shape != shape:
            raise InternalError(f"{counts.shape} bucket counts for {shape} groups x candidates")
        candidates = list(selection.candidates)
        chosen = []
        for group, row in enumerate(counts):
            labels = self.labels if selection.groups is None else (*self.labels, group)
            stream = derive_stream(self.context.master_key(), *labels)
            chosen.append(
                candidates[select_quantile(row, selection.q, candidates, self.mechanism, stream)]
            )
        integer_grid = all(c.denominator == 1 for c in (selection.bounds[0], self.granularity))
        columns: dict[str, object] = {}
        if selection.groups is not None:
            keys = selection.groups.decode(np.arange(selection.group_count, dtype=np.int64))
            columns.update(zip(selection.groups.columns, keys, strict=True))
        columns["quantile"] = np.full(len(chosen), float(selection.q))
        columns[self.column] = (
            np.array([int(c) for c in chosen], dtype=np.int64)
            if integer_grid
            else np.array([float(c) for c in chosen], dtype=np.float64)
        )
        frame = pd.DataFrame(columns)
        attach_info(frame, self.info().with_diagnostics(diagnostics))
        return frame


@dataclass(frozen=True)
class TopKQuery:
    """A `TopKSelection` in its run context; ``counts`` is its count engine `QuerySpec`."""

    selection: TopKSelection
    context: RunContext

    @classmethod
    def build(cls, **arguments) -> TopKQuery:
        """`TopKSelection.build`'s arguments plus key, release_id and table, validated;
        ``privacy_unit`` is required (``None``: per record)."""
        require_explicit("TopKQuery.build({})", arguments)
        context = _split_context(arguments)
        return cls(TopKSelection.build(**arguments), context)

    def with_plan(self, mechanism, counts_noise: DiscreteLaplace | None) -> TopKQuery:
        """The same selection running a release plan's proved mechanism (and one-shot noise)."""
        counts = self.selection.counts
        if counts_noise is not None:
            counts = counts.with_noise(counts_noise)
        return replace(self, selection=replace(self.selection, mechanism=mechanism, counts=counts))

    @property
    def column(self) -> str:
        return self.selection.column

    @property
    def k(self) -> int:
        return self.selection.k

    @property
    def method(self) -> str:
        return self.selection.method

    @property
    def mechanism(self) -> BaseTwoExponential | DiscreteLaplace:
        return self.selection.mechanism

    @property
    def epsilon(self) -> Fraction:
        return self.selection.epsilon

    @property
    def counts(self) -> QuerySpec:
        """The count engine's query of the candidates' bounded counts, in this run context."""
        return QuerySpec.bind(self.selection.counts, self.context)

    def stream(self, group: int | None = None) -> SecureStream:
        """The peeling stream: labelled by the names, then what is measured (a digest),
        then the group's index when there are groups (each group draws independently)."""
        context = self.context
        measured = {
            "counts": self.counts.digest,
            "column": self.column,
            "k": self.k,
            "method": self.method,
            "mechanism": mechanism_to_dict(self.mechanism),
        }
        return derive_stream(
            context.master_key(),
            context.release_id,
            context.table,
            context.release_digest,
            "selection",
            "top_k",
            digest_of(measured),
            *(() if group is None else (group,)),
        )

    def labels(self) -> list:
        """The candidates in cell-index order (the order of the count arrays)."""
        return self.selection.labels()

    def info(self) -> SelectionInfo:
        return self.selection.info()

    def select(self, counts: np.ndarray, group: int | None = None) -> list[int]:
        """Indices chosen from one group's true bounded counts (peeling) or noisy counts
        (one-shot)."""
        if self.method == "peeling":
            return peel_top_k(counts, self.k, self.mechanism, self.stream(group))
        return one_shot_top_k(counts, self.k)

    def release(self, counts: np.ndarray, diagnostics: Diagnostics) -> pd.DataFrame:
        """Select on the driver: k rows (rank, column[, noisy count]) per declared group,
        after the group's keys, with attrs. ``counts`` in cell order (groups, then candidates)."""
        selection = self.selection
        groups = selection.groups
        by_group = np.asarray(counts, dtype=np.int64).reshape(selection.group_count, -1)
        labels = self.labels()
        chosen = [
            self.select(row, None if groups is None else group)
            for group, row in enumerate(by_group)
        ]
        columns: dict[str, object] = {}
        if groups is not None:
            repeated = np.repeat(np.arange(selection.group_count, dtype=np.int64), self.k)
            columns.update(zip(groups.columns, groups.decode(repeated), strict=True))
        columns["rank"] = np.tile(np.arange(1, self.k + 1, dtype=np.int64), len(chosen))
        columns[self.column] = [labels[i] for picks in chosen for i in picks]
        if self.method == "one_shot":  # noisy: free post-processing
            columns["count"] = np.concatenate(
                [row[picks] for row, picks in zip(by_group, chosen, strict=True)]
            )
        frame = pd.DataFrame(columns)
        attach_info(frame, self.info().with_diagnostics(diagnostics))
        return frame
