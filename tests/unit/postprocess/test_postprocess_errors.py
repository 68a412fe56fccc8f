"""Bad input to the consistency step: each error names the table or field, value and rule."""

from __future__ import annotations

import re
from fractions import Fraction

import numpy as np
import pytest

from dp_pipeline.postprocess import (
    Hierarchy,
    NoisyCounts,
    PostprocessError,
    TableShape,
    check_combinable,
    make_consistent,
)

PARENTS = np.array([0, 0, 1, 1, 1])
H = Hierarchy(("state", "county"), (2, 5), (PARENTS,))


def counts(name, keys, sizes, variance=Fraction(4)):
    return NoisyCounts(name, keys, sizes, np.ones(int(np.prod(sizes)), np.int64), variance)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"levels": (), "sizes": (), "parents": ()}, "levels is empty"),
        ({"levels": ("s", "s"), "sizes": (2, 2), "parents": (np.array([0, 1]),)}, "repeat"),
        ({"levels": ("s", "c"), "sizes": (2,), "parents": ()}, "1 sizes for 2 levels"),
        ({"levels": ("s",), "sizes": (0,), "parents": ()}, "level 's' has size 0"),
        ({"levels": ("s", "c"), "sizes": (2, 3), "parents": ()}, "0 parent arrays"),
        (
            {"levels": ("s", "c"), "sizes": (2, 3), "parents": (np.array([0, 1]),)},
            "parents of level 'c' has shape (2,); it must list one parent per c position (3)",
        ),
        (
            {"levels": ("s", "c"), "sizes": (2, 3), "parents": (np.array([0.0, 1.0, 1.0]),)},
            "dtype float64",
        ),
        (
            {"levels": ("s", "c"), "sizes": (2, 3), "parents": (np.array([0, 1, 2]),)},
            "c position 2 has parent 2, outside the s domain 0..1",
        ),
        (
            {"levels": ("s", "c"), "sizes": (2, 3), "parents": (np.array([0, -1, 0]),)},
            "c position 1 has parent -1",
        ),
        (
            {"levels": ("s", "c"), "sizes": (3, 3), "parents": (np.array([0, 0, 2]),)},
            "s position 1 has no c",
        ),
    ],
)
def test_bad_hierarchy(kwargs, message):
    with pytest.raises(PostprocessError, match="hierarchy") as info:
        Hierarchy(**kwargs)
    assert message in str(info.value)


@pytest.mark.parametrize(
    "tables, message",
    [
        ([], "no table given"),
        (
            [TableShape("a", ("state",), (2,)), TableShape("a", ("county",), (5,))],
            "table 'a': the name is used twice",
        ),
        ([TableShape("a", ("state", "age"), (2,))], "table 'a': 2 keys ['state', 'age'] but 1"),
        ([TableShape("a", ("age", "age"), (2, 2))], "repeat a key"),
        ([TableShape("a", ("age",), (0,))], "key 'age' has size 0"),
        (
            [TableShape("a", ("state", "age"), (2, 3)), TableShape("b", ("age",), (4,))],
            "table 'b': key 'age' has domain size 4 but table 'a' gives it 3",
        ),
        (
            [TableShape("a", ("state", "county"), (2, 5))],
            "table 'a': keys ['state', 'county'] are all hierarchy levels; "
            "a table has at most one hierarchy key",
        ),
        (
            [TableShape("a", ("county",), (6,))],
            "table 'a': hierarchy key 'county' has size 6 but the hierarchy gives it 5",
        ),
        (
            [
                TableShape("sa", ("state", "age"), (2, 3)),
                TableShape("sx", ("state", "sex"), (2, 2)),
                TableShape("cr", ("county", "race"), (5, 2)),
                TableShape("c_age_sex_race", ("county", "age", "sex", "race"), (5, 3, 2, 2)),
            ],
            "table 'c_age_sex_race' cannot be made consistent exactly: its cells would have "
            "to match 3 fixed margins that are not nested (state x age (from table 'sa'); "
            "state x sex (from table 'sx'); county x race (from table 'cr')); at most two "
            "can be matched exactly",
        ),
    ],
)
def test_bad_shapes_are_refused_by_check_combinable(tables, message):
    with pytest.raises(PostprocessError) as info:
        check_combinable(tables, H)
    assert message in str(info.value)


def test_good_shapes_pass_check_combinable():
    check_combinable(
        [
            TableShape("cas", ("county", "age", "sex"), (5, 3, 2)),
            TableShape("sas", ("state", "age", "sex"), (2, 3, 2)),
            TableShape("sr", ("state", "race"), (2, 4)),
            TableShape("national_age", ("age",), (3,)),
        ],
        H,
    )
    check_combinable([TableShape("x", ("age", "sex"), (3, 2))], None)


@pytest.mark.parametrize(
    "table, message",
    [
        (
            NoisyCounts("a", ("state", "age"), (2, 3), np.ones(5, np.int64), Fraction(1)),
            "table 'a': 5 values (shape (5,)) for 6 cells (2 x 3)",
        ),
        (
            NoisyCounts("a", ("state",), (2,), np.ones((2, 1), np.int64), Fraction(1)),
            "table 'a': 2 values (shape (2, 1))",
        ),
        (
            NoisyCounts("a", ("state",), (2,), np.array([1.0, 2.0]), Fraction(1)),
            "table 'a': values have dtype float64; noisy counts are integers",
        ),
        (
            NoisyCounts("a", ("state",), (2,), np.array([1, 2]), 0.5),
            "table 'a': variance 0.5 is not an exact rational",
        ),
        (
            NoisyCounts("a", ("state",), (2,), np.array([1, 2]), Fraction(0)),
            "table 'a': variance 0 must be > 0",
        ),
    ],
)
def test_bad_values_are_refused(table, message):
    with pytest.raises(PostprocessError) as info:
        make_consistent([table, counts("b", ("county",), (5,))], H)
    assert message in str(info.value)


def test_non_combinable_tables_are_refused_before_any_work():
    tables = [
        counts("sa", ("state", "age"), (2, 3)),
        counts("sx", ("state", "sex"), (2, 2)),
        counts("cr", ("county", "race"), (5, 2)),
        counts("c_age_sex_race", ("county", "age", "sex", "race"), (5, 3, 2, 2)),
    ]
    with pytest.raises(PostprocessError, match="'c_age_sex_race' cannot be made consistent"):
        make_consistent(tables, H)


def test_hierarchy_key_without_hierarchy_is_an_ordinary_key():
    # With no hierarchy, 'state' is a plain key: two state tables agree on state x (shared).
    a = NoisyCounts("a", ("state",), (2,), np.array([10, 20]), Fraction(1))
    b = NoisyCounts("b", ("state", "sex"), (2, 2), np.array([4, 4, 9, 9]), Fraction(1))
    result = make_consistent([a, b], None)
    np.testing.assert_array_equal(result.values["a"], result.values["b"].reshape(2, 2).sum(1))


@pytest.mark.parametrize("national", [False, True])
def test_variances_too_far_apart_are_refused_before_any_work(national):
    from dp_pipeline.postprocess.group_solver import group_solver
    from dp_pipeline.postprocess.inputs import MAX_COUPLED_VARIANCE_RATIO, MAX_VARIANCE_RATIO

    limit = MAX_COUPLED_VARIANCE_RATIO if national else MAX_VARIANCE_RATIO
    county = counts("county_sex", ("county", "sex"), (5, 2), Fraction(1))
    state = counts("state_sex", ("state", "sex"), (2, 2), Fraction(limit))
    tables = [county, state] + ([counts("sex", ("sex",), (2,), Fraction(2))] if national else [])
    make_consistent(tables, H)  # at the limit: solved
    state = counts("state_sex", ("state", "sex"), (2, 2), Fraction(limit) + 1)
    tables = [county, state, *tables[2:]]
    with pytest.raises(
        PostprocessError, match=re.escape(f"is {limit + 1:.3g} times that of table 'county_sex'")
    ):
        make_consistent(tables, H)
    with pytest.raises(PostprocessError, match=f"accurate up to a ratio of {limit:,}"):
        group_solver(tables, H)
