"""The JVM logs of Spark sessions started by a release: one owner-only folder in the
temporary folder, holding only the newest logs (failed runs keep theirs, never piling up)."""

from __future__ import annotations

import os
import stat
import tempfile

from dp_pipeline.engines.spark.session.quiet import KEPT_LOGS, jvm_output_to_file, log_folder


def test_kept_logs_stay_in_one_private_folder_and_only_the_newest_are_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    made = []
    for number in range(KEPT_LOGS + 5):  # each one kept, as after a failed run
        with jvm_output_to_file() as path:
            os.write(2, b"WARN NativeCodeLoader\n")
        os.utime(path, ns=(number * 10**9, number * 10**9))  # distinct ages, oldest first
        made.append(path)
    folder = tmp_path / f"dp_pipeline-spark-logs-{os.getuid()}"
    assert log_folder() == folder
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert [p.name for p in tmp_path.iterdir()] == [folder.name]  # nothing beside it
    kept = sorted(str(p) for p in folder.iterdir())
    assert len(kept) == KEPT_LOGS and kept == sorted(made[-KEPT_LOGS:])


def test_a_log_folder_that_is_not_this_user_s_private_one_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    other = tmp_path / "elsewhere"
    other.mkdir()
    (tmp_path / f"dp_pipeline-spark-logs-{os.getuid()}").symlink_to(other)
    assert log_folder() is None
    with jvm_output_to_file() as path:
        pass
    assert os.path.dirname(path) == str(tmp_path) and not list(other.iterdir())
    os.unlink(path)
    link = tmp_path / f"dp_pipeline-spark-logs-{os.getuid()}"
    link.unlink()
    link.mkdir(mode=0o755)
    os.chmod(link, 0o755)  # readable by others: not a private folder
    assert log_folder() is None
