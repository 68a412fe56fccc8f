"""The plan step's checks of a release's post-processing, before any budget is spent.

Where the combined tables are made consistent (on the driver, or on Spark one
top-level group at a time above `DRIVER_POSTPROCESS_CELLS` cells), whether that
engine can solve them, and whether the least squares can weigh the calibrated
noise variances: each refusal is a `SpecError`, so no solve fails after the
noise is drawn.
"""

from __future__ import annotations

import math

import numpy as np

from dp_pipeline.accounting.noise_variance import noise_variance
from dp_pipeline.mechanisms import BaseTwoExponential, DiscreteGaussian, DiscreteLaplace
from dp_pipeline.postprocess import Hierarchy, TableShape
from dp_pipeline.postprocess.coupled import coupled_refusal
from dp_pipeline.postprocess.groups import coupling_table
from dp_pipeline.postprocess.inputs import variance_refusal
from dp_pipeline.postprocess.plan import plan
from dp_pipeline.release.spec.model import ReleaseSpec, SpecError
from dp_pipeline.release.spec.outputs import RAW_COLUMN

__all__ = [
    "DRIVER_POSTPROCESS_CELLS",
    "RAW_COLUMN",
    "VALUE_MARGIN",
    "check_postprocess_engine",
    "check_postprocess_variances",
    "hierarchy_of",
    "postprocess_on_spark",
]

# The columns of a post-processed table beside its consistent ``value``: the noisy count
# (``RAW_COLUMN``, unbiased, with the plan's margin) and the margin of ``value``.
VALUE_MARGIN = "value_margin_of_error"

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
    tables = {t.name: t for t in spec.tables}
    shapes = [
        TableShape(name, tables[name].keys, tuple(len(spec.domains[k]) for k in tables[name].keys))
        for name in settings.tables
    ]
    hierarchy = hierarchy_of(spec)
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


def check_postprocess_variances(
    spec: ReleaseSpec,
    mechanisms: dict[str, DiscreteGaussian | DiscreteLaplace | BaseTwoExponential],
) -> None:
    """Raise `SpecError` when the least squares cannot weigh the calibrated noise variances.

    Runs in the plan step once every table's noise is calibrated, before any budget
    is spent: each set the post-processing combines (the count tables, each set of
    sum tables) must have variances within the solver's ratio
    (`dp_pipeline.postprocess.inputs.variance_refusal`), so that no solve fails after
    the noise is drawn.
    """
    settings = spec.postprocess
    if settings is None or not settings.consistent:
        return
    tables = {t.name: t for t in spec.tables}
    hierarchy = hierarchy_of(spec)
    for names in (settings.tables, *settings.sum_sets):
        if not names:
            continue
        shapes = [
            TableShape(n, tables[n].keys, tuple(len(spec.domains[k]) for k in tables[n].keys))
            for n in names
        ]
        p = plan(shapes, hierarchy)
        coupled = coupling_table(p, hierarchy) is not None and coupled_refusal(p, hierarchy) is None
        reason = variance_refusal(p, [noise_variance(mechanisms[n]) for n in names], coupled)
        if reason is not None:
            raise SpecError([f"postprocess: {reason} (tables[*].share or sigma2)"])


def hierarchy_of(spec: ReleaseSpec) -> Hierarchy | None:
    """The spec's public hierarchy as the post-processing takes it (None without one)."""
    declared = spec.hierarchy
    if declared is None:
        return None
    return Hierarchy(
        levels=declared.levels,
        sizes=tuple(len(spec.domains[level]) for level in declared.levels),
        parents=tuple(np.asarray(p, dtype=np.int64) for p in declared.parents),
    )
