"""Exact parameters: accepted forms, the float rule, and bad input."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

from dp_pipeline.rational import exact_rational, float_to_rational_up, positive_rational


@pytest.mark.parametrize(
    "value, expected",
    [
        (3, Fraction(3)),
        (np.int32(4), Fraction(4)),
        (Fraction(7, 3), Fraction(7, 3)),
        ("7/3", Fraction(7, 3)),
        (" 10/4 ", Fraction(5, 2)),
        ("2.5", Fraction(5, 2)),
        ("1e3", Fraction(1000)),
        (Decimal("0.1"), Fraction(1, 10)),
        (0.1, Fraction(0.1)),  # the binary value is above the decimal reading 1/10
        (2.5, Fraction(5, 2)),
    ],
)
def test_accepted_forms(value, expected):
    assert exact_rational(value, "sigma2") == expected


@pytest.mark.parametrize("value", [0.1, 0.3, 2.675, 1 / 3, 1e-300, 123456.789, 2.0**-40])
def test_float_rule_never_rounds_down(value):
    exact = float_to_rational_up(value)
    assert exact >= Fraction(value)
    assert exact >= Fraction(repr(value))


def test_float_below_its_decimal_reading_keeps_its_binary_value():
    # 0.1 as a double is 0.1000000000000000055...; its decimal "0.1" is smaller,
    # so the larger binary value is kept.
    assert float_to_rational_up(0.1) == Fraction(0.1)
    # 2.675 as a double is 2.67499999...; the decimal "2.675" is larger and wins.
    assert float_to_rational_up(2.675) == Fraction(2675, 1000)


@pytest.mark.parametrize(
    "value, exc, message",
    [
        (True, TypeError, "sigma2 must be an int, a Fraction or a 'p/q' string, got True"),
        (None, TypeError, "sigma2 must be an int.*got None"),
        (float("nan"), ValueError, "sigma2 must be finite, got nan"),
        (float("inf"), ValueError, "sigma2 must be finite, got inf"),
        (Decimal("NaN"), ValueError, "sigma2 must be finite"),
        ("7//3", ValueError, "sigma2: cannot read '7//3' as an exact rational"),
        ("abc", ValueError, "cannot read 'abc'"),
        ("1/0", ValueError, "zero denominator"),
        ([1], TypeError, "got list"),
        (0, ValueError, "sigma2 must be > 0, got 0"),
        ("-1/2", ValueError, "sigma2 must be > 0, got '-1/2'"),
    ],
)
def test_bad_values_name_the_parameter_and_rule(value, exc, message):
    with pytest.raises(exc, match=message):
        positive_rational(value, "sigma2")
