"""Spec tables of means, variances, standard deviations and sums of any granularity:
every rule of their value fields is refused at load time, naming the field and the rule."""

from __future__ import annotations

import copy
from decimal import Decimal
from fractions import Fraction

import pytest

from dp_pipeline.release.spec.load import parse_spec
from dp_pipeline.release.spec.model import SpecError

DELETE = object()


def document(*tables: dict) -> dict:
    return {
        "release": {"id": "r-1"},
        "population": {"name": "people", "cap": {"rho": 1}},
        "privacy_unit": {"column": "person_id"},
        "budget": {"rho": Decimal("0.1")},
        "domains": {"state": {"start": 1, "stop": 3}, "sex": ["F", "M"]},
        "tables": list(tables),
    }


MEAN = {
    "name": "mean_income",
    "statistic": "mean",
    "keys": ["state"],
    "value": "income",
    "lower": 0,
    "upper": 1000,
    "granularity": 10,
    "share": "1/4",
}
VAR = {
    "name": "age_var",
    "statistic": "var",
    "keys": ["sex"],
    "value": "age",
    "lower": 0,
    "upper": 100,
    "share": "1/4",
}
STD = dict(VAR, name="age_std", statistic="std", granularity="1/2")
SUM = {
    "name": "income_sum",
    "statistic": "sum",
    "keys": ["state"],
    "value": "income",
    "lower": Decimal("-2.5"),
    "upper": Decimal("7.5"),
    "granularity": "1/4",
    "share": "1/4",
}

CASES = [
    (0, "lower", DELETE, "tables[0].lower: required for a mean (values are clamped into "),
    (1, "upper", DELETE, "tables[1].upper: required for a var (values are clamped into "),
    (1, "lower", 100, "tables[1]: lower = 100 must be < upper = 100"),
    (2, "lower", 200, "tables[2]: lower = 200 must be < upper = 100"),
    (0, "granularity", 0, "tables[0].granularity = 0: must be > 0"),
    (3, "granularity", -1, "tables[3].granularity = -1: must be > 0"),
    (
        0,
        "upper",
        1005,
        "tables[0].upper = 1005: must be an integer multiple of granularity = 10 (values are "
        "rounded to the granularity grid",
    ),
    (
        3,
        "lower",
        Decimal("-2.6"),
        "tables[3].lower = -2.6: must be an integer multiple of granularity = 1/4",
    ),
    (3, "granularity", "1/3", "tables[3].upper = 7.5: must be an integer multiple of"),
    (1, "value", DELETE, "tables[1].value: required field is missing"),
    (1, "value", "sex", "tables[1].value = 'sex': the var's column cannot also be one of"),
    (0, "value", "person_id", "column 'person_id' is the privacy unit"),
    (
        1,
        "keys",
        ["region"],
        "tables[1].keys: column 'region' has no domain; declare it under [domains]",
    ),
    (1, "q", Decimal("0.5"), "tables[1].q = 0.5: only quantile and median tables take q"),
    (
        1,
        "upper",
        100_000,
        "tables[1]: lower = 0, upper = 100000 and granularity = 1: the squares of the centred "
        "values, ((upper - lower) / granularity)**2 is 10,000,000,000 units and the largest "
        "|bound| is 10,000,000,000 granularity units, above the limit",
    ),
    (
        0,
        "upper",
        2**31 * 10 + 10,
        "tables[0].upper = 21474836490: the largest |bound| is 2,147,483,649 granularity units, "
        "above the limit",
    ),
    (
        3,
        "max_per_cell",
        2**61,
        "tables[3].max_per_cell = 2305843009213693952 with |upper| / granularity = 30: "
        "max_per_cell x the largest |bound| is 69,175,290,276,410,818,560 granularity units, "
        "above the limit",
    ),
    (
        2,
        "max_per_cell",
        2**48,
        "tables[2]: lower = 0, upper = 100 and granularity = 1/2: the squares of the centred "
        "values, ((upper - lower) / granularity)**2 is 40,000 units and max_per_cell x the "
        "largest |bound|",
    ),
]


@pytest.mark.parametrize("index, field, value, message", CASES, ids=[c[3][:60] for c in CASES])
def test_value_table_rules_name_field_value_and_rule(index, field, value, message):
    raw = document(*(copy.deepcopy(t) for t in (MEAN, VAR, STD, SUM)))
    if value is DELETE:
        del raw["tables"][index][field]
    else:
        raw["tables"][index][field] = value
    with pytest.raises(SpecError) as info:
        parse_spec(raw)
    assert message in str(info.value), str(info.value)


def test_granularity_belongs_to_value_and_quantile_tables_only():
    count = {"name": "c", "keys": ["state"], "granularity": 2, "share": "1/4"}
    raw = document(copy.deepcopy(MEAN), copy.deepcopy(VAR), copy.deepcopy(STD), count)
    with pytest.raises(SpecError) as info:
        parse_spec(raw)
    assert (
        "tables[3].granularity = 2: only sum, mean, var, std, quantile and median tables take "
        "granularity"
    ) in str(info.value)


def test_value_tables_are_read_exactly():
    spec = parse_spec(document(MEAN, VAR, STD, SUM))
    mean, var, std, total = spec.tables
    assert (mean.lower, mean.upper, mean.granularity) == (0, 1000, Fraction(10))
    assert (var.granularity, std.granularity) == (Fraction(1), Fraction(1, 2))
    assert (total.lower, total.upper) == (Fraction(-5, 2), Fraction(15, 2))
    assert total.granularity == Fraction(1, 4)
    # Sensitivity in granularity units: the largest |bound| is 30 quarters.
    assert total.per_cell_bound == 30


def test_a_sum_of_granularity_one_keeps_its_identity_fields():
    """A sum written with granularity = 1 is the sum it was before granularities existed."""
    plain = dict(SUM, lower=0, upper=10)
    del plain["granularity"]
    explicit = dict(plain, granularity=1)
    first = parse_spec(document(MEAN, VAR, STD, plain)).tables[3]
    second = parse_spec(document(MEAN, VAR, STD, explicit)).tables[3]
    assert first == second and first.granularity is None
    assert isinstance(first.lower, int) and isinstance(first.upper, int)


def test_postprocessed_sums_refuse_a_granularity_naming_the_table():
    """The consistency step weighs sums by their noise variance in units of the value and
    publishes raw_value as integers: a sum noised in quarters is refused, before any data."""
    raw = document(
        {"name": "state_count", "keys": ["state"], "share": "1/2"},
        dict(SUM, share="1/2"),
    )
    raw["postprocess"] = {"consistent": True, "sums": True}
    with pytest.raises(SpecError) as info:
        parse_spec(raw)
    message = str(info.value)
    assert "tables[1].granularity = 1/4: post-processing combines the sum tables" in message
    assert "table 'income_sum' is noised in units of its granularity" in message
    assert "remove its granularity or set [postprocess] sums = false" in message


def test_means_and_variances_are_left_alone_by_postprocessing():
    """Only count (and sum) tables are combined; a mean or variance is published as noised."""
    raw = document({"name": "state_count", "keys": ["state"], "share": "1/2"}, MEAN, VAR)
    raw["tables"][1]["share"] = raw["tables"][2]["share"] = "1/4"
    raw["privacy_unit"]["max_cells_per_table"] = 1
    raw["privacy_unit"]["max_per_cell"] = 1
    raw["postprocess"] = {"consistent": True}
    spec = parse_spec(raw)
    assert spec.postprocess.tables == ("state_count",)
