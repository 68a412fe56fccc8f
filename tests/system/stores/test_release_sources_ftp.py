"""A Spark input on a store that asks for a login: Hadoop's own FTP file system against
a real FTP server on 127.0.0.1. Refused credentials, a path that is not there and a
store that does not answer are each one line naming the input and the fix, before the
reservation, with no password in the message."""

from __future__ import annotations

import pytest
from ftp_server import PASSWORD, USER, free_port

from dp_pipeline.release.run import Progress, run_release
from dp_pipeline.release.spec.load import load_spec
from dp_pipeline.release.spec.model import SpecError
from tests.unit.release.sources.test_release_inputs import write_inputs
from tests.unit.release.sources.test_release_sources import _ledger_rows, spec_text, write_spec

pytestmark = [
    pytest.mark.spark,
    # pyftpdlib runs on the standard library's asyncore/asynchat on this Python.
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("wrong password", "access was refused (missing or failing credentials"),
        ("no such path", "no such file or folder on its file system"),
        ("nothing listening", "its file system cannot be reached"),
    ],
)
def test_an_ftp_store_s_failures_are_one_line_before_the_reservation(
    spark, tmp_path, ftp_store, case, expected
):
    root, port = ftp_store
    _, parquet_path = write_inputs(tmp_path)
    (root / "people.parquet").write_bytes(parquet_path.read_bytes())
    password, name = PASSWORD, "people.parquet"
    if case == "wrong password":
        password = "not-" + PASSWORD
    elif case == "no such path":
        name = "nobody.parquet"
    elif case == "nothing listening":
        port = free_port()
    uri = f"ftp://{USER}:{password}@127.0.0.1:{port}/{name}"
    spec = load_spec(write_spec(tmp_path, spec_text(tmp_path, f'path = "{uri}"')))
    with pytest.raises(SpecError) as caught:
        run_release(spec, progress=Progress(quiet=True), spark=spark)
    message = str(caught.value)
    assert expected in message, message
    assert len(caught.value.problems) == 1 and "\n" not in caught.value.problems[0]
    assert PASSWORD not in message and "Exception" not in message
    assert f"ftp://<credentials>@127.0.0.1:{port}/{name}" in message
    assert _ledger_rows(tmp_path / "ledger.sqlite") == 0
    assert not (tmp_path / "out").exists()
