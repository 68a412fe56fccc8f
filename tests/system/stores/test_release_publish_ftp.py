"""An output on a store that asks for a login: Hadoop's own FTP file system against a
real FTP server on 127.0.0.1, written through the classic session. Refused credentials
and a store that does not answer are each one line naming the output (no user
information) and the fix, from the probe before the reservation, with no password in
the message; a ``file://`` output whose folder cannot be created is named the same way
through ``pyarrow.fs``."""

from __future__ import annotations

from pathlib import Path

import pytest
from ftp_server import PASSWORD, USER, free_port

from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.publish.filesystems import (
    OutputLocationError,
    open_filesystem,
    probe_write,
)
from dp_pipeline.release.run import run_release
from dp_pipeline.release.spec.model import SpecError
from tests.system.stores.test_release_publish_fs import QUIET, fixed_key, small_spec  # noqa: F401

CASES = [
    ("wrong password", "access was refused (missing or failing credentials"),
    ("nothing listening", "its file system cannot be reached (connection refused"),
]


def _output(port: int, case: str) -> str:
    password = "not-" + PASSWORD if case == "wrong password" else PASSWORD
    if case == "nothing listening":
        port = free_port()
    return f"ftp://{USER}:{password}@127.0.0.1:{port}/out"


def _assert_one_line(message: str, uri: str, expected: str) -> None:
    shown = "ftp://127.0.0.1:" + uri.rpartition("@127.0.0.1:")[2]
    assert message.startswith(f"output.dir = {shown!r} (or --output): "), message
    assert expected in message, message
    assert "\n" not in message
    assert PASSWORD not in message and USER not in message and "Exception" not in message


@pytest.mark.spark
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # pyftpdlib's asyncore
@pytest.mark.parametrize(("case", "expected"), CASES)
def test_an_ftp_output_s_failures_are_one_line_before_the_reservation(
    spark, tmp_path, ftp_store, case, expected
):
    root, port = ftp_store
    uri = _output(port, case)
    spec = small_spec(tmp_path / "p", engine="spark", output_dir=uri)
    with pytest.raises(SpecError) as raised:
        run_release(spec, progress=QUIET, spark=spark)
    (problem,) = raised.value.problems
    _assert_one_line(problem, uri, expected)
    assert "cannot be written (a probe file could not be created" in problem
    assert PASSWORD not in str(raised.value)
    assert not Path(spec.ledger_path).exists() or Ledger(spec.ledger_path).history() == []
    assert list(root.iterdir()) == []  # nothing written on the store


@pytest.mark.spark
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # pyftpdlib's asyncore
@pytest.mark.parametrize(("case", "expected"), CASES)
def test_the_probe_of_an_ftp_output_names_the_failure_and_its_fix(spark, ftp_store, case, expected):
    root, port = ftp_store
    uri = _output(port, case)
    filesystem = open_filesystem(uri, spark)
    try:
        with pytest.raises(OutputLocationError) as raised:
            probe_write(filesystem)
    finally:
        filesystem.close()
    _assert_one_line(str(raised.value), uri, expected)
    assert raised.value.rule is not None and raised.value.rule in str(raised.value)
    assert list(root.iterdir()) == []


def test_a_file_output_whose_folder_cannot_be_created_names_the_fix(tmp_path):
    (tmp_path / "a-file").write_bytes(b"")
    uri = f"file://{tmp_path}/a-file/out"
    with pytest.raises(OutputLocationError) as raised:
        probe_write(open_filesystem(uri))
    message = str(raised.value)
    assert message.startswith(f"output.dir = {uri!r} (or --output): cannot be written"), message
    assert "no such file, folder or bucket on its file system" in message
    assert "give an output whose bucket or parent folder exists" in message
    assert "\n" not in message and "Error" not in message
