"""Continuous Gaussian calibration: Vinterbo's closed form vs the Balle–Wang exact condition."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dp_pipeline.accounting import (
    gaussian_sigma_analytic,
    gaussian_sigma_classic,
    gaussian_sigma_vinterbo,
)
from dp_pipeline.accounting.gaussian import balle_wang_delta

EPSILONS = np.geomspace(0.01, 20, 9)
DELTAS = [1e-15, 1e-10, 1e-6, 1e-3, 0.1, 0.3, 0.5]


@pytest.mark.parametrize("delta", DELTAS)
def test_vinterbo_satisfies_exact_condition(delta):
    for epsilon in EPSILONS:
        sigma = gaussian_sigma_vinterbo(epsilon, delta)
        assert balle_wang_delta(sigma, epsilon) <= delta * (1 + 1e-9)
        analytic = gaussian_sigma_analytic(epsilon, delta)
        assert analytic <= sigma
        # The analytic σ is tight: 0.1% less noise breaks the exact condition.
        assert balle_wang_delta(analytic * 0.999, epsilon) > delta


def test_vinterbo_beats_classic_where_classic_is_defined():
    for epsilon in [0.01, 0.1, 0.5, 0.99]:
        for delta in [1e-10, 1e-5, 0.01]:
            assert gaussian_sigma_vinterbo(epsilon, delta) < gaussian_sigma_classic(epsilon, delta)


def test_paper_claim_classic_epsilon_at_delta_one_tenth():
    # Vinterbo (2022): with δ = 0.1, σ = 1, Δ = 1 the classic bound needs ε = sqrt(2 ln 12.5)
    # ≈ 2.2475 > 2.24, where it is not valid; the closed form's inverse gives a smaller ε.
    classic_epsilon = math.sqrt(2 * math.log(1.25 / 0.1))
    assert classic_epsilon == pytest.approx(2.2475, abs=1e-4)
    assert classic_epsilon > 2.24
    z = -math.log(4 * 0.1 * 0.9)
    vinterbo_epsilon = math.sqrt(2 * z) + 0.5  # inverse for δ <= 1/2, σ = Δ = 1
    assert gaussian_sigma_vinterbo(vinterbo_epsilon, 0.1) == pytest.approx(1.0, rel=1e-12)
    assert vinterbo_epsilon < classic_epsilon


def test_gaussian_bad_input():
    with pytest.raises(ValueError, match="epsilon must be < 1 for the classic"):
        gaussian_sigma_classic(1.5, 1e-5)
    with pytest.raises(ValueError, match="delta must lie strictly between 0 and 1"):
        gaussian_sigma_vinterbo(1.0, 0.0)
    with pytest.raises(ValueError, match="epsilon must be > 0"):
        gaussian_sigma_vinterbo(0.0, 0.1)
