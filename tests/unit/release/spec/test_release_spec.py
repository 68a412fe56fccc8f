"""Release specs: the shipped specs load, and every validation rule names field, value and rule."""

from __future__ import annotations

import copy
import re
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from dp_pipeline.release.spec.load import load_spec, parse_spec
from dp_pipeline.release.spec.model import SpecError

ROOT = Path(__file__).resolve().parents[4]


def base_document() -> dict:
    return {
        "release": {"id": "r-1", "noise_partitions": 4},
        "population": {"name": "people", "cap": {"rho": 1}},
        "privacy_unit": {"column": "person_id"},
        "budget": {"epsilon": Decimal("1"), "delta": Decimal("1e-9")},
        "domains": {"age": {"start": 0, "stop": 9}, "sex": ["F", "M"]},
        "tables": [
            {"name": "age_sex", "keys": ["age", "sex"], "share": "3/4"},
            {
                "name": "income",
                "keys": ["sex"],
                "statistic": "sum",
                "value": "income",
                "lower": 0,
                "upper": 100,
                "share": Decimal("0.25"),
            },
        ],
    }


def test_shipped_census_demo_has_six_tables_and_a_700k_cell_table():
    spec = load_spec(ROOT / "conf" / "census_demo.toml")
    assert len(spec.tables) == 6
    big = spec.table("county_age_sex")
    assert big.keys == ("county", "age", "sex")
    assert big.cells == 3143 * 116 * 2
    assert sum(t.share for t in spec.tables) == 1
    # Decimals in TOML stay exact: 1e-10 is exactly 1/10**10, not a binary float.
    assert spec.budget.delta == Fraction(1, 10**10)
    assert spec.cap.epsilon == 10


def test_shipped_monthly_example_loads():
    spec = load_spec(ROOT / "conf" / "monthly_example.toml")
    assert spec.budget.rho == Fraction(1, 100)
    assert (spec.cap.epsilon, spec.cap.delta) == (Fraction(29, 10), Fraction(1, 10**9))
    assert spec.with_release_id("labour-2026-07").release_id == "labour-2026-07"


def test_defaults():
    spec = parse_spec(base_document())
    assert spec.noise == "discrete_gaussian"
    assert spec.neighbouring == "add_remove"
    assert spec.engine == "spark" and spec.master == "local[2]"
    assert spec.output_dir == "out" and spec.input_path == ""
    age_sex = spec.table("age_sex")
    assert (age_sex.statistic, age_sex.max_cells, age_sex.max_per_cell) == ("count", 1, 1)
    assert age_sex.cells == 20
    assert spec.table("income").per_cell_bound == 100
    assert spec.table("income").share == Fraction(1, 4)


def mutate(path: str, value):
    """A copy of the base document with the dotted ``path`` set (``DELETE`` removes it)."""
    document = base_document()
    *parents, last = path.split(".")
    node = document
    for part in parents:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    if value is DELETE:
        del node[int(last) if last.isdigit() else last]
    elif last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return document


DELETE = object()

CASES = [
    ("unknown.x", 1, "unknown: unknown field; top-level sections are"),
    ("release.colour", "red", "release.colour: unknown field; allowed fields are"),
    ("tables.0.shar", "1/2", "tables[0].shar: unknown field"),
    ("release.id", DELETE, "release.id: required field is missing"),
    ("release.id", "a b/c", "release.id = 'a b/c': must be 1-128 letters"),
    ("release.noise", "gaussian", "release.noise = 'gaussian': must be one of discrete_gaussian"),
    ("release.neighbouring", "swap", "release.neighbouring = 'swap': must be one of add_remove"),
    ("release.noise_partitions", 0, "release.noise_partitions = 0: must be between 1 and 4096"),
    ("release.noise_partitions", Decimal("2.5"), "noise_partitions = 2.5: must be an integer"),
    ("budget.epsilon", Decimal("-1"), "budget.epsilon = -1: must be > 0"),
    ("budget.epsilon", 0, "budget.epsilon = 0: must be > 0"),
    ("budget.delta", Decimal("1.5"), "budget.delta = 1.5: must be 0 or lie in [1e-100, 1)"),
    ("budget.rho", "1/2", "budget: give rho, or epsilon with delta, not both"),
    ("budget.epsilon", "one", "budget.epsilon = 'one': budget.epsilon: cannot read 'one'"),
    ("population.cap", {"rho": -2}, "population.cap.rho = -2: must be > 0"),
    ("population.cap", {"epsilon": 1, "x": 1}, "population.cap.x: unknown field"),
    ("population.cap", DELETE, "population.cap: required field is missing"),
    ("population.name", DELETE, "population.name: required field is missing"),
    ("privacy_unit.max_per_cell", 0, "privacy_unit.max_per_cell = 0: must be >= 1"),
    ("privacy_unit.column", "", "privacy_unit.column = '': must not be empty"),
    ("privacy_unit.column", DELETE, "privacy_unit.column: required (the column identifying"),
    ("privacy_unit.each_row", True, "give column (rows of one unit share it) or each_row"),
    ("privacy_unit.each_row", "yes", "privacy_unit.each_row = 'yes': must be true or false"),
    ("domains.age", [], "domains.age = []: empty domain"),
    ("domains.age", {"start": 5, "stop": 4}, "empty domain (stop 4 < start 5)"),
    ("domains.sex", ["F", "M", "F"], "domains.sex: value(s) ['F'] appear more than once"),
    ("domains.sex", ["F", 1], "values must be all integers or all strings"),
    ("domains.sex", "FM", "domains.sex = 'FM': a domain is a list of values"),
    ("tables.1.name", "age_sex", "tables[1].name = 'age_sex': duplicated table name"),
    ("tables.0.share", "7/10", "shares sum to 19/20 (7/10 + 1/4)"),
    ("tables.0.share", Decimal("1.5"), "tables[0].share = 1.5: must lie between 1e-6 and 1"),
    ("tables.0.share", DELETE, "tables ['age_sex']: share is missing"),
    ("tables.0.keys", [], "tables[0].keys = []: must be a non-empty list of column names"),
    ("tables.0.keys", ["age", "age"], "a key column appears twice"),
    ("tables.0.keys", ["county"], "column 'county' has no domain"),
    (
        "tables.0.statistic",
        "variance",
        "tables[0].statistic = 'variance': must be one of count, sum",
    ),
    ("tables.1.upper", DELETE, "tables[1].upper: required for a sum"),
    ("tables.1.lower", Decimal("0.5"), "tables[1].lower = 0.5: must be an integer"),
    ("tables.1.lower", 100, "tables[1]: lower = 100 must be < upper = 100"),
    ("tables.1.value", DELETE, "tables[1].value: required field is missing"),
    (
        "tables.0.upper",
        3,
        "tables[0].upper = 3: only sum, mean, var, std, quantile and median tables take upper",
    ),
    ("tables.0.max_cells", 21, "tables[0].max_cells = 21: larger than the table's 20 cells"),
    ("tables.0.sigma2", 4, "tables[0]: give share or sigma2, not both"),
    ("tables", [], "tables: a release needs at least one [[tables]] entry"),
    ("release.max_cells", 10, "tables[0]: 20 cells exceed release.max_cells = 10"),
    ("input.synthetic_persons", 0, "input.synthetic_persons = 0: must be between 1 and"),
    ("input.format", "xlsx", "input.format = 'xlsx': must be one of parquet, csv"),
    ("input.on_invalid", "skip", "input.on_invalid = 'skip': must be one of drop, error"),
    ("run.engine", "dask", "run.engine = 'dask': must be one of spark, pandas"),
]


@pytest.mark.parametrize("path, value, message", CASES, ids=[c[0] + "/" + c[2] for c in CASES])
def test_validation_error_names_field_value_and_rule(path, value, message):
    with pytest.raises(SpecError) as info:
        parse_spec(mutate(path, value))
    assert message in str(info.value), str(info.value)


def test_each_row_is_a_unit_without_a_column_and_without_bounds():
    document = base_document()
    document["privacy_unit"] = {"each_row": True}
    spec = parse_spec(document)
    assert spec.privacy_unit is None
    assert all((t.max_cells, t.max_per_cell) == (1, 1) for t in spec.tables)
    document["privacy_unit"] = {"each_row": True, "max_per_cell": 2}
    with pytest.raises(SpecError, match=r"privacy_unit.max_per_cell = 2: with each_row = true"):
        parse_spec(document)
    document["privacy_unit"] = {"each_row": True}
    document["tables"][0]["max_cells"] = 3
    with pytest.raises(SpecError, match=r"tables\[0\].max_cells = 3: with privacy_unit.each_row"):
        parse_spec(document)


def test_mixing_shares_and_sigma2_is_refused():
    document = base_document()
    del document["tables"][1]["share"]
    document["tables"][1]["sigma2"] = "9/2"
    with pytest.raises(SpecError, match="1 table\\(s\\) give a share and 1 give sigma2"):
        parse_spec(document)


def test_all_sigma2_needs_no_budget():
    document = base_document()
    del document["budget"]
    for table in document["tables"]:
        del table["share"]
        table["sigma2"] = "25/2"
    spec = parse_spec(document)
    assert spec.budget is None
    assert spec.table("age_sex").sigma2 == Fraction(25, 2)


def test_shares_need_a_budget():
    document = base_document()
    del document["budget"]
    with pytest.raises(SpecError, match="budget: required when tables give shares"):
        parse_spec(document)


def test_laplace_needs_epsilon_budget():
    document = base_document()
    document["release"]["noise"] = "discrete_laplace"
    document["budget"] = {"rho": "1/2"}
    with pytest.raises(SpecError, match="discrete_laplace noise needs an epsilon budget"):
        parse_spec(document)


def test_all_problems_are_reported_together():
    document = copy.deepcopy(base_document())
    document["budget"]["epsilon"] = -1
    document["domains"]["age"] = []
    with pytest.raises(SpecError) as info:
        parse_spec(document)
    assert len(info.value.problems) >= 2
    assert isinstance(info.value, ValueError)


def test_file_errors(tmp_path):
    with pytest.raises(SpecError, match="does not exist"):
        load_spec(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[release\n")
    with pytest.raises(SpecError, match="not valid TOML"):
        load_spec(bad)


def test_with_release_id_validates():
    spec = parse_spec(base_document())
    with pytest.raises(SpecError, match=re.escape("release.id = '../x'")):
        spec.with_release_id("../x")
