"""The key selections of a release in its reports: the threshold and how many keys were kept.

Post-processing of the plan and of the selection's output (the released keys), so it
costs no privacy. The number of keys the data had (the candidates) is never reported:
it is not a DP output.
"""

from __future__ import annotations

import html

from dp_pipeline.release.plan.key_selections import selection_plans
from dp_pipeline.release.plan.release_plan import ReleasePlan

__all__ = ["key_selection_rows", "key_selection_section"]


def key_selection_rows(plan: ReleasePlan) -> list[dict]:
    """One entry per selected column: threshold, keys kept, noise and budget (for
    ``accuracy.json``: what a reader needs to judge which keys could be missing)."""
    rows = []
    for entry in selection_plans(plan):
        selection = entry.selection
        rows.append(
            {
                "column": entry.column,
                "keys_kept": entry.kept,
                "threshold": selection.threshold,
                "single_unit_release": float(selection.single_unit_release),
                "meaning": (
                    "a key is released when its noisy count of distinct privacy units reaches "
                    "the threshold: keys held by far fewer units are almost never released, "
                    "keys held by far more almost always"
                ),
            }
        )
    return rows


def key_selection_section(plan: ReleasePlan) -> list[str]:
    """The report.html section on keys selected from the data (empty without any)."""
    if not selection_plans(plan):
        return []
    esc = html.escape
    parts = [
        "<h2>Keys selected from the data</h2>",
        "<p>These key columns had no declared domain: each privacy unit kept at most "
        "<i>max_cells</i> of its keys, each key's count of distinct units got exact discrete "
        "noise, and only the keys whose noisy count reached the threshold were released; the "
        "tables grouped by them have a cell for each released key (and no other). The "
        "selection is part of the release's guarantee above. How many keys the data held is "
        "not published.</p>",
        "<table><tr><th>column</th><th>keys kept</th><th>threshold (units)</th>"
        "<th>noise</th><th>max_cells</th><th>ε</th><th>δ</th>"
        "<th>P[release] of a key held by one unit</th></tr>",
    ]
    for entry in selection_plans(plan):
        selection = entry.selection
        noise = (
            f"Laplace, scale {float(selection.scale):.4g}"
            if selection.scale is not None
            else f"Gaussian, σ² {float(selection.sigma2):.4g}"
        )
        kept = "–" if entry.kept is None else f"{entry.kept:,}"
        parts.append(
            f"<tr><td>{esc(entry.column)}</td><td>{kept}</td><td>{selection.threshold:,}</td>"
            f"<td>{esc(noise)}</td><td>{selection.max_cells}</td>"
            f"<td>{float(selection.epsilon):.4g}</td><td>{float(selection.delta):.3g}</td>"
            f"<td>≤ {float(selection.single_unit_release):.3g}</td></tr>"
        )
    parts.append("</table>")
    return parts
