"""Private key selection: release only the keys whose noisy count of distinct units clears
an exact threshold (for grouping keys nobody declared a domain for).

- `plan`: the threshold and the selection's δ for a target (ε, δ), ``max_cells`` and
  the neighbouring relation, every δ an upper bound computed in exact rationals
  (`exact_exp`, `tails`, `noise_profiles`), and the selection's privacy profile.

One job per module; nothing here reads a spec or touches the ledger.
"""

from __future__ import annotations

from dp_pipeline.keyselect.plan import SelectionPlan, plan_selection

__all__ = ["SelectionPlan", "plan_selection"]
