"""A release from a user's own CSV or Parquet file: typed from the spec, bad values dropped.

The published files' schema comes from the spec (keys int64 or string by domain,
values int64), and the same release publishes the same files from CSV or
Parquet, on the pandas or the Spark engine. A bad value in the input (empty,
unparsable, not an integer, out of the domain) is an invalid row, dropped and
counted, never an abort.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dp_pipeline import MasterKey
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.plan.release_plan import plan_release
from dp_pipeline.release.publish.outputs import write_table
from dp_pipeline.release.run import Progress, apply_overrides, run_release
from dp_pipeline.release.sources.schema import (
    check_input_columns,
    parse_decimals,
    parse_integers,
    published_table,
    read_csv_pandas,
    spark_csv_schema,
)
from dp_pipeline.release.sources.source import OpenedInput, kept_log
from dp_pipeline.release.spec.load import load_spec
from dp_pipeline.release.spec.model import SpecError
from dp_pipeline.release.tables import engines

QUIET = Progress(quiet=True)
KEY = MasterKey.from_hex("5a" * 32)

SPEC = """
[release]
id = "people-1"
noise_partitions = 2

[population]
name = "people"
cap = {{ epsilon = 8, delta = 1e-8 }}

[privacy_unit]
column = "pid"

[budget]
epsilon = 2
delta = 1e-9

[input]
path = "{input}"
format = "{format}"

[output]
dir = "{tmp}/out"

[run]
engine = "{engine}"
master = "local[1]"
ledger = "{tmp}/ledger.sqlite"
key_file = "{tmp}/master.key"

[domains]
year = {{ start = 2000, stop = 2004 }}
sex = ["F", "M"]

[[tables]]
name = "year_sex"
keys = ["year", "sex"]
share = "1/3"
max_cells = 4

[[tables]]
name = "spend_by_sex"
keys = ["sex"]
statistic = "sum"
value = "spend"
lower = 0
upper = 1000
share = "1/3"
max_cells = 1
max_per_cell = 4

[[tables]]
name = "median_spend"
keys = ["sex"]
statistic = "median"
value = "spend"
lower = 0
upper = 1000
granularity = 10
share = "1/3"
max_cells = 1
"""

# Rows with one bad value each, in CSV text: what the reader and the engines make of them.
BAD_ROWS = [
    "900,,F,5,x",  # empty year: null key
    "901,abc,M,5,x",  # unparsable year: null key
    "902,1.5,F,5,x",  # not an integer: null key (Spark's CSV reader reads it as null)
    "903, 2001,M,5,x",  # a space is not part of an integer: null key
    "904,2001,,5,x",  # empty sex: null key
    "905,1999,F,5,x",  # outside the year domain
    "906,2001,X,5,x",  # outside the sex domain
    "907,2001,F,abc,x",  # unparsable spend: invalid value (sum and median tables)
    ",2001,F,5,x",  # no privacy unit
]


def people(seed: int = 1) -> pd.DataFrame:
    """Several rows per person (one per year they appear), valid values only."""
    rng = np.random.default_rng(seed)
    rows = []
    for pid in range(120):
        for year in range(2000, 2000 + int(rng.integers(1, 5))):
            rows.append((pid, year, rng.choice(["F", "M"]), int(rng.integers(0, 1200))))
    return pd.DataFrame(rows, columns=["pid", "year", "sex", "spend"])


def write_inputs(tmp_path: Path) -> tuple[Path, Path]:
    """The same rows as a CSV file (with `BAD_ROWS`) and as a Parquet file of other types.

    The Parquet file holds what a user's own pipeline might write: year as float64
    (NaN where the CSV's year is unreadable), pid as nullable int64, other columns
    in another order plus a column the spec does not use.
    """
    frame = people()
    lines = ["pid,year,sex,spend,note"]
    lines += [f"{r.pid},{r.year},{r.sex},{r.spend},x" for r in frame.itertuples()]
    lines += BAD_ROWS
    csv_path = tmp_path / "people.csv"
    csv_path.write_text("\n".join(lines) + "\n")
    bad = pd.DataFrame(
        {
            "pid": pd.array([900, 901, 902, 903, 904, 905, 906, 907, None], dtype="Int64"),
            "year": [np.nan] * 4 + [2001.0, 1999.0, 2001.0, 2001.0, 2001.0],
            "sex": ["F", "M", "F", "M", None, "F", "X", "F", "F"],
            "spend": [5.0] * 7 + [np.nan, 5.0],
        }
    )
    rows = pd.concat([frame.astype({"pid": "Int64", "year": float, "spend": float}), bad])
    table = pa.table(
        {
            "extra": pa.array(["x"] * len(rows)),
            "spend": pa.array(rows["spend"], type=pa.float64()),
            "sex": pa.array(rows["sex"], type=pa.string(), from_pandas=True),
            "year": pa.array(rows["year"], type=pa.float64(), from_pandas=True),
            "pid": pa.array(rows["pid"], type=pa.int64(), from_pandas=True),
        }
    )
    parquet_path = tmp_path / "people.parquet"
    pq.write_table(table, parquet_path, row_group_size=100)
    return csv_path, parquet_path


def make_spec(tmp_path: Path, input_path: Path, engine: str = "pandas"):
    text = SPEC.format(tmp=tmp_path, input=input_path, format=input_path.suffix[1:], engine=engine)
    path = tmp_path / f"spec-{engine}-{input_path.suffix[1:]}.toml"
    path.write_text(text)
    return load_spec(path)


def file_digests(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.parquet"))
    }


def test_integers_are_parsed_as_spark_parses_csv_longs():
    strings = ["7", "+8", "-9", "007", "", None, "abc", "1.5", " 7", "7 ", "1e3", "٣"]
    strings += ["9" * 19, "9223372036854775807", "9223372036854775808", "-" + "0" * 22 + "42"]
    text = pd.Series(strings, dtype=object)
    parsed = parse_integers(text)
    assert parsed.tolist() == [7, 8, -9, 7] + [pd.NA] * 9 + [
        2**63 - 1,
        pd.NA,
        -42,
    ]


def test_numbers_are_parsed_in_decimal_notation():
    text = pd.Series(["1.5", " 2 ", "-.5", "1e3", "3.", "abc", "", None, "NaN", "1_0", "0x10"])
    parsed = parse_decimals(text)
    assert parsed[:5].tolist() == [1.5, 2.0, -0.5, 1000.0, 3.0]
    assert np.isnan(parsed[5:]).all()


def test_the_csv_reader_types_the_specs_columns_and_reads_no_others(tmp_path):
    csv_path, _ = write_inputs(tmp_path)
    spec = make_spec(tmp_path, csv_path)
    frame = read_csv_pandas(spec, csv_path)
    assert list(frame.columns) == ["year", "sex", "spend", "pid"]  # no "note"
    assert str(frame["year"].dtype) == "Int64"
    assert frame["spend"].dtype == np.float64
    assert pd.api.types.is_string_dtype(frame["pid"].dtype) and frame["pid"].iloc[0] == "0"
    assert frame["year"].isna().sum() == 4
    # Spark reads every field as text (a malformed row then sets only its corrupt-record
    # column) and types the spec's columns with the pandas reader's rules.
    assert spark_csv_schema(spec, csv_path) == (
        "`pid` STRING, `year` STRING, `sex` STRING, `spend` STRING, `note` STRING, "
        "`_dp_malformed_row` STRING"
    )


def test_a_column_missing_from_the_csv_header_is_named(tmp_path):
    csv_path = tmp_path / "people.csv"
    csv_path.write_text("pid,yr,sex,spend\n1,2001,F,5\n")
    spec = make_spec(tmp_path, csv_path)
    with pytest.raises(SpecError) as info:
        read_csv_pandas(spec, csv_path)
    assert str(info.value) == (
        f"input {str(csv_path)!r}: 1 problem(s):\n"
        "  - its CSV header has 4 field(s) and lacks the declared column 'year'; every "
        "column the spec uses must be named there (the file's own names are not shown: "
        "they can be data)"
    )


def test_bad_values_in_a_csv_are_dropped_and_counted_not_an_abort(tmp_path):
    csv_path, _ = write_inputs(tmp_path)
    spec = make_spec(tmp_path, csv_path)
    result = run_release(spec, progress=QUIET)
    tables = {p.stem: pq.read_table(p) for p in result.output.glob("*.parquet")}
    assert tables["year_sex"].schema == pa.schema(
        [("year", pa.int64()), ("sex", pa.string()), ("value", pa.int64())]
    )
    assert tables["year_sex"].num_rows == 10  # every declared cell (stop is inclusive)
    assert tables["median_spend"].schema.field("value").type == pa.int64()
    assert tables["year_sex"].schema.metadata is None  # no engine or pandas metadata
    html = (result.output / "report.html").read_text()
    assert "<img alt='Margins of error' src='data:image/png;base64," in html  # plots
    counts = result.diagnostics["year_sex"]
    assert counts.rows_in == len(people()) + len(BAD_ROWS)
    assert counts.rows_null_key == {"year": 4, "sex": 1}
    assert counts.rows_out_of_domain == {"year": 1, "sex": 1}
    assert counts.rows_null_unit == 1
    spend = result.diagnostics["spend_by_sex"]
    assert spend.rows_null_key == {"sex": 1}
    assert spend.rows_out_of_domain == {"sex": 1}
    assert spend.rows_invalid_value == 1


@pytest.mark.spark
@pytest.mark.driver_aggregation  # sets DRIVER_INPUT_BYTES itself, for each engine path
def test_csv_or_parquet_on_pandas_or_spark_publish_identical_files(tmp_path, spark, monkeypatch):
    """The engine step of one release (one digest labels the noise) on every input and engine.

    A release's identity covers the fingerprint of the files it reads, so two real
    releases of a CSV and of a Parquet file draw different noise; with the same
    digest, every combination must publish the same bytes. Spark runs both its
    paths: the small-input driver aggregation and the Spark SQL jobs.
    """
    import dp_pipeline.release.tables.on_spark as spark_tables

    driver_input_bytes = spark_tables.DRIVER_INPUT_BYTES
    csv_path, parquet_path = write_inputs(tmp_path)
    published, diagnostics = {}, {}
    for input_path in (csv_path, parquet_path):
        for engine, driver_bytes in (("pandas", 0), ("spark", driver_input_bytes), ("spark", 0)):
            monkeypatch.setattr(spark_tables, "DRIVER_INPUT_BYTES", driver_bytes)
            spec = make_spec(tmp_path, input_path, engine)
            plan = plan_release(spec)
            source = engines.open_input(spec, input_path, spec.input_format, QUIET, spark)
            results, _, found = engines.compute_tables(
                spec, plan, KEY, source, "digest", with_truth=False, progress=QUIET
            )
            label = (input_path.suffix, engine, driver_bytes)
            files = {}
            for table in spec.tables:
                path = tmp_path / f"{table.name}{hash(label)}.parquet"
                write_table(published_table(spec, table, results[table.name]), path)
                files[table.name] = hashlib.sha256(path.read_bytes()).hexdigest()
            published[label] = files
            diagnostics[label] = found
    first = next(iter(published.values()))
    assert all(files == first for files in published.values()), published
    first = next(iter(diagnostics.values()))
    assert all(found == first for found in diagnostics.values())
    assert first["year_sex"].rows_null_key == {"year": 4, "sex": 1}


@pytest.mark.spark
@pytest.mark.driver_aggregation
def test_a_csv_release_on_spark_publishes_the_pandas_engines_files(tmp_path, spark, monkeypatch):
    csv_path, _ = write_inputs(tmp_path)
    folders = {}
    for engine in ("pandas", "spark"):
        root = tmp_path / engine
        root.mkdir()
        if engine == "spark":  # the same master key's value, a fresh ledger and output
            # folder (the key file's binding lines are the first operator's)
            key_line = (tmp_path / "pandas" / "master.key").read_text().splitlines()[0]
            (root / "master.key").write_text(key_line)
            (root / "master.key").chmod(0o600)
        # each engine's ledger and key are its own home's (the key binds to one ledger)
        monkeypatch.setenv("DP_PIPELINE_HOME", str(root))
        monkeypatch.setenv("HOME", str(Path(root) / "user"))  # a user of its own
        lines = io.StringIO()
        spec = make_spec(root, csv_path, engine)
        result = run_release(spec, progress=Progress(stream=lines), spark=spark)
        folders[engine] = file_digests(result.output)
    assert "spark: read the input" in lines.getvalue()
    assert "a small input is aggregated on the driver" in lines.getvalue()
    assert folders["pandas"] == folders["spark"]
    assert len(folders["spark"]) == 3


JVM_NOISE = ("WARN", "log4j", "NativeCodeLoader", "incubator", "loopback", "SPARK_LOCAL_IP")


def dp_release(*arguments: str, cwd: Path, temp: Path | None = None):
    """The CLI in a subprocess (``temp``: its temporary folder, where JVM logs go)."""
    command = [sys.executable, "-m", "dp_pipeline.release", "run", *arguments]
    env = None if temp is None else dict(os.environ, TMPDIR=str(temp))
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600, env=env)


def jvm_logs(folder: Path) -> list[Path]:
    return sorted(folder.rglob("dp_pipeline-spark-*.log"))


@pytest.mark.spark
def test_the_cli_prints_its_own_lines_but_no_jvm_or_spark_warnings(tmp_path):
    csv_path, _ = write_inputs(tmp_path)
    make_spec(tmp_path, csv_path, "spark")
    temp = tmp_path / "temp"
    temp.mkdir()
    done = dp_release("spec-spark-csv.toml", cwd=tmp_path, temp=temp)
    assert done.returncode == 0, done.stderr
    for noise in JVM_NOISE:
        assert noise not in done.stderr and noise not in done.stdout, noise
    assert "spark: starting a session on local[1]" in done.stderr
    assert "(see --verbose)" in done.stderr
    assert "release written to" in done.stderr
    assert "release people-1: published and committed (new spend)" in done.stdout
    assert jvm_logs(temp) == []  # the run went well: its JVM log is deleted
    # An error still reaches the user: a column the spec needs is not in the file.
    csv_path.write_text("pid,yr,sex,spend\n1,2001,F,5\n")
    failed = dp_release("spec-spark-csv.toml", "--release-id", "people-2", cwd=tmp_path, temp=temp)
    assert failed.returncode == 2, failed.stderr
    assert "Traceback" not in failed.stderr
    assert "its CSV header has 4 field(s) and lacks the declared column 'year'" in failed.stderr
    for noise in JVM_NOISE:
        assert noise not in failed.stderr, noise
    # After an error the JVM log is kept, and the message names it.
    (kept,) = jvm_logs(temp)
    assert f"the JVM's and Spark's own log lines of this run are kept in {kept}" in failed.stderr


@pytest.mark.spark
def test_the_cli_shows_the_jvms_lines_with_verbose(tmp_path):
    csv_path, _ = write_inputs(tmp_path)
    make_spec(tmp_path, csv_path, "spark")
    temp = tmp_path / "temp"
    temp.mkdir()
    done = dp_release("spec-spark-csv.toml", "--verbose", cwd=tmp_path, temp=temp)
    assert done.returncode == 0, done.stderr
    assert "log4j" in done.stderr
    assert "release written to" in done.stderr
    assert jvm_logs(temp) == []  # the lines went to the terminal, no log file


def test_a_csv_path_names_its_format_unless_one_is_given(tmp_path):
    csv_path, parquet_path = write_inputs(tmp_path)
    spec_path = tmp_path / "no-format.toml"
    text = SPEC.format(tmp=tmp_path, input=csv_path, format="csv", engine="pandas")
    spec_path.write_text(text.replace('format = "csv"\n', ""))
    assert "format" not in spec_path.read_text().split("[input]")[1].split("[")[0]
    spec = load_spec(spec_path)
    assert spec.input_format == "csv"
    # --input brings the format its name says; --format decides first; else the spec's.
    parquet_spec = apply_overrides(spec, input_path=str(parquet_path))
    assert parquet_spec.input_format == "parquet"
    assert apply_overrides(parquet_spec, input_path=str(csv_path)).input_format == "csv"
    folder = tmp_path / "parts"
    assert apply_overrides(spec, input_path=str(folder)).input_format == "csv"
    assert apply_overrides(parquet_spec, input_path=str(folder)).input_format == "parquet"
    forced = apply_overrides(spec, input_path=str(csv_path), input_format="parquet")
    assert forced.input_format == "parquet"
    with pytest.raises(SpecError) as info:
        apply_overrides(spec, input_path=str(csv_path), input_format="json")
    assert "--format 'json': must be one of parquet, csv" in str(info.value)


def test_an_input_without_a_spec_column_is_refused_before_the_reservation(tmp_path):
    _, parquet_path = write_inputs(tmp_path)
    pq.write_table(pq.read_table(parquet_path).drop(["year"]), parquet_path)
    spec = make_spec(tmp_path, parquet_path)
    with pytest.raises(SpecError) as info:
        run_release(spec, Progress(quiet=True))
    assert str(info.value) == (
        f"input {str(parquet_path)!r}: 1 problem(s):\n"
        "  - its Parquet schema has 4 field(s) and lacks the declared column 'year'; every "
        "column the spec uses must be named there (the file's own names are not shown: "
        "they can be data)"
    )
    # Nothing was reserved: the ledger holds no row for the release.
    assert Ledger(spec.ledger_path).entry(spec.release_id) is None
    # A partition folder's name=value directory is a column the engines read.
    folder = tmp_path / "parts" / "year=2001"
    folder.mkdir(parents=True)
    pq.write_table(pq.read_table(parquet_path), folder / "part-0.parquet")
    check_input_columns(spec, tmp_path / "parts", (folder / "part-0.parquet",), "parquet")


def test_closing_an_input_deletes_its_jvm_log_unless_the_run_failed(tmp_path):
    logs = []
    for failed in (False, True):
        log = tmp_path / f"dp_pipeline-spark-{failed}.log"
        log.write_text("WARN NativeCodeLoader\n")
        opened = OpenedInput(tmp_path, "csv", "spark", (), jvm_log=str(log))
        logs.append((opened.close(failed=failed), log.exists()))
    assert logs == [(None, False), (str(tmp_path / "dp_pipeline-spark-True.log"), True)]
    error = ValueError("the run failed")
    kept_log(error, logs[1][0])
    assert error.__notes__ == [
        f"the JVM's and Spark's own log lines of this run are kept in {logs[1][0]}"
    ]
    kept_log(error, None)  # --verbose or a session not started here: no log
    assert len(error.__notes__) == 1
