"""A release's accuracy against the truth, accumulated table by table from batches of rows.

Synthetic input only (the truth is never known for real data). `TableAccuracy`
takes a table's released rows in any number of batches (the driver gives a
whole table as one; a large Spark release its Arrow batches) and keeps exact
tallies (`dp_pipeline.release.report.exact_errors`), never the table: the summary
and the error histograms are the same however the table was split. Every
figure is post-processing of the released and true values: no privacy cost.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd

from dp_pipeline.errors import DPValueError
from dp_pipeline.release.plan.release_plan import ReleasePlan, TablePlan
from dp_pipeline.release.report.exact_errors import ErrorTally, histogram_counts
from dp_pipeline.release.report.statistics_accuracy import StatisticAccuracy
from dp_pipeline.release.tables.consistency import RAW_COLUMN, value_margin_of

__all__ = ["HISTOGRAM_BINS", "TableAccuracy", "accuracy_summary", "table_accuracies"]

HISTOGRAM_BINS = 60
_COLUMN_OF = {"consistent": "value", "raw": RAW_COLUMN}
# Classes of true count for the post-processed tables' figures (label, lowest, highest).
SIZE_CLASSES = (
    ("0", 0, 0),
    ("1-5", 1, 5),
    ("6-20", 6, 20),
    ("21-100", 21, 100),
    ("> 100", 101, None),
)
_SELECTION_COLUMNS = {"top_k": "in_true_top_k", "quantile": "rank_error", "median": "rank_error"}


def whole(value) -> int | float:
    """An integral figure as int (JSON ``36``, not ``36.0``), any other as float."""
    return int(value) if float(value).is_integer() else float(value)


def _mean(total: int | Fraction, count: int) -> float:
    """total / count rounded once to the nearest float (exact rational, then one rounding)."""
    return float(Fraction(total) / count)


def _root_mean(total: int | Fraction, count: int) -> float:
    """√(total / count): the exact mean rounded to a float, then its correctly rounded root."""
    return math.sqrt(_mean(total, count))


class TableAccuracy:
    """Accuracy of one released table against the truth, from batches of its rows.

    Noised count / sum tables (rows with ``true_value``): per cell, value − truth,
    and raw_value − truth when post-processed, tallied exactly, with each cell's
    error summed by its top-level geography (counties rolled up to states) for
    the margin figures. Selections (quantile, median, top_k: a row per group or
    candidate) keep their few comparison values. Tables without the truth
    (real input) have no summary.
    """

    def __init__(
        self, plan: ReleasePlan, table_plan: TablePlan, value_margin: int | None = None
    ) -> None:
        self.table_plan = table_plan
        spec = table_plan.table
        self.name = spec.name
        self.statistic = spec.statistic
        self._selection_column = _SELECTION_COLUMNS.get(spec.statistic)
        self._selected: list[np.ndarray] = []
        self._tallies: dict[str, ErrorTally] | None = None  # set by the first batch
        self._has_truth: bool | None = None
        self._geography_level, self._top_of, self._groups = _geography(plan, table_plan)
        domain = plan.spec.domains[self._geography_level] if self._geography_level else None
        self._domain = domain
        self._domain_index = pd.Index(list(domain)) if domain is not None else None
        self._top_name = plan.spec.hierarchy.levels[0] if self._geography_level else None
        self._classes: dict[str, list] | None = None  # post-processed: by true count
        self._value_margin: int | None = None
        self._given_margin = value_margin  # a table written in batches: its value margin

    def add(self, frame: pd.DataFrame) -> None:
        """Tally a batch of released rows (the table's key columns, ``value``, optionally
        ``raw_value``, ``true_value``; a selection's comparison column).

        The batch is checked whole before anything is tallied: a bad batch raises
        `ValueError` naming the table, the column and the value, and leaves the
        tallies as they were.
        """
        if self._selection_column is not None:
            self._check_truth(self._selection_column in frame, self._selection_column)
            if self._has_truth:
                self._selected.append(frame[self._selection_column].to_numpy(np.float64))
            return
        self._check_truth("true_value" in frame, "true_value")
        if not self._has_truth:
            return
        if self._tallies is None:
            columns = ["consistent", "raw"] if RAW_COLUMN in frame else ["consistent"]
            margin = self.table_plan.margin_of_error
            self._tallies = {label: ErrorTally(margin, self._groups) for label in columns}
        needed = [_COLUMN_OF[label] for label in self._tallies]
        if self._geography_level is not None:
            needed.append(self._geography_level)
        missing = [column for column in needed if column not in frame]
        if missing:
            raise DPValueError(
                f"table {self.name!r}: a batch has no {missing[0]!r} column (its columns: "
                f"{list(frame.columns)}); every batch needs the same columns"
            )
        truth = self._integers(frame, "true_value")
        group_of = self._group_of(frame)
        errors = {label: self._errors(frame, _COLUMN_OF[label], truth) for label in self._tallies}
        for label, tally in self._tallies.items():
            tally.add(errors[label], group_of)
        if "raw" in self._tallies:
            margin = value_margin_of(frame)
            self._add_classes(truth, errors, self._given_margin if margin is None else margin)

    def _add_classes(self, truth: np.ndarray, errors: dict, value_margin: int | None) -> None:
        """Per class of true count, exact tallies of the raw and published errors."""
        if self._classes is None:
            raw_margin = self.table_plan.margin_of_error
            shown = raw_margin if value_margin is None else value_margin
            self._classes = {
                label: (ErrorTally(raw_margin), ErrorTally(shown)) for label, _, _ in SIZE_CLASSES
            }
            self._value_margin = value_margin
        for label, low, high in SIZE_CLASSES:
            mine = (truth >= low) if high is None else (truth >= low) & (truth <= high)
            raw, value = self._classes[label]
            raw.add(errors["raw"][mine])
            value.add(errors["consistent"][mine])

    def _check_truth(self, present: bool, column: str) -> None:
        """Every batch has the comparison column, or none has (real input)."""
        if self._has_truth is None:
            self._has_truth = present
        elif present != self._has_truth:
            raise DPValueError(
                f"table {self.name!r}: a batch {'has' if present else 'has no'} {column!r} "
                f"column and earlier ones {'did not' if present else 'did'}; every batch "
                "needs the same columns"
            )

    def _integers(self, frame: pd.DataFrame, column: str) -> np.ndarray:
        series = frame[column]
        if series.isna().any():
            raise DPValueError(f"table {self.name!r}: column {column!r} has missing values")
        if not pd.api.types.is_integer_dtype(series.dtype):
            raise DPValueError(
                f"table {self.name!r}: column {column!r} has dtype {series.dtype}; true cell "
                "values are integers"
            )
        return series.to_numpy(np.int64)

    def _errors(self, frame: pd.DataFrame, column: str, truth: np.ndarray) -> np.ndarray:
        """estimate − truth per cell: int64 for whole estimates, float64 otherwise."""
        series = frame[column]
        if series.isna().any():
            raise DPValueError(f"table {self.name!r}: column {column!r} has missing values")
        if pd.api.types.is_integer_dtype(series.dtype):
            values = series.to_numpy(np.int64)
            if values.size and max(int(np.abs(values).max()), int(np.abs(truth).max())) >= 2**62:
                return values.astype(object) - truth.astype(object)  # exact Python ints
            return values - truth
        values = series.to_numpy(np.float64)
        if not np.isfinite(values).all():
            bad = values[~np.isfinite(values)][0].item()
            raise DPValueError(
                f"table {self.name!r}: column {column!r} has {bad!r}; estimates must be finite"
            )
        return values - truth

    def _group_of(self, frame: pd.DataFrame) -> np.ndarray | None:
        if self._geography_level is None:
            return None
        level = self._geography_level
        keys = frame[level].to_numpy()
        if isinstance(self._domain, range) and self._domain.step == 1 and keys.dtype.kind in "iu":
            # Integer ranges (county codes): positions by subtraction, no hash lookup.
            positions = keys.astype(np.int64) - self._domain.start
            positions[(positions < 0) | (positions >= len(self._domain))] = -1
        else:
            positions = self._domain_index.get_indexer(keys)
        if (positions < 0).any():
            bad = keys[positions < 0][0]
            bad = bad.item() if hasattr(bad, "item") else bad
            raise DPValueError(
                f"table {self.name!r}: column {level!r} has {bad!r}, which is not in its "
                "declared domain"
            )
        return self._top_of[positions]

    def summary(self) -> dict | None:
        """The table's accuracy row of ``accuracy.json`` (None without the truth)."""
        if not self._has_truth:
            return None
        if self._selection_column is not None:
            return self._selection_summary()
        cells = self.table_plan.table.cells
        tally = self._tallies["consistent"]
        if tally.cells != cells:
            raise DPValueError(
                f"table {self.name!r}: the accuracy saw {tally.cells:,} rows; the table has "
                f"{cells:,} cells, and every one must be given"
            )
        row = {"table": self.name, "cells": tally.cells, **self._figures(tally)}
        row["margin_of_error"] = self.table_plan.margin_of_error
        row["sigma"] = self.table_plan.noise_sd
        if "raw" in self._tallies:
            row["raw"] = self._figures(self._tallies["raw"])
            row["margins"] = {
                label: self._margins(self._tallies[label]) for label in ("raw", "consistent")
            }
            row["by_true_count"] = self._class_rows()
        return row

    def _class_rows(self) -> list[dict]:
        """RMSE raw and published, bias and margin coverage per class of true count."""
        rows = []
        for label, _, _ in SIZE_CLASSES:
            raw, value = self._classes[label]
            if not raw.cells:
                continue
            row = {
                "true_count": label,
                "cells": raw.cells,
                "raw_rmse": _root_mean(raw.sum_squares, raw.cells),
                "rmse": _root_mean(value.sum_squares, value.cells),
                "bias": _mean(value.total, value.cells),
                "raw_within_margin": raw.within / raw.cells,
            }
            if self._value_margin is not None:
                row["value_margin_of_error"] = self._value_margin
                row["within_value_margin"] = value.within / value.cells
            rows.append(row)
        return rows

    @staticmethod
    def _figures(tally: ErrorTally) -> dict:
        return {
            "mean_abs_error": _mean(tally.sum_abs, tally.cells),
            "rmse": _root_mean(tally.sum_squares, tally.cells),
            "max_abs_error": whole(tally.max_abs),
            "within_margin": tally.within / tally.cells,
        }

    def _margins(self, tally: ErrorTally) -> dict:
        """|national error| and the top-level geography's RMSE of the error sums."""
        figures = {"national_abs_error": float(abs(Fraction(tally.total)))}
        if self._geography_level is not None:
            squares = sum(Fraction(total) ** 2 for total in tally.group_sums)
            figures[f"{self._top_name}_rmse"] = _root_mean(squares, len(tally.group_sums))
        return figures

    def _selection_summary(self) -> dict:
        values = np.concatenate(self._selected)
        if self.statistic == "top_k":
            return {
                "table": self.name,
                "statistic": self.statistic,
                "k": int(values.size),
                "precision": float(values.mean()),
            }
        margin = self.table_plan.margin_of_error
        return {
            "table": self.name,
            "statistic": self.statistic,
            "groups": int(values.size),
            "mean_rank_error": float(values.mean()),
            "max_rank_error": float(values.max()),
            "within_margin": float((values < margin).mean()),
            "margin_of_error": margin,
        }

    def histogram(self) -> dict[str, np.ndarray] | None:
        """The error histogram's ``edges`` (60 equal bins over min..max of the errors, raw
        and consistent together) and per column its counts (``consistent``, ``raw``):
        equal to ``np.histogram`` of the whole table's errors. None without cell errors."""
        if not self._has_truth or self._tallies is None:
            return None
        distributions = {label: t.distribution() for label, t in self._tallies.items()}
        everything = np.concatenate([values for values, _ in distributions.values()])
        edges = np.histogram_bin_edges(everything, bins=HISTOGRAM_BINS)
        result = {"edges": edges}
        for label, (values, counts) in distributions.items():
            result[label] = histogram_counts(values, counts, edges)
        return result


def _geography(plan: ReleasePlan, table_plan: TablePlan):
    """The table's coarsest hierarchy key, each of its positions' top-level group, and
    how many top-level groups the margin figure averages over (as the hierarchy rolls up)."""
    hierarchy = plan.spec.hierarchy
    keys = list(table_plan.table.keys)
    levels = [k for k in keys if hierarchy is not None and k in hierarchy.levels]
    if not levels:
        return None, None, 0
    level = levels[0]
    top_of = np.arange(len(plan.spec.domains[level]), dtype=np.int64)
    groups = top_of.size
    depth = hierarchy.levels.index(level)
    for parents in reversed(hierarchy.parents[:depth]):
        parents = np.asarray(parents, dtype=np.int64)
        top_of = parents[top_of]
        groups = int(parents.max()) + 1
    return level, top_of, groups


def table_accuracies(plan: ReleasePlan, results: dict) -> dict[str, TableAccuracy]:
    """Every table's `TableAccuracy`: a released frame is fed whole, as one batch; a
    `TableAccuracy` (a table fed batch by batch as it was written) is taken as it is."""
    accuracies = {}
    for table_plan in plan.tables:
        name = table_plan.table.name
        value = results[name]
        if not isinstance(value, TableAccuracy | StatisticAccuracy):
            kind = StatisticAccuracy if table_plan.measures else TableAccuracy  # mean, var, std
            accuracy = kind(plan, table_plan)
            accuracy.add(value)
            value = accuracy
        accuracies[name] = value
    return accuracies


def accuracy_summary(plan: ReleasePlan, accuracies: dict[str, TableAccuracy]) -> list[dict]:
    """Per table, in plan order: how far the release is from the truth (synthetic input only).

    Noised tables: cells, mean |error|, RMSE, max |error|, the share of cells within
    the margin of error, σ; post-processed ones also the raw noisy count's figures
    and the top-level geography and national errors, raw and consistent. quantile /
    median: the rank error per group (values between the released value and the best
    candidate, beyond the best's own loss) and the share within the planned rank
    error. top_k: the share of reported candidates in the true top k. mean / var / std:
    errors of the ratio and the aggregates' margins (`StatisticAccuracy`). Means are exact
    sums divided once; RMSEs the square root of that exactly computed mean.
    """
    rows = []
    for table_plan in plan.tables:
        accuracy = accuracies.get(table_plan.table.name)
        row = accuracy.summary() if accuracy is not None else None
        if row is not None:
            rows.append(row)
    return rows
