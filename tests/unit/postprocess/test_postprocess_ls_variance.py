"""The least squares estimate's per-cell variance from public facts, against a dense solve."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dp_pipeline.postprocess import Hierarchy, TableShape, ls_variance
from dp_pipeline.postprocess.ls_variance import least_squares_variances, path_shapes
from dp_pipeline.postprocess.plan import plan
from dp_pipeline.postprocess.wls import constraint_system

# Three levels, subtrees of unequal shapes: state 0 has counties with 2, 1 and 1
# tracts, state 1 two counties of 3 tracts, state 2 two counties of 3 and 2.
HIERARCHY = Hierarchy(
    ("state", "county", "tract"),
    (3, 7, 15),
    (
        np.array([0, 0, 0, 1, 1, 2, 2]),
        np.array([0, 0, 1, 2, 3, 3, 3, 4, 4, 4, 5, 5, 5, 6, 6]),
    ),
)
TABLES = [
    TableShape("tract_age", ("tract", "age"), (15, 4)),
    TableShape("county_sex_age", ("county", "sex", "age"), (7, 2, 4)),
    TableShape("state_sex", ("state", "sex"), (3, 2)),
    TableShape("county", ("county",), (7,)),
]
VARIANCES = [Fraction(3), Fraction(7, 2), Fraction(12), Fraction(20)]


def dense_variances(tables, hierarchy, variances) -> dict[str, np.ndarray]:
    """diag(P V), P = I - V C^T (C V C^T)^+ C: every cell's variance, densely."""
    p = plan(tables, hierarchy)
    weights = [float(v) for v in variances]
    system = constraint_system(p.structures, weights, p.constraints, hierarchy)
    c, v = system.C.toarray(), np.diag(system.v)
    projection = np.eye(v.shape[0]) - v @ c.T @ np.linalg.pinv(c @ v @ c.T) @ c
    diagonal = np.diag(projection @ v)
    bounds = np.cumsum([0, *(s.cells for s in p.structures)])
    return {s.name: diagonal[bounds[t] : bounds[t + 1]] for t, s in enumerate(p.structures)}


def test_every_table_gets_its_largest_cell_variance_exactly():
    dense = dense_variances(TABLES, HIERARCHY, VARIANCES)
    solved = least_squares_variances(TABLES, HIERARCHY, VARIANCES)
    for name, cells in dense.items():
        assert solved[name] == pytest.approx(cells.max(), rel=1e-9)
        # The least squares never has more variance than the noise.
        assert solved[name] < float(VARIANCES[[t.name for t in TABLES].index(name)])


def test_without_a_hierarchy_one_solve_per_table_is_exact():
    tables = [
        TableShape("a", ("x", "y"), (3, 4)),
        TableShape("b", ("x",), (3,)),
        TableShape("c", ("y",), (4,)),
    ]
    variances = [Fraction(2), Fraction(3), Fraction(5)]
    dense = dense_variances(tables, None, variances)
    # Permuting a key's values keeps the constraints: every cell of a table is alike.
    assert all(np.ptp(cells) < 1e-12 for cells in dense.values())
    solved = least_squares_variances(tables, None, variances)
    assert solved == pytest.approx({n: cells.max() for n, cells in dense.items()}, rel=1e-9)


def test_with_a_national_table_the_figures_are_upper_bounds():
    tables = [*TABLES, TableShape("national_sex", ("sex",), (2,))]
    variances = [*VARIANCES, Fraction(5)]
    dense = dense_variances(tables, HIERARCHY, variances)
    solved = least_squares_variances(tables, HIERARCHY, variances)
    for name, cells in dense.items():
        assert solved[name] >= cells.max() - 1e-9
    assert solved["national_sex"] == 5.0  # its noise variance
    # Without the national table: the geography tables' exact figures.
    alone = least_squares_variances(TABLES, HIERARCHY, VARIANCES)
    assert all(solved[t.name] == alone[t.name] for t in TABLES)


def test_positions_share_a_path_shape_exactly_when_their_subtrees_do_level_by_level():
    states, counties, tracts = path_shapes(HIERARCHY)
    assert len(set(states.tolist())) == 3  # (2, 1, 1), (3, 3), (3, 2) tracts per county
    # County 1 and 2 (one tract each, in state 0) alike; counties 3 and 4 (state 1) alike.
    assert counties[1] == counties[2] and counties[3] == counties[4]
    assert counties[0] != counties[1] and counties[5] != counties[6]
    # State 2's county of 3 tracts is not state 1's (a different state shape).
    assert counties[5] != counties[3]
    assert tracts[0] == tracts[1] and tracts[2] == tracts[3] and tracts[4] == tracts[8]
    assert tracts[2] != tracts[0] and tracts[10] != tracts[4]


def test_a_level_of_too_many_shapes_gets_its_noise_variance(monkeypatch):
    monkeypatch.setattr(ls_variance, "MAX_PATH_SHAPES", 3)  # 5 path shapes of county and tract
    solved = least_squares_variances(TABLES, HIERARCHY, VARIANCES)
    exact = dense_variances(TABLES, HIERARCHY, VARIANCES)
    assert solved["tract_age"] == 3.0 and solved["county_sex_age"] == 3.5
    assert solved["county"] == 20.0
    assert solved["state_sex"] == pytest.approx(exact["state_sex"].max(), rel=1e-9)


def test_two_levels_solve_on_the_orbits_exactly():
    # States of 3, 1 and 2 counties; county and state tables sharing keys or not.
    hierarchy = Hierarchy(("state", "county"), (3, 6), (np.array([0, 0, 0, 1, 2, 2]),))
    tables = [
        TableShape("county_age_sex", ("county", "age", "sex"), (6, 4, 2)),
        TableShape("state_age_sex", ("state", "age", "sex"), (3, 4, 2)),
        TableShape("state_race", ("state", "race"), (3, 3)),
        TableShape("county_size", ("county", "size"), (6, 3)),
        TableShape("age_by_sex", ("sex", "age"), (2, 4)),  # keys in another order
    ]
    variances = [Fraction(37, 2), Fraction(74), Fraction(60), Fraction(90), Fraction(5)]
    geo, national = tables[:4], tables[4:]
    dense = dense_variances(geo, hierarchy, variances[:4])
    solved = least_squares_variances(geo, hierarchy, variances[:4])
    for name, cells in dense.items():
        assert solved[name] == pytest.approx(cells.max(), rel=1e-9)
    # Without a hierarchy (the state an ordinary key), on the orbits too.
    pair, weights = [tables[1], *national], [variances[1], variances[4]]
    dense = dense_variances(pair, None, weights)
    solved = least_squares_variances(pair, None, weights)
    assert solved == pytest.approx({n: cells.max() for n, cells in dense.items()}, rel=1e-9)


def test_a_skewed_geography_solves_exactly_on_tall_constraint_systems():
    # A dominant state of many counties (a tall constraint matrix over few orbits),
    # single-county and empty states, a near-exact table beside a very noisy one: the
    # null spaces from the orbits' Gram matrices give the dense projection's variances.
    from tests.support.postprocess_cases import SKEWED_AGES, SKEWED_TABLES, skewed_geography

    hierarchy, _ = skewed_geography(states=8, empty=1, counties=120, seed=3)
    sizes = {"county": 120, "state": 8, "age": SKEWED_AGES, "sex": 2}
    tables = [
        TableShape(n, keys, tuple(sizes[k] for k in keys)) for n, (keys, _) in SKEWED_TABLES.items()
    ]
    variances = [sigma2 for _, sigma2 in SKEWED_TABLES.values()]
    dense = dense_variances(tables, hierarchy, variances)
    solved = least_squares_variances(tables, hierarchy, variances)
    for name, cells in dense.items():
        assert solved[name] == pytest.approx(cells.max(), rel=1e-9), name
