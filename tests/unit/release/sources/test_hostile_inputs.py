"""A spec names its input, and a spec is hostile: no message shows a file's content, and an
input that is no data file (a device, a FIFO, /proc, the dp_pipeline home, the master key)
is refused before anything is reserved. Each test names the secret it plants and checks
it appears nowhere the run writes (its message, stdout and stderr, the ``--json`` line)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dp_pipeline.release.cli import main
from dp_pipeline.release.input_kinds import special_input_problem
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.run import Progress, run_release
from dp_pipeline.release.sources.arrow_files import open_arrow_input
from dp_pipeline.release.sources.schema import (
    check_column_families,
    check_csv_headers,
    check_parquet_footers,
)
from dp_pipeline.release.spec.load import load_spec
from dp_pipeline.release.spec.model import SpecError
from tests.unit.release.sources.test_release_inputs import SPEC, write_inputs

QUIET = Progress(quiet=True)
KEY_HEX = hashlib.sha256(b"hostile inputs").hexdigest()  # the run's key: never shown
SECRET = "sk_live_51HxSecretToken"  # a secret-looking text planted in a file


@pytest.fixture(autouse=True)
def key_from_its_file(monkeypatch):
    monkeypatch.delenv("DP_PIPELINE_MASTER_KEY", raising=False)


def write_key(tmp_path: Path) -> Path:
    key = tmp_path / "master.key"
    key.write_text(KEY_HEX + "\n")
    key.chmod(0o600)
    return key


def spec_file(tmp_path: Path, input_path, engine: str = "pandas", fmt: str = "csv") -> Path:
    write_key(tmp_path)
    text = SPEC.format(tmp=tmp_path, input=input_path, format=fmt, engine=engine)
    path = tmp_path / f"hostile-{engine}.toml"
    path.write_text(text)
    return path


def nothing_reserved(tmp_path: Path) -> bool:
    ledger = tmp_path / "ledger.sqlite"
    return not ledger.exists() or Ledger(ledger).history() == []


def cli_run(capsys, *arguments: str) -> tuple[int, str]:
    """(exit code, everything printed) of ``dp-release run ARGS`` (stdout and stderr)."""
    capsys.readouterr()
    status = main(["run", *arguments])
    captured = capsys.readouterr()
    return status, captured.out + captured.err


def assert_no_key(text: str) -> None:
    for shown in (KEY_HEX, KEY_HEX[:12], KEY_HEX[-12:], KEY_HEX.upper()[:12]):
        assert shown not in text, text


@pytest.mark.parametrize("json_line", [False, True])
def test_the_key_file_as_the_input_shows_nothing_and_reserves_nothing(tmp_path, capsys, json_line):
    spec = spec_file(tmp_path, tmp_path / "people.csv")
    key = tmp_path / "master.key"
    link = tmp_path / "innocent.csv"
    link.symlink_to(key)
    for given in (key, link):
        extra = ["--json"] if json_line else []
        status, printed = cli_run(
            capsys, str(spec), "--input", str(given), "--format", "csv", *extra
        )
        assert status == 2, printed
        assert_no_key(printed)
        assert "master key file of this run" in printed
        if json_line:
            line = json.loads(printed.splitlines()[0])
            assert line["status"] == "spec_error" and "input.path" in line["message"]
        assert nothing_reserved(tmp_path)


@pytest.mark.parametrize("engine", ["pandas", pytest.param("spark", marks=pytest.mark.spark)])
def test_proc_self_environ_as_the_input_is_refused_before_anything_starts(
    tmp_path, capsys, monkeypatch, engine
):
    # The Spark engine would start a JVM after the check: the fast tier forbids one.
    monkeypatch.setenv("DP_HOSTILE_SECRET", SECRET)
    spec = spec_file(tmp_path, "/proc/self/environ", engine)
    status, printed = cli_run(capsys, str(spec), "--json")
    assert status == 2, printed
    assert SECRET not in printed and "DP_HOSTILE_SECRET" not in printed
    assert "it is under /proc, the system's own files, not data" in printed
    assert nothing_reserved(tmp_path)


def test_a_copy_of_the_key_named_as_a_csv_shows_only_its_field_count(tmp_path, capsys):
    copy = tmp_path / "copy.csv"
    copy.write_text(KEY_HEX + "\n")
    spec = spec_file(tmp_path, copy)
    for extra in ([], ["--json"]):
        status, printed = cli_run(capsys, str(spec), *extra)
        assert status == 2, printed
        assert_no_key(printed)
        assert (
            "its CSV header has 1 field(s) and lacks the declared columns 'year', 'sex', "
            "'spend', 'pid'"
        ) in printed
        assert nothing_reserved(tmp_path)


def test_a_confidential_csv_without_a_header_never_shows_its_first_record(tmp_path):
    data = tmp_path / "confidential.csv"
    data.write_text(f"4711,2001,{SECRET},17\n4712,2002,F,3\n")
    spec = load_spec(spec_file(tmp_path, data))
    with pytest.raises(SpecError) as caught:
        run_release(spec, QUIET)
    message = str(caught.value)
    assert SECRET not in message and "4711" not in message
    assert message == (
        f"input {str(data)!r}: 1 problem(s):\n"
        "  - its CSV header has 4 field(s) and lacks the declared columns 'year', 'sex', "
        "'spend', 'pid'; every column the spec uses must be named there (the file's own "
        "names are not shown: they can be data)"
    )
    assert nothing_reserved(tmp_path)


def test_a_csv_header_naming_an_undeclared_column_twice_does_not_name_it(tmp_path):
    spec = load_spec(spec_file(tmp_path, tmp_path / "people.csv"))
    header = ["pid", "year", "sex", "spend", SECRET, SECRET]
    with pytest.raises(SpecError) as caught:
        check_csv_headers(spec, [("a.csv", header)])
    assert SECRET not in str(caught.value)
    assert "names a column the spec does not use (not shown) more than once" in str(caught.value)
    with pytest.raises(SpecError) as caught:
        check_csv_headers(spec, [("a.csv", ["pid", "year", "sex", "spend", "pid"])])
    assert "its CSV header names the declared column(s) 'pid' more than once" in str(caught.value)


def test_csv_files_with_different_headers_are_told_apart_by_counts_and_declared_names(tmp_path):
    spec = load_spec(spec_file(tmp_path, tmp_path / "people.csv"))
    first = ["pid", "year", "sex", "spend", SECRET]
    cases = [
        (["pid", "year", "sex", "spend"], "it has 4 field(s), the first file's 5"),
        (
            ["year", "pid", "sex", "spend", SECRET],
            "the declared column 'year' is field 1 here and field 2 there",
        ),
        (
            ["pid", "year", "sex", "spend", "zz_undeclared"],
            "a column the spec does not use has another name or place (not shown)",
        ),
    ]
    for header, expected in cases:
        with pytest.raises(SpecError) as caught:
            check_csv_headers(spec, [("a.csv", first), ("b.csv", header)])
        message = str(caught.value)
        assert message.startswith(
            "input 'b.csv': 1 problem(s):\n  - its header differs from the first file's "
        )
        assert expected in message and SECRET not in message and "zz_undeclared" not in message


def test_a_parquet_column_the_spec_did_not_declare_is_never_named(tmp_path):
    _, parquet = write_inputs(tmp_path)
    table = pq.read_table(parquet).drop(["year"])
    table = table.append_column(SECRET, pa.array([1] * table.num_rows))
    pq.write_table(table, parquet)
    spec = load_spec(spec_file(tmp_path, parquet, fmt="parquet"))
    with pytest.raises(SpecError) as caught:
        run_release(spec, QUIET)
    message = str(caught.value)
    assert SECRET not in message and "extra" not in message
    assert "its Parquet schema has 5 field(s) and lacks the declared column 'year'" in message, (
        message
    )
    assert nothing_reserved(tmp_path)


def test_a_nested_parquet_type_is_named_by_its_kind_not_its_fields(tmp_path):
    _, parquet = write_inputs(tmp_path)
    table = pq.read_table(parquet)
    rows = table.num_rows
    nested = pa.array([{SECRET: 1}] * rows)
    table = table.set_column(table.schema.get_field_index("sex"), "sex", nested)
    pq.write_table(table, parquet)
    spec = load_spec(spec_file(tmp_path, parquet, fmt="parquet"))
    with pytest.raises(SpecError) as caught:
        check_parquet_footers(spec, tmp_path, [parquet])
    message = str(caught.value)
    assert SECRET not in message
    assert "column 'sex' has type a struct type; as the spec's string key" in message


def test_dev_zero_is_refused_before_the_reservation(tmp_path, capsys):
    for fmt in ("csv", "parquet"):
        spec = spec_file(tmp_path, "/dev/zero", fmt=fmt)
        status, printed = cli_run(capsys, str(spec), "--json")
        assert status == 2, printed
        assert "input.path = '/dev/zero' (or --input): it is under /dev" in printed
        assert nothing_reserved(tmp_path)


@pytest.mark.parametrize("engine", ["pandas", pytest.param("spark", marks=pytest.mark.spark)])
def test_a_fifo_is_refused_before_the_reservation(tmp_path, engine):
    fifo = tmp_path / "people.csv"
    os.mkfifo(fifo)
    spec = load_spec(spec_file(tmp_path, fifo, engine))
    with pytest.raises(SpecError) as caught:
        run_release(spec, QUIET)  # a read would block: the refusal comes first
    assert "it is a FIFO (named pipe), not a regular file" in str(caught.value)
    assert nothing_reserved(tmp_path)


def test_the_dp_pipeline_home_is_refused_as_an_input(tmp_path, monkeypatch):
    # The conftest makes each test's folder its operator's home (the spec's ledger and key).
    assert Path(os.environ["DP_PIPELINE_HOME"]) == tmp_path
    write_key(tmp_path)
    Ledger(tmp_path / "ledger.sqlite").close()
    (tmp_path / "bindings.json").write_text("{}")
    for named, fmt, rule in (
        (tmp_path, "parquet", "it is (or holds) the dp_pipeline home ($DP_PIPELINE_HOME"),
        (tmp_path.parent, "parquet", "it is (or holds) the dp_pipeline home ($DP_PIPELINE_HOME"),
        (tmp_path / "ledger.sqlite", "csv", "it is the ledger of this run"),
        (tmp_path / "bindings.json", "csv", "it is the dp_pipeline home's bindings.json"),
    ):
        spec = load_spec(spec_file(tmp_path, named, fmt=fmt))
        with pytest.raises(SpecError) as caught:
            run_release(spec, QUIET)
        assert rule in str(caught.value)
        assert nothing_reserved(tmp_path)


def test_a_folder_holding_a_link_to_the_key_is_refused_before_the_reservation(tmp_path):
    _, parquet = write_inputs(tmp_path)
    folder = tmp_path / "parts"
    folder.mkdir()
    parquet.rename(folder / "part-0.parquet")
    spec = load_spec(spec_file(tmp_path, folder, fmt="parquet"))
    (folder / "part-1.parquet").symlink_to(tmp_path / "master.key")
    with pytest.raises(SpecError) as caught:
        run_release(spec, QUIET)
    message = str(caught.value)
    assert f"its file {str(folder / 'part-1.parquet')!r}: it is the master key file" in message
    assert_no_key(message)
    assert nothing_reserved(tmp_path)


@pytest.mark.spark
@pytest.mark.parametrize("json_line", [False, True])
def test_on_spark_a_copy_of_the_key_named_as_a_csv_shows_nothing(
    tmp_path, capsys, spark, json_line
):
    copy = tmp_path / "copy.csv"
    copy.write_text(KEY_HEX + "\n")
    spec = spec_file(tmp_path, copy, "spark")
    status, printed = cli_run(capsys, str(spec), *(["--json"] if json_line else []))
    assert status == 2, printed
    assert_no_key(printed)
    assert "its CSV header has 1 field(s) and lacks the declared columns" in printed
    assert nothing_reserved(tmp_path)


def test_a_schema_column_the_spec_did_not_declare_is_never_named(tmp_path):
    spec = load_spec(spec_file(tmp_path, tmp_path / "people.csv"))
    families = {"pid": "integer", "sex": "string", SECRET: "integer", "spend": "struct"}
    with pytest.raises(SpecError) as caught:
        check_column_families(spec, families, "table db.people")
    message = str(caught.value)
    assert SECRET not in message
    assert "its schema has 4 field(s) and lacks the declared column 'year'" in message


@pytest.mark.parametrize("year_in_files", [False, True])
def test_a_hive_partition_type_conflict_is_one_line_before_the_ledger(
    tmp_path, capsys, year_in_files
):
    folder = tmp_path / "hive"
    rows = {"pid": [1, 2], "sex": ["F", "M"], "spend": [1.0, 2.0]}
    if year_in_files:
        rows["year"] = [2001, 2002]
    for value in ("2001", "zz_secret_value"):
        (folder / f"year={value}").mkdir(parents=True)
        pq.write_table(pa.table(rows), folder / f"year={value}" / "part-0.parquet")
    spec = spec_file(tmp_path, folder, fmt="parquet")
    status, printed = cli_run(capsys, str(spec), "--json")
    assert status == 2, printed
    assert "Traceback" not in printed and "zz_secret_value" not in printed
    line = json.loads(printed.splitlines()[0])
    expected = (
        "its files and partition folders cannot be read as one dataset"
        if year_in_files
        else "column 'year' comes from its year=... partition folders, whose values are not "
        "all integers"
    )
    assert line["status"] == "spec_error" and expected in line["message"]
    assert nothing_reserved(tmp_path)


def test_domain_values_equal_under_nfc_are_refused_naming_the_field(tmp_path):
    composed, decomposed = "Qu\u00e9bec", "Que\u0301bec"
    text = SPEC.format(tmp=tmp_path, input=tmp_path / "people.csv", format="csv", engine="pandas")
    text = text.replace('sex = ["F", "M"]', f'sex = ["F", "M", "{composed}", "{decomposed}"]')
    path = tmp_path / "nfc.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert (
        "domains.sex: values 'Qu\\xe9bec' and 'Que\\u0301bec' are the same text in Unicode "
        "normal form NFC but different code points; write each value once, in one form (NFC)"
    ) in str(caught.value)
    # One form of each is a domain like any other.
    path.write_text(text.replace(f', "{decomposed}"', ""), encoding="utf-8")
    assert load_spec(path).domains["sex"] == ("F", "M", composed)


def csv_with_malformed_records(tmp_path: Path) -> Path:
    """A valid input plus records one of which used to decide the pandas engine's outcome:
    a 2 MiB field (longer than pyarrow's block), a 2 MiB id, an id that is not UTF-8, a
    key holding U+FFFD (what Spark decodes such bytes to)."""
    csv_path, _ = write_inputs(tmp_path)
    long = "y" * (2 * 2**20)
    records = [
        f"950,2001,F,5,{long}".encode(),  # valid: a long field the spec does not use
        f"{long},2002,M,7,x".encode(),  # valid: a long id is an id
        b"9\xff51,2001,F,5,x",  # malformed: an id that is not UTF-8
        "952,2001,F\ufffd,5,x".encode(),  # malformed: U+FFFD in a used field
        b"953,2001,M,5,\xff",  # valid: bytes that are not UTF-8 in a column not used
    ]
    csv_path.write_bytes(csv_path.read_bytes() + b"\n".join(records) + b"\n")
    return csv_path


def test_malformed_records_are_invalid_rows_not_an_abort_on_pandas(tmp_path):
    csv_path = csv_with_malformed_records(tmp_path)
    text = SPEC.format(tmp=tmp_path, input=csv_path, format="csv", engine="pandas")
    write_key(tmp_path)
    path = tmp_path / "drop.toml"
    path.write_text(text.replace("[input]\n", '[input]\non_invalid = "drop"\n'))
    result = run_release(load_spec(path), QUIET)
    assert result.outcome == "reserved"
    assert result.diagnostics["year_sex"].rows_malformed == 2
    assert (result.output / "manifest.json").exists()


@pytest.mark.spark
def test_malformed_records_are_the_same_invalid_rows_on_both_engines(tmp_path, spark, monkeypatch):
    import dp_pipeline.release.tables.on_spark as spark_tables

    csv_path = csv_with_malformed_records(tmp_path)
    published, malformed = {}, {}
    for engine, driver_bytes in (("pandas", 0), ("spark", 64 * 2**20), ("spark", 0)):
        monkeypatch.setattr(spark_tables, "DRIVER_INPUT_BYTES", driver_bytes)
        folder = tmp_path / f"{engine}-{driver_bytes}"
        folder.mkdir()
        monkeypatch.setenv("DP_PIPELINE_HOME", str(folder))  # its ledger's home: one key each
        monkeypatch.setenv("HOME", str(Path(folder) / "user"))  # a user of its own
        text = SPEC.format(tmp=folder, input=csv_path, format="csv", engine=engine)
        write_key(folder)  # one key: the same release identity and noise
        # The noisy count of invalid units decides, as the spec's rule says: published
        # under a high threshold, on the same count on every path.
        text = text.replace('share = "1/3"', 'share = "3/10"')
        fields = 'on_invalid = "error"\ninvalid_share = "1/10"\ninvalid_threshold = 10000\n'
        path = folder / "error.toml"
        path.write_text(text.replace("[input]\n", f"[input]\n{fields}"))
        result = run_release(load_spec(path), QUIET, spark)
        malformed[(engine, driver_bytes)] = result.diagnostics["year_sex"].rows_malformed
        published[(engine, driver_bytes)] = {
            name: (result.output / name).read_bytes()
            for name in ("year_sex.parquet", "spend_by_sex.parquet", "median_spend.parquet")
        }
    assert set(malformed.values()) == {2}, malformed
    assert len({tuple(sorted(files.items())) for files in published.values()}) == 1


def test_a_store_path_that_is_no_file_or_folder_is_refused_before_it_is_read(tmp_path):
    fifo = tmp_path / "people.csv"
    os.mkfifo(fifo)
    spec = load_spec(spec_file(tmp_path, tmp_path / "other.csv"))
    with pytest.raises(SpecError) as caught:
        open_arrow_input(spec, f"file://{fifo}", "csv")  # a read would block
    assert "it is neither a regular file nor a folder (a device, a FIFO or a socket)" in str(
        caught.value
    )


def test_a_regular_file_on_the_shared_memory_disk_is_an_input(tmp_path):
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm on this system")
    folder = Path(tempfile.mkdtemp(dir=shm))
    try:
        (folder / "people.csv").write_text("pid,year\n1,2001\n")
        assert special_input_problem(folder / "people.csv", None) is None
        assert special_input_problem(folder, None) is None
        os.mkfifo(folder / "pipe")
        assert "FIFO" in special_input_problem(folder / "pipe", None)
    finally:
        shutil.rmtree(folder)
