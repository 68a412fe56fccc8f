"""A release planned on the driver, before any data is read: costs, noise, checks.

`plan_release` (`plan.release_plan`) calibrates every table's noise to the
budget with the accountant; the other modules give the key-free queries, the
selections, the checks against the machine and against the ledger.
"""

from dp_pipeline.release.plan.release_plan import (
    PlanError,
    ReleasePlan,
    TablePlan,
    plan_release,
)
from dp_pipeline.release.plan.text import format_plan

__all__ = ["PlanError", "ReleasePlan", "TablePlan", "format_plan", "plan_release"]
