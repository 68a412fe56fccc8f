"""Accuracy of a released mean, variance or standard deviation against the truth.

Synthetic input only (the truth is never known for real data). The truth of a
cell is the statistic of its bounded true aggregates (the count and sums the noise
is added to, `dp_pipeline.release.tables.moments`), so the errors are the noise's
effect on the ratio. The row of ``accuracy.json`` gives them beside each noisy
aggregate's 95% margin of error (none exists for the ratio itself). Every figure
is post-processing of the released and true values: no privacy cost.
"""

from __future__ import annotations

import html
import math

import numpy as np
import pandas as pd

from dp_pipeline.errors import DPValueError
from dp_pipeline.release.plan.moments import exact_margin, margin_text

__all__ = ["StatisticAccuracy", "statistic_paragraphs"]


class StatisticAccuracy:
    """Accuracy of one mean, var or std table, from batches of its released rows."""

    def __init__(self, plan, table_plan) -> None:
        self.table_plan = table_plan
        self.name = table_plan.table.name
        self.statistic = table_plan.table.statistic
        self._errors: list[np.ndarray] = []
        self._has_truth: bool | None = None

    def add(self, frame: pd.DataFrame) -> None:
        """Tally a batch of released rows (``value`` and, on synthetic input, ``true_value``)."""
        present = "true_value" in frame
        if self._has_truth is None:
            self._has_truth = present
        elif present != self._has_truth:
            raise DPValueError(
                f"table {self.name!r}: a batch {'has' if present else 'has no'} 'true_value' "
                "column and earlier ones did not agree; every batch needs the same columns"
            )
        if present:
            values = frame["value"].to_numpy(np.float64)
            self._errors.append(values - frame["true_value"].to_numpy(np.float64))

    def summary(self) -> dict | None:
        """The table's row of ``accuracy.json`` (None without the truth)."""
        if not self._has_truth:
            return None
        errors = np.abs(np.concatenate(self._errors))
        cells = int(errors.size)
        if cells != self.table_plan.table.cells or not np.isfinite(errors).all():
            raise DPValueError(
                f"table {self.name!r}: the accuracy needs a finite error for each of its "
                f"{self.table_plan.table.cells:,} cells, it has {cells:,}"
            )
        return {
            "table": self.name,
            "statistic": self.statistic,
            "released_cells": cells,
            "mean_abs_error": math.fsum(errors.tolist()) / cells,
            "rmse": math.sqrt(math.fsum((errors * errors).tolist()) / cells),
            "max_abs_error": float(errors.max()),
            "margins_of_error": {
                m.name: exact_margin(m.margin_of_error) for m in self.table_plan.measures
            },
        }

    def histogram(self) -> None:
        """No error histogram: the report's figures are the counts' and sums'."""
        return None


def statistic_paragraphs(plan, rows: list[dict]) -> list[str]:
    """The report's lines on the means, variances and standard deviations' accuracy."""
    plans = {t.table.name: t for t in plan.tables}
    parts = []
    for row in rows:
        parts.append(
            f"<p><b>{html.escape(row['table'])}</b> ({row['statistic']}): over "
            f"{row['released_cells']:,} cell(s), mean |error| {row['mean_abs_error']:.3g}, "
            f"RMSE {row['rmse']:.3g}, max |error| {row['max_abs_error']:.3g}; its noisy "
            f"aggregates' margins: {html.escape(margin_text(plans[row['table']]))}.</p>"
        )
    return parts
