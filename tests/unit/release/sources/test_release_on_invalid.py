"""``input.on_invalid``: invalid rows dropped and counted (default), or a DP decision to refuse.

Under ``"error"`` the decision is made after the ledger reserved the release, on a
noisy count of the privacy units that have an invalid row: noised from the
release's keyed stream with its own share of the budget, planned and proven with
the tables, and charged whatever it decides. Both engines count the same units and
draw the same noise, so they decide the same; running the same release id again
resumes its reservation and decides the same, spending nothing more.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from dp_pipeline.engines.pandas.invalid_rows import invalid_unit_count
from dp_pipeline.release.keys import load_or_create_master_key
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.plan.release_plan import plan_release
from dp_pipeline.release.run import run_release
from dp_pipeline.release.sources.schema import read_csv_rows
from dp_pipeline.release.spec.load import load_spec
from dp_pipeline.release.spec.model import SpecError
from dp_pipeline.release.tables.invalid_rows import (
    InvalidRowsRefusedError,
    noisy_invalid_count,
    row_checks,
)
from tests.unit.release.sources.test_release_inputs import (
    BAD_ROWS,
    QUIET,
    SPEC,
    file_digests,
    people,
    write_inputs,
)


def spec_text(tmp_path, input_path, engine="pandas", on_invalid="error", release_id="people-1"):
    text = SPEC.format(tmp=tmp_path, input=input_path, format=input_path.suffix[1:], engine=engine)
    return text.replace('id = "people-1"', f'id = "{release_id}"')


def spec_with(
    tmp_path, input_path, engine="pandas", on_invalid="error", release_id="people-1", threshold=0
):
    text = spec_text(tmp_path, input_path, engine, on_invalid, release_id)
    if on_invalid == "error":
        # The tables give up a tenth of the budget to the noisy invalid-row count.
        text = text.replace('share = "1/3"', 'share = "3/10"')
        fields = f'on_invalid = "error"\ninvalid_share = "1/10"\ninvalid_threshold = {threshold}\n'
    else:
        fields = f'on_invalid = "{on_invalid}"\n'
    text = text.replace("[input]\n", f"[input]\n{fields}")
    path = tmp_path / f"spec-{engine}-{on_invalid}-{release_id}.toml"
    path.write_text(text)
    return load_spec(path)


def csv_with(tmp_path, bad_rows, name="input.csv"):
    lines = ["pid,year,sex,spend,note"]
    lines += [f"{r.pid},{r.year},{r.sex},{r.spend},x" for r in people().itertuples()]
    path = tmp_path / name
    path.write_text("\n".join([*lines, *bad_rows]) + "\n")
    return path


def many_bad_units(units=150):
    """One row outside the year domain for each of ``units`` new privacy units."""
    return [f"{1000 + unit},1999,F,5,x" for unit in range(units)]


def write_spec_file(tmp_path, text: str) -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(text)
    return path


# ------------------------------------------------------------------ the spec fields


def test_the_rule_is_a_spec_field_with_drop_by_default(tmp_path):
    csv_path = csv_with(tmp_path, [])
    assert spec_with(tmp_path, csv_path, on_invalid="drop").on_invalid == "drop"
    strict = spec_with(tmp_path, csv_path, threshold=7)
    assert strict.on_invalid == "error"
    assert (strict.invalid_rows.share, strict.invalid_rows.threshold) == (Fraction(1, 10), 7)
    default = write_spec_file(tmp_path, spec_text(tmp_path, csv_path))
    assert load_spec(default).on_invalid == "drop"
    assert load_spec(default).invalid_rows is None


def test_an_unknown_rule_is_a_spec_error_naming_the_field(tmp_path):
    with pytest.raises(SpecError) as info:
        spec_with(tmp_path, csv_with(tmp_path, []), on_invalid="skip")
    assert "input.on_invalid = 'skip': must be one of drop, error" in str(info.value)


def test_error_needs_a_share_and_a_threshold_and_the_shares_must_sum_to_one(tmp_path):
    csv_path = csv_with(tmp_path, [])
    text = spec_text(tmp_path, csv_path).replace("[input]\n", '[input]\non_invalid = "error"\n')
    with pytest.raises(SpecError) as info:
        load_spec(write_spec_file(tmp_path, text))
    problems = info.value.problems
    assert any(p.startswith("input.invalid_threshold: required with on_invalid") for p in problems)
    assert any(p.startswith("input.invalid_share: required with on_invalid") for p in problems)
    # A share that leaves the tables' shares summing to more than 1.
    fields = 'on_invalid = "error"\ninvalid_share = "1/10"\ninvalid_threshold = 5\n'
    text = spec_text(tmp_path, csv_path).replace("[input]\n", f"[input]\n{fields}")
    with pytest.raises(SpecError) as info:
        load_spec(write_spec_file(tmp_path, text))
    assert info.value.problems == [
        "tables[*].share: shares sum to 11/10 (1/3 + 1/3 + 1/3 + 1/10); the shares of all "
        "tables and input.invalid_share must sum to exactly 1"
    ]
    # Under "drop" the fields decide nothing: an error naming them.
    text = spec_text(tmp_path, csv_path).replace("[input]\n", "[input]\ninvalid_threshold = 5\n")
    with pytest.raises(SpecError) as info:
        load_spec(write_spec_file(tmp_path, text))
    assert info.value.problems[0].startswith(
        'input.invalid_threshold: only with input.on_invalid = "error"'
    )


def test_a_negative_threshold_is_refused(tmp_path):
    with pytest.raises(SpecError, match=r"input.invalid_threshold = -1: must be >= 0"):
        spec_with(tmp_path, csv_with(tmp_path, []), threshold=-1)


def test_the_plan_and_the_report_hold_the_count_and_the_ledger_its_spend(tmp_path):
    csv_path = csv_with(tmp_path, [])
    spec = spec_with(tmp_path, csv_path, threshold=10_000)
    plan = plan_release(spec)
    drop = plan_release(spec_with(tmp_path, csv_path, on_invalid="drop"))
    assert plan.invalid_count is not None and drop.invalid_count is None
    assert plan.invalid_count.event.sensitivity == (1,)
    # One more event than the tables, inside the proven budget.
    assert len(plan.accountant.to_dict()["events"]) == len(spec.tables) + 1
    assert float(plan.epsilon_tight.upper) <= 2
    result = run_release(spec, QUIET)
    report = json.loads((result.output / "privacy_report.json").read_text())
    assert report["invalid_rows"]["threshold"] == 10_000
    assert report["invalid_rows"]["sensitivity"] == [1]
    entry = Ledger(spec.ledger_path).entry(spec.release_id)
    assert entry.accountant == plan.accountant.to_dict()


# ------------------------------------------------------------------ the decision


def test_a_clean_input_far_below_the_threshold_publishes_what_drop_publishes(tmp_path):
    csv_path = csv_with(tmp_path, [])
    result = run_release(spec_with(tmp_path, csv_path, threshold=1000), QUIET)
    assert result.outcome == "reserved" and len(file_digests(result.output)) == 3


def test_many_invalid_units_refuse_the_release_charged_and_a_rerun_resumes(tmp_path):
    csv_path = csv_with(tmp_path, many_bad_units())
    spec = spec_with(tmp_path, csv_path)
    with pytest.raises(InvalidRowsRefusedError) as first:
        run_release(spec, QUIET)
    message = str(first.value)
    assert "the noisy count of privacy units with an invalid row is " in message
    assert "above input.invalid_threshold = 0" in message
    assert "year" not in message and "1999" not in message  # no column, no value
    ledger = Ledger(spec.ledger_path)
    entry = ledger.entry(spec.release_id)
    assert entry.status == "reserved"  # charged: the reservation is kept
    spent = ledger.spent(spec.population)
    assert not any(Path(spec.output_dir).glob("*"))
    # The same id again: the same reservation, the same noise, the same decision.
    with pytest.raises(InvalidRowsRefusedError) as again:
        run_release(spec, QUIET)
    assert str(again.value) == message
    assert ledger.spent(spec.population) == spent
    assert [e.release_id for e in ledger.history()] == [spec.release_id]


def test_the_noisy_count_is_the_exact_unit_count_plus_the_keyed_draw(tmp_path):
    bad = [*many_bad_units(40), BAD_ROWS[0], "1005,1999,M,5,x", ",1999,F,5,x", "1,2,3"]
    csv_path = csv_with(tmp_path, bad)
    spec = spec_with(tmp_path, csv_path)
    frame, malformed = read_csv_rows(spec, csv_path)
    assert malformed == 1
    # 40 units outside the domain (unit 1005 twice), unit 900's null year, and one for
    # the unreadable rows (a null unit, a malformed row) together.
    exact = invalid_unit_count(frame, row_checks(spec), spec.privacy_unit, malformed)
    assert exact == 40 + 1 + 1
    with pytest.raises(InvalidRowsRefusedError) as info:
        run_release(spec, QUIET)
    plan = plan_release(spec)
    master = load_or_create_master_key(spec.key_file, QUIET)
    digest = Ledger(spec.ledger_path).entry(spec.release_id).identity["digest"]
    noisy = noisy_invalid_count(plan, master, digest, exact)
    assert f"invalid row is {noisy}, above" in str(info.value)
    assert noisy_invalid_count(plan, master, digest, 0) == noisy - exact  # one keyed draw


def test_drop_still_publishes_and_counts_the_invalid_and_malformed_rows(tmp_path):
    csv_path = csv_with(tmp_path, [*BAD_ROWS, "1,2", "1,2001,F,5,x,extra"])
    result = run_release(spec_with(tmp_path, csv_path, on_invalid="drop"), QUIET)
    assert result.diagnostics["year_sex"].rows_null_key == {"year": 4, "sex": 1}
    assert result.diagnostics["year_sex"].rows_malformed == 2
    assert len(file_digests(result.output)) == 3


@pytest.mark.spark
def test_spark_counts_the_same_units_and_draws_the_same_noise(tmp_path, spark, monkeypatch):
    """Both engines (and Spark's two paths) decide the same release the same way."""
    import dp_pipeline.release.tables.on_spark as spark_tables

    bad = [*many_bad_units(40), BAD_ROWS[0], ",1999,F,5,x", "1,2,3"]
    csv_path, parquet_path = write_inputs(tmp_path)
    csv_path.write_text(csv_path.read_text() + "\n".join(bad) + "\n")
    messages = {}
    for engine, driver_bytes in (("pandas", 0), ("spark", 8 * 2**20), ("spark", 0)):
        monkeypatch.setattr(spark_tables, "DRIVER_INPUT_BYTES", driver_bytes)
        folder = tmp_path / f"{engine}-{driver_bytes}"
        folder.mkdir()
        monkeypatch.setenv("DP_PIPELINE_HOME", str(folder))  # its ledger's home: one key each
        monkeypatch.setenv("HOME", str(Path(folder) / "user"))  # a user of its own
        key = folder / "master.key"
        if messages:  # the same master key (its value; the file's binding lines are the
            # first operator's): the same release identity and noise
            key.write_text((tmp_path / "pandas-0" / "master.key").read_text().splitlines()[0])
            key.chmod(0o600)
        spec = spec_with(folder, csv_path, engine=engine)
        with pytest.raises(InvalidRowsRefusedError) as info:
            run_release(spec, QUIET, spark)
        messages[(engine, driver_bytes)] = str(info.value)
        assert Ledger(spec.ledger_path).entry(spec.release_id).status == "reserved"
    assert len(set(messages.values())) == 1, messages
    # Parquet on Spark: the same units (its float year's NaN is the CSV's empty year).
    monkeypatch.setenv("DP_PIPELINE_HOME", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))  # a fourth operator, the same key
    key_line = (tmp_path / "pandas-0" / "master.key").read_text().splitlines()[0]
    (tmp_path / "master.key").write_text(key_line)
    (tmp_path / "master.key").chmod(0o600)
    spec = spec_with(tmp_path, parquet_path, engine="spark", threshold=10_000)
    result = run_release(spec, QUIET, spark)
    assert result.outcome == "reserved"
    assert pq.read_table(result.output / "year_sex.parquet").num_rows == 10
