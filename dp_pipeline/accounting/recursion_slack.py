"""Round-off slack of the bounded-range recursions (`bounded_range_adaptive`, `_joint`).

Both recursions compute upper bounds in floats; every operation's round-off is charged by
raising its result by a whole number of units of round-off, never by a model: one
step's result by `STEP_SLACK`, each weight (p_t, 1 - p_t, e^{-h}) by `WEIGHT_SLACK`, and
the bounds are kept at least `TINY` so that no step runs in subnormal arithmetic (where
the relative slack would not hold).
"""

from __future__ import annotations

__all__ = ["STEP_SLACK", "TINY", "UNIT", "WEIGHT_SLACK"]

UNIT = 2.0**-53  # unit round-off of a float64 operation (round to nearest)
STEP_SLACK = 1 + 32 * UNIT  # each recursion step's result is raised by this factor
WEIGHT_SLACK = 1 + 16 * UNIT  # each weight p_t, 1 - p_t, e^{-h}... raised by this
TINY = 2.0**-900  # the recursion's bounds stay at least this (no subnormal arithmetic)
