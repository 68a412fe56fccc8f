"""The release report's plots, as PNGs without metadata (deterministic bytes), base64 for HTML.

Plots of the plan (budget split, margins of error) and, for synthetic input only, of the
errors against the truth. matplotlib is the optional ``report`` extra: without it the
report has its tables and no plots.
"""

from __future__ import annotations

import base64
import io

from dp_pipeline.release.plan.release_plan import ReleasePlan
from dp_pipeline.release.report.postprocess import rmse_figure

__all__ = ["report_figures"]


def _png(figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight", metadata={"Software": None})
    import matplotlib.pyplot as plt

    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def report_figures(plan: ReleasePlan, accuracies, accuracy) -> dict[str, str]:
    """The report's plots as base64 PNGs by name (empty without matplotlib).

    ``budget``: each table's share of the release's ρ; ``margins``: the 95% margin of
    error per noised table; ``accuracy``: histograms of the cell errors (synthetic input
    only, raw and consistent when post-processed), drawn from each table's
    `TableAccuracy.histogram` (``accuracies`` by table name: exact counts, whatever the
    batches); ``postprocessing``: RMSE before and after post-processing (``accuracy``,
    the rows of `accuracy_summary`). Post-processing of released figures: no privacy cost.
    """
    try:
        import matplotlib
    except ImportError:  # the 'report' extra is optional: tables without plots
        return {}

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [t.table.name for t in plan.tables]
    # A mean's, var's or std's margins are its aggregates' (the report's table lists them).
    noised = [t for t in plan.tables if not t.table.is_selection and t.margin_of_error is not None]
    accuracy = [row for row in accuracy if "cells" in row]  # selections have no histogram
    figures = {}
    if plan.rho:
        shares = [float(t.rho / plan.rho) for t in plan.tables]
        figure, axis = plt.subplots(figsize=(7, 0.45 * len(names) + 1))
        axis.barh(names, shares, color="#4477aa")
        axis.set_xlabel("share of the release's zCDP ρ")
        axis.invert_yaxis()
        figures["budget"] = _png(figure)
    if noised:
        figure, axis = plt.subplots(figsize=(7, 0.45 * len(noised) + 1))
        axis.barh(
            [t.table.name for t in noised],
            [float(t.margin_of_error) for t in noised],
            color="#ee7733",
        )
        axis.set_xscale("log")
        axis.set_xlabel("95% margin of error per cell (log scale)")
        axis.invert_yaxis()
        figures["margins"] = _png(figure)
    if accuracy:
        columns = min(3, len(accuracy))
        rows = (len(accuracy) + columns - 1) // columns
        figure, axes = plt.subplots(rows, columns, figsize=(4 * columns, 3 * rows), squeeze=False)
        for axis, summary in zip(axes.ravel(), accuracy, strict=False):
            histogram = accuracies[summary["table"]].histogram()
            edges = histogram["edges"]
            margin = summary["margin_of_error"]
            # One filled step per series (``stairs``), not one bar per bin: the same bars,
            # drawn as a single shape, which keeps the plot's cost independent of the bins.
            if "raw" in summary:
                axis.stairs(histogram["raw"], edges, fill=True, color="#bbbbbb", label="raw noisy")
                axis.stairs(
                    histogram["consistent"],
                    edges,
                    fill=True,
                    color="#228833",
                    alpha=0.7,
                    label="consistent",
                )
                axis.legend(fontsize=7)
                axis.set_title(f"{summary['table']}: estimate − true", fontsize=9)
            else:
                axis.stairs(histogram["consistent"], edges, fill=True, color="#228833")
                axis.set_title(f"{summary['table']}: noisy − true", fontsize=9)
            axis.axvline(-margin, color="k", linestyle="--", linewidth=1)
            axis.axvline(margin, color="k", linestyle="--", linewidth=1)
        for axis in axes.ravel()[len(accuracy) :]:
            axis.axis("off")
        figure.tight_layout()
        figures["accuracy"] = _png(figure)
    if any("raw" in row for row in accuracy):
        figures["postprocessing"] = _png(rmse_figure(plt, accuracy))
    return figures
