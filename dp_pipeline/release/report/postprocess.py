"""The report's post-processing parts: what was done, and errors against the truth.

`postprocessing_description` (every release that post-processes, real input
too): the method and, per table, the margin of error of ``raw_value`` and of
``value`` (`dp_pipeline.release.tables.consistency.value_margin`), from the privacy
report alone. `postprocessing_section` (synthetic input only: the truth is never
known for real data): per cell, for the coarsest geography margin and for the
national total, before (``raw_value``) and after (``value``) post-processing, and
by class of true count, as HTML tables and a bar plot of the figures
`dp_pipeline.release.report.accuracy` computes.
"""

from __future__ import annotations

import html

import numpy as np

from dp_pipeline.release.tables.consistency import WIDENED

__all__ = [
    "WIDER_NOTE",
    "postprocessing_description",
    "postprocessing_section",
    "rmse_figure",
    "with_widened",
]


def postprocessing_description(report: dict, raw_margins: dict[str, int]) -> list[str]:
    """What the post-processing did and the margins of error of ``value`` (no truth used)."""
    settings = report.get("postprocessing")
    if not settings:
        return []
    method = html.escape(settings.get("method", ""))
    steps = ["every shared margin of the combined tables agrees exactly"]
    if settings.get("consistent"):
        steps = [
            "the overlapping noisy tables were combined by weighted least squares with "
            "their exact noise variances, so every shared margin agrees exactly"
        ]
    if settings.get("nonnegative") or settings.get("integer"):
        steps.append(
            "then, top-down along the geography, each table was replaced by the closest "
            + ("non-negative " if settings.get("nonnegative") else "")
            + "table with the margins already fixed"
            + (", then by integers keeping those margins" if settings.get("integer") else "")
        )
    parts = [
        "<h2>Post-processing</h2>",
        f"<p>Method {method}: {'; '.join(steps)}. It reads only the noisy tables and "
        "public facts, so it costs no privacy. <code>raw_value</code> keeps each cell's "
        "unbiased noisy count; <code>value</code> is the consistent estimate. "
        + (
            "Non-negativity biases cells whose true count is near 0 upwards (a count "
            "cannot go below 0); large cells stay at the least squares estimate. "
            if settings.get("nonnegative")
            else ""
        )
        + "</p>",
    ]
    margins = settings.get("value_margin_of_error", {})
    if margins:
        parts.append(f"<p>{html.escape(settings.get('value_margin_of_error_meaning', ''))}</p>")
        parts.append(
            "<table><tr><th>table</th><th>raw_value margin (95%)</th>"
            "<th>value margin (95%; with the rounding's moves, by the union bound at "
            "least 90% of a table's cells expected within it)</th><th>note</th></tr>"
        )
        for name in settings.get("tables", []):
            if name in margins:
                raw = raw_margins.get(name, 0)
                parts.append(
                    f"<tr><td>{html.escape(name)}</td><td>±{raw:,}</td>"
                    f"<td>±{margins[name]:,}</td><td>{_wider_note(raw, margins[name])}</td></tr>"
                )
        parts.append("</table>")
    parts.extend(_by_noisy_count(settings))
    parts.extend(_widened(settings))
    return parts


def _widened(settings: dict) -> list[str]:
    """Which tables' controlled rounding had to leave the floor/ceil box, and by how many cells."""
    widened = settings.get(WIDENED)
    if widened is None:
        return []
    outside = {name: n for name, n in widened.items() if n}
    if not outside:
        return [
            "<p>Controlled rounding: every cell of every table is the floor or the ceiling "
            "of its real estimate (no rounding had to leave that box to meet the margins).</p>"
        ]
    listed = ", ".join(f"{html.escape(name)}: {n:,}" for name, n in outside.items())
    return [
        "<p>Controlled rounding left the floor/ceiling box (a cell a count or more "
        "from its real estimate, because no rounding inside the box met the margins "
        f"already fixed) in these tables, cells per table: {listed}.</p>"
    ]


def with_widened(accuracy: list[dict], postprocessing: dict) -> list[dict]:
    """``accuracy``'s rows, each post-processed table's with its cells rounded outside
    their floor/ceil box (``rounding_widened_cells``, from the privacy report's summary)."""
    widened = (postprocessing or {}).get(WIDENED, {})
    return [
        {**row, WIDENED: widened[row["table"]]} if row.get("table") in widened else row
        for row in accuracy
    ]


def _by_noisy_count(settings: dict) -> list[str]:
    """The value margins per class of the noisy value (``raw_value``), per table."""
    by_class = settings.get("value_margin_of_error_by_noisy_count", {})
    if not by_class:
        return []
    classes = list(dict.fromkeys(c for margins in by_class.values() for c in margins))
    meaning = settings.get("value_margin_of_error_by_noisy_count_meaning", "")
    parts = [
        f"<p>By class of the noisy value: {html.escape(meaning)}.</p>",
        "<table><tr><th>table</th>"
        + "".join(f"<th>raw_value {html.escape(c)} (95%)</th>" for c in classes)
        + "</tr>",
    ]
    for name, margins in by_class.items():
        cells = "".join(
            f"<td>±{margins[c]:,}</td>" if c in margins else "<td>–</td>" for c in classes
        )
        parts.append(f"<tr><td>{html.escape(name)}</td>{cells}</tr>")
    parts.append("</table>")
    return parts


# A value margin wider than the raw one is never shown without its reason: it bounds the
# least squares error (never above the raw margin) plus how far the non-negative integer
# step moved the cells, which is not the value's typical error.
WIDER_NOTE = (
    "wider than raw_value's because it adds to the least squares margin (at most the raw "
    "one) the 95th percentile of how far the non-negative integer step moved the cells; "
    "a bound, not the typical error, which is usually smaller than raw_value's"
)


def _wider_note(raw: int, value: int) -> str:
    """The note of a table whose ``value`` margin exceeds its ``raw`` margin, else empty."""
    return html.escape(WIDER_NOTE) if value > raw else ""


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
    parts.extend(_by_true_count(rows))
    if "postprocessing" in figures:
        parts.append(
            "<img alt='RMSE before and after post-processing' src='data:image/png;base64,"
            + figures["postprocessing"]
            + "'>"
        )
    return parts


def _by_true_count(rows: list[dict]) -> list[str]:
    """Per table and class of true count: RMSE raw and published, bias, coverage."""
    classes = [(row["table"], c) for row in rows for c in row.get("by_true_count", [])]
    if not classes:
        return []
    parts = [
        "<p>By true count: RMSE of <code>raw_value</code> and <code>value</code>, the mean "
        "error of <code>value</code>, and the share of cells within each margin.</p>",
        "<table><tr><th>table</th><th>true count</th><th>cells</th><th>RMSE raw</th>"
        "<th>RMSE value</th><th>value bias</th><th>raw within its margin</th>"
        "<th>value within its margin</th></tr>",
    ]
    for table, c in classes:
        within = f"{c['within_value_margin']:.1%}" if "within_value_margin" in c else "–"
        parts.append(
            f"<tr><td>{html.escape(table)}</td><td>{html.escape(c['true_count'])}</td>"
            f"<td>{c['cells']:,}</td><td>{c['raw_rmse']:.3g}</td><td>{c['rmse']:.3g}</td>"
            f"<td>{c['bias']:+.2f}</td><td>{c['raw_within_margin']:.1%}</td><td>{within}</td></tr>"
        )
    parts.append("</table>")
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
