"""Post-processing of a release's noisy count tables into one consistent set (driver, numpy).

After the engines have noised every table, the count tables that
``[postprocess]`` combines go through `dp_pipeline.postprocess.make_consistent`
with their exact, public noise variances and the spec's public hierarchy. The
result depends only on the noisy tables and public facts, so it costs no
privacy (post-processing, Dwork & Roth 2014, Proposition 2.1) and, being
deterministic numpy on the driver, is the same bit for bit on every engine.

Each post-processed table keeps its noisy count as ``raw_value`` (unbiased,
with the plan's exact margin of error) and publishes the consistent estimate
as ``value``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd

from dp_pipeline.mechanisms import DiscreteGaussian, DiscreteLaplace
from dp_pipeline.release.plan import ReleasePlan, TablePlan
from dp_pipeline.release.spec_model import ReleaseSpec

__all__ = ["RAW_COLUMN", "consistent_results", "noise_variance"]

RAW_COLUMN = "raw_value"


def noise_variance(table_plan: TablePlan) -> Fraction:
    """The public per-cell noise variance the least squares weights a table by.

    Discrete Gaussian of parameter σ²: σ² (CKS 2020, Section 2: its variance is at
    most σ², equal up to a relative 1e-9 for σ² >= 1). Discrete Laplace of scale t:
    2·e^{-1/t} / (1 - e^{-1/t})², its exact variance, evaluated in floating point:
    a weight only, so an estimate's optimality, never a privacy figure, depends on it.
    """
    mechanism = table_plan.mechanism
    if isinstance(mechanism, DiscreteGaussian):
        return Fraction(mechanism.sigma2)
    if isinstance(mechanism, DiscreteLaplace):
        q = math.exp(-1 / float(mechanism.scale))
        return Fraction(2 * q / (1 - q) ** 2)
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
    spec: ReleaseSpec, plan: ReleasePlan, results: dict[str, pd.DataFrame]
) -> tuple[dict[str, pd.DataFrame], dict]:
    """``results`` with every post-processed table's ``value`` made consistent.

    Returns the new results (the other tables unchanged) and a summary for the
    privacy report: the method, the tables and settings, and that post-processing
    costs no privacy (no timings: a re-emitted release is byte-identical).
    """
    settings = spec.postprocess
    if settings is None:
        return results, {}
    # Imported here: only releases that post-process load the solver (and scipy).
    from dp_pipeline.postprocess import NoisyCounts, make_consistent

    plans = {p.table.name: p for p in plan.tables}
    noisy = []
    for name in settings.tables:
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
    options = {"nonnegative": settings.nonnegative, "integer": settings.integer}
    if settings.consistent:
        solved = [make_consistent(noisy, _hierarchy(spec), **options)]
    else:  # each table on its own: non-negative integers with the table's own total
        solved = [make_consistent([table], None, **options) for table in noisy]
    estimates = {name: values for one in solved for name, values in one.values.items()}
    updated = dict(results)
    for name in settings.tables:
        frame = results[name].copy()
        frame[RAW_COLUMN] = frame["value"].to_numpy(np.int64)
        frame["value"] = estimates[name]
        updated[name] = frame
    summary = {
        "method": solved[0].method,
        "tables": list(settings.tables),
        **settings.to_dict(),
        "privacy_cost": "none: post-processing of the noisy tables and public facts only "
        "(the hierarchy mapping, the domains and the noise variances)",
    }
    return updated, summary
