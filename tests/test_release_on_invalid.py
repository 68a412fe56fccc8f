"""``input.on_invalid``: invalid rows dropped and counted (default) or the release refused.

Under ``"error"`` a release whose input has one invalid row stops before the
ledger is touched: the error names the column, the reason code and the rule,
the ledger holds no reservation and the output folder nothing. Both engines
refuse the same rows with the same message; a release the rule lets through
publishes exactly what ``"drop"`` publishes (the rule is not part of the identity).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_release_inputs import BAD_ROWS, QUIET, SPEC, file_digests, people, write_inputs

from dp_pipeline.release.ledger import Ledger
from dp_pipeline.release.run import run_release
from dp_pipeline.release.spec import load_spec
from dp_pipeline.release.spec_model import SpecError

# What each of `BAD_ROWS` breaks first: (column, reason code).
BROKEN = [
    ("year", "null_key"),
    ("year", "null_key"),
    ("year", "null_key"),
    ("year", "null_key"),
    ("sex", "null_key"),
    ("year", "out_of_domain"),
    ("sex", "out_of_domain"),
    ("spend", "invalid_value"),
    ("pid", "null_unit"),
]
RULES = {
    "null_key": "have a null (empty or unparsable) key",
    "out_of_domain": "have a key outside the declared domain",
    "null_unit": "have a null privacy unit",
    "invalid_value": "hold a null, NaN or infinite value",
}


def spec_with(tmp_path, input_path, engine="pandas", on_invalid="error", release_id="people-1"):
    text = SPEC.format(tmp=tmp_path, input=input_path, format=input_path.suffix[1:], engine=engine)
    text = text.replace("[input]\n", f'[input]\non_invalid = "{on_invalid}"\n')
    text = text.replace('id = "people-1"', f'id = "{release_id}"')
    path = tmp_path / f"spec-{engine}-{on_invalid}-{release_id}.toml"
    path.write_text(text)
    return load_spec(path)


def csv_with(tmp_path, bad_rows, name="input.csv"):
    lines = ["pid,year,sex,spend,note"]
    lines += [f"{r.pid},{r.year},{r.sex},{r.spend},x" for r in people().itertuples()]
    path = tmp_path / name
    path.write_text("\n".join([*lines, *bad_rows]) + "\n")
    return path


def expected_message(spec, input_path, column, reason):
    return (
        f"release {spec.release_id!r}, input {str(input_path)!r}: 1 problem(s):\n"
        f"  - column {column!r}: some rows {RULES[reason]} (reason code {reason}); "
        f'input.on_invalid = "error" refuses a release with any invalid row, so nothing '
        f"was reserved or written (the message quotes no count or value from the data); "
        f'set input.on_invalid = "drop" to drop such rows and count them in the '
        f"non-private diagnostics"
    )


def assert_refused_before_the_ledger(spec, input_path, column, reason, spark=None):
    with pytest.raises(SpecError) as info:
        run_release(spec, QUIET, spark)
    assert str(info.value) == expected_message(spec, input_path, column, reason)
    assert Ledger(spec.ledger_path).entry(spec.release_id) is None  # no reservation
    output = spec.output_dir
    assert not any(p for p in Path(output).glob("*")), "output written"


def test_the_rule_is_a_spec_field_with_drop_by_default(tmp_path):
    csv_path = csv_with(tmp_path, [])
    assert spec_with(tmp_path, csv_path, on_invalid="drop").on_invalid == "drop"
    assert spec_with(tmp_path, csv_path).on_invalid == "error"
    text = SPEC.format(tmp=tmp_path, input=csv_path, format="csv", engine="pandas")
    default = tmp_path / "default.toml"
    default.write_text(text)
    assert load_spec(default).on_invalid == "drop"


def test_an_unknown_rule_is_a_spec_error_naming_the_field(tmp_path):
    with pytest.raises(SpecError) as info:
        spec_with(tmp_path, csv_with(tmp_path, []), on_invalid="skip")
    assert "input.on_invalid = 'skip': must be one of drop, error" in str(info.value)


@pytest.mark.parametrize(("bad_row", "broken"), list(zip(BAD_ROWS, BROKEN, strict=True)))
def test_each_kind_of_invalid_row_refuses_the_release_before_the_ledger(tmp_path, bad_row, broken):
    csv_path = csv_with(tmp_path, [bad_row])
    spec = spec_with(tmp_path, csv_path)
    assert_refused_before_the_ledger(spec, csv_path, *broken)


def test_the_first_broken_rule_in_table_and_key_order_is_named(tmp_path):
    csv_path, parquet_path = write_inputs(tmp_path)  # every kind of bad row at once
    for input_path in (csv_path, parquet_path):
        spec = spec_with(tmp_path, input_path)
        assert_refused_before_the_ledger(spec, input_path, "year", "null_key")


def test_a_valid_input_publishes_what_drop_publishes_and_a_committed_id_is_re_emitted(tmp_path):
    csv_path = csv_with(tmp_path, [])
    dropped = run_release(spec_with(tmp_path, csv_path, on_invalid="drop"), QUIET)
    digests = file_digests(dropped.output)
    report = (dropped.output / "privacy_report.json").read_text()
    # The same release id under "error": the same identity, so the committed files again.
    again = run_release(spec_with(tmp_path, csv_path), QUIET)
    assert again.outcome == "already_committed"
    assert file_digests(again.output) == digests
    assert (again.output / "privacy_report.json").read_text() == report
    # A new id under "error" on a valid input is an ordinary release.
    fresh = run_release(spec_with(tmp_path, csv_path, release_id="people-2"), QUIET)
    assert fresh.outcome == "reserved" and len(file_digests(fresh.output)) == 3
    # The committed id with an invalid row added: refused, its files untouched.
    csv_path.write_text(csv_path.read_text() + BAD_ROWS[5] + "\n")
    with pytest.raises(SpecError, match="column 'year': some rows have a key outside"):
        run_release(spec_with(tmp_path, csv_path), QUIET)
    assert file_digests(dropped.output) == digests


def test_drop_still_publishes_and_counts_the_invalid_rows(tmp_path):
    csv_path = csv_with(tmp_path, BAD_ROWS)
    result = run_release(spec_with(tmp_path, csv_path, on_invalid="drop"), QUIET)
    assert result.diagnostics["year_sex"].rows_null_key == {"year": 4, "sex": 1}
    assert len(file_digests(result.output)) == 3


@pytest.mark.spark
def test_spark_refuses_the_same_rows_with_the_same_message(tmp_path, spark):
    for index in (0, 4, 5, 6, 7, 8):
        folder = tmp_path / f"row{index}"
        folder.mkdir()
        csv_path = csv_with(folder, [BAD_ROWS[index]])
        spec = spec_with(folder, csv_path, engine="spark")
        assert_refused_before_the_ledger(spec, csv_path, *BROKEN[index], spark=spark)
    # Parquet with a float year (NaN: null key) and the other bad values.
    _, parquet_path = write_inputs(tmp_path)
    spec = spec_with(tmp_path, parquet_path, engine="spark")
    assert_refused_before_the_ledger(spec, parquet_path, "year", "null_key", spark=spark)
    table = pq.read_table(parquet_path).to_pandas()
    valid = table[table["year"].notna()]  # left: year out of domain first
    pq.write_table(pa.Table.from_pandas(valid), parquet_path)
    assert_refused_before_the_ledger(spec, parquet_path, "year", "out_of_domain", spark=spark)
    # A valid input passes the check and is released.
    clean = csv_with(tmp_path, [], name="clean.csv")
    result = run_release(spec_with(tmp_path, clean, engine="spark"), QUIET, spark)
    assert result.outcome == "reserved"
