"""The key-free query of each noised table of a release spec, for the planner and the engines.

The planner costs a table by building its `dp_pipeline.query.aggregations`
parameter object (``noise=None``) and asking it for its sensitivity; the engines
run the same object with the plan's mechanism in the release's run context. One
function builds both, so the vector the accountant is told is the one the
engines enforce.
"""

from __future__ import annotations

import numpy as np

from dp_pipeline.errors import DPValueError
from dp_pipeline.query.aggregations import Aggregation, CountQuery, SharedRows, SumQuery
from dp_pipeline.query.context import RunContext
from dp_pipeline.query.domain import MAX_CELL_LIMIT, Domain, build_cell_domain
from dp_pipeline.query.hierarchy import HierarchyRule
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.randomness import MasterKey
from dp_pipeline.release.spec.model import ReleaseSpec, TableSpec
from dp_pipeline.release.spec.statistics import value_granularity
from dp_pipeline.selection.parameters import top_k_counts

__all__ = [
    "hierarchy_rule",
    "run_context",
    "shared_rows",
    "table_query",
    "table_sensitivity",
    "table_spec",
]


def table_query(spec: ReleaseSpec, table: TableSpec) -> Aggregation:
    """The parameter object of a count, sum or top_k table, its noise not yet set.

    A top_k table's query is its candidates' bounded counts (what one-shot
    noise is added to).
    """
    common = dict(
        privacy_unit=spec.privacy_unit,
        neighbouring=spec.neighbouring,
        cell_limit=spec.cell_limit,
    )
    if table.statistic == "top_k":
        (column,) = table.keys
        return top_k_counts(
            column,
            spec.domains[column],
            max_candidates=table.max_cells,
            max_per_candidate=table.max_per_cell,
            **common,
        )
    cells = dict(
        by=list(table.keys),
        domains={key: spec.domains[key] for key in table.keys},
        noise=None,
        max_cells=table.max_cells,
        max_per_cell=table.max_per_cell,
        allow_no_noise=True,
        **common,
    )
    if table.statistic == "sum":
        query = SumQuery.build(
            table.value,
            bounds=(table.lower, table.upper),
            granularity=value_granularity(table),
            **cells,
        )
    elif table.statistic == "count":
        query = CountQuery.build(**cells)
    else:
        raise DPValueError(f"table {table.name!r}: a {table.statistic} table has no noised query")
    shared = shared_rows(spec)
    if shared is not None and table.name in spec.postprocess.combined:
        query = query.with_shared_rows(shared, table.name)
    rule = hierarchy_rule(spec)
    if rule is not None and table.name in spec.postprocess.combined:
        query = query.with_hierarchy(rule)
    return query


def hierarchy_rule(spec: ReleaseSpec) -> HierarchyRule | None:
    """The public hierarchy every table made consistent drops the breaking rows of.

    The checked levels are the hierarchy levels among the combined tables' keys:
    the finest of them must be valid and each coarser one its ancestor in the
    spec's mapping (`dp_pipeline.query.hierarchy`), so every table of the set
    counts the same rows. None without consistent post-processing over a hierarchy.
    """
    settings, hierarchy = spec.postprocess, spec.hierarchy
    if settings is None or not settings.consistent or hierarchy is None:
        return None
    keys = {key for name in settings.combined for key in spec.table(name).keys}
    present = [i for i, level in enumerate(hierarchy.levels) if level in keys]
    if not present:
        return None
    *coarser, finest = present
    size = len(spec.domains[hierarchy.levels[finest]])
    ancestor = np.arange(size, dtype=np.int64)
    ancestors = {}
    for level in range(finest - 1, -1, -1):  # parents[i]: level i + 1 -> level i
        ancestor = np.asarray(hierarchy.parents[level], dtype=np.int64)[ancestor]
        ancestors[level] = ancestor

    def domain(level: int) -> Domain:
        name = hierarchy.levels[level]
        return Domain.from_spec(name, spec.domains[name])

    return HierarchyRule.build(
        domain(finest), [domain(i) for i in coarser], [ancestors[i] for i in coarser]
    )


def shared_rows(spec: ReleaseSpec) -> SharedRows | None:
    """The bounding group of the tables post-processing combines (None: no group needed).

    With a privacy-unit column, a unit with several rows must keep the same row in
    every combined table, or their true margins differ: the tables rank rows by
    their cell over the union of the tables' keys (`dp_pipeline.engines.bounding`).
    """
    if spec.postprocess is None or spec.privacy_unit is None:
        return None
    keys = list(
        dict.fromkeys(key for name in spec.postprocess.combined for key in spec.table(name).keys)
    )
    cells = build_cell_domain(keys, {k: spec.domains[k] for k in keys}, MAX_CELL_LIMIT)
    return SharedRows(cells=cells, group="postprocess")


def table_sensitivity(spec: ReleaseSpec, table: TableSpec) -> tuple[int, ...]:
    """The sensitivity vector of a count, sum or top_k table's noised vector."""
    query = table_query(spec, table)
    return query.sensitivity("sum" if table.statistic == "sum" else "count")


def run_context(spec: ReleaseSpec, table: TableSpec, master: MasterKey, release_digest: str):
    """The release's run context of one table: key, labels and noise partitions."""
    return RunContext.build(
        key=master,
        release_id=spec.release_id,
        table=table.name,
        noise_partitions=spec.noise_partitions,
        release_digest=release_digest,
    )


def table_spec(spec: ReleaseSpec, table: TableSpec, noise, master, release_digest: str = ""):
    """The engines' `QuerySpec` of a count or sum table running the plan's ``noise``."""
    query = table_query(spec, table).with_noise(noise)
    return QuerySpec.bind(query, run_context(spec, table, master, release_digest))
