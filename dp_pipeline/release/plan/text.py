"""A plan as ``dp-release plan`` prints it: each table's noise, share and margin, and the
release's guarantee, exact fractions with their decimals beside them."""

from __future__ import annotations

from fractions import Fraction

from dp_pipeline.accounting import PrivacyAccountant
from dp_pipeline.release.plan.moments import margin_text
from dp_pipeline.release.plan.release_plan import ReleasePlan
from dp_pipeline.release.plan.selection_text import selection_lines

__all__ = ["exact_and_decimal", "format_plan"]


def exact_and_decimal(value: Fraction) -> str:
    """An exact parameter as printed: ``1/8 (0.125)``; a long fraction by its decimal alone."""
    value = Fraction(value)
    if value.denominator == 1 and abs(value) < 10**12:
        return str(value.numerator)
    decimal = f"{float(value):.6g}"
    return f"{value} ({decimal})" if len(str(value)) <= 20 else decimal


def _budget_text(budget) -> str:
    if budget.rho is not None:
        return f"rho={exact_and_decimal(budget.rho)}"
    return f"epsilon={exact_and_decimal(budget.epsilon)}, delta={exact_and_decimal(budget.delta)}"


def format_plan(plan: ReleasePlan) -> str:
    """The plan as a human-readable table (what ``dp-release plan`` prints).

    Exact fractions are printed with their decimal beside them (``1/8 (0.125)``).
    """
    spec = plan.spec
    rows = []
    for table in plan.tables:
        share = "" if table.rho is None or not plan.rho else f"{float(table.rho / plan.rho):.4f}"
        parameter = table.parameter
        shown = exact_and_decimal(parameter)
        margin = "" if table.margin_of_error is None else f"±{table.margin_of_error}"
        if table.measures or isinstance(table.margin_of_error, Fraction):
            margin = margin_text(table)  # a mean's, var's, std's aggregates; a fractional sum
        if table.table.is_selection:
            shown = f"eps {float(parameter):.6g}"
            if table.table.statistic in ("quantile", "median"):
                margin = f"rank ±{table.margin_of_error}"
        cells = table.table.cells
        if any(key in spec.key_selections for key in table.table.keys):
            cells = f"{cells} x kept"  # its selected keys are known after the selection
        rows.append((table.table.name, cells, shown, share, margin))
    invalid_note = None
    if plan.invalid_count is not None:
        count = plan.invalid_count
        parameter = count.mechanism.sigma2 if hasattr(count.mechanism, "sigma2") else None
        parameter = count.mechanism.scale if parameter is None else parameter
        share = ""
        if plan.rho:
            rho = Fraction(PrivacyAccountant().add_event(count.event).rho())
            share = f"{float(rho / plan.rho):.4f}"
        rows.append(
            (
                "(invalid-row count)",
                1,
                exact_and_decimal(parameter),
                share,
                f"±{count.margin_of_error}",
            )
        )
        invalid_note = (
            f"  refused when the noisy count of units with an invalid row is above "
            f"{count.threshold}"
        )
    width = max([22, *(len(row[2]) for row in rows)])
    lines = [
        f"release {spec.release_id} on population {spec.population} "
        f"({spec.neighbouring}, {spec.noise}, {spec.noise_partitions} noise partitions)",
        f"budget: {_budget_text(spec.budget) if spec.budget else 'explicit sigma2'}"
        + (f"; population cap: {_budget_text(spec.cap)}" if spec.cap else ""),
        "",
        f"{'table':<26}{'cells':>10}  {'sigma2 / scale / eps':>{width}}{'rho share':>12}"
        f"{'margin (95%)':>14}",
    ]
    for name, cells, shown, share, margin in rows:
        # Two spaces before the margin even when it is long (a mean's aggregates).
        lines.append(f"{name:<26}{cells:>10}  {shown:>{width}}{share:>12}  {margin:>12}")
    if invalid_note:
        lines.append(invalid_note)
    lines += selection_lines(plan)
    lines.append("")
    delta = float(plan.report_delta)
    tight = plan.epsilon_tight
    lines.append(
        f"epsilon at delta={delta:.3g}: tight {float(tight.upper):.6g} ({tight.method}, "
        f"lower bound {float(tight.lower):.6g})"
    )
    if plan.epsilon_zcdp is not None:
        lines.append(
            f"epsilon at delta={delta:.3g}: zCDP conversion {plan.epsilon_zcdp:.6g} "
            f"(rho = {float(plan.rho):.6g}); tight bound saves "
            f"{max(0.0, plan.epsilon_zcdp - float(tight.upper)):.4g}"
        )
    if plan.delta_tight is not None:
        lines.append(
            f"delta at epsilon={float(spec.budget.epsilon):.6g}: "
            f"{float(plan.delta_tight.upper):.4g} ({plan.delta_tight.method}, lower bound "
            f"{float(plan.delta_tight.lower):.4g}; budget {float(spec.budget.delta):.3g})"
        )
    lines.append(f"planned in {plan.seconds:.3f} s, before reading any data")
    return "\n".join(lines)
