"""Post-processing of a release's noisy count tables into one consistent set.

After the engines have noised every table, the count tables that
``[postprocess]`` combines go through `dp_pipeline.postprocess.make_consistent`
with their exact, public noise variances and the spec's public hierarchy. The
result depends only on the noisy tables and public facts, so it costs no
privacy (post-processing, Dwork & Roth 2014, Proposition 2.1) and, being
deterministic numpy, is the same bit for bit on every engine.

Where it runs: on the driver, unless the Spark engine combines more than
`DRIVER_POSTPROCESS_CELLS` cells, which are then made consistent on Spark, one
task per top-level geography (`dp_pipeline.engines.spark.postprocess`; the
same per-group functions as the driver, so the same published bytes). When
the Spark engine aggregated on the executors, the combined tables' noisy cells
never left Spark (`dp_pipeline.release.streamed.OnSpark`): the cells DataFrame
is built there, and each consistent table becomes a
`dp_pipeline.release.streamed.StreamedTable` that the writer reads one range
of cells at a time. When the driver aggregated a small input, its noisy tables
are sent to Spark and read back one table at a time. A table without a
hierarchy key (a national table) is one more block, solved exactly with the
groups (`dp_pipeline.postprocess.coupled`); what cannot be solved so is refused
by `check_postprocess_engine` in the plan step, before any budget is spent.

Each post-processed table keeps its noisy count as ``raw_value`` (unbiased,
with the plan's exact margin of error) and publishes the consistent estimate
as ``value``.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from dp_pipeline.accounting.noise_variance import noise_variance as exact_noise_variance
from dp_pipeline.errors import InternalError
from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace
from dp_pipeline.release.spec_model import ReleaseSpec, SpecError
from dp_pipeline.release.streamed import OnSpark, StreamedTable

if TYPE_CHECKING:  # the plan step calls check_postprocess_engine: no import back at run time
    from dp_pipeline.release.plan import ReleasePlan, TablePlan

__all__ = [
    "DRIVER_POSTPROCESS_CELLS",
    "RAW_COLUMN",
    "check_postprocess_engine",
    "consistent_results",
    "noise_variance",
]

RAW_COLUMN = "raw_value"

# Above this many combined cells (all post-processed tables together) a Spark release
# makes them consistent on Spark, one task per top-level geography, rather than on the
# driver. The driver's solve needs ~120 bytes per cell at its peak (the least squares'
# sparse matrices and vectors), so 10 million cells is about 1.2 GB of driver memory.
DRIVER_POSTPROCESS_CELLS = 10_000_000


def _combined_cells(spec: ReleaseSpec) -> int:
    tables = {t.name: t for t in spec.tables}
    return sum(
        math.prod(len(spec.domains[key]) for key in tables[name].keys)
        for name in spec.postprocess.tables
    )


def postprocess_on_spark(spec: ReleaseSpec) -> bool:
    """True when this release makes its combined tables consistent on Spark."""
    settings = spec.postprocess
    return (
        spec.engine == "spark"
        and settings is not None
        and settings.consistent
        and spec.hierarchy is not None
        and _combined_cells(spec) > DRIVER_POSTPROCESS_CELLS
    )


def check_postprocess_engine(spec: ReleaseSpec) -> None:
    """Raise `SpecError` when the combined tables must go to Spark but cannot be solved per group.

    Runs in the plan step, before any budget is spent. National tables (no
    hierarchy key) are solved with the groups exactly (`dp_pipeline.postprocess.coupled`)
    unless a table below the top level takes a national margin (its top-down step
    then couples every group) or the national margins have too many cells for one
    covariance per group on the driver (`MAX_COVARIANCE_ENTRIES`).
    """
    settings = spec.postprocess
    if settings is None or not settings.consistent or spec.engine != "spark":
        return
    cells = _combined_cells(spec)
    if cells <= DRIVER_POSTPROCESS_CELLS:
        return
    from dp_pipeline.postprocess import TableShape
    from dp_pipeline.postprocess.coupled import coupled_refusal
    from dp_pipeline.postprocess.groups import coupling_table
    from dp_pipeline.postprocess.plan import plan

    tables = {t.name: t for t in spec.tables}
    shapes = [
        TableShape(name, tables[name].keys, tuple(len(spec.domains[k]) for k in tables[name].keys))
        for name in settings.tables
    ]
    hierarchy = _hierarchy(spec)
    p = plan(shapes, hierarchy)
    if coupling_table(p, hierarchy) is None:
        return
    reason = coupled_refusal(p, hierarchy)
    if reason is not None:
        raise SpecError(
            [
                f"postprocess: {reason}; the combined tables have {cells:,} cells, above the "
                f"driver's {DRIVER_POSTPROCESS_CELLS:,}, so they are made consistent on Spark "
                "one top-level group at a time"
            ]
        )


def noise_variance(table_plan: TablePlan) -> Fraction:
    """The public per-cell noise variance the least squares weights a table by.

    The exact variance of the noise drawn (`dp_pipeline.accounting.noise_variance`):
    for a discrete Gaussian of parameter σ² below σ² (CKS 2020, Proposition 5), far
    below it for σ² < 1 (about 0.0133 at σ² = 1/10); for a discrete Laplace of scale
    t, 2·e^{-1/t} / (1 - e^{-1/t})². A weight only: an estimate's optimality, never a
    privacy figure, depends on it.
    """
    mechanism = table_plan.mechanism
    if isinstance(mechanism, DiscreteGaussian | DiscreteLaplace):
        return exact_noise_variance(mechanism)
    raise TypeError(f"table {table_plan.table.name!r}: no noise variance for {mechanism!r}")


def _hierarchy(spec: ReleaseSpec):
    from dp_pipeline.postprocess import Hierarchy

    declared = spec.hierarchy
    if declared is None:
        return None
    return Hierarchy(
        levels=declared.levels,
        sizes=tuple(len(spec.domains[level]) for level in declared.levels),
        parents=tuple(np.asarray(p, dtype=np.int64) for p in declared.parents),
    )


def consistent_results(
    spec: ReleaseSpec, plan: ReleasePlan, results: dict[str, pd.DataFrame], spark=None
) -> tuple[dict[str, pd.DataFrame], dict]:
    """``results`` with every post-processed table's ``value`` made consistent.

    The count tables are one set; with ``sums``, each set of sum tables (one value
    column, one pair of clamping bounds) is another, solved on its own by the same
    functions, non-negative only when its lower bound is (otherwise a true sum may be
    negative). Returns the new results (the other tables unchanged) and a summary for
    the privacy report: the method, the tables and settings, and that post-processing
    costs no privacy (no timings: a re-emitted release is byte-identical, and the
    same whether it ran on the driver or on Spark).
    """
    settings = spec.postprocess
    if settings is None:
        return results, {}
    plans = {p.table.name: p for p in plan.tables}
    method, estimates, streamed = "", {}, {}
    if settings.tables and any(isinstance(results[n], OnSpark) for n in settings.tables):
        # The noisy cells never left Spark: they are made consistent there and read
        # back by the writer (`dp_pipeline.release.streamed.StreamedTable`).
        method, streamed = _streamed_on_spark(spec, plans, results)
    elif settings.tables:
        options = {"nonnegative": settings.nonnegative, "integer": settings.integer}
        noisy = _noisy_counts(spec, plans, results, settings.tables)
        if spark is not None and postprocess_on_spark(spec):
            method, estimates = _on_spark(spark, noisy, _hierarchy(spec), options)
        else:
            method, estimates = _on_driver(spec, noisy, options)
    sum_sets = []
    for names in settings.sum_sets:
        nonnegative = settings.nonnegative and plans[names[0]].table.lower >= 0
        options = {"nonnegative": nonnegative, "integer": settings.integer}
        solved_method, solved = _on_driver(
            spec, _noisy_counts(spec, plans, results, names), options
        )
        method = method or solved_method
        estimates.update(solved)
        sum_sets.append({"tables": list(names), "nonnegative": nonnegative})
    updated = {**results, **streamed}
    for name in settings.combined:
        if name in streamed:
            continue
        frame = results[name].copy()
        frame[RAW_COLUMN] = frame["value"].to_numpy(np.int64)
        frame["value"] = estimates[name]
        updated[name] = frame
    summary = {
        "method": method,
        **settings.to_dict(),
        "tables": list(settings.combined),
        "privacy_cost": "none: post-processing of the noisy tables and public facts only "
        "(the hierarchy mapping, the domains and the noise variances)",
    }
    if settings.sums:
        summary["sum_sets"] = sum_sets
    return updated, summary


def _noisy_counts(spec, plans, results, names):
    # Imported here: only releases that post-process load the solver (and scipy).
    from dp_pipeline.postprocess import NoisyCounts

    noisy = []
    for name in names:
        table = plans[name].table
        noisy.append(
            NoisyCounts(
                name=name,
                keys=table.keys,
                sizes=tuple(len(spec.domains[key]) for key in table.keys),
                values=results[name]["value"].to_numpy(np.int64),
                variance=noise_variance(plans[name]),
            )
        )
    return noisy


def _on_driver(spec, noisy, options) -> tuple[str, dict[str, np.ndarray]]:
    """`make_consistent` on one set; without ``consistent``, each table on its own."""
    from dp_pipeline.postprocess import make_consistent

    if spec.postprocess.consistent:
        solved = make_consistent(noisy, _hierarchy(spec), **options)
        return solved.method, solved.values
    # Each table on its own: non-negative integers with the table's own total.
    each = [make_consistent([table], None, **options) for table in noisy]
    return each[0].method, {name: values for one in each for name, values in one.values.items()}


def _on_spark(spark, noisy, hierarchy, options) -> tuple[str, dict[str, np.ndarray]]:
    """The same estimates as `make_consistent`, one Spark task per top-level group."""
    from dp_pipeline.engines.spark.postprocess import consistent_tables
    from dp_pipeline.postprocess.group_solver import group_solver

    solver = group_solver(noisy, hierarchy, [t.variance for t in noisy], **options)
    values = consistent_tables(spark, solver, [t.values for t in noisy])
    return solver.method, {noisy[t].name: v for t, v in values}


def _streamed_on_spark(spec, plans, results) -> tuple[str, dict[str, StreamedTable]]:
    """The same estimates as `make_consistent` from noisy cells that stay on Spark.

    The cells DataFrame is built on the executors from the noise job's output
    (each cell's top-level group from its index and the public hierarchy); the
    consistent tables are read back by the writer one range of cells at a time.
    """
    from dp_pipeline.engines.spark.postprocess import FittedCells, TopLayout, top_cells
    from dp_pipeline.postprocess.group_solver import group_solver
    from dp_pipeline.postprocess.groups import TOP
    from dp_pipeline.postprocess.structure import TableShape

    settings = spec.postprocess
    lazy = {results[name].tables for name in settings.tables}
    if len(lazy) != 1 or not all(isinstance(results[n], OnSpark) for n in settings.tables):
        raise InternalError("the combined tables must all be on Spark, from one noise step")
    (noisy,) = lazy
    if noisy.names != tuple(settings.tables):
        raise InternalError(f"the Spark noisy tables are {noisy.names}, not {settings.tables}")
    keys = {name: plans[name].table.keys for name in settings.tables}
    shapes = [
        TableShape(name, keys[name], tuple(len(spec.domains[k]) for k in keys[name]))
        for name in settings.tables
    ]
    hierarchy = _hierarchy(spec)
    variances = [noise_variance(plans[name]) for name in settings.tables]
    options = {"nonnegative": settings.nonnegative, "integer": settings.integer}
    solver = group_solver(shapes, hierarchy, variances, **options)
    layouts = [
        # A table without a hierarchy key, where a solver takes one, is its own block.
        TopLayout(1, 1, np.array([solver.groups], dtype=np.int32))
        if s.geo_axis is None
        else TopLayout(
            int(np.prod(s.sizes[s.geo_axis + 1 :], dtype=np.int64)),
            s.sizes[s.geo_axis],
            hierarchy.ancestors(s.level, TOP).astype(np.int32),
        )
        for s in solver.plan.structures
    ]
    carry = {RAW_COLUMN: "value"} | ({"true_value": "true_n"} if noisy.truth else {})
    cells = top_cells(noisy.frame, layouts, ["true_n"] if noisy.truth else [])
    try:
        fitted = FittedCells(cells, solver, carry)
    except BaseException:
        cells.unpersist()  # the noisy tables are closed by the release (close_tables)
        raise

    def close() -> None:
        fitted.close()
        noisy.close()

    def reader(position: int, cells_in_table: int):
        def batches(rows: int):
            for got in fitted.batches(position, cells_in_table, rows):
                columns = {name: got.column(name).to_numpy() for name in ("value", *carry)}
                yield noisy.decoded(position, got.column("cell").to_numpy(), columns)

        return batches

    streamed = {
        name: StreamedTable(name, shape_cells, noisy.truth, reader(position, shape_cells), close)
        for position, (name, shape_cells) in enumerate(
            (s.name, s.cells) for s in solver.plan.structures
        )
    }
    return solver.method, streamed
