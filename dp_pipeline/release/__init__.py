"""Census-style releases: spec (TOML) -> plan (accountant) -> run (engines) -> outputs + ledger.

See docs/quickstart.md; the command-line entry point is ``dp-release``
(`dp_pipeline.release.cli`).
"""

from dp_pipeline.release.plan.release_plan import PlanError, ReleasePlan, plan_release
from dp_pipeline.release.spec.load import load_spec, parse_spec
from dp_pipeline.release.spec.model import ReleaseSpec, SpecError

__all__ = [
    "PlanError",
    "ReleasePlan",
    "ReleaseSpec",
    "SpecError",
    "load_spec",
    "parse_spec",
    "plan_release",
]
