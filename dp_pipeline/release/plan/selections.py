"""Selection tables of a release (quantile, median, top_k): what to aggregate, and the release.

Both engines aggregate a selection table in the same pass as the noised tables, as a
count `QuerySpec` over a full declared domain, with the release's privacy unit and
bounding rule:

- quantile / median: counts by (group keys..., grid position of the value). The
  position column is derived by the engine before aggregating, with the one IEEE
  expression of `dp_pipeline.query.quantile_grid.quantile_positions` (null for a null, NaN or
  infinite value: such rows are dropped like the release's other invalid rows). Each
  privacy unit keeps ONE row (``max_cells = max_per_cell = 1``, the keyed bounding
  rule picks it), so adding or removing a unit moves one group's rank losses by at most
  1: Δu = 1 in every group, and only one group changes (parallel composition;
  `dp_pipeline.release.plan.costs.selection_runs`).
- top_k: the bounded per-candidate counts of `dp_pipeline.selection.query.TopKQuery`
  (candidates = the key's declared domain, ``max_cells`` / ``max_per_cell`` as for a
  count table).

The selection itself runs on the driver (`release_selection`), with the mechanism the
plan proved. Randomness: ``derive_stream(key, release_id, table, release digest,
"selection", statistic[, group])``; one-shot top-k noise uses the count engine's
per-partition streams, labelled with the release digest too. A release's draws are
therefore its own: they depend on its whole identity (spec and input), never on the
names alone, and equal no library call's.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd

from dp_pipeline.errors import InternalError
from dp_pipeline.mechanisms import DiscreteLaplace
from dp_pipeline.query.context import RunContext
from dp_pipeline.query.diagnostics import Diagnostics
from dp_pipeline.query.domain import build_cell_domain
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.randomness import MasterKey, derive_stream
from dp_pipeline.release.plan.release_plan import TablePlan
from dp_pipeline.release.spec.model import ReleaseSpec
from dp_pipeline.release.spec.outputs import output_columns, position_column, quantile_grid
from dp_pipeline.selection.algorithms import quantile_losses, select_quantile
from dp_pipeline.selection.parameters import TopKSelection
from dp_pipeline.selection.query import TopKQuery
from dp_pipeline.udfs.noise import noisy_dense

__all__ = [
    "aggregation_spec",
    "output_columns",
    "position_column",
    "quantile_grid",
    "release_selection",
]


def _top_k_query(
    spec: ReleaseSpec, plan: TablePlan, master: MasterKey, release_digest: str
) -> TopKQuery:
    table = plan.table
    (column,) = table.keys
    selection = TopKSelection.build(
        column,
        table.k,
        candidates=spec.domains[column],
        epsilon=plan.epsilon,
        method=table.method,
        privacy_unit=spec.privacy_unit,
        max_candidates=table.max_cells,
        max_per_candidate=table.max_per_cell,
        neighbouring=spec.neighbouring,
        cell_limit=spec.cell_limit,
    )
    # The plan proved its own mechanism; the query must run exactly that one.
    if table.method == "one_shot" and selection.counts.count_sensitivity() != plan.sensitivity:
        raise InternalError(
            f"table {table.name!r}: the count engine's sensitivity "
            f"{selection.counts.count_sensitivity()} differs from the plan's {plan.sensitivity}"
        )
    # The library's default noise partitions: top-k counts are labelled as ``df.dp.top_k``'s.
    context = RunContext.build(
        key=master, release_id=spec.release_id, table=table.name, release_digest=release_digest
    )
    one_shot_noise = plan.mechanism if table.method == "one_shot" else None
    return TopKQuery(selection, context).with_plan(plan.mechanism, one_shot_noise)


def aggregation_spec(
    spec: ReleaseSpec, plan: TablePlan, master: MasterKey, index: int, release_digest: str = ""
):
    """The count `QuerySpec` both engines aggregate for selection table ``index``."""
    table = plan.table
    if table.statistic == "top_k":
        return _top_k_query(spec, plan, master, release_digest).counts
    position = position_column(index)
    domains = {key: spec.domains[key] for key in table.keys}
    domains[position] = range(table.candidates)
    return QuerySpec.build(
        "count",
        by=[*table.keys, position],
        domains=domains,
        noise=DiscreteLaplace(1),  # never used: the counts feed the exponential mechanism
        key=master,
        release_id=spec.release_id,
        table=table.name,
        privacy_unit=spec.privacy_unit,
        max_cells=1,
        max_per_cell=1,
        neighbouring=spec.neighbouring,
        cell_limit=spec.cell_limit,
        release_digest=release_digest,
    )


def release_selection(
    spec: ReleaseSpec,
    plan: TablePlan,
    master: MasterKey,
    counts_spec: QuerySpec,
    counts: np.ndarray,
    diagnostics: Diagnostics,
    *,
    with_truth: bool = False,
    release_digest: str = "",
) -> pd.DataFrame:
    """The released frame of a selection table from its dense bounded counts (cell order).

    ``diagnostics`` (the aggregation's, never published) go to a top_k frame's
    ``attrs["dp"]`` as with ``df.dp.top_k``.

    ``with_truth`` (synthetic input only) adds the non-private comparison columns the
    report's accuracy section uses: quantile ``true_value`` (the best candidate) and
    ``rank_error`` (the released value's rank loss minus the best one); top_k
    ``true_count`` and ``in_true_top_k``.
    """
    counts = np.asarray(counts, dtype=np.int64)
    if counts.shape != (counts_spec.cells.total,):
        raise InternalError(
            f"table {plan.table.name!r}: {counts.shape} counts for {counts_spec.cells.total} cells"
        )
    if plan.table.statistic == "top_k":
        query = _top_k_query(spec, plan, master, release_digest)
        return _release_top_k(query, counts_spec, counts, diagnostics, with_truth)
    return _release_quantile(spec, plan, master, counts, with_truth, release_digest)


def _release_top_k(query, counts_spec, counts, diagnostics, with_truth):
    scores = counts
    if query.method == "one_shot":
        # The count engine's noisy counts (its per-partition streams, as ``df.dp.count``).
        scores = noisy_dense(counts_spec, {"count": counts})["count"]
    frame = query.release(scores, diagnostics)  # rank, candidate[, noisy count]
    if with_truth:
        (domain,) = query.counts.cells.domains
        labels = frame[query.column].to_numpy(np.int64 if domain.kind == "int" else object)
        chosen = domain.positions(labels)
        kth = np.sort(counts)[::-1][query.k - 1]
        frame["true_count"] = counts[chosen]
        frame["in_true_top_k"] = counts[chosen] >= kth
    return frame


def _release_quantile(spec, plan, master, counts, with_truth, release_digest) -> pd.DataFrame:
    table = plan.table
    grid = quantile_grid(table)
    width = len(grid)
    groups = counts.size // width
    by_group = counts.reshape(groups, width)  # the position is the least significant key
    # The release's digest covers the table's whole definition and the input.
    labels = (spec.release_id, table.name, release_digest, "selection", table.statistic)
    chosen = np.empty(groups, dtype=np.int64)
    for group in range(groups):
        # One stream per group: the draws of different groups are independent.
        stream = (
            derive_stream(master, *labels, group) if table.keys else derive_stream(master, *labels)
        )
        chosen[group] = select_quantile(by_group[group], table.q, grid, plan.mechanism, stream)
    integer_grid = all(value.denominator == 1 for value in grid[:2])
    values = [grid[i] for i in chosen]
    columns: dict[str, object] = {}
    if table.keys:
        cells = build_cell_domain(
            list(table.keys), {key: spec.domains[key] for key in table.keys}, spec.cell_limit
        )
        decoded = cells.decode(np.arange(groups, dtype=np.int64))
        columns.update(zip(table.keys, decoded, strict=True))
    columns["value"] = (
        np.array([int(v) for v in values], dtype=np.int64)
        if integer_grid
        else np.array([float(v) for v in values], dtype=np.float64)
    )
    frame = pd.DataFrame(columns)
    if with_truth:
        best, excess = _rank_excess(by_group, table.q, chosen)
        frame["true_value"] = [int(grid[i]) if integer_grid else float(grid[i]) for i in best]
        frame["rank_error"] = excess
    return frame


def _rank_excess(by_group: np.ndarray, q: Fraction, chosen: np.ndarray):
    """Per group: the best candidate (least rank loss) and the chosen one's excess loss."""
    best = np.empty(len(chosen), dtype=np.int64)
    excess = np.empty(len(chosen), dtype=np.float64)
    for group, row in enumerate(by_group):
        losses = quantile_losses(row, q)  # exact: int64 or Fractions
        best[group] = int(np.argmin(losses))
        excess[group] = float(losses[chosen[group]] - losses[best[group]])
    return best, excess
