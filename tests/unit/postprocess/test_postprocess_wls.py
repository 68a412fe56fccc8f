"""Weighted least squares consistency against an independent dense KKT solve."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from dp_pipeline.postprocess import (
    Hierarchy,
    NoisyCounts,
    PostprocessError,
    check_combinable,
    make_consistent,
)
from dp_pipeline.postprocess.plan import _constraints
from dp_pipeline.postprocess.structure import validate_shapes
from dp_pipeline.postprocess.wls import solve_wls

KEY_SIZES = {"a": 2, "b": 3, "c": 2}


def random_instance(seed: int):
    rng = np.random.default_rng(seed)
    sizes = (2, 5, 9)
    parents = []
    for i in range(len(sizes) - 1):
        p = np.concatenate(
            [np.arange(sizes[i]), rng.integers(0, sizes[i], sizes[i + 1] - sizes[i])]
        )
        parents.append(rng.permutation(p))
    hierarchy = Hierarchy(("region", "district", "block"), sizes, tuple(parents))
    geo = {"region": 2, "district": 5, "block": 9}
    tables = []
    n_tables = int(rng.integers(2, 6))
    for t in range(n_tables):
        keys = [k for k in KEY_SIZES if rng.random() < 0.5]
        level = rng.integers(-1, 3)
        if level >= 0:
            keys.insert(int(rng.integers(0, len(keys) + 1)), hierarchy.levels[level])
        dims = tuple(KEY_SIZES.get(k) or geo[k] for k in keys)
        cells = int(np.prod(dims))
        values = rng.integers(-3, 30, cells)
        variance = Fraction(int(rng.integers(1, 40)), int(rng.integers(1, 4)))
        tables.append(NoisyCounts(f"t{t}", tuple(keys), dims, values, variance))
    return tables, hierarchy


def _geo_of(table, hierarchy, cell):
    """(level, position) of a cell's geography, -1 national (walks the parents one by one)."""
    for axis, key in enumerate(table.keys):
        if key in hierarchy.levels:
            return hierarchy.levels.index(key), cell[axis]
    return -1, 0


def _up(hierarchy, level, pos, to):
    while level > to:
        pos = int(hierarchy.parents[level - 1][pos])
        level -= 1
    return pos if to >= 0 else 0


def dense_kkt(tables, hierarchy):
    """Minimise sum (z-y)^2/v subject to every pair's common margin agreeing; all pairs,
    constraint rows built cell by cell, solved by least squares on the KKT system."""
    offsets = np.cumsum([0] + [t.values.size for t in tables])
    n = offsets[-1]
    rows = []
    for i, j in itertools.combinations(range(len(tables)), 2):
        a, b = tables[i], tables[j]
        la = _geo_of(a, hierarchy, [0] * len(a.keys))[0]
        lb = _geo_of(b, hierarchy, [0] * len(b.keys))[0]
        level = min(la, lb)
        shared = sorted(set(a.keys) & set(b.keys) - set(hierarchy.levels))
        block = {}
        for t_index, sign in ((i, 1.0), (j, -1.0)):
            t = tables[t_index]
            for flat, cell in enumerate(itertools.product(*[range(s) for s in t.sizes])):
                lv, pos = _geo_of(t, hierarchy, cell)
                shared_cells = [cell[t.keys.index(k)] for k in shared]
                key = (_up(hierarchy, lv, pos, level), *shared_cells)
                block.setdefault(key, np.zeros(n))[offsets[t_index] + flat] += sign
        rows.extend(block.values())
    C = np.array(rows).reshape(-1, n)
    v = np.concatenate([np.full(t.values.size, float(t.variance)) for t in tables])
    y = np.concatenate([t.values for t in tables]).astype(float)
    m = C.shape[0]
    kkt = np.block([[np.diag(1 / v), C.T], [C, np.zeros((m, m))]])
    rhs = np.concatenate([y / v, np.zeros(m)])
    sol = np.linalg.lstsq(kkt, rhs, rcond=None)[0]
    return np.split(sol[:n], offsets[1:-1]), C


@pytest.mark.parametrize("seed", range(12))
def test_wls_matches_dense_kkt(seed):
    tables, hierarchy = random_instance(seed)
    structures = validate_shapes(tables, hierarchy)
    result = solve_wls(
        structures,
        [t.values for t in tables],
        [t.variance for t in tables],
        _constraints(structures),
        hierarchy,
    )
    expected, C = dense_kkt(tables, hierarchy)
    for got, want, t in zip(result.estimates, expected, tables, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-6, err_msg=t.name)
    # Every pairwise constraint (not only the non-redundant ones solved) holds.
    assert np.max(np.abs(C @ np.concatenate(result.estimates)), initial=0) < 1e-6


@pytest.mark.parametrize("seed", range(40))
def test_random_structures_are_consistent_integers_or_refused(seed):
    tables, hierarchy = random_instance(seed)
    try:
        check_combinable(tables, hierarchy)
    except PostprocessError as exc:
        assert "cannot be made consistent exactly" in str(exc)
        return
    # make_consistent verifies every pairwise margin in integers before returning.
    result = make_consistent(tables, hierarchy)
    for t in tables:
        out = result.values[t.name]
        assert out.dtype == np.int64 and out.shape == t.values.shape and out.min() >= 0
    real = make_consistent(tables, hierarchy, integer=False)
    _, C = dense_kkt(tables, hierarchy)
    stacked = np.concatenate([real.values[t.name] for t in tables])
    assert stacked.min() >= 0
    assert np.max(np.abs(C @ stacked), initial=0) < 1e-6
    signed = make_consistent(tables, hierarchy, nonnegative=False)
    stacked = np.concatenate([signed.values[t.name] for t in tables])
    assert stacked.dtype == np.int64 and not np.any(C @ stacked)


def test_wls_beats_raw_on_average():
    """Consistency is a projection in the V^-1 metric: the weighted error never grows."""
    tables, hierarchy = random_instance(3)
    rng = np.random.default_rng(0)
    truth = [rng.integers(0, 20, t.values.size) for t in tables]
    noisy = [
        NoisyCounts(t.name, t.keys, t.sizes, tr + rng.integers(-5, 6, tr.size), t.variance)
        for t, tr in zip(tables, truth, strict=True)
    ]
    # The truth is consistent only if built from one population; project it first.
    consistent_truth, _ = dense_kkt(
        [
            NoisyCounts(t.name, t.keys, t.sizes, tr, t.variance)
            for t, tr in zip(tables, truth, strict=True)
        ],
        hierarchy,
    )
    result = make_consistent(noisy, hierarchy, nonnegative=False, integer=False)

    def weighted(est):
        return sum(
            float(np.sum((e - c) ** 2)) / float(t.variance)
            for e, c, t in zip(est, consistent_truth, tables, strict=True)
        )

    assert weighted([result.values[t.name] for t in tables]) <= weighted([t.values for t in noisy])


def _coupled_instances(count: int):
    """Random instances whose national tables are solved per block (:mod:`.coupled`)."""
    from dp_pipeline.postprocess.coupled import coupled_refusal, coupling_of
    from dp_pipeline.postprocess.plan import plan

    found, seed = [], 0
    while len(found) < count:
        tables, hierarchy = random_instance(1000 + seed)
        seed += 1
        try:
            p = plan(tables, hierarchy)
        except PostprocessError:
            continue
        if coupling_of(p, hierarchy) is not None and coupled_refusal(p, hierarchy) is None:
            found.append(1000 + seed - 1)
    return found


@pytest.mark.parametrize("seed", _coupled_instances(16))
def test_national_tables_per_block_match_the_dense_kkt(seed):
    tables, hierarchy = random_instance(seed)
    result = make_consistent(tables, hierarchy, nonnegative=False, integer=False)
    expected, C = dense_kkt(tables, hierarchy)
    for want, t in zip(expected, tables, strict=True):
        np.testing.assert_allclose(result.values[t.name], want, atol=1e-6, err_msg=t.name)
    stacked = np.concatenate([result.values[t.name] for t in tables])
    assert np.max(np.abs(C @ stacked), initial=0) < 1e-6
    signed = make_consistent(tables, hierarchy, nonnegative=False)
    assert not np.any(C @ np.concatenate([signed.values[t.name] for t in tables]))
