"""The report's post-processing parts: errors of raw and consistent counts against the truth.

Synthetic input only (the truth is never known for real data): per cell, for
the coarsest geography margin and for the national total, before (``raw_value``)
and after (``value``) post-processing, as figures, an HTML table and a bar plot.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd

from dp_pipeline.release.consistency import RAW_COLUMN

__all__ = ["cell_errors", "margin_errors", "postprocessing_section", "rmse_figure", "whole"]


def cell_errors(values: pd.Series, truth: np.ndarray) -> np.ndarray:
    """value − truth per cell (float64: estimates may be fractional without ``integer``)."""
    return values.to_numpy(np.float64) - truth


def whole(value) -> int | float:
    return int(value) if float(value).is_integer() else float(value)


def margin_errors(plan, table, frame: pd.DataFrame, truth: np.ndarray) -> dict:
    """Errors of the table's coarsest geography margin and national total, raw vs after.

    The geography key is rolled up the hierarchy to its top level (counties to
    states), where combining tables helps most; the truth is the table's own.
    """
    keys = list(table.table.keys)
    hierarchy = plan.spec.hierarchy
    levels = [k for k in keys if hierarchy is not None and k in hierarchy.levels]
    shape = [len(plan.spec.domains[k]) for k in keys]
    result = {}
    for label, column in (("raw", RAW_COLUMN), ("consistent", "value")):
        error = (frame[column].to_numpy(np.float64) - truth).reshape(shape)
        figures = {"national_abs_error": float(abs(error.sum()))}
        if levels:
            axis = keys.index(levels[0])
            other = tuple(i for i in range(len(keys)) if i != axis)
            by_geography = error.sum(axis=other) if other else error
            depth = hierarchy.levels.index(levels[0])
            for parents in reversed(hierarchy.parents[:depth]):
                rolled = np.zeros(max(parents) + 1)
                np.add.at(rolled, np.asarray(parents), by_geography)
                by_geography = rolled
            figures[f"{hierarchy.levels[0]}_rmse"] = float(np.sqrt((by_geography**2).mean()))
        result[label] = figures
    return result


def postprocessing_section(report: dict, cell_rows: list[dict], figures: dict) -> list[str]:
    """Accuracy of the post-processed tables before (raw noisy) and after (consistent)."""
    rows = [row for row in cell_rows if "raw" in row]
    if not rows:
        return []
    method = html.escape(report.get("postprocessing", {}).get("method", ""))
    parts = [
        "<h3>Post-processing: raw noisy counts and consistent estimates</h3>",
        f"<p>The count tables were made consistent ({method}): every shared margin agrees "
        "exactly. Post-processing reads only the noisy tables and public facts, so it costs "
        "no privacy. <code>value</code> is the consistent estimate, <code>raw_value</code> "
        "the unbiased noisy count (its margin of error above).</p>",
        "<table><tr><th>table</th><th>RMSE raw</th><th>RMSE consistent</th>"
        "<th>geography margin RMSE raw</th><th>consistent</th>"
        "<th>|national error| raw</th><th>consistent</th></tr>",
    ]
    for row in rows:
        raw, after = row["margins"]["raw"], row["margins"]["consistent"]
        geography = next((k for k in raw if k.endswith("_rmse")), None)
        shown = (f"{raw[geography]:.3g}", f"{after[geography]:.3g}") if geography else ("–", "–")
        parts.append(
            f"<tr><td>{html.escape(row['table'])}</td><td>{row['raw']['rmse']:.3g}</td>"
            f"<td>{row['rmse']:.3g}</td><td>{shown[0]}</td><td>{shown[1]}</td>"
            f"<td>{raw['national_abs_error']:.3g}</td>"
            f"<td>{after['national_abs_error']:.3g}</td></tr>"
        )
    parts.append("</table>")
    if "postprocessing" in figures:
        parts.append(
            "<img alt='RMSE before and after post-processing' src='data:image/png;base64,"
            + figures["postprocessing"]
            + "'>"
        )
    return parts


def rmse_figure(plt, accuracy: list[dict]):
    """Bars of each post-processed table's RMSE per cell, raw noisy and consistent."""
    processed = [row for row in accuracy if "raw" in row]
    figure, axis = plt.subplots(figsize=(7, 0.6 * len(processed) + 1))
    positions = np.arange(len(processed))
    axis.barh(
        positions - 0.2,
        [r["raw"]["rmse"] for r in processed],
        0.4,
        color="#bbbbbb",
        label="raw noisy",
    )
    axis.barh(
        positions + 0.2,
        [r["rmse"] for r in processed],
        0.4,
        color="#228833",
        label="consistent",
    )
    axis.set_yticks(positions, [r["table"] for r in processed])
    axis.set_xlabel("RMSE per cell against the truth")
    axis.invert_yaxis()
    axis.legend(fontsize=8)
    return figure
