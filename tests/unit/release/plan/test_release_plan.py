"""Planning before data: σ² per table from the budget, proven guarantee, CLI plan and ledger."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest

from dp_pipeline.mechanisms import DiscreteGaussian
from dp_pipeline.release.cli import main
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.plan.costs import sensitivity_vector
from dp_pipeline.release.plan.release_plan import PlanError, plan_release
from dp_pipeline.release.spec.load import load_spec, parse_spec
from dp_pipeline.release.spec.model import SpecError

ROOT = Path(__file__).resolve().parents[4]


def small_document(**budget) -> dict:
    return {
        "release": {"id": "r-1", "noise_partitions": 2},
        "population": {"name": "people", "cap": {"rho": 1}},
        "privacy_unit": {"column": "person_id"},
        "budget": budget or {"rho": "1/8"},
        "domains": {"age": {"start": 0, "stop": 9}, "sex": ["F", "M"]},
        "tables": [
            {"name": "age_sex", "keys": ["age", "sex"], "share": "3/4"},
            {
                "name": "income",
                "keys": ["sex"],
                "statistic": "sum",
                "value": "income",
                "lower": -10,
                "upper": 100,
                "share": "1/4",
            },
        ],
    }


def test_rho_budget_splits_by_share_and_is_met_exactly():
    plan = plan_release(parse_spec(small_document(rho="1/8")))
    # rho_t = share_t * rho with rho_t = ||Δ_t||² / (2 σ_t²) (CKS Prop. 5).
    assert plan.table("age_sex").rho == Fraction(3, 32)
    assert plan.table("income").rho == Fraction(1, 32)
    assert plan.rho == Fraction(1, 8)
    assert plan.table("age_sex").mechanism == DiscreteGaussian(Fraction(16, 3))
    assert plan.table("income").sensitivity == (100,)
    assert plan.epsilon_zcdp is not None
    assert float(plan.epsilon_tight.upper) <= plan.epsilon_zcdp


def test_epsilon_delta_budget_is_proven():
    plan = plan_release(parse_spec(small_document(epsilon=1, delta="1/1000000000")))
    assert plan.delta_tight is not None
    assert Fraction(plan.delta_tight.upper) <= Fraction(1, 10**9)
    assert plan.tables[0].margin_of_error > 0


def test_explicit_sigma2_above_budget_is_refused_before_data():
    document = small_document(rho="1/100")
    for table in document["tables"]:
        del table["share"]
        table["sigma2"] = 1
    with pytest.raises(PlanError, match=r"above budget\.rho = 1/100"):
        plan_release(parse_spec(document))


def test_sensitivity_vectors():
    spec = parse_spec(small_document())
    replace = dataclasses.replace(spec, neighbouring="replace")
    count, total = spec.table("age_sex"), spec.table("income")
    assert sensitivity_vector(spec, count) == (1,)
    assert sensitivity_vector(replace, count) == (1, 1)
    assert sensitivity_vector(spec, total) == (100,)
    # Replace within one cell can move a sum from -10 to 100: 110 in one coordinate.
    assert sensitivity_vector(replace, total) == (110, 110)


def test_replace_never_counts_more_coordinates_than_cells():
    document = small_document()
    document["domains"]["one"] = ["x"]
    document["tables"][0].update(keys=["one"])
    spec = dataclasses.replace(parse_spec(document), neighbouring="replace")
    table = spec.table("age_sex")
    assert table.cells == 1
    assert sensitivity_vector(spec, table) == (1,)  # leaving and entering the same cell


def test_noise_sd_is_the_standard_deviation_of_the_noise():
    import numpy as np

    plan = plan_release(parse_spec(dict(small_document(), budget={"rho": "1/8"})))
    assert plan.table("age_sex").noise_sd == pytest.approx(float(Fraction(16, 3)) ** 0.5)
    document = small_document(epsilon=1)
    document["release"]["noise"] = "discrete_laplace"
    table = plan_release(parse_spec(document)).table("age_sex")
    scale = float(table.mechanism.scale)
    support = np.arange(-2000, 2001)
    pmf = np.exp(-np.abs(support) / scale)
    pmf /= pmf.sum()
    assert table.noise_sd == pytest.approx(float(np.sqrt((pmf * support**2).sum())), rel=1e-9)


def test_census_demo_plans_with_the_tight_accountant():
    plan = plan_release(load_spec(ROOT / "conf" / "census_demo.toml"))
    assert len(plan.tables) == 6
    assert Fraction(plan.delta_tight.upper) <= Fraction(1, 10**10)
    shares = {t.table.name: t.rho / plan.rho for t in plan.tables}
    assert shares["county_age_sex"] == Fraction(1, 2)


def test_cli_plan(capsys):
    assert main(["plan", str(ROOT / "conf" / "census_demo.toml")]) == 0
    out = capsys.readouterr().out
    assert "county_age_sex" in out and "729176" in out
    assert "zCDP conversion" in out and "before reading any data" in out
    assert main(["plan", str(ROOT / "conf" / "monthly_example.toml"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["guarantee"]["rho"] == "1/100"


def test_cli_reports_spec_errors_with_status_2(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text(
        (ROOT / "conf" / "monthly_example.toml").read_text().replace('"1/2"', '"2/3"', 1)
    )
    assert main(["plan", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "shares sum to 7/6" in err


def test_cli_ledger_missing_empty_and_unknown_population(tmp_path, capsys):
    ledger = str(tmp_path / "l.sqlite")
    # Reading a ledger never creates one: a missing file is reported, and left missing.
    nested = str(tmp_path / "typo" / "l.sqlite")
    assert main(["ledger", "--ledger", nested]) == 0
    assert f"no ledger at {nested} (the first `dp-release run`" in capsys.readouterr().out
    assert main(["ledger", "--ledger", nested, "--abort", "r-1"]) == 2
    assert f"--abort r-1: no ledger at {nested}" in capsys.readouterr().err
    assert main(["ledger", "--ledger", nested, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["populations"] == []
    assert not (tmp_path / "typo").exists()
    Ledger(ledger).close()
    assert main(["ledger", "--ledger", ledger]) == 0
    assert "no releases yet" in capsys.readouterr().out
    assert main(["ledger", "--ledger", ledger, "--population", "x"]) == 2
    assert "--population 'x': not in the ledger" in capsys.readouterr().err


# ------------------------------------------------ hostile values: spec errors before any data


def edited(path: str, value) -> dict:
    """`small_document` with the dotted ``path`` set to ``value``."""
    document = small_document(epsilon=Decimal(1), delta=Decimal("1e-9"))
    *parents, last = path.split(".")
    node = document
    for part in parents:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    node[int(last) if last.isdigit() else last] = value
    return document


# One row per hostile value: (field, value, a fragment the error must contain). Each used
# to end in a traceback (or run for hours) in the accountant, numpy or the engines.
HOSTILE = [
    ("budget.delta", 0, "budget.delta = 0: discrete_gaussian noise (release.noise"),
    ("budget", {"epsilon": 1}, "budget.delta: discrete_gaussian noise"),
    ("budget.epsilon", Decimal("1e-100000"), "budget.epsilon = 1E-100000: too many digits"),
    ("budget.epsilon", Decimal("1e100000"), "budget.epsilon = 1E+100000: too many digits"),
    ("budget.epsilon", "1e999999999", "budget.epsilon = '1e999999999': too many digits"),
    ("budget.epsilon", Decimal("1e-30"), "budget.epsilon = 1E-30: must lie between 1e-6 and 1000"),
    ("budget.epsilon", Decimal("NaN"), "budget.epsilon = NaN: must be finite"),
    ("budget.epsilon", Decimal("-Infinity"), "budget.epsilon = -Infinity: must be finite"),
    ("budget.epsilon", Decimal("-2"), "budget.epsilon = -2: must be > 0"),
    ("budget.epsilon", [1], "budget.epsilon = [1]: must be a number or a 'p/q' string"),
    ("budget.epsilon", True, "budget.epsilon = True: must be a number"),
    ("budget.delta", Decimal("1e-101"), "budget.delta = 1E-101: too many digits"),
    ("budget.delta", Decimal("1"), "budget.delta = 1: must be 0 or lie in [1e-100, 1)"),
    ("budget", {"rho": Decimal("1e-40")}, "budget.rho = 1E-40: must lie between 1e-12 and 10000"),
    ("budget", {"rho": "1/" + "7" * 5000}, "too many digits"),
    ("budget", 3, "budget = 3: must be a table ([budget])"),
    ("population.cap", {"epsilon": 4}, "population.cap.delta: discrete_gaussian noise"),
    ("population.cap", {"epsilon": Decimal("1e100000"), "delta": Decimal("1e-9")}, "too many"),
    ("domains.age", {"start": -(2**63), "stop": 2**63 - 1}, "above the 1,099,511,627,776 (2**40)"),
    ("domains.age", {"start": 0, "stop": 10**30}, "must fit in a 64-bit signed integer"),
    ("domains.age", [2**64, 1], "domains.age: every integer value must fit in a 64-bit"),
    ("domains.age", {"start": 0, "stop": 10**5000}, "must fit in a 64-bit signed integer"),
    ("release.max_cells", 10**30, "release.max_cells = 1000000000000000000000000000000: must be"),
    ("tables.1.value", "sex", "tables[1].value = 'sex': the summed column cannot also be one"),
    ("tables.0.share", "1/" + "3" * 3000, "characters): too many digits"),
    ("tables.0.share", Decimal("1e-9"), "tables[0].share = 1E-9: must lie between 1e-6 and 1"),
    ("tables.0.share", Decimal("NaN"), "tables[0].share = NaN: must be finite"),
    ("tables.0.statistic", "avg", "tables[0].statistic = 'avg': must be one of count"),
    ("tables", [], "tables: a release needs at least one [[tables]] entry"),
    ("tables", {"name": "x"}, "tables: must be an array of tables"),
    ("tables.1.upper", 2**63, "tables[1].upper = 9223372036854775808: the largest |bound|"),
    ("tables.0.max_cells", 10**30, "tables[0].max_cells = 1000000000000000000000000000000: larger"),
    ("input.synthetic_persons", 10**30, "input.synthetic_persons = 10000000000000000000000000"),
    ("input.synthetic_seed", -1, "input.synthetic_seed = -1: must be between 0 and 2**63 - 1"),
    ("release.id", 10**5000, "release.id = a int too long to print: must be a string"),
    ("output.dir", ["x"], "output.dir = ['x']: must be a string"),
    ("budget.colour", 1, "budget.colour: unknown field; allowed fields are rho, epsilon, delta"),
    ("release", [1], "release = [1]: must be a table ([release])"),
    ("population", "people", "population = 'people': must be a table ([population])"),
    ("privacy_unit", 5, "privacy_unit = 5: must be a table ([privacy_unit])"),
    ("release.noise_partitions", 10**30, "release.noise_partitions = 10000000000000000000"),
    ("tables.0.keys", "age", "tables[0].keys = 'age': must be a non-empty list of column names"),
]


@pytest.mark.parametrize("path, value, fragment", HOSTILE, ids=[f"{r[0]}-{r[2]}" for r in HOSTILE])
def test_a_hostile_value_is_one_spec_error_naming_its_field(path, value, fragment):
    with pytest.raises(SpecError) as info:
        plan_release(parse_spec(edited(path, value)))
    assert fragment in str(info.value), str(info.value)
    # The field's own problem, and no cascade (a second problem caused by the first).
    assert len(info.value.problems) == 1, str(info.value)


def test_sigma2_out_of_range_is_a_spec_error():
    document = small_document()
    del document["budget"]
    for table, sigma2 in zip(document["tables"], ("1/1000", Decimal("1e31")), strict=True):
        del table["share"]
        table["sigma2"] = sigma2
    with pytest.raises(SpecError) as info:
        plan_release(parse_spec(document))
    assert [p.split(":")[0] for p in info.value.problems] == [
        "tables[0].sigma2 = '1/1000'",
        "tables[1].sigma2 = 1E+31",
    ], str(info.value)
    assert "must lie between 1e-2 and 1e+30" in str(info.value)


@pytest.mark.parametrize(
    "statistic, key, reserved",
    [
        ("count", "value", "value, raw_value, true_value, true_n"),
        ("count", "raw_value", "value, raw_value"),
        ("count", "Value", "value, raw_value"),  # Spark ignores the case of column names
        ("sum", "_dp_position_0", "value, raw_value, true_value, true_n or start with '_dp_'"),
        ("median", "value", "value, true_value, rank_error"),
        ("top_k", "rank", "rank, count, true_count, in_true_top_k"),
        ("top_k", "count", "rank, count"),
    ],
)
def test_a_key_named_like_an_output_column_is_a_spec_error(statistic, key, reserved):
    document = small_document()
    document["domains"][key] = ["a", "b", "c"]
    table = {"name": "clash", "keys": [key], "statistic": statistic, "share": "1/4"}
    if statistic == "sum":
        table.update(value="income", lower=0, upper=10)
    if statistic == "median":
        table.update(value="income", lower=0, upper=10)
    if statistic == "top_k":
        table.update(k=1)
    document["tables"] = [document["tables"][0], table]
    with pytest.raises(SpecError) as info:
        parse_spec(document)
    message = str(info.value)
    assert f"tables[1].keys: table 'clash' has key column {key!r}" in message, message
    assert f"cannot be named {reserved}" in message, message


# ------------------------------------------------ common mistakes: one error naming the fix

SPEC_TEXT = """
[release]
id = "mistake-1"
[population]
name = "people"
cap = {{ rho = 1 }}
[privacy_unit]
column = "person_id"
[budget]
rho = "1/8"
[input]
path = "{input}"
[output]
dir = "{tmp}/out"
[run]
ledger = "{tmp}/ledger.sqlite"
key_file = "{tmp}/master.key"
[domains]
sex = ["F", "M"]
[[tables]]
name = "sex"
keys = ["sex"]
share = 1
"""


def write_mistake(tmp_path, input_path="", engine: str | None = None) -> Path:
    text = SPEC_TEXT.format(tmp=tmp_path, input=input_path)
    if engine:
        text = text.replace("[run]", f'[run]\nengine = "{engine}"')
    path = tmp_path / "spec.toml"
    path.write_text(text)
    return path


def refused(capsys, *arguments) -> str:
    capsys.readouterr()
    assert main(list(arguments)) == 2
    error = capsys.readouterr().err
    assert "Traceback" not in error
    return error


def test_a_missing_input_is_named_before_anything_is_read(tmp_path, capsys):
    spec = write_mistake(tmp_path, engine="pandas")
    missing = tmp_path / "nowhere.parquet"
    error = refused(capsys, "run", str(spec), "--quiet", "--input", str(missing))
    assert f"input.path = '{missing}' (or --input): no such file or folder" in error
    assert not (tmp_path / "ledger.sqlite").exists() and not (tmp_path / "master.key").exists()
    # A scheduled release is planned before its input arrives: a note, not an error.
    write_mistake(tmp_path, input_path=missing, engine="pandas")
    capsys.readouterr()
    assert main(["plan", str(spec)]) == 0
    note = capsys.readouterr().err
    assert f"note: dp-release run would refuse this input now: input.path = '{missing}'" in note


def test_an_input_of_another_format_names_the_format_to_give(tmp_path, capsys):
    spec = write_mistake(tmp_path, engine="pandas")
    csv = tmp_path / "persons.csv"
    csv.write_text("person_id,sex\n1,F\n")
    error = refused(capsys, "run", str(spec), "--quiet", "--input", str(csv), "--format", "parquet")
    assert "input.format = 'parquet' (or --format)" in error and "use --format csv" in error
    unnamed = tmp_path / "persons"
    unnamed.write_text("person_id,sex\n1,F\n")
    error = refused(capsys, "run", str(spec), "--quiet", "--input", str(unnamed))
    assert "is not a Parquet file (it does not start with PAR1); for a CSV file use" in error
    parquet = tmp_path / "persons.data"
    pd.DataFrame({"person_id": [1], "sex": ["F"]}).to_parquet(parquet)
    error = refused(capsys, "run", str(spec), "--quiet", "--input", str(parquet), "--format", "csv")
    assert "is a Parquet file; use --format parquet" in error
    assert not (tmp_path / "ledger.sqlite").exists()


def run_python(code: str, cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    environment = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        **kwargs,
    )


def test_the_default_spark_engine_without_pyspark_names_the_pandas_engine(tmp_path):
    spec = write_mistake(tmp_path)  # no engine under [run]: spark
    code = (
        "import sys; sys.modules['pyspark'] = None\n"
        "from dp_pipeline.release.cli import main\n"
        f"sys.exit(main(['run', {str(spec)!r}, '--quiet']))"
    )
    done = run_python(code, tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert 'run.engine = "spark" (the default when [run] gives no engine): PySpark is not ' in (
        done.stderr
    )
    assert 'set engine = "pandas" under [run] (or --engine pandas)' in done.stderr
    assert not (tmp_path / "ledger.sqlite").exists() and not (tmp_path / "master.key").exists()


def test_output_piped_into_a_reader_that_stops_ends_quietly(tmp_path):
    code = (
        "import sys, time; time.sleep(1)\n"  # the reader is gone before the first line
        "from dp_pipeline.release.cli import main\n"
        f"sys.exit(main(['plan', '--json', {str(ROOT / 'conf' / 'census_demo.toml')!r}]))"
    )
    environment = dict(os.environ, PYTHONPATH=str(ROOT))
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    process.stdout.close()  # `| head -0`: the pipe's reader went away
    _, error = process.communicate(timeout=300)
    assert process.returncode == 1, error
    assert b"Traceback" not in error and b"BrokenPipeError" not in error, error


def test_version_and_decimals_beside_fractions(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert re.fullmatch(r"dp-release \d+\.\d+\.\d+\n", capsys.readouterr().out)
    assert main(["plan", str(ROOT / "conf" / "census_demo.toml")]) == 0
    out = capsys.readouterr().out
    assert "delta=1/10000000000 (1e-10)" in out
    assert "1831161/100000 (18.3116)" in out


def test_paths_blocked_by_a_file_and_a_huge_synthetic_input_are_named(tmp_path, capsys):
    spec = write_mistake(tmp_path, engine="pandas")
    # The operator's --ledger decides: the spec names no ledger of its own.
    spec.write_text(spec.read_text().replace(f'ledger = "{tmp_path}/ledger.sqlite"\n', ""))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    error = refused(
        capsys,
        "run",
        str(spec),
        "--quiet",
        "--output",
        str(blocker / "out"),
        "--ledger",
        str(blocker / "ledger.sqlite"),
        "--persons",
        str(10**12),
    )
    assert f"output.dir = '{blocker / 'out'}' (or --output): '{blocker}' is an existing file" in (
        error
    )
    assert f"run.ledger = '{blocker / 'ledger.sqlite'}' (or --ledger): '{blocker}' is a file" in (
        error
    )
    assert "input.synthetic_persons = 1000000000000 (or --persons): must be between 1 and" in error
    assert not (tmp_path / "master.key").exists()
