"""var and std: the estimator's exact aggregates, their sensitivities against brute force, the
accountant's three events, bad input, and the same release on every Python surface."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import dp_pipeline  # noqa: F401  (registers df.dp)
from dp_pipeline import (
    Budget,
    DiscreteGaussian,
    DPTypeError,
    DPValueError,
    MasterKey,
    PrivacyAccountant,
    Session,
)
from dp_pipeline.accounting import margin_of_error
from dp_pipeline.engines.backend import aggregate
from dp_pipeline.engines.variance import run_variance, with_variance_columns
from dp_pipeline.query.variance import VarianceSpec, variance_columns
from dp_pipeline.session.plan import query_table, session_digest

KEY = MasterKey.from_hex("38" * 32)
LABELS = dict(key=KEY, release_id="r", table="t")
SEX = dict(by="sex", domains={"sex": ["F", "M"]})
# Noise this small is 0 except with probability about 2·e^-50 per cell.
QUIET = DiscreteGaussian(Fraction(1, 100))


def people(n: int = 400, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)  # test data only
    return pd.DataFrame(
        {
            "person_id": rng.integers(0, n // 2, n),
            "sex": rng.choice(["F", "M"], n),
            "age": rng.integers(-20, 130, n),
            "height": rng.normal(170, 15, n),
        }
    )


def true_vectors(df: pd.DataFrame, spec: VarianceSpec) -> dict[str, np.ndarray]:
    """count, Σe and Σe² of every cell, before noise (the engines' own aggregates)."""
    centered, squares = aggregate(with_variance_columns(df, spec), [spec.centered, spec.squares])
    return {"count": centered.count, "sum": centered.sum, "squares": squares.sum}


def spec_of(statistic: str = "var", **arguments) -> VarianceSpec:
    parameters = {"bounds": (0, 100), **SEX, "noise": QUIET, "privacy_unit": None, **LABELS}
    return VarianceSpec.build(statistic, "age", **{**parameters, **arguments})


@pytest.mark.parametrize(("bounds", "granularity"), [((0, 100), 1), ((-7, 10), 1), ((0, 9), 3)])
def test_the_exact_aggregates_give_numpy_s_population_variance_of_the_clamped_values(
    bounds, granularity
):
    df = people()
    spec = spec_of(bounds=bounds, granularity=granularity)
    true = true_vectors(df, spec)
    released = variance_columns(
        spec, {"count": true["count"], "sum": true["sum"]}, {"sum": true["squares"]}
    )
    lower, upper = bounds
    for cell, sex in enumerate(["F", "M"]):
        values = df.loc[df.sex == sex, "age"].clip(lower, upper).to_numpy(dtype=float)
        # The centred values are rounded to granularity/2 around the midpoint.
        centre = (lower + upper) / 2
        step = granularity / 2
        on_grid = centre + np.rint((values - centre) / step) * step
        assert true["count"][cell] == values.size
        assert released["var"][cell] == pytest.approx(np.var(on_grid), rel=1e-12)
        if granularity == 1 and (lower + upper) % 2 == 0:
            assert released["var"][cell] == pytest.approx(np.var(values), rel=1e-12)


def test_with_negligible_noise_var_and_std_are_numpy_s_and_the_count_is_exact():
    df = people()
    var = df.dp.var("age", bounds=(0, 100), noise=QUIET, privacy_unit=None, **SEX, **LABELS)
    std = df.dp.std("age", bounds=(0, 100), noise=QUIET, privacy_unit=None, **SEX, **LABELS)
    assert var.columns.tolist() == ["sex", "count", "var"]
    assert std.columns.tolist() == ["sex", "count", "std"]
    expected = df.assign(age=df.age.clip(0, 100)).groupby("sex").age.var(ddof=0)
    assert var["var"].tolist() == pytest.approx(expected.tolist(), rel=1e-12)
    assert std["std"].tolist() == pytest.approx(np.sqrt(expected).tolist(), rel=1e-12)
    assert var["count"].tolist() == df.groupby("sex").size().tolist()


def test_the_released_variance_is_clamped_into_zero_and_the_half_range_squared():
    spec = spec_of(bounds=(0, 10))
    # Noisy aggregates that would give a negative and a too-large variance.
    out = variance_columns(
        spec,
        {"count": np.array([10, 1]), "sum": np.array([100, 0])},
        {"sum": np.array([0, 10_000])},
    )
    assert out["var"].tolist() == [0.0, 25.0]  # ((10 - 0) / 2)² = 25


def _neighbour_shifts(first: pd.DataFrame, second: pd.DataFrame, spec: VarianceSpec):
    a, b = true_vectors(first, spec), true_vectors(second, spec)
    return {name: np.abs(a[name] - b[name]) for name in a}


def _declared(spec: VarianceSpec) -> dict[str, tuple[int, ...]]:
    shifts = {name: shift for name, _, shift in spec.measures()}
    return {
        "count": shifts["count"],
        "sum": shifts["centered_sum"],
        "squares": shifts["centered_sum_of_squares"],
    }


@pytest.mark.parametrize("neighbouring", ["add_remove", "replace"])
def test_the_sensitivities_are_the_brute_force_maxima_over_small_neighbours(neighbouring):
    """Every dataset of at most 3 rows (one cell, each row a unit) with values around the
    bounds (0, 4), against each of its neighbours: the largest change of each aggregate
    is at most the declared sensitivity, and the sums reach it."""
    spec = spec_of(bounds=(0, 4), neighbouring=neighbouring, by="sex", domains={"sex": ["F"]})
    declared = _declared(spec)
    grid = [-1, 0, 1, 2, 3, 4, 6]
    largest = {"count": 0, "sum": 0, "squares": 0}
    for size in range(1, 3 + 1):
        for values in itertools.product(grid, repeat=size):
            base = pd.DataFrame({"sex": ["F"] * size, "age": list(values)})
            if neighbouring == "add_remove":
                others = [base.iloc[1:]]
            else:
                others = [base.assign(age=[v, *values[1:]]) for v in grid if v != values[0]]
            for other in others:
                for name, shift in _neighbour_shifts(base, other, spec).items():
                    largest[name] = max(largest[name], int(shift.max()))
    width = 4  # (upper - lower) / granularity
    assert declared["sum"] == ((width,) if neighbouring == "add_remove" else (2 * width,))
    assert declared["squares"] == (width * width,)
    assert largest["sum"] == declared["sum"][0]
    assert largest["squares"] == declared["squares"][0]
    assert largest["count"] <= declared["count"][0]


@pytest.mark.parametrize("neighbouring", ["add_remove", "replace"])
def test_a_unit_of_several_rows_moves_each_aggregate_at_most_its_sensitivity(neighbouring):
    spec = spec_of(
        bounds=(0, 10),
        privacy_unit="person_id",
        max_cells=1,
        max_per_cell=2,
        neighbouring=neighbouring,
    )
    declared = _declared(spec)
    rng = np.random.default_rng(1)  # test data only
    for trial in range(30):
        df = people(12, seed=trial).assign(person_id=rng.integers(0, 4, 12))
        unit = int(df.person_id.iloc[0])
        if neighbouring == "add_remove":
            other = df[df.person_id != unit]
        else:
            rows = int((df.person_id == unit).sum())
            swapped = pd.DataFrame(
                {
                    "person_id": [unit] * rows,
                    "sex": rng.choice(["F", "M"], rows),
                    "age": rng.integers(-5, 15, rows),
                    "height": 0.0,
                }
            )
            other = pd.concat([df[df.person_id != unit], swapped], ignore_index=True)
        for name, shift in _neighbour_shifts(df, other, spec).items():
            moved = np.sort(shift[shift > 0])[::-1]
            assert moved.size <= len(declared[name]), name
            assert all(m <= d for m, d in zip(moved, declared[name], strict=False)), name


def test_the_charge_is_the_three_events_composed_and_a_budget_is_split_in_thirds():
    df = people()
    result = df.dp.var("age", bounds=(0, 100), epsilon=1, privacy_unit=None, **SEX, **LABELS)
    info = result.attrs["dp"]
    assert [m.value for m in info.measures] == [
        "centered_sum",
        "count",
        "centered_sum_of_squares",
    ]
    accountant = PrivacyAccountant()
    for event in info.events:
        accountant.add_event(event)
    assert len(info.events) == 3
    assert info.rho == accountant.rho() == sum(m.rho for m in info.measures)
    assert info.epsilon <= 1
    assert info.budget_split == {m.value: Fraction(1, 3) for m in info.measures}
    # Centring: the sums' shifts are half the range and its square, in granularity units.
    assert [m.sensitivity for m in info.measures] == [(100,), (1,), (10_000,)]
    assert set(result.dp.margin_of_error) == {"centered_sum", "count", "centered_sum_of_squares"}


def test_margins_are_in_value_units():
    df = people()
    result = df.dp.var(
        "age",
        bounds=(0, 100),
        granularity=2,
        noise=DiscreteGaussian(8),
        privacy_unit=None,
        **SEX,
        **LABELS,
    )
    unit = margin_of_error(DiscreteGaussian(8), Fraction(95, 100))
    margins = result.dp.margin_of_error
    assert margins["count"] == unit
    assert margins["centered_sum"] == unit  # units of granularity/2 = 1
    assert margins["centered_sum_of_squares"] == unit
    # Granularity 1: a centred unit is 1/2 of the value, a squared one 1/4 of its square.
    result = df.dp.var(
        "age", bounds=(0, 100), noise=DiscreteGaussian(8), privacy_unit=None, **SEX, **LABELS
    )
    margins = result.dp.margin_of_error
    assert margins["centered_sum"] == Fraction(unit, 2)
    assert margins["centered_sum_of_squares"] == Fraction(unit, 4)


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"bounds": (100, 0)}, DPValueError, "bounds: lower 100 is above upper 0"),
        ({"bounds": (5, 5)}, DPValueError, "bounds (5, 5): lower equals upper"),
        ({"bounds": None}, DPValueError, "var of column 'age' needs bounds=(lower, upper)"),
        (
            {"bounds": (0, 100_000)},
            DPValueError,
            "bounds (0, 100000) with granularity 1: the squares of the centred values",
        ),
        ({"count_noise": QUIET, "epsilon": 1, "noise": None}, DPValueError, "count_noise="),
    ],
)
def test_bad_bounds_and_budgets_are_refused_naming_the_parameter(arguments, error, message):
    with pytest.raises(error) as caught:
        people().dp.var(
            "age",
            **{**dict(bounds=(0, 100), noise=QUIET), **arguments},
            privacy_unit=None,
            **SEX,
            **LABELS,
        )
    assert message in str(caught.value)


def test_on_invalid_error_names_the_value_column_the_user_gave():
    df = people().assign(age=lambda frame: frame.age.where(frame.age > 0))  # nulls
    with pytest.raises(DPValueError) as caught:
        df.dp.var(
            "age",
            bounds=(0, 100),
            noise=QUIET,
            privacy_unit=None,
            on_invalid="error",
            **SEX,
            **LABELS,
        )
    assert str(caught.value).startswith("column 'age': some rows hold null, NaN or infinite")


def test_a_call_without_bounds_names_the_missing_parameter():
    with pytest.raises(TypeError, match="bounds"):
        people().dp.std("age", noise=QUIET, privacy_unit=None, **SEX, **LABELS)


def test_a_non_numeric_or_missing_value_column_is_refused_naming_it():
    df = people().assign(name="x")
    with pytest.raises(
        DPTypeError, match=r"value column 'name' has dtype (object|str); var needs a numeric"
    ):
        df.dp.var("name", bounds=(0, 1), noise=QUIET, privacy_unit=None, **SEX, **LABELS)
    with pytest.raises(DPValueError, match="value column 'weight' is not in the DataFrame"):
        df.dp.var("weight", bounds=(0, 1), noise=QUIET, privacy_unit=None, **SEX, **LABELS)
    with pytest.raises(DPValueError, match="cannot be a key or privacy unit column"):
        df.dp.var("sex", bounds=(0, 1), noise=QUIET, privacy_unit=None, **SEX, **LABELS)


def test_session_var_is_the_direct_call_in_the_session_s_labels_and_charges_three_events(
    tmp_path,
):
    df = people()
    s = Session(
        key=KEY,
        population="people",
        privacy_unit="person_id",
        budget=Budget(epsilon=2, delta=Fraction(1, 10**6)),
        cap=Budget(epsilon=2, delta=Fraction(1, 10**6)),
        ledger=tmp_path / "ledger.sqlite",
        release_id="nb",
    )
    cost = s.cost.std("height", bounds=(100, 250), granularity="1/2", **SEX, rho=Fraction(1, 10))
    assert len(cost.info.events) == 3
    released = s.std(df, "height", bounds=(100, 250), granularity="1/2", **SEX, rho=Fraction(1, 10))
    salt = {"ledger": s.ledger.meta("ledger_id")}
    direct = run_variance(
        df,
        VarianceSpec.build(
            "std",
            "height",
            bounds=(100, 250),
            granularity="1/2",
            **SEX,
            rho=Fraction(1, 10),
            privacy_unit="person_id",
            key=KEY,
            release_id="nb",
            table=query_table(0),
            release_digest=session_digest("people", "nb", salt),
        ),
    )
    pd.testing.assert_frame_equal(released, direct)
    assert released.attrs["dp"].rho == cost.info.rho == Fraction(1, 10)
    (record,) = s.queries
    assert (record.statistic, record.state, len(record.events)) == ("std", "committed", 3)
    assert math.isfinite(released["std"].iloc[0])
