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
never left Spark (`dp_pipeline.release.tables.streamed.OnSpark`): the cells DataFrame
is built there, and each consistent table becomes a
`dp_pipeline.release.tables.streamed.StreamedTable` that the writer reads one range
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
import weakref
from fractions import Fraction

import numpy as np
import pandas as pd

from dp_pipeline.accounting.noise_variance import noise_variance as exact_noise_variance
from dp_pipeline.errors import InternalError
from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace
from dp_pipeline.postprocess.ls_variance import least_squares_variances
from dp_pipeline.postprocess.margins import (
    MOVE_UNITS,
    NOISY_CLASSES,
    class_move_counts,
    least_squares_margin,
    move_counts,
    move_percentile,
    moves,
    size_classes,
)
from dp_pipeline.postprocess.structure import TableShape
from dp_pipeline.release.plan.postprocess import (
    RAW_COLUMN,
    VALUE_MARGIN,
    hierarchy_of,
    postprocess_on_spark,
)
from dp_pipeline.release.plan.release_plan import ReleasePlan, TablePlan
from dp_pipeline.release.spec.model import ReleaseSpec
from dp_pipeline.release.tables.streamed import OnSpark, StreamedTable

__all__ = [
    "RAW_COLUMN",
    "VALUE_MARGIN",
    "WIDENED",
    "class_margins",
    "consistent_results",
    "least_squares_margins",
    "noise_variance",
    "value_margin",
    "value_margin_of",
    "value_margin_of_counts",
]

# Each post-processed frame's value margin (by the frame's id while it lives), for the
# accuracy tallies: not in its attrs, which pyarrow writes into the files' metadata.
_VALUE_MARGINS: dict[int, int] = {}


def _remember_margin(frame: pd.DataFrame, margin: int) -> None:
    _VALUE_MARGINS[id(frame)] = margin
    weakref.finalize(frame, _VALUE_MARGINS.pop, id(frame), None)


def value_margin_of(frame: pd.DataFrame) -> int | None:
    """The value margin `consistent_results` computed for this frame, or None."""
    return _VALUE_MARGINS.get(id(frame))


VALUE_MARGIN_MEANING = (
    "95% margin of error of each cell's published value: the least squares estimate's "
    "margin (the normal law's 95% point, 1.96 standard deviations for Gaussian noise, "
    "2.12 for Laplace noise, of the table's largest exact per-cell variance, computed from "
    "the public noise variances and the hierarchy; never more than the raw margin; the raw "
    "margin itself, the exact discrete 95% point of the noise, where that variance is at "
    "least half the noise variance) plus "
    "the 95th percentile over the table's cells of how much the non-negative integer step "
    "can have added to a cell's error (its move from the least squares estimate, except "
    "that raising a negative estimate toward 0 adds nothing until it passes |estimate|; "
    "rounded up to a sixteenth of a count), rounded down to a whole count for integer "
    "values. The least squares error is a weighted sum of independent discrete noises, "
    "close to but not exactly normal, so its 95% is an approximation, not a guarantee; "
    "with the union bound, about 90% of a table's cells or more are expected within the "
    "margin. Cells with true counts near 0 are biased up (a count cannot go below 0)."
)

VALUE_MARGIN_BY_CLASS = "value_margin_of_error_by_noisy_count"
BY_CLASS_MEANING = (
    "the same 95% margin of error of value, with the 95th percentile of the moves taken "
    "over the table's cells of one class of noisy value (raw_value: 20 or less, 21 to 100, "
    "over 100; by the noisy value, since the true count is not public), so a small cell's "
    "margin and a large one's can be read apart"
)

WIDENED = "rounding_widened_cells"
WIDENED_MEANING = (
    "per table, how many cells the controlled rounding set outside their floor/ceil box "
    "(more than one count from the real estimate) because no rounding inside the box met "
    "the margins already fixed; 0 when every cell is its estimate's floor or ceiling"
)

# The normal law's two-sided 95% point, and the Laplace law's in standard deviations
# (P(|X| > x) = exp(-x sqrt(2)) for unit variance): the z of a margin from a variance.
NORMAL_95 = 1.959963984540054
LAPLACE_95 = math.log(20) / math.sqrt(2)


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
    raise InternalError(f"table {table_plan.table.name!r}: no noise variance for {mechanism!r}")


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
    method, estimates, streamed, least_squares = "", {}, {}, {}
    margins, counts, widened = {}, {}, {}
    # The least squares part of each table's value margin: public facts only.
    ls_margins = least_squares_margins(spec, plans, settings.tables)
    for names in settings.sum_sets:
        ls_margins.update(least_squares_margins(spec, plans, names))
    if settings.tables and any(isinstance(results[n], OnSpark) for n in settings.tables):
        # The noisy cells never left Spark: they are made consistent there and read
        # back by the writer (`dp_pipeline.release.tables.streamed.StreamedTable`).
        method, streamed, margins, counts, widened = _streamed_on_spark(
            spec, plans, results, ls_margins
        )
    elif settings.tables:
        options = {"nonnegative": settings.nonnegative, "integer": settings.integer}
        noisy = _noisy_counts(spec, plans, results, settings.tables)
        if spark is not None and postprocess_on_spark(spec):
            method, estimates, counts, widened = _on_spark(
                spark, noisy, hierarchy_of(spec), options
            )
        else:
            method, estimates, least_squares, widened = _on_driver(spec, noisy, options)
    sum_sets = []
    # Per table, whether the top-down step made it non-negative (its truth is then >= 0).
    nonnegative_of = dict.fromkeys(settings.tables, settings.nonnegative)
    for names in settings.sum_sets:
        nonnegative = settings.nonnegative and plans[names[0]].table.lower >= 0
        nonnegative_of.update(dict.fromkeys(names, nonnegative))
        options = {"nonnegative": nonnegative, "integer": settings.integer}
        solved_method, solved, solved_ls, solved_widened = _on_driver(
            spec, _noisy_counts(spec, plans, results, names), options
        )
        method = method or solved_method
        estimates.update(solved)
        least_squares.update(solved_ls)
        widened.update(solved_widened)
        sum_sets.append({"tables": list(names), "nonnegative": nonnegative})
    updated = {**results, **streamed}
    by_class: dict[str, dict[str, int]] = {}
    for name in settings.combined:
        if name in streamed:
            if name in counts:
                by_class[name] = class_margins(ls_margins[name], counts[name], settings.integer)
            continue
        frame = results[name].copy(deep=False)  # new columns below; the keys are shared
        frame[RAW_COLUMN] = frame["value"].to_numpy(np.int64)
        frame["value"] = estimates[name]
        ls_margin, integer = ls_margins[name], settings.integer
        if name in least_squares:
            moved = moves(estimates[name], least_squares[name], nonnegative_of[name])
            counts[name] = class_move_counts(moved, size_classes(frame[RAW_COLUMN].to_numpy()))
        if name in counts:
            margins[name] = value_margin_of_counts(ls_margin, counts[name].sum(axis=0), integer)
            by_class[name] = class_margins(ls_margin, counts[name], integer)
        elif not (settings.nonnegative or settings.integer) and settings.consistent:
            margins[name] = math.ceil(ls_margin)  # the least squares alone (real values)
        if name in margins:
            _remember_margin(frame, margins[name])
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
    if margins:
        summary[VALUE_MARGIN] = margins
        summary["value_margin_of_error_meaning"] = VALUE_MARGIN_MEANING
    if by_class:
        summary[VALUE_MARGIN_BY_CLASS] = by_class
        summary[VALUE_MARGIN_BY_CLASS + "_meaning"] = BY_CLASS_MEANING
    if settings.integer:
        summary[WIDENED] = {name: int(widened.get(name, 0)) for name in settings.combined}
        summary[WIDENED + "_meaning"] = WIDENED_MEANING
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


def _on_driver(spec, noisy, options) -> tuple[str, dict[str, np.ndarray], dict, dict]:
    """`make_consistent` on one set; without ``consistent``, each table on its own.

    Also returns each table's least squares estimate before the top-down step (none
    without one), for the margin of error of ``value``, and its cells rounded outside
    their floor/ceil box (`dp_pipeline.postprocess.ConsistentTables.widened`).
    """
    from dp_pipeline.postprocess import make_consistent

    topdown = options["nonnegative"] or options["integer"]
    if spec.postprocess.consistent:
        hierarchy = hierarchy_of(spec)
        solved = make_consistent(noisy, hierarchy, **options)
        estimates = solved.least_squares
        if topdown and estimates is None:  # a solve that kept no estimates: solve again
            estimates = make_consistent(noisy, hierarchy, nonnegative=False, integer=False).values
        return solved.method, solved.values, (estimates if topdown else {}), solved.widened
    # Each table on its own: non-negative integers with the table's own total.
    each = [make_consistent([table], None, **options) for table in noisy]
    values = {name: values for one in each for name, values in one.values.items()}
    # One table alone: its least squares estimate is its noisy count.
    estimates = {t.name: t.values.astype(np.float64) for t in noisy} if topdown else {}
    widened = {name: n for one in each for name, n in one.widened.items()}
    return each[0].method, values, estimates, widened


def least_squares_margins(
    spec: ReleaseSpec, plans: dict[str, TablePlan], names: tuple[str, ...] | list[str]
) -> dict[str, float]:
    """Per table of one combined set, the 95% margin of its least squares estimate (counts).

    z·sqrt(var) (a real number), var the table's largest exact per-cell variance of the least
    squares estimate (`dp_pipeline.postprocess.ls_variance`: ls − truth = P e is a
    fixed linear map of the noise, Cov = P V, computed from the public shapes,
    hierarchy and noise variances; with national tables an upper bound), z the
    normal law's 95% point (`NORMAL_95`) for discrete Gaussian noise, the Laplace
    law's (`LAPLACE_95`) for discrete Laplace noise. The error is a weighted sum of
    independent discrete noises: near normal, not exactly, so the 95% is an
    approximation, checked by coverage on synthetic truth (docs/consistency.md).
    Where the least squares variance is at least half the table's noise variance
    (`dp_pipeline.postprocess.margins.least_squares_margin`), the error is mostly the
    table's own discrete noise and the raw margin (its exact discrete 95% point) is
    taken: the normal law's point can fall below it (a near-exact table's 0.9 against 1).
    Never more than the raw margin, the noise's exact 95% bound (the least squares
    variance is never larger). Without ``consistent`` each table is its own
    estimate: the raw margin. Independent of the data, computed on the driver for
    every engine, so every engine publishes the same integers.
    """
    raw = {n: float(plans[n].margin_of_error) for n in names}
    if not names or not spec.postprocess.consistent:
        return raw
    shapes = [
        TableShape(n, plans[n].table.keys, tuple(len(spec.domains[k]) for k in plans[n].table.keys))
        for n in names
    ]
    variances = least_squares_variances(
        shapes, hierarchy_of(spec), [noise_variance(plans[n]) for n in names]
    )
    out = {}
    for n in names:
        z = LAPLACE_95 if isinstance(plans[n].mechanism, DiscreteLaplace) else NORMAL_95
        out[n] = least_squares_margin(variances[n], noise_variance(plans[n]), raw[n], z)
    return out


def value_margin(
    ls_margin: float,
    value: np.ndarray,
    least_squares: np.ndarray,
    nonnegative: bool,
    integer: bool,
) -> int:
    """The 95% margin of error of a post-processed table's ``value`` (counts, an integer).

    |value − truth| <= |ls − truth| + move, where ls is the least squares estimate the
    non-negative integer step started from and move the most the step can have added
    to the cell's error (`dp_pipeline.postprocess.margins.moves`; with ``nonnegative``
    the truth is taken as >= 0, so raising a negative estimate toward 0 adds nothing
    until it passes |ls|). ls − truth is a fixed linear map of the noise whose 95%
    margin is ``ls_margin`` (`least_squares_margins`, from the exact per-cell
    variance). The moves are public once published: their 95th percentile H over
    the table's cells is added. By the union bound a cell is outside the margin with
    probability at most 5% + 5% on average over the table's cells (at least 90%
    covered), 95% where the step moved cells little. With ``integer`` the value and
    the truth are integers, so the margin is floor(ls_margin + H); else the
    ceiling. Pure post-processing of published values and public facts;
    deterministic. Tables made consistent on Spark get the same figure from each
    group's counts (`value_margin_of_counts`).
    """

    counts = move_counts(moves(value, least_squares, nonnegative))
    return value_margin_of_counts(ls_margin, counts, integer)


def value_margin_of_counts(ls_margin: float, counts: np.ndarray, integer: bool) -> int:
    """`value_margin` from a table's `dp_pipeline.postprocess.margins.move_counts`."""

    bound = ls_margin + move_percentile(counts) / MOVE_UNITS  # a sixteenth: exact in binary
    return math.floor(bound) if integer else math.ceil(bound)


def class_margins(ls_margin: float, counts: np.ndarray, integer: bool) -> dict[str, int]:
    """`value_margin_of_counts` per class of the noisy value that has cells.

    ``counts``: `dp_pipeline.postprocess.margins.class_move_counts` (row k: class k).
    """
    return {
        NOISY_CLASSES[k]: value_margin_of_counts(ls_margin, row, integer)
        for k, row in enumerate(counts)
        if row.sum() > 0
    }


def _on_spark(spark, noisy, hierarchy, options) -> tuple[str, dict[str, np.ndarray], dict, dict]:
    """The same estimates as `make_consistent`, one Spark task per top-level group.

    Also returns each table's `dp_pipeline.postprocess.margins.class_move_counts`
    (none without a top-down step), for the margins of error of ``value``, and its
    cells rounded outside their floor/ceil box.
    """
    from dp_pipeline.engines.spark.postprocess import consistent_tables
    from dp_pipeline.postprocess.group_solver import group_solver

    solver = group_solver(noisy, hierarchy, [t.variance for t in noisy], **options)
    moved: list[np.ndarray] = []
    widened: list[int] = []
    values = consistent_tables(spark, solver, [t.values for t in noisy], moved, widened)
    estimates = {noisy[t].name: v for t, v in values}
    counts = {t.name: c for t, c in zip(noisy, moved, strict=True)}
    # No widened counts without a top-down step.
    widened_by_name = {t.name: n for t, n in zip(noisy, widened, strict=False)}
    return solver.method, estimates, counts, widened_by_name


def _streamed_on_spark(
    spec, plans, results, ls_margins
) -> tuple[str, dict[str, StreamedTable], dict, dict, dict]:
    """The same estimates as `make_consistent` from noisy cells that stay on Spark.

    The cells DataFrame is built on the executors from the noise job's output
    (each cell's top-level group from its index and the public hierarchy); the
    consistent tables are read back by the writer one range of cells at a time.
    Also returns each table's value margin (`value_margin_of_counts`; none without
    a top-down step), its move counts per noisy-value class and its cells rounded
    outside their floor/ceil box, from one small aggregation of the fitted cells.
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
    hierarchy = hierarchy_of(spec)
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
    try:
        counts = fitted.move_counts(len(solver.plan.structures))
    except BaseException:
        fitted.close()
        raise
    margins, by_name, widened = {}, {}, {}
    if counts is not None:
        by_name = {s.name: c for s, c in zip(solver.plan.structures, counts, strict=True)}
        widened = {s.name: n for s, n in zip(solver.plan.structures, fitted.widened, strict=True)}
        margins = {
            name: value_margin_of_counts(ls_margins[name], c.sum(axis=0), settings.integer)
            for name, c in by_name.items()
        }

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
        name: StreamedTable(
            name,
            shape_cells,
            noisy.truth,
            reader(position, shape_cells),
            close,
            margins.get(name),
        )
        for position, (name, shape_cells) in enumerate(
            (s.name, s.cells) for s in solver.plan.structures
        )
    }
    return solver.method, streamed, margins, by_name, widened
