"""Selection tables in release specs: quantile, median and top_k next to noisy tables.

Validation messages, planning (each selection's ε from its share of ρ or ε, the whole
release proven by the accountant), both engines end to end and identical, equality with
``df.dp.median / top_k``, contribution bounding of quantiles, bad input, the ledger.
"""

from __future__ import annotations

import copy
import json
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from release_specs import operator_paths

import dp_pipeline.engines.pandas.aggregate  # noqa: F401  (registers df.dp)
from dp_pipeline.accounting import PrivacyAccountant
from dp_pipeline.mechanisms import BaseTwoExponential, DiscreteLaplace
from dp_pipeline.randomness import derive_stream
from dp_pipeline.release.keys import load_or_create_master_key
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.plan.release_plan import plan_release
from dp_pipeline.release.plan.text import format_plan
from dp_pipeline.release.run import Progress, apply_overrides, read_release, run_release
from dp_pipeline.release.spec.load import load_spec, parse_spec
from dp_pipeline.release.spec.model import SpecError
from dp_pipeline.selection.algorithms import select_quantile
from dp_pipeline.selection.query import QuantileQuery

ROOT = Path(__file__).resolve().parents[4]
QUIET = Progress(quiet=True)
KEY_HEX = "57af74b97b8dca150c88eab838b51b745293770fb15167e0b7f938bd350df2e2"


@pytest.fixture(autouse=True)
def fixed_key(monkeypatch):
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)


def selections_spec(tmp_path: Path, **overrides):
    spec = load_spec(ROOT / "conf" / "census_selections.toml")
    return apply_overrides(
        spec,
        output_dir=str(tmp_path / "out"),
        ledger_path=str(tmp_path / "ledger.sqlite"),
        key_file=str(tmp_path / "master.key"),
        synthetic_persons=4000,
        **overrides,
    )


# ----------------------------------------------------------------------------- spec rules


def document(*tables: dict) -> dict:
    return {
        "release": {"id": "r-1"},
        "population": {"name": "people", "cap": {"rho": 1}},
        "privacy_unit": {"column": "person_id"},
        "budget": {"rho": Decimal("0.1")},
        "domains": {"state": {"start": 1, "stop": 3}, "race": ["a", "b", "c"]},
        "tables": list(tables),
    }


MEDIAN = {
    "name": "median_age",
    "statistic": "median",
    "keys": ["state"],
    "value": "age",
    "lower": 0,
    "upper": 99,
    "share": "1/2",
}
TOP_K = {"name": "top_race", "statistic": "top_k", "keys": ["race"], "k": 2, "share": "1/2"}
DELETE = object()

CASES = [
    (0, "q", Decimal("0.5"), "tables[0].q = 0.5: a median is q = 1/2; remove q"),
    (0, "statistic", "quantile", "tables[0].q: required for a quantile"),
    (0, "lower", 99, "tables[0]: lower = 99 must be < upper = 99"),
    (0, "lower", DELETE, "tables[0].lower: required for a median"),
    (0, "value", DELETE, "tables[0].value: required field is missing"),
    (0, "granularity", 0, "tables[0].granularity = 0: must be > 0"),
    (
        0,
        "granularity",
        Decimal("1e-6"),
        "give more than 10000000 candidates; use a coarser granularity",
    ),
    (0, "sigma2", 4, "is released by DP selection, not Gaussian noise"),
    (0, "max_per_cell", 3, "tables[0].max_per_cell = 3: a median table takes one value per"),
    (0, "value", "state", "tables[0].value = 'state': the median's column cannot also be"),
    (0, "value", "person_id", "column 'person_id' is the privacy unit"),
    (0, "keys", "state", "tables[0].keys = 'state': must be a list of column names"),
    (0, "k", 3, "tables[0].k = 3: only top_k tables take k"),
    (1, "k", DELETE, "tables[1].k: required for a top_k table"),
    (1, "k", 4, "tables[1].k = 4: must be between 1 and the number of candidates (3)"),
    (1, "keys", ["race", "state"], "a top_k table has exactly one key column"),
    (1, "method", "greedy", "tables[1].method = 'greedy': must be one of peeling, one_shot"),
    (1, "q", Decimal("0.9"), "tables[1].q = 0.9: only quantile and median tables take q"),
    (1, "upper", 3, "tables[1].upper = 3: only sum, mean, var, std, quantile and median tables"),
]


@pytest.mark.parametrize("index, field, value, message", CASES, ids=[c[3] for c in CASES])
def test_selection_table_rules_name_field_value_and_rule(index, field, value, message):
    raw = document(copy.deepcopy(MEDIAN), copy.deepcopy(TOP_K))
    if value is DELETE:
        del raw["tables"][index][field]
    else:
        raw["tables"][index][field] = value
    with pytest.raises(SpecError) as info:
        parse_spec(raw)
    assert message in str(info.value), str(info.value)


def test_quantile_groups_times_grid_are_limited_by_release_max_cells():
    raw = document(dict(MEDIAN, share=1))
    raw["release"]["max_cells"] = 100  # 3 states x 100 grid positions
    with pytest.raises(SpecError, match=r"3 group\(s\) x 100 grid positions = 300 cells"):
        parse_spec(raw)


def test_quantile_bounds_and_grid_are_exact_rationals():
    table = dict(MEDIAN, statistic="quantile", q="1/3", lower="-1/2", upper=Decimal("2.5"))
    table["granularity"] = Decimal("0.25")
    spec = parse_spec(document(dict(table, share=1)))
    (parsed,) = spec.tables
    assert (parsed.q, parsed.lower, parsed.upper) == (
        Fraction(1, 3),
        Fraction(-1, 2),
        Fraction(5, 2),
    )
    assert parsed.candidates == 13  # -1/2, -1/4, ..., 5/2
    assert (parsed.max_cells, parsed.max_per_cell) == (1, 1)


# ----------------------------------------------------------------------------- planning


def test_rho_budget_gives_each_selection_its_share_of_rho():
    spec = parse_spec(document(MEDIAN, dict(TOP_K, method="one_shot")))
    plan = plan_release(spec)
    assert plan.rho <= spec.budget.rho
    median, top = plan.tables
    assert isinstance(median.mechanism, BaseTwoExponential)
    assert isinstance(top.mechanism, DiscreteLaplace)
    for table in (median, top):
        share = table.table.share * spec.budget.rho
        # Never above the share; at most the base's granularity below it.
        assert share * Fraction(85, 100) < table.rho <= share
    assert median.rho == median.mechanism.zcdp_rho()  # ε²/8: bounded range
    assert top.rho == Fraction(1, 2) / top.mechanism.scale**2  # one coordinate shifted by 1


def test_epsilon_budget_with_gaussian_tables_is_proven_by_the_accountant():
    raw = document(dict(MEDIAN, share="1/4"), dict(TOP_K, share="1/4"))
    raw["domains"]["sex"] = ["F", "M"]
    raw["tables"].append({"name": "state_sex", "keys": ["state", "sex"], "share": "1/2"})
    raw["budget"] = {"epsilon": Decimal("1"), "delta": Decimal("1e-9")}
    plan = plan_release(parse_spec(raw))
    assert plan.delta_tight.upper <= 1e-9
    # Calibrated to the budget, not far below it.
    assert plan.epsilon_tight.upper > 0.95
    assert {t.table.name: t.runs for t in plan.tables} == {
        "median_age": 1,
        "top_race": 2,
        "state_sex": 1,
    }
    text = format_plan(plan)
    assert "rank ±" in text and "eps " in text


def test_discrete_laplace_release_spends_pure_epsilon_shares():
    raw = document(MEDIAN, TOP_K)
    raw["release"]["noise"] = "discrete_laplace"
    raw["budget"] = {"epsilon": Decimal("2")}
    plan = plan_release(parse_spec(raw))
    median, top = plan.tables
    assert median.epsilon <= 1 and top.epsilon <= 1
    assert median.epsilon > Fraction(99, 100)  # the base is chosen just below the target
    assert plan.accountant.pure_epsilon() <= 2
    assert plan.delta_tight.upper == 0 and plan.delta_tight.method == "pure_dp"


def test_grouped_quantile_under_replace_counts_two_runs():
    raw = document(dict(MEDIAN, share=1))
    raw["release"]["neighbouring"] = "replace"
    (median,) = plan_release(parse_spec(raw)).tables
    assert median.runs == 2  # a replaced unit can move its value to another group
    ungrouped = dict(MEDIAN, share=1)
    del ungrouped["keys"]
    raw["tables"] = [ungrouped]
    assert plan_release(parse_spec(raw)).tables[0].runs == 1


# ----------------------------------------------------------------------------- releases


def test_selection_release_is_identical_on_both_engines(tmp_path, spark, monkeypatch):
    spec = selections_spec(tmp_path / "pandas", engine="pandas")
    pandas_result = run_release(spec, progress=QUIET)
    monkeypatch.setenv("DP_PIPELINE_HOME", str(tmp_path / "spark-home"))  # its own ledger's
    monkeypatch.setenv("HOME", str(Path(tmp_path / "spark-home") / "user"))  # a user of its own
    spark_spec = selections_spec(tmp_path / "spark", engine="spark")
    spark_result = run_release(spark_spec, progress=QUIET, spark=spark)
    released = read_release(pandas_result.output)
    assert released.keys() == read_release(spark_result.output).keys()
    for name, frame in read_release(spark_result.output).items():
        pd.testing.assert_frame_equal(frame, released[name], check_dtype=False)

    median = released["median_age_by_state"]
    assert list(median.columns) == ["state", "value"] and len(median) == 51
    assert median["value"].between(0, 115).all()
    assert list(released["income_p90"].columns) == ["value"]
    assert released["income_p90"]["value"].iloc[0] % 1000 == 0
    counties = released["largest_counties"]
    assert list(counties.columns) == ["rank", "county"] and len(counties) == 5
    assert counties["county"].is_unique
    races = released["most_common_races"]
    assert list(races.columns) == ["rank", "race", "count"] and len(races) == 3

    report = json.loads((pandas_result.output / "privacy_report.json").read_text())
    tables = {t["name"]: t for t in report["tables"]}
    assert tables["median_age_by_state"]["mechanism"] == "base2_exponential"
    assert tables["most_common_races"]["scale"] is not None
    assert report["ledger"]["cumulative"]["rho"] is not None  # exp mech restored with its ρ
    accuracy = json.loads((pandas_result.output / "accuracy.json").read_text())
    rows = {row["table"]: row for row in accuracy["accuracy_vs_truth"]}
    assert rows["median_age_by_state"]["groups"] == 51
    assert rows["median_age_by_state"]["within_margin"] >= 0.9
    assert rows["most_common_races"]["precision"] == 1.0  # 'white' and co. dominate
    html = (pandas_result.output / "report.html").read_text()
    assert "Selections" in html and "rank ±" in html


def test_ledger_restores_the_exponential_mechanism(tmp_path):
    spec = selections_spec(tmp_path, engine="pandas")
    run_release(spec, progress=QUIET)
    (entry,) = Ledger(spec.ledger_path).history()
    restored = PrivacyAccountant.from_dict(entry.accountant)
    mechanisms = [event.mechanism for event in restored.events]
    planned = [event.mechanism for event in plan_release(spec).accountant.events]
    assert mechanisms == planned
    assert restored.rho() == plan_release(spec).rho


def test_release_selections_draw_from_the_release_identity(tmp_path):
    """One row per person: the release's p90 is the core mechanism on the release's stream.

    The stream is labelled with the release's digest (spec and input), so it is
    the release's own: neither a library call with the same names nor a release
    with another spec draws from it.
    """
    spec = selections_spec(tmp_path, engine="pandas")
    result = run_release(spec, progress=QUIET)
    released = read_release(result.output)
    report = json.loads((result.output / "privacy_report.json").read_text())
    frame = pd.read_parquet(next((tmp_path / "samples").glob("*.parquet")))
    key = load_or_create_master_key(spec.key_file, QUIET)
    mechanism = result.plan.table("income_p90").mechanism
    query = QuantileQuery.build(
        "quantile",
        privacy_unit=None,
        column="income",
        q=Fraction(9, 10),
        bounds=(0, 500_000),
        granularity=1000,
        epsilon=mechanism,
        key=key,
        release_id=spec.release_id,
        table="income_p90",
    )
    positions, _ = query.positions(frame["income"].to_numpy(dtype=np.float64))
    counts = np.bincount(positions, minlength=len(query.candidates))
    labels = (spec.release_id, "income_p90", report["release_digest"], "selection", "quantile")
    chosen = select_quantile(
        counts, Fraction(9, 10), list(query.candidates), mechanism, derive_stream(key, *labels)
    )
    assert query.candidates[chosen] == released["income_p90"]["value"].iloc[0]
    assert labels != query.labels  # the library's stream for the same names is another one
    races = released["most_common_races"]
    assert races["count"].tolist() == sorted(races["count"], reverse=True)
    assert races["race"].nunique() == 3


QUANTILE_SPEC = """
[release]
id = "bounded-median"
[population]
name = "units"
cap = {{ rho = 100 }}
[privacy_unit]
column = "person_id"
[budget]
rho = 20
[input]
path = "{input}"
[output]
dir = "{tmp}/out"
[run]
engine = "{engine}"
ledger = "{tmp}/ledger.sqlite"
key_file = "{tmp}/master.key"
[domains]
group = ["a", "b"]
[[tables]]
name = "median_by_group"
statistic = "median"
keys = ["group"]
value = "age"
lower = 0
upper = 120
share = 1
"""


def bounded_input(tmp_path: Path) -> Path:
    """201 persons aged 20..40 in group a, one person with 1,000 rows aged 100, bad values."""
    ages = np.repeat(np.arange(20.0, 41.0), 10)  # median 30
    persons = pd.DataFrame({"person_id": np.arange(210), "group": "a", "age": ages})
    heavy = pd.DataFrame({"person_id": 10_000, "group": "a", "age": np.full(1000, 100.0)})
    bad = pd.DataFrame(
        {"person_id": [20_001, 20_002, 20_003], "group": "b", "age": [np.nan, None, np.inf]}
    )
    other = pd.DataFrame(
        {"person_id": np.arange(300, 342), "group": "b", "age": np.repeat(np.arange(60.0, 81.0), 2)}
    )
    frame = pd.concat([persons, heavy, bad, other], ignore_index=True)
    path = tmp_path / "units.parquet"
    frame.to_parquet(path, index=False)
    return path


@pytest.mark.parametrize("engine", ["pandas", pytest.param("spark", marks=pytest.mark.spark)])
def test_quantile_keeps_one_value_per_unit_and_drops_invalid_values(tmp_path, engine, request):
    calls = request.getfixturevalue("parquet_pass_calls") if engine == "spark" else []
    session = request.getfixturevalue("spark") if engine == "spark" else None
    path = tmp_path / "spec.toml"
    path.write_text(
        QUANTILE_SPEC.format(input=bounded_input(tmp_path), tmp=tmp_path, engine=engine)
    )
    spec = load_spec(path)
    released = read_release(run_release(spec, progress=QUIET, spark=session).output)
    result = released["median_by_group"]
    medians = dict(zip(result["group"], result["value"], strict=True))
    # Unbounded, the 1,000 rows at 100 would make group a's median 100; bounded, the
    # heavy person is one value among 211. ε ≈ 12.6 makes the selection near-exact.
    assert abs(medians["a"] - 30) <= 2
    assert abs(medians["b"] - 70) <= 2  # NaN, null and inf ages dropped, not fatal
    # A unit with several rows: the Spark SQL path's general bounding rule ran.
    assert calls == ([False] if engine == "spark" else [])


def test_non_numeric_quantile_column_is_refused_before_anything_is_published(tmp_path):
    frame = pd.DataFrame({"person_id": [1, 2], "group": ["a", "b"], "age": ["old", "young"]})
    frame.to_parquet(tmp_path / "text.parquet", index=False)
    path = tmp_path / "spec.toml"
    path.write_text(
        QUANTILE_SPEC.format(input=tmp_path / "text.parquet", tmp=tmp_path, engine="pandas")
    )
    spec = load_spec(path)
    # The Parquet footer says so before the ledger reserves anything.
    with pytest.raises(
        SpecError, match=r"column 'age' has type (large_)?string; as the spec's number"
    ):
        run_release(spec, progress=QUIET)
    assert not (tmp_path / "out" / spec.release_id).exists()
    assert Ledger(spec.ledger_path).entry(spec.release_id) is None


def test_rank_error_bound_holds_over_many_releases():
    """The planned 95% rank error covers >= 95% of releases (independent streams)."""
    from dp_pipeline.randomness import MasterKey, derive_stream
    from dp_pipeline.selection.algorithms import select_quantile

    raw = document(dict(MEDIAN, share=1, keys=[]))
    plan = plan_release(parse_spec(raw))
    (median,) = plan.tables
    rng = np.random.Generator(np.random.PCG64(7))  # test data only
    counts = np.bincount(rng.integers(20, 80, size=2000), minlength=100)
    below = np.concatenate(([0], np.cumsum(counts)[:-1]))
    losses = np.abs(below - counts.sum() / 2)
    key = MasterKey.from_hex("5a" * 32)
    grid = list(range(100))
    trials = 300
    within = sum(
        losses[
            select_quantile(
                counts, Fraction(1, 2), grid, median.mechanism, derive_stream(key, "t", i)
            )
        ]
        - losses.min()
        < median.margin_of_error
        for i in range(trials)
    )
    assert within / trials >= 0.95
    # Not vacuous: ε ≈ 0.89 over 100 candidates gives 2 + ceil(11 bits / η) = 20 ranks.
    assert median.margin_of_error == 20


def test_selection_release_takes_the_parquet_pass_and_equals_pandas(
    tmp_path, spark, parquet_pass_calls, monkeypatch
):
    """Quantile positions are derived inside the one pass: the input stays a bare scan."""
    spec = selections_spec(tmp_path / "pandas", engine="pandas")
    expected = read_release(run_release(spec, progress=QUIET).output)
    monkeypatch.setenv("DP_PIPELINE_HOME", str(tmp_path / "spark-home"))  # its own ledger's
    monkeypatch.setenv("HOME", str(Path(tmp_path / "spark-home") / "user"))  # a user of its own
    spark_spec = selections_spec(tmp_path / "spark", engine="spark")
    released = read_release(run_release(spark_spec, progress=QUIET, spark=spark).output)
    assert parquet_pass_calls == [True]
    assert released.keys() == expected.keys()
    for name, frame in released.items():
        pd.testing.assert_frame_equal(frame, expected[name], check_dtype=False)


def test_parquet_pass_drops_invalid_quantile_values_like_pandas(
    tmp_path, spark, parquet_pass_calls, monkeypatch
):
    rng = np.random.Generator(np.random.PCG64(11))  # test data only
    ages = rng.normal(50, 15, 3000)
    ages[::97] = np.nan
    ages[5] = np.inf
    frame = pd.DataFrame(
        {"person_id": np.arange(3000), "group": rng.choice(["a", "b"], 3000), "age": ages}
    )
    frame.loc[7, "age"] = None
    frame.to_parquet(tmp_path / "ages.parquet", index=False, row_group_size=700)
    released = {}
    for engine in ("pandas", "spark"):
        folder = tmp_path / engine
        folder.mkdir()
        monkeypatch.setenv("DP_PIPELINE_HOME", str(folder / "home"))  # one ledger per home
        monkeypatch.setenv("HOME", str(Path(folder / "home") / "user"))  # a user of its own
        path = folder / "spec.toml"
        path.write_text(
            QUANTILE_SPEC.format(input=tmp_path / "ages.parquet", tmp=folder, engine=engine)
        )
        result = run_release(load_spec(path, **operator_paths(folder)), progress=QUIET, spark=spark)
        released[engine] = read_release(result.output)["median_by_group"]
    assert parquet_pass_calls == [True]
    pd.testing.assert_frame_equal(released["spark"], released["pandas"], check_dtype=False)
    assert released["spark"]["value"].between(45, 55).all()
