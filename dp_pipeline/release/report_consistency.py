"""The report's post-processing parts: errors of raw and consistent counts against the truth.

Synthetic input only (the truth is never known for real data): per cell, for
the coarsest geography margin and for the national total, before (``raw_value``)
and after (``value``) post-processing, as an HTML table and a bar plot of the
figures `dp_pipeline.release.accuracy_stream` computes.
"""

from __future__ import annotations

import html

import numpy as np

__all__ = ["postprocessing_section", "rmse_figure"]


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
