"""Declared bounds of a summed value: clamp into ``[lower, upper]``, round to ``granularity``.

The noised quantity is an exact integer sum in granularity units; the limits on
those units (`sum_units_problem`) keep every engine's exact sums in range.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from dp_pipeline.errors import DPTypeError, DPValueError
from dp_pipeline.query.domain import MAX_UNITS
from dp_pipeline.query.exact_sums import MAX_SUM_UNITS, SUM_LIMIT
from dp_pipeline.rational import exact_rational, positive_rational

__all__ = ["SUM_UNITS_RULE", "UNIT_SUM_RULE", "ValueBounds", "sum_units_problem"]

SUM_UNITS_RULE = (
    f"a summed value may be at most 2**31 = {MAX_SUM_UNITS:,} granularity units in absolute "
    f"value, so that the sum of any cell of fewer than 2**31 rows is exact (totals are "
    f"clamped into ±2**62 before noise)"
)
UNIT_SUM_RULE = (
    f"one privacy unit's sum in one cell may be at most 2**62 = {SUM_LIMIT:,} granularity "
    f"units, so that it is summed exactly in int64"
)


def sum_units_problem(largest_units: int, max_per_cell: int | None) -> str | None:
    """The sum limit (if any) that bounds of ``largest_units`` granularity units break.

    None when both hold: ``largest_units <= 2**31`` and (with ``max_per_cell``)
    ``max_per_cell * largest_units <= 2**62``. Otherwise a sentence naming the
    value and the rule, for the caller to prefix with the field.
    """
    if largest_units > MAX_SUM_UNITS:
        return (
            f"the largest |bound| is {largest_units:,} granularity units, above the limit: "
            f"{SUM_UNITS_RULE}"
        )
    if max_per_cell is not None and max_per_cell * largest_units > SUM_LIMIT:
        return (
            f"max_per_cell x the largest |bound| is {max_per_cell * largest_units:,} "
            f"granularity units, above the limit: {UNIT_SUM_RULE}"
        )
    return None


@dataclass(frozen=True)
class ValueBounds:
    """Clamping bounds and granularity of a summed column (exact rationals).

    A value v becomes ``clip(rint(v / granularity), lower/granularity, upper/granularity)``
    granularity units; ``lower`` and ``upper`` must be integer multiples of the
    granularity, so clamping before or after rounding is the same.

    ``build`` refuses, before any data is read, bounds whose largest absolute
    value B exceeds ``2**31`` granularity units (`dp_pipeline.query.exact_sums`): every
    cell of fewer than ``2**31`` rows then has an exact total inside ``±2**62``,
    and a larger cell an exact total clamped to ``±2**62``. (``2**31 < 2**53``, so
    the units are also exact in float64 and both engines clamp identically.)
    """

    lower: Fraction
    upper: Fraction
    granularity: Fraction

    @classmethod
    def build(cls, bounds: object, granularity: object) -> ValueBounds:
        if not isinstance(bounds, Sequence) or isinstance(bounds, str) or len(bounds) != 2:
            raise DPTypeError(f"bounds must be a pair (lower, upper), got {bounds!r}")
        lower = exact_rational(bounds[0], "bounds lower")
        upper = exact_rational(bounds[1], "bounds upper")
        if lower > upper:
            raise DPValueError(f"bounds: lower {bounds[0]!r} is above upper {bounds[1]!r}")
        step = positive_rational(granularity, "granularity")
        for name, value, raw in (("lower", lower, bounds[0]), ("upper", upper, bounds[1])):
            if (value / step).denominator != 1:
                raise DPValueError(
                    f"bounds {name} {raw!r} is not an integer multiple of granularity "
                    f"{granularity!r}; choose bounds on the granularity grid"
                )
        out = cls(lower, upper, step)
        if out.max_abs_units > MAX_UNITS:
            raise DPValueError(
                f"bounds {bounds!r} span more than 2**53 granularity units; use a coarser "
                f"granularity"
            )
        problem = sum_units_problem(out.max_abs_units, None)
        if problem is not None:
            raise DPValueError(
                f"bounds {bounds!r} with granularity {granularity!r}: {problem}; use a coarser "
                f"granularity or tighter bounds"
            )
        if out.lower_units == 0 and out.upper_units == 0:
            raise DPValueError("bounds (0, 0) make every sum 0; declare a non-trivial range")
        return out

    @property
    def lower_units(self) -> int:
        return int(self.lower / self.granularity)

    @property
    def upper_units(self) -> int:
        return int(self.upper / self.granularity)

    @property
    def max_abs_units(self) -> int:
        return max(abs(self.lower_units), abs(self.upper_units))

    @property
    def scale_numerator(self) -> int:
        """v / granularity is computed as v * denominator / numerator (float64, both engines)."""
        return self.granularity.numerator

    @property
    def scale_denominator(self) -> int:
        return self.granularity.denominator
