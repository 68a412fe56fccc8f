"""make_consistent end to end: the demo's structure, consistency, accuracy, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from dp_pipeline.postprocess import make_consistent
from dp_pipeline.postprocess.plan import plan
from dp_pipeline.postprocess.wls import solve_wls
from tests.support.postprocess_cases import DEMO_HIERARCHY, demo_truth, noisy_demo

PERSONS = 100_000


@pytest.fixture(scope="module")
def truth():
    return demo_truth(PERSONS)


@pytest.fixture(scope="module")
def demo(truth):
    tables = noisy_demo(truth, seed=7)
    return tables, make_consistent(tables, DEMO_HIERARCHY)


def _state_of(name: str, dims, counts):
    """Aggregate a demo table to (state totals, national total)."""
    cube = counts.reshape(dims).reshape(dims[0], -1).sum(axis=1)
    if name.startswith("county"):
        cube = np.bincount(DEMO_HIERARCHY.parents[0], cube, 51)
    return cube.astype(np.int64)


def test_demo_tables_agree_on_every_margin(demo, truth):
    _, result = demo
    v = result.values
    cas = v["county_age_sex"].reshape(3143, 116, 2)
    sas = v["state_age_sex"].reshape(51, 116, 2)
    parent = DEMO_HIERARCHY.parents[0]
    # Counties of each state sum to that state's cells.
    summed = np.zeros_like(sas)
    np.add.at(summed, parent, cas)
    np.testing.assert_array_equal(summed, sas)
    # Every county table has the same county totals.
    np.testing.assert_array_equal(
        cas.sum(axis=(1, 2)), v["county_household_size"].reshape(3143, 7).sum(axis=1)
    )
    # Every state table has the same state totals; one national total.
    states = {n: _state_of(n, truth[n][0], v[n]) for n in v}
    first = states["state_age_sex"]
    for n, s in states.items():
        np.testing.assert_array_equal(s, first, err_msg=n)
    for n, arr in v.items():
        assert arr.dtype == np.int64, n
        assert arr.min() >= 0, n
        assert arr.shape == truth[n][1].shape, n


def test_demo_accuracy_no_worse_than_the_noise(demo, truth):
    tables, result = demo
    for table in tables:
        true = truth[table.name][1]
        raw = np.sqrt(np.mean((table.values - true) ** 2))
        after = np.sqrt(np.mean((result.values[table.name] - true) ** 2))
        assert after <= raw, (table.name, raw, after)
        # State totals of every table: better than the table's own noisy state totals.
        dims = truth[table.name][0]
        true_states = _state_of(table.name, dims, true)
        raw_s = np.sqrt(np.mean((_state_of(table.name, dims, table.values) - true_states) ** 2))
        after_s = np.sqrt(
            np.mean((_state_of(table.name, dims, result.values[table.name]) - true_states) ** 2)
        )
        assert after_s < raw_s, (table.name, raw_s, after_s)


def test_national_total_variance_below_every_table(demo):
    """The least squares national total is linear in the noisy values, z = P y; its exact
    variance a^T V a (a = P^T 1, computed as V^-1 P V 1 since P is V-self-adjoint) is
    below every table's own national total variance (cells x v)."""
    tables, _ = demo
    p = plan(tables, DEMO_HIERARCHY)
    variances = [float(t.variance) for t in tables]
    tenure = [t.name for t in tables].index("state_tenure")
    probe = [np.zeros(s.cells) for s in p.structures]
    probe[tenure] = np.full(p.structures[tenure].cells, variances[tenure])
    z = solve_wls(p.structures, probe, variances, p.constraints, DEMO_HIERARCHY).estimates
    variance = sum(float(np.sum(zi * zi)) / v for zi, v in zip(z, variances, strict=True))
    raw = [s.cells * v for s, v in zip(p.structures, variances, strict=True)]
    assert variance < min(raw), (variance, raw)
    # Nothing else in these tables informs the total, so the best linear unbiased estimate
    # is the inverse-variance combination of the five tables' own totals.
    assert variance == pytest.approx(1 / sum(1 / r for r in raw), rel=1e-6)


def test_deterministic_bit_for_bit(truth, demo):
    tables, result = demo
    again = make_consistent(tables, DEMO_HIERARCHY)
    for name, arr in result.values.items():
        assert np.array_equal(arr, again.values[name]), name
    assert result.method == again.method == "wls+topdown-nonnegative-integer"
    assert result.groups == 51
    assert result.wls_max_residual <= 1e-7
