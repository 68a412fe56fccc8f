"""The one type switch over mechanism families (`families.family_of`): every method takes
a mechanism by the same family, in one order."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dp_pipeline.accounting.events import PmfPair, PureDP
from dp_pipeline.accounting.families import Family, family_of
from dp_pipeline.errors import DPTypeError
from dp_pipeline.mechanisms import BaseTwoExponential, DiscreteGaussian, DiscreteLaplace


class _PmfWithPureEpsilon:
    """Both descriptions: the pmf pair is the one every path uses."""

    pure_epsilon = Fraction(1)

    def privacy_loss_pmfs(self):
        return np.array([0.5, 0.5]), np.array([0.25, 0.75])


class _BadSelection:
    bounded_range_epsilon = 0.5  # a float, not a stored Fraction


@pytest.mark.parametrize(
    ("mechanism", "family"),
    [
        (DiscreteGaussian(8), Family.DISCRETE_GAUSSIAN),
        (DiscreteLaplace(2), Family.DISCRETE_LAPLACE),
        # a selection states a pure ε too: its bounded-range curve is what is composed
        (BaseTwoExponential(Fraction(1, 2)), Family.SELECTION),
        (PmfPair((0.5, 0.5), (0.25, 0.75)), Family.PMF_PAIR),
        (_PmfWithPureEpsilon(), Family.PMF_PAIR),
        (PureDP(Fraction(1, 3)), Family.PURE_DP),
        (object(), None),
    ],
    ids=lambda value: type(value).__name__,
)
def test_family_of_takes_every_mechanism_by_one_family(mechanism, family):
    assert family_of(mechanism) is family


def test_a_malformed_bounded_range_epsilon_is_refused_by_name():
    with pytest.raises(DPTypeError, match=r"_BadSelection\.bounded_range_epsilon must be a stored"):
        family_of(_BadSelection())
