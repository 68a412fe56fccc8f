"""The pandas engine's inputs on a store pyarrow opens (``s3://``): listed, fingerprinted
as a local copy, schema checked, and every failure of the store (unreachable, refused
credentials) one line before the reservation, with no credential in it.

The S3 store is a real server process (`tests.support.s3_server`: moto's S3-compatible server,
installed with the test extra, on a free local port); without it the tests that need
it are skipped locally and fail in CI. The unreachable store needs no server (a closed
local port).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from dp_pipeline.release.run import Progress, apply_overrides, run_release
from dp_pipeline.release.spec.load import load_spec
from dp_pipeline.release.spec.model import SpecError
from tests.support.s3_server import (
    ACCESS_KEY,
    SECRET,
    free_port,
    refuse_every_request,
    request,
    s3_server,
    s3_uri,
    upload,
)
from tests.unit.release.sources.test_release_inputs import write_inputs
from tests.unit.release.sources.test_release_sources import _ledger_rows, spec_text, write_spec


@pytest.fixture
def s3_store():
    """A running S3-compatible server on a free local port: its ``host:port``."""
    yield from s3_server()


def pandas_spec(tmp_path: Path):
    return load_spec(write_spec(tmp_path, spec_text(tmp_path, 'path = "x"', engine="pandas")))


def test_the_pandas_engine_reads_an_s3_store_as_a_local_copy(s3_store, tmp_path):
    csv_path, parquet_path = write_inputs(tmp_path)
    folder = tmp_path / "people_parquet"
    (folder / "year_group=a").mkdir(parents=True)
    table = pq.read_table(parquet_path)
    pq.write_table(table.slice(0, 60), folder / "year_group=a" / "part-0.parquet")
    pq.write_table(table.slice(60), folder / "part-1.parquet")
    (folder / "_SUCCESS").write_text("")  # not a data file for either engine
    upload(s3_store, folder, "parquet")
    upload(s3_store, csv_path.parent, "csv")
    spec = pandas_spec(tmp_path)
    quiet = Progress(quiet=True)
    local = run_release(apply_overrides(spec, input_path=str(folder), release_id="local-1"), quiet)
    stored = apply_overrides(spec, input_path=s3_uri(s3_store, "parquet"), release_id="s3-1")
    remote = run_release(stored, quiet)
    # The same bytes under the same names: the fingerprint of the local copy.
    assert remote.report["input_fingerprint"] == local.report["input_fingerprint"]
    assert SECRET not in (remote.output / "privacy_report.json").read_text()
    by_csv = apply_overrides(
        spec, input_path=s3_uri(s3_store, "csv/people.csv"), input_format="csv", release_id="c-1"
    )
    local_csv = apply_overrides(
        spec, input_path=str(csv_path), input_format="csv", release_id="c-2"
    )
    assert (
        run_release(by_csv, quiet).report["input_fingerprint"]
        == run_release(local_csv, quiet).report["input_fingerprint"]
    )
    # Another file in the folder behind the same URI: the committed id is refused.
    pq.write_table(table.slice(0, 5), tmp_path / "more.parquet")
    request(s3_store, "/people/parquet/part-2.parquet", (tmp_path / "more.parquet").read_bytes())
    with pytest.raises(Exception, match="input data changed"):
        run_release(stored, quiet)


def test_a_csv_header_on_a_store_is_checked_before_the_reservation(s3_store, tmp_path):
    source = tmp_path / "csv"
    source.mkdir()
    (source / "people.csv").write_text("pid,year,sex,note\n1,2001,F,x\n")
    upload(s3_store, source, "bad")
    spec = apply_overrides(
        pandas_spec(tmp_path), input_path=s3_uri(s3_store, "bad/people.csv"), input_format="csv"
    )
    with pytest.raises(SpecError) as caught:
        run_release(spec, Progress(quiet=True))
    message = str(caught.value)
    assert "its CSV header has 4 field(s) and lacks the declared column 'spend'" in message
    assert SECRET not in message and "2001" not in message
    assert _ledger_rows(tmp_path / "ledger.sqlite") == 0


def test_refused_credentials_are_one_line_before_the_reservation(s3_store, tmp_path, monkeypatch):
    _, parquet_path = write_inputs(tmp_path)
    upload(s3_store, parquet_path.parent, "refused")
    refuse_every_request(s3_store)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET + "-env")
    spec = apply_overrides(
        pandas_spec(tmp_path), input_path=s3_uri(s3_store, f"refused/{parquet_path.name}")
    )
    with pytest.raises(SpecError) as caught:
        run_release(spec, Progress(quiet=True))
    message = str(caught.value)
    assert "access was refused (missing or failing credentials" in message, message
    assert len(caught.value.problems) == 1 and "\n" not in caught.value.problems[0]
    assert SECRET not in message and ACCESS_KEY not in message
    assert "s3://<credentials>@people/refused/" in message
    assert _ledger_rows(tmp_path / "ledger.sqlite") == 0
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("credentials", ["in the URI", "in the environment"])
def test_an_unreachable_store_is_one_line_before_the_reservation(
    tmp_path, monkeypatch, credentials
):
    endpoint = f"127.0.0.1:{free_port()}"  # nothing listens there
    uri = s3_uri(endpoint, "people.parquet")
    if credentials == "in the environment":
        uri = uri.replace(f"{ACCESS_KEY}:{SECRET}@", "")
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    spec = apply_overrides(pandas_spec(tmp_path), input_path=uri)
    with pytest.raises(SpecError) as caught:
        run_release(spec, Progress(quiet=True))
    message = str(caught.value)
    assert "its file system cannot be reached" in message and "the store is up" in message
    assert len(caught.value.problems) == 1 and "\n" not in caught.value.problems[0]
    assert SECRET not in message and ACCESS_KEY not in message
    assert _ledger_rows(tmp_path / "ledger.sqlite") == 0
    assert (
        not (tmp_path / "ledger.sqlite").exists() or _ledger_rows(tmp_path / "ledger.sqlite") == 0
    )


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("viewfs://cluster/data/people.parquet", "read it with the spark engine"),
        ("nosuchfs://host/people.parquet", "read it with the spark engine"),
    ],
)
def test_a_uri_pyarrow_cannot_open_names_the_spark_engine(tmp_path, uri, expected):
    spec = apply_overrides(pandas_spec(tmp_path), input_path=uri)
    with pytest.raises(SpecError) as caught:
        run_release(spec, Progress(quiet=True))
    assert expected in str(caught.value) and len(caught.value.problems) == 1
    assert _ledger_rows(tmp_path / "ledger.sqlite") == 0


def test_an_output_store_that_refuses_credentials_is_refused_before_the_reservation(
    s3_store, tmp_path
):
    _, parquet_path = write_inputs(tmp_path)
    refuse_every_request(s3_store)
    spec = apply_overrides(
        pandas_spec(tmp_path),
        input_path=str(parquet_path),
        output_dir=s3_uri(s3_store, "releases"),
    )
    with pytest.raises(SpecError) as caught:
        run_release(spec, Progress(quiet=True))
    (problem,) = caught.value.problems
    assert "cannot be written" in problem and "\n" not in problem
    assert SECRET not in problem and ACCESS_KEY not in problem
    assert _ledger_rows(tmp_path / "ledger.sqlite") == 0


def test_the_store_path_fingerprints_a_folder_as_the_local_path_does(tmp_path, monkeypatch):
    """The pyarrow.fs path (here on the local file system through a file: URI) lists,
    names and hashes the files exactly as the local path does, range by range."""
    from dp_pipeline import MasterKey
    from dp_pipeline.release.sources import fingerprint
    from dp_pipeline.release.sources.arrow_files import open_arrow_input
    from dp_pipeline.release.tables.engines import open_input

    monkeypatch.setattr(fingerprint, "CHUNK_BYTES", 1000)  # several ranges per file
    _, parquet_path = write_inputs(tmp_path)
    folder = tmp_path / "people"
    (folder / "year_group=a").mkdir(parents=True)
    table = pq.read_table(parquet_path)
    pq.write_table(table.slice(0, 60), folder / "year_group=a" / "part-0.parquet")
    pq.write_table(table.slice(60), folder / "part-1.parquet")
    (folder / ".hidden.parquet").write_bytes(b"not read by either path")
    spec = pandas_spec(tmp_path)
    key = MasterKey.from_hex("5a" * 32)
    stored = open_arrow_input(spec, f"file://{folder}", "parquet")
    local = open_input(spec, folder, "parquet", print)
    assert [d.name for d in stored.digests()] == ["part-1.parquet", "year_group=a/part-0.parquet"]
    assert stored.digests() == local.digests()
    assert stored.fingerprint(key) == local.fingerprint(key)
    assert stored.list_files() == stored.listed()
    single = open_arrow_input(spec, f"file://{folder}/part-1.parquet", "parquet")
    assert [d.name for d in single.digests()] == ["part-1.parquet"]
