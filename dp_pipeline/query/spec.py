"""`QuerySpec`: one DP aggregation bound to its run context, what the engines execute.

A `QuerySpec` pairs the key-free parameters of what is computed
(`dp_pipeline.query.aggregations`: `CountQuery`, `SumQuery`, `MeanQuery`) with
where it runs (`dp_pipeline.query.context.RunContext`: key, labels, noise
partitions). The pandas engine and the Spark engine both execute it and report
the same `dp_pipeline.query.diagnostics.Diagnostics`, so one rule set governs
both and their releases are bit-identical. Its digest and stream labels name
exactly what is computed, so two queries that differ in anything share no noise.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from functools import cached_property

from dp_pipeline.accounting.events import PrivacyEvent
from dp_pipeline.digest import digest_of
from dp_pipeline.errors import InternalError
from dp_pipeline.query.aggregations import Aggregation, Mechanism, SharedRows
from dp_pipeline.query.bounds import ValueBounds
from dp_pipeline.query.budget import query_with_budget
from dp_pipeline.query.context import DEFAULT_NOISE_PARTITIONS, RunContext
from dp_pipeline.query.domain import CellDomain
from dp_pipeline.query.hierarchy import HierarchyRule
from dp_pipeline.query.signatures import require_explicit
from dp_pipeline.randomness import MasterKey

__all__ = ["DEFAULT_NOISE_PARTITIONS", "QuerySpec", "SharedRows"]

_CONTEXT_ARGUMENTS = ("key", "release_id", "table", "noise_partitions", "release_digest")


@dataclass(frozen=True)
class QuerySpec:
    """What is computed (``query``) and where it runs (``context``), identical for both engines."""

    query: Aggregation
    context: RunContext

    @classmethod
    def build(cls, statistic: str, **arguments) -> QuerySpec:
        """Validate the parameters of ``statistic`` and the run context; raise before any work.

        ``arguments``: those of `CountQuery.build` / `SumQuery.build` /
        `MeanQuery.build`, of `RunContext.build`, and ``noise`` or a budget
        (`dp_pipeline.query.budget.QueryBudget`: ``epsilon``, ``delta``, ``rho``).
        ``privacy_unit`` is required, ``None`` for a per-record guarantee, as in every
        public call (`dp_pipeline.query.signatures.EXPLICIT`).
        """
        require_explicit(f'QuerySpec.build("{statistic}", {{}})', arguments)
        context_arguments = {k: arguments.pop(k) for k in _CONTEXT_ARGUMENTS if k in arguments}
        shared_rows = arguments.pop("shared_rows", None)
        hierarchy = arguments.pop("hierarchy", None)
        query = query_with_budget(statistic, **arguments)
        context = RunContext.build(**context_arguments)
        if shared_rows is not None:
            query = query.with_shared_rows(shared_rows, context.table)
        if hierarchy is not None:
            query = query.with_hierarchy(hierarchy)
        return cls(query, context)

    @classmethod
    def bind(cls, query: Aggregation, context: RunContext) -> QuerySpec:
        """A calibrated query (its noise set) in its run context."""
        query.mechanism()
        return cls(query, context)

    def with_noise(self, noise: Mechanism) -> QuerySpec:
        """The same query with another mechanism (the plan's calibrated one)."""
        return replace(self, query=self.query.with_noise(noise))

    def with_release_digest(self, release_digest: str) -> QuerySpec:
        return replace(self, context=replace(self.context, release_digest=release_digest))

    def without_key(self) -> QuerySpec:
        """This query without its master key: what Spark tasks receive.

        Aggregation tasks need no key material at all (bounding salts are derived
        on the driver); noise tasks get derived `StreamKey`s beside this copy.
        """
        return replace(self, context=self.context.without_key())

    def master_key(self) -> MasterKey:
        """The master key (driver only); an internal error on a shipped copy."""
        return self.context.master_key()

    # What is computed (`Aggregation`).
    @property
    def statistic(self) -> str:
        return self.query.statistic

    @property
    def cells(self) -> CellDomain:
        return self.query.cells

    @property
    def noise(self) -> Mechanism:
        return self.query.mechanism()

    @property
    def count_noise(self) -> Mechanism | None:
        return self.query.count_noise

    @property
    def privacy_unit(self) -> str | None:
        return self.query.privacy_unit

    @property
    def max_cells(self) -> int:
        return self.query.max_cells

    @property
    def max_per_cell(self) -> int:
        return self.query.max_per_cell

    @property
    def column(self) -> str | None:
        return self.query.column

    @property
    def value_bounds(self) -> ValueBounds | None:
        return self.query.value_bounds

    @property
    def shared_rows(self) -> SharedRows | None:
        return self.query.shared_rows

    @property
    def hierarchy(self) -> HierarchyRule | None:
        """The public hierarchy rows must agree with (None: no such check)."""
        return self.query.hierarchy

    def counting_cells(self, cells: CellDomain) -> QuerySpec:
        """A count over ``cells`` with this query's bounds and context (its own row rule)."""
        return replace(self, query=self.query.counting_cells(cells))

    @property
    def neighbouring(self) -> str:
        return self.query.neighbouring

    @property
    def on_invalid(self) -> str:
        return self.query.on_invalid

    @property
    def confidence(self) -> Fraction:
        return self.query.confidence

    @property
    def delta(self) -> Fraction:
        return self.query.delta

    @property
    def effective_max_cells(self) -> int:
        return self.query.effective_max_cells

    @property
    def effective_max_per_cell(self) -> int:
        return self.query.effective_max_per_cell

    def count_sensitivity(self) -> tuple[int, ...]:
        return self.query.count_sensitivity()

    def sum_sensitivity(self) -> tuple[int, ...]:
        return self.query.sum_sensitivity()

    def measures(self) -> tuple[tuple[str, Mechanism, tuple[int, ...]], ...]:
        """(output value, mechanism, sensitivity vector) of every noised vector."""
        return self.query.measures()

    def events(self) -> tuple[PrivacyEvent, ...]:
        """One `PrivacyEvent` per noised vector: what one run of the query costs."""
        return self.query.events()

    def measure_unit(self, value: str) -> Fraction:
        """What one noised integer unit of ``value`` is worth in the released units (a sum's
        granularity, 1 for a count)."""
        if value != "sum":
            return Fraction(1)
        if self.value_bounds is None:
            raise InternalError("a sum without value bounds")
        return self.value_bounds.granularity

    # Where it runs (`RunContext`).
    @property
    def key(self) -> MasterKey | None:
        return self.context.key

    @property
    def release_id(self) -> str:
        return self.context.release_id

    @property
    def table(self) -> str:
        return self.context.table

    @property
    def release_digest(self) -> str:
        return self.context.release_digest

    @property
    def noise_partitions(self) -> int:
        return self.context.noise_partitions

    def canonical(self) -> dict:
        """Every parameter that can change a released number, as exact JSON values.

        The query's parameters and the noise partitions; not the key, the stream
        labels' names (release id, table) or what only shapes reports or errors.
        """
        return {**self.query.canonical(), "noise_partitions": self.noise_partitions}

    @cached_property
    def digest(self) -> str:
        """SHA-256 (hex) of `canonical`: two queries share it only if they compute alike."""
        return digest_of(self.canonical())

    def stream_labels(self, value: str, partition: int) -> tuple[str | int, ...]:
        """Labels of the noise stream of one noise partition of one noised vector.

        (release id, table, release digest, query digest, statistic, measure,
        partition): the names a user chose, then what is measured. Two queries
        that compute anything differently (another statistic, domain, order,
        bound or noise) never share a stream, even under the same release id
        and table; a release's queries also carry the release's digest, which
        covers its whole spec and its input's fingerprint.
        """
        return (
            "query-noise/v2",
            self.release_id,
            self.table,
            self.release_digest,
            self.digest,
            self.statistic,
            value,
            partition,
        )
