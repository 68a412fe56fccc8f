"""Release reports: ``privacy_report.json`` (machine-readable) and ``report.html`` (for people).

Both are post-processing of the plan, the ledger's reservation and the
released tables, so they cost no privacy. The accuracy section compares the
noisy cells with the true ones; it exists only when the input is synthetic
(``truth`` given), because true counts of real data must never be published.
Outputs are deterministic (no timestamps besides the ledger's reservation
time, PNGs without metadata) so a re-emitted release is byte-identical.
"""

from __future__ import annotations

import html
from fractions import Fraction

from dp_pipeline.release.ledger.phrases import delta_text
from dp_pipeline.release.plan.moments import margin_text, statistic_text
from dp_pipeline.release.plan.release_plan import ReleasePlan
from dp_pipeline.release.report.figures import report_figures
from dp_pipeline.release.report.key_selections import key_selection_section
from dp_pipeline.release.report.postprocess import (
    postprocessing_description,
    postprocessing_section,
)
from dp_pipeline.release.report.statistics_accuracy import statistic_paragraphs

__all__ = ["html_report", "privacy_report"]


def privacy_report(plan: ReleasePlan, reservation, key_fingerprint: str, files: dict) -> dict:
    """The machine-readable report: mechanisms, σ², ρ, (ε, δ) of the release and cumulative."""
    report = plan.to_dict()
    report.pop("planning_seconds", None)
    report["ledger"] = {
        "population": reservation.population,
        "reserved_at": reservation.reserved_at,
        "cap": reservation.cap,
        "release": reservation.guarantee,
        "cumulative": reservation.cumulative,
    }
    report["master_key_fingerprint"] = key_fingerprint
    report["files"] = files
    report["guarantee"]["bounds"] = privacy_bounds(report)
    return report


def privacy_bounds(report: dict) -> dict:
    """Lower and upper bound of every privacy figure of the report, each pair at one point.

    ρ is exact (lower = upper). The tight ε (at ``delta_reference``) and δ (at the budget's
    ε) carry the accountant's bracket. The zCDP conversion is an upper bound on the same ε,
    so its lower bound is the tight one's. The cumulative ε and δ are the ledger's brackets
    at the cap's δ and ε (`dp_pipeline.release.ledger.budget.Spend`): a bound of this release,
    taken at the budget's δ or ε, is a bound at another point and is never paired with
    them. A ledger written before it kept its lower bounds gives 0, the trivial one.
    """
    guarantee = report["guarantee"]
    tight = guarantee["epsilon_tight"]
    bounds = {
        "rho": {"lower": guarantee["rho"], "upper": guarantee["rho"]},
        "epsilon_tight": {"lower": tight["lower"], "upper": tight["upper"]},
        "epsilon_zcdp": {"lower": tight["lower"], "upper": guarantee["epsilon_zcdp"]},
    }
    if guarantee.get("delta_tight") is not None:
        delta = guarantee["delta_tight"]
        bounds["delta_tight"] = {"lower": delta["lower"], "upper": delta["upper"]}
    cumulative = report.get("ledger", {}).get("cumulative") or {}
    for name in ("epsilon", "delta"):
        if cumulative.get(name) is not None:
            lower = cumulative.get(f"{name}_lower")
            bounds[f"cumulative_{name}"] = {
                "lower": 0.0 if lower is None else lower,
                "upper": cumulative[name],
            }
    return bounds


def _bracket(bound: dict) -> str:
    """'upper (lower bound L)' for the HTML report."""
    if bound.get("lower") is None or bound["lower"] == bound["upper"]:
        return _number(bound["upper"])
    return f"{_number(bound['upper'])} (lower bound {_number(bound['lower'])})"


def _number(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, Fraction):
        value = float(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape(str(value))


def html_report(plan: ReleasePlan, report: dict, accuracies, accuracy: list[dict]) -> str:
    """A self-contained HTML page (plots embedded as PNG) a person can read and publish.

    ``accuracies``: each table's `TableAccuracy` by name (its error histograms),
    ``accuracy``: their `accuracy_summary` rows (empty for real input).
    """
    spec = plan.spec
    figures = report_figures(plan, accuracies, accuracy)
    guarantee = report["guarantee"]
    ledger = report["ledger"]
    bounds = guarantee.get("bounds") or privacy_bounds(report)
    esc = html.escape
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>Release {esc(spec.release_id)}</title>",
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto;line-height:1.4}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .6em;"
        "text-align:right}th{background:#eee}td:first-child{text-align:left}</style>",
        "</head><body>",
        f"<h1>Release {esc(spec.release_id)}</h1>",
        f"<p>{esc(spec.description)}</p>" if spec.description else "",
        f"<p>Population <b>{esc(spec.population)}</b>; privacy unit: "
        + (
            f"one <code>{esc(spec.privacy_unit)}</code>"
            if spec.privacy_unit
            else "one row (every row is a different unit)"
        )
        + "; neighbouring relation "
        f"<b>{esc(spec.neighbouring)}</b>; noise <b>{esc(spec.noise)}</b> "
        "(exact sampler, keyed ChaCha20 streams).</p>",
        "<h2>Privacy guarantee</h2>",
        "<table><tr><th>quantity</th><th>this release</th></tr>",
        f"<tr><td>zCDP ρ</td><td>{_number(guarantee['rho'] and Fraction(guarantee['rho']))}"
        "</td></tr>",
        f"<tr><td>ε at δ = {_number(float(Fraction(guarantee['delta_reference'])))} "
        f"(tight bound, {esc(guarantee['epsilon_tight']['method'])})</td>"
        f"<td>{_bracket(guarantee['epsilon_tight'])}</td></tr>",
        f"<tr><td>ε at the same δ by the zCDP conversion alone</td>"
        f"<td>{_bracket(bounds['epsilon_zcdp'])}</td></tr>",
    ]
    if guarantee["delta_tight"] is not None:
        parts.append(
            f"<tr><td>δ at the budget's ε = {_number(float(spec.budget.epsilon))}</td>"
            f"<td>{_bracket(guarantee['delta_tight'])}</td></tr>"
        )
    parts.append("</table>")
    cumulative = ledger["cumulative"]
    cumulative_rho = cumulative.get("rho") and float(Fraction(cumulative["rho"]))
    parts.append(
        "<p>Cumulative for the population after this release (every committed and reserved "
        f"release, composed by the accountant; upper bounds): ρ = {_number(cumulative_rho)}"
        # Each figure with the point it is taken at (the cap's δ, the cap's ε): side by
        # side without them they would read as one pair, stronger than the truth.
        + (
            f"; ε = {_bracket(bounds['cumulative_epsilon'])} at the cap's "
            f"δ = {delta_text(ledger['cap']['delta'])}"
            if "cumulative_epsilon" in bounds
            else ""
        )
        + (
            f"; δ = {_bracket(bounds['cumulative_delta'])} at the cap's "
            f"ε = {delta_text(ledger['cap']['epsilon'])}"
            if "cumulative_delta" in bounds
            else ""
        )
        + f". Cap: {esc(_cap_text(ledger['cap']))}.</p>"
    )
    parts.append("<h2>Tables, noise and margins of error</h2>")
    parts.append(
        "<p>The margin of error is the half-width m such that each cell's noise lies in "
        "[−m, m] with probability at least 95% (exact, rounded up). Every declared cell is "
        "released, zero counts included. A mean, variance or standard deviation is a ratio "
        "of noisy aggregates: the margins shown are those of its noisy count and sums (in "
        "units of the value, or of its square), not of the ratio.</p>"
    )
    parts.append(
        "<table><tr><th>table</th><th>keys</th><th>statistic</th><th>cells</th>"
        "<th>σ² / scale</th><th>noise sd</th><th>ρ share</th><th>margin (95%)</th></tr>"
    )
    for table in plan.tables:
        if table.table.is_selection:
            continue
        share = "–" if not plan.rho or table.rho is None else f"{float(table.rho / plan.rho):.1%}"
        statistic = table.table.statistic
        if table.table.value is not None:
            statistic = statistic_text(table.table)
        parts.append(
            f"<tr><td>{esc(table.table.name)}</td><td>{esc(' × '.join(table.table.keys))}</td>"
            f"<td>{esc(statistic)}</td><td>{table.table.cells:,}</td>"
            f"<td>{_parameters(table)}</td>"
            f"<td>{_number(None if table.measures else table.noise_sd)}</td><td>{share}</td>"
            f"<td>{esc(margin_text(table))}</td></tr>"
        )
    parts.append("</table>")
    parts.extend(_selection_section(plan))
    parts.extend(key_selection_section(plan))
    parts.extend(
        postprocessing_description(report, {t.table.name: t.margin_of_error for t in plan.tables})
    )
    for key, title in (("budget", "Budget split"), ("margins", "Margins of error")):
        if key in figures:
            parts.append(f"<h3>{title}</h3><img alt='{title}' src='data:image/png;base64,")
            parts.append(figures[key] + "'>")
    cell_rows = [row for row in accuracy if "cells" in row]
    statistic_rows = [row for row in accuracy if "margins_of_error" in row]  # mean, var, std
    selection_rows = [row for row in accuracy if "cells" not in row and row not in statistic_rows]
    if accuracy:
        parts.append("<h2>Accuracy against the truth (synthetic input only)</h2>")
    if cell_rows:
        parts.append(
            "<table><tr><th>table</th><th>cells</th><th>mean |error|</th><th>RMSE</th>"
            "<th>noise sd</th><th>max |error|</th><th>within margin</th></tr>"
        )
        for row in cell_rows:
            parts.append(
                f"<tr><td>{esc(row['table'])}</td><td>{row['cells']:,}</td>"
                f"<td>{row['mean_abs_error']:.3g}</td><td>{row['rmse']:.3g}</td>"
                f"<td>{row['sigma']:.3g}</td><td>{row['max_abs_error']:,}</td>"
                f"<td>{row['within_margin']:.2%}</td></tr>"
            )
        parts.append("</table>")
        parts.extend(postprocessing_section(report, cell_rows, figures))
        if "accuracy" in figures:
            parts.append(
                "<img alt='errors' src='data:image/png;base64," + figures["accuracy"] + "'>"
            )
    for row in selection_rows:
        if row["statistic"] == "top_k":
            parts.append(
                f"<p><b>{esc(row['table'])}</b>: {row['precision']:.0%} of the {row['k']} "
                "reported candidates are in the true top k.</p>"
            )
        else:
            parts.append(
                f"<p><b>{esc(row['table'])}</b>: rank error over {row['groups']:,} group(s): "
                f"mean {row['mean_rank_error']:.3g}, max {row['max_rank_error']:.3g}; "
                f"{row['within_margin']:.0%} within the planned ±{row['margin_of_error']:,}."
                "</p>"
            )
    parts.extend(statistic_paragraphs(plan, statistic_rows))
    parts.append(
        "<h2>Files</h2><ul>"
        + "".join(f"<li><code>{esc(name)}</code></li>" for name in sorted(report["files"]))
        + "</ul>"
    )
    parts.append("</body></html>")
    return "\n".join(part for part in parts if part)


def _parameters(table) -> str:
    """A noised table's σ² or scale; a mean's, var's or std's, one per noisy aggregate."""
    if not table.measures:
        return _number(float(table.parameter))
    mechanisms = [m.event.mechanism for m in table.measures]
    return ", ".join(_number(float(getattr(m, "sigma2", None) or m.scale)) for m in mechanisms)


def _selection_section(plan: ReleasePlan) -> list[str]:
    """The selection tables (quantile, median, top_k): mechanism, ε and precision."""
    selections = [t for t in plan.tables if t.table.is_selection]
    if not selections:
        return []
    esc = html.escape
    parts = [
        "<h3>Selections</h3>",
        "<p>Quantiles, medians and top-k are chosen by the exact base-2 exponential "
        "mechanism (Ilvento 2020) from candidates fixed before reading the data, or, for "
        "one-shot top-k, from discrete-Laplace-noised counts. A quantile's rank error r: "
        "with probability at least 95%, the number of values between the released value "
        "and rank q·n exceeds that of the best grid candidate by less than r.</p>",
        "<table><tr><th>table</th><th>groups</th><th>statistic</th><th>candidates</th>"
        "<th>mechanism</th><th>ε</th><th>ρ share</th><th>precision (95%)</th></tr>",
    ]
    for table in selections:
        spec = table.table
        share = "–" if not plan.rho or table.rho is None else f"{float(table.rho / plan.rho):.1%}"
        if spec.statistic == "top_k":
            statistic = f"top {spec.k} of {spec.keys[0]} ({spec.method})"
            groups = "–"
        else:
            level = "median" if spec.statistic == "median" else f"{float(spec.q):g}-quantile"
            statistic = (
                f"{level} of {spec.value} on [{spec.lower}, {spec.upper}] step {spec.granularity}"
            )
            groups = esc(" × ".join(spec.keys)) or "–"
        if table.margin_of_error is None:
            precision = "–"
        elif spec.statistic == "top_k":
            precision = f"counts ±{table.margin_of_error:,}"
        else:
            precision = f"rank ±{table.margin_of_error:,}"
        runs = f" × {table.runs}" if table.runs > 1 else ""
        parts.append(
            f"<tr><td>{esc(spec.name)}</td><td>{groups}</td><td>{esc(statistic)}</td>"
            f"<td>{spec.candidates:,}</td><td>{esc(table.mechanism.name)}{runs}</td>"
            f"<td>{_number(table.epsilon)}</td><td>{share}</td><td>{precision}</td></tr>"
        )
    parts.append("</table>")
    return parts


def _cap_text(cap: dict) -> str:
    if cap.get("rho") is not None:
        return f"ρ ≤ {cap['rho']}"
    return f"(ε = {cap['epsilon']}, δ = {cap['delta']})"
