"""The weighted policy for max_cells > 1: integer weights within the norm, exact
thresholds against mpmath, totals whose neighbours differ by at most the sensitivity."""

from __future__ import annotations

import functools
from fractions import Fraction

import mpmath as mp
import numpy as np
import pandas as pd
import pytest

from dp_pipeline.engines.bounding import BoundingSalt
from dp_pipeline.errors import DPValueError
from dp_pipeline.keyselect.counts import bounded_pairs
from dp_pipeline.keyselect.key_streams import SelectionKey
from dp_pipeline.keyselect.mechanism import release_decisions
from dp_pipeline.keyselect.weighted import (
    GAUSSIAN_WEIGHT_SCALE,
    LAPLACE_WEIGHT_SCALE,
    plan_weighted_selection,
    select_weighted_keys,
    unit_weights,
    weighted_totals,
)
from dp_pipeline.randomness import MasterKey

MASTER = MasterKey(bytes(range(40, 72)))
SELECTION = SelectionKey.derive(MASTER, "release", "weighted")
SALT = BoundingSalt.derive(MASTER, "release", "weighted")


def mpf(value) -> mp.mpf:
    value = Fraction(value)
    return mp.mpf(value.numerator) / value.denominator


@functools.cache
def gaussian_upper_sums(sigma2: Fraction, digits: int) -> tuple[int, list[mp.mpf]]:
    """(width, S) with S[i] = Σ_{z >= i - width} e^{-z²/(2σ²)} / Σ_z e^{-z²/(2σ²)}, for z
    in [-width, width], width = 30σ (the rest is below e^{-450} of the total)."""
    with mp.workdps(digits):
        s = mpf(sigma2)
        width = int(mp.sqrt(s) * 30) + 10
        weights = [mp.exp(-mp.mpf(z * z) / (2 * s)) for z in range(-width, width + 1)]
        total = mp.fsum(weights)
        sums, running = [mp.mpf(0)] * len(weights), mp.mpf(0)
        for i in range(len(weights) - 1, -1, -1):
            running += weights[i]
            sums[i] = running / total
        return width, sums


def tail(plan, k: int) -> mp.mpf:
    """P[Z >= k] from the pmf (mpmath, at the caller's precision)."""
    if plan.noise == "gaussian":
        width, sums = gaussian_upper_sums(plan.sigma2, mp.mp.dps)
        index = k + width
        return sums[index] if 0 <= index < len(sums) else mp.mpf(1 if index < 0 else 0)
    alpha = mp.exp(-1 / mpf(plan.scale))
    norm = (1 - alpha) / (1 + alpha)
    if k >= 1:
        return norm * alpha**k / (1 - alpha)
    return 1 - norm * alpha ** (1 - k) / (1 - alpha)


def new_keys(plan, threshold: int) -> mp.mpf:
    return max(
        1 - (1 - tail(plan, threshold - w)) ** k for k, w in enumerate(plan.weights, start=1)
    )


def test_weights_stay_within_the_norm_and_positive_up_to_the_max_cells_limit():
    for k, w in enumerate(unit_weights("gaussian", 1000), start=1):
        assert w >= 1 and k * w * w <= GAUSSIAN_WEIGHT_SCALE**2 < k * (w + 1) ** 2
    for k, w in enumerate(unit_weights("laplace", 1000), start=1):
        assert w >= 1 and k * w <= LAPLACE_WEIGHT_SCALE < k * (w + 1)


@pytest.mark.parametrize(
    ("noise", "m", "neighbouring"),
    [("laplace", 5, "add_remove"), ("gaussian", 5, "add_remove"), ("gaussian", 12, "replace")],
)
def test_weighted_threshold_and_delta_match_the_reference(noise, m, neighbouring):
    delta = Fraction(1, 10**6)
    plan = plan_weighted_selection(
        noise=noise, epsilon=1, delta=delta, max_cells=m, neighbouring=neighbouring
    )
    factor = 2 if neighbouring == "replace" else 1
    scale = LAPLACE_WEIGHT_SCALE if noise == "laplace" else GAUSSIAN_WEIGHT_SCALE**2
    assert plan.sensitivity == factor * scale
    with mp.workdps(60):
        exact = new_keys(plan, plan.threshold)
        assert exact <= mpf(plan.new_keys_delta) <= exact * (1 + mp.mpf("1e-12"))
        total = 1 - (1 - mpf(plan.noise_delta)) * (1 - exact)
        assert total <= mpf(plan.delta_upper) <= mpf(delta)
        before = 1 - (1 - mpf(plan.noise_delta)) * (1 - new_keys(plan, plan.threshold - 1))
        assert before > mpf(delta)
    assert plan.delta_at(1) == plan.delta_upper


def test_weighted_totals_are_exact_sums_of_each_units_weight():
    # Unit 0 holds keys 0 and 1, unit 1 holds key 1, unit 2 holds keys 0, 1, 2.
    unit = np.array([0, 0, 1, 2, 2, 2])
    key = np.array([0, 1, 1, 0, 1, 2])
    weights = (10, 7, 5)
    assert weighted_totals(unit, key, 4, weights).tolist() == [7 + 5, 7 + 10 + 5, 5, 0]


def test_removing_a_unit_moves_the_totals_by_at_most_the_sensitivity():
    rng = np.random.default_rng(2)
    df = pd.DataFrame({"unit": rng.integers(0, 300, 3000), "key": rng.zipf(1.4, 3000) % 200})
    for noise in ("gaussian", "laplace"):
        weights = unit_weights(noise, 8)

        def totals(frame: pd.DataFrame, weights=weights) -> pd.Series:
            pairs = bounded_pairs(
                frame,
                key="key",
                privacy_unit="unit",
                max_cells=8,
                salt=SALT,
                selection_key=SELECTION,
            )
            values = weighted_totals(pairs.unit, pairs.key, len(pairs.uniques), weights)
            return pd.Series(values, index=pairs.uniques.tolist())

        full = totals(df)
        for unit in rng.choice(300, 12, replace=False):
            moved = full.sub(totals(df[df["unit"] != unit]), fill_value=0).to_numpy()
            if noise == "gaussian":
                assert int((moved * moved).sum()) <= GAUSSIAN_WEIGHT_SCALE**2
            else:
                assert int(np.abs(moved).sum()) <= LAPLACE_WEIGHT_SCALE


def test_weighted_selection_releases_by_each_keys_total():
    rng = np.random.default_rng(4)
    df = pd.DataFrame({"unit": rng.integers(0, 3000, 9000), "key": rng.zipf(1.5, 9000) % 400})
    plan = plan_weighted_selection(noise="gaussian", epsilon=1, delta="1/100000", max_cells=4)
    selected = select_weighted_keys(
        df, key="key", privacy_unit="unit", plan=plan, selection_key=SELECTION, salt=SALT
    )
    pairs = bounded_pairs(
        df, key="key", privacy_unit="unit", max_cells=4, salt=SALT, selection_key=SELECTION
    )
    totals = weighted_totals(pairs.unit, pairs.key, len(pairs.uniques), plan.weights)
    present = totals > 0
    decided = release_decisions(plan, SELECTION, pairs.uniques[present], totals[present])
    assert sorted(pairs.uniques[present][decided].tolist()) == selected.keys.tolist()
    assert selected.keys.size > 3 and selected.threshold == plan.threshold


def test_weighted_plans_refuse_bad_parameters_with_the_same_messages():
    with pytest.raises(DPValueError, match=r"^max_cells=2000: must be between 1 and 1000"):
        plan_weighted_selection(noise="gaussian", epsilon=1, delta="1/1000000", max_cells=2000)
    with pytest.raises(DPValueError, match=r"budget too small for key selection"):
        plan_weighted_selection(noise="gaussian", epsilon="1/1000", delta="1/1000000", max_cells=3)
