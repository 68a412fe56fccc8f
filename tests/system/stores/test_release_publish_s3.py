"""Releases published to an S3-compatible store by the pandas engine (``s3://`` through
``pyarrow.fs``), against a real server process (`tests.support.s3_server`).

The protocol is the one of every output without an atomic rename
(`dp_pipeline.release.publish.remote`): the files under a hidden prefix
``<output>/.<id>.tmp-<pid>-<token>/``, ``manifest.json`` (every file's SHA-256)
last, then copied to ``<output>/<id>/``, ``manifest.json`` last, the ledger
committing only after it; a folder without its manifest is never trusted, and a
resume removes the hidden prefix a killed run left and completes the folder. The
store's options (endpoint, scheme, region) ride in the URI's query and its
credentials in its user information: neither is ever shown.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from pyarrow import fs as arrow_fs
from release_specs import operator_home

from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.publish.filesystems import OutputLocationError, open_filesystem
from dp_pipeline.release.publish.manifest import PublicationError
from dp_pipeline.release.publish.remote import pending_name
from dp_pipeline.release.run import Progress, read_release, run_release
from tests.support.s3_server import ACCESS_KEY, SECRET, s3_server, s3_uri
from tests.system.stores.test_release_publish_fs import (
    KEY_HEX,
    LAUNCHER,
    ROOT,
    assert_same_files,
    local_bytes,
    small_spec,
)

QUIET = Progress(quiet=True)
PREFIX = "releases"


@pytest.fixture(autouse=True)
def fixed_key(monkeypatch):
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)


@pytest.fixture
def s3_store():
    """A running S3-compatible server on a free local port: its ``host:port``."""
    yield from s3_server()


@pytest.fixture(scope="module")
def reference_release(tmp_path_factory):
    """The small release on the pandas engine, uninterrupted, to a local folder."""
    folder = tmp_path_factory.mktemp("reference")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)
        patch.setenv("DP_PIPELINE_HOME", str(folder))  # its own key binding
        patch.setenv("HOME", str(folder / "user"))  # a user of its own (made again per worker)
        return run_release(small_spec(folder), progress=QUIET).output


def stored(endpoint: str) -> dict[str, bytes]:
    """Every object under ``people/releases/`` by its relative name (no folder markers)."""
    store, base = arrow_fs.FileSystem.from_uri(s3_uri(endpoint, PREFIX))
    selector = arrow_fs.FileSelector(base, recursive=True, allow_not_found=True)
    names = [
        i.path.removeprefix(base + "/")
        for i in store.get_file_info(selector)
        if i.type == arrow_fs.FileType.File
    ]
    return {name: store.open_input_stream(f"{base}/{name}").read() for name in sorted(names)}


def in_folder(files: dict[str, bytes], release_id: str) -> dict[str, bytes]:
    return {
        name.removeprefix(f"{release_id}/"): data
        for name, data in files.items()
        if name.startswith(f"{release_id}/")
    }


def ledger_text(spec) -> str:
    """Every value the ledger holds, as text (to look for credentials in it)."""
    with sqlite3.connect(spec.ledger_path) as connection:
        query = "SELECT name FROM sqlite_master WHERE type = 'table'"
        tables = [r[0] for r in connection.execute(query)]
        return repr([connection.execute(f'SELECT * FROM "{t}"').fetchall() for t in tables])


def test_an_s3_release_publishes_its_files_and_manifest_last(s3_store, tmp_path, reference_release):
    lines = io.StringIO()
    output = s3_uri(s3_store, PREFIX)
    spec = small_spec(tmp_path / "remote", output_dir=output)
    result = run_release(spec, progress=Progress(stream=lines))
    assert result.outcome == "reserved"
    # Shown and recorded without the credentials or the store's options.
    assert result.output == f"s3://people/{PREFIX}/{spec.release_id}"
    files = stored(s3_store)
    assert set(files) == {f"{spec.release_id}/{n}" for n in local_bytes(reference_release)}
    folder = in_folder(files, spec.release_id)
    manifest = json.loads(folder["manifest.json"])
    assert set(manifest["files"]) == set(folder) - {"manifest.json"}
    for name, entry in manifest["files"].items():
        assert hashlib.sha256(folder[name]).hexdigest() == entry["sha256"]
        assert len(folder[name]) == entry["bytes"]
    assert_same_files(folder, local_bytes(reference_release))
    entry = Ledger(spec.ledger_path).entry(spec.release_id)
    assert (entry.status, entry.output) == ("committed", result.output)
    assert entry.manifest == manifest
    # The release read back through the store (its options in the URI's query).
    uri = s3_uri(s3_store, f"{PREFIX}/{spec.release_id}")
    tables = read_release(uri)
    for name, frame in read_release(reference_release).items():
        pd.testing.assert_frame_equal(tables[name], frame)
    assert not os.listdir(Path(spec.ledger_path).parent / "staging")
    # A re-run of the committed id finds the same bytes and writes nothing.
    store, base = arrow_fs.FileSystem.from_uri(s3_uri(s3_store, PREFIX))
    selector = arrow_fs.FileSelector(base, recursive=True)
    before = {i.path: i.mtime for i in store.get_file_info(selector)}
    assert run_release(spec, progress=QUIET).outcome == "already_committed"
    assert {i.path: i.mtime for i in store.get_file_info(selector)} == before
    shown = "\n".join([lines.getvalue(), ledger_text(spec)]).encode() + b"".join(folder.values())
    for secret in (SECRET, ACCESS_KEY, s3_store):
        assert secret.encode() not in shown


def test_a_changed_object_is_refused_by_readers_and_repaired_by_a_rerun(s3_store, tmp_path):
    spec = small_spec(tmp_path / "remote", output_dir=s3_uri(s3_store, PREFIX))
    run_release(spec, progress=QUIET)
    good = stored(s3_store)
    filesystem = open_filesystem(s3_uri(s3_store, PREFIX))
    table = f"{spec.release_id}/tenure.parquet"
    filesystem.write_bytes(table, good[table][:-1] + b"!")
    uri = s3_uri(s3_store, f"{PREFIX}/{spec.release_id}")
    with pytest.raises(PublicationError) as raised:
        read_release(uri)
    message = str(raised.value)
    assert message.startswith(
        f"'s3://people/{PREFIX}/{spec.release_id}/tenure.parquet' differs from the release's"
    )
    assert SECRET not in message and ACCESS_KEY not in message and s3_store not in message
    assert run_release(spec, progress=QUIET).outcome == "already_committed"
    assert stored(s3_store) == good
    filesystem.delete(f"{spec.release_id}/manifest.json")
    with pytest.raises(PublicationError, match=r"is not a complete release: it has no manifest"):
        read_release(uri)
    # A store's own message is never quoted (it can hold credentials): its class is.
    with pytest.raises(OutputLocationError) as raised:
        filesystem.read_bytes("missing/file.bin")
    assert str(raised.value) == (
        f"reading 's3://people/{PREFIX}/missing/file.bin' failed on its file system "
        "(FileNotFoundError)"
    )


def run_killed(arguments: list[str], kill_at: str) -> subprocess.CompletedProcess:
    """The CLI in a child process, killed (SIGKILL) at the protocol point ``kill_at``."""
    environment = dict(os.environ, PYTHONPATH=str(ROOT), DP_PIPELINE_MASTER_KEY=KEY_HEX)
    return subprocess.run(
        [sys.executable, LAUNCHER, kill_at, "kill", *arguments],
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.parametrize(
    ("kill_at", "state", "hidden", "final", "marker"),
    [
        ("after_reserve", "reserved", 0, 0, False),
        ("after_noise", "noised", 0, 0, False),
        ("before_publish", "noised", 0, 0, False),
        ("before_upload", "publishing", 0, 0, False),
        ("mid_upload", "publishing", 1, 0, False),
        ("after_hidden_manifest", "publishing", None, 0, False),
        ("before_final", "publishing", None, 0, True),
        ("mid_copy", "publishing", None, 1, True),
        ("after_manifest", "publishing", None, None, True),
        ("after_publish", "publishing", 0, None, False),
    ],
)
def test_a_killed_s3_publication_is_not_trusted_and_the_resume_completes_it(
    s3_store, tmp_path, kill_at, state, hidden, final, marker, reference_release
):
    """An object store has no rename: the files go under a hidden prefix, manifest last,
    then are copied into the release folder, manifest last. ``hidden`` and ``final`` count
    the files a kill leaves in each (None: all of the release's, manifest included)."""
    output = s3_uri(s3_store, PREFIX)
    spec = small_spec(tmp_path / "remote", output_dir=output)
    # The spec names remote/ledger.sqlite and remote/master.key: the killed CLI (and the
    # resume) run as the operator whose home is remote/, so the spec names its defaults.
    operator_home(tmp_path / "remote")
    arguments = ["run", str(tmp_path / "remote" / "small.toml"), "--output", output]
    killed = run_killed(arguments, kill_at)
    assert killed.returncode == -9, killed.stderr[-2000:]
    shown = killed.stdout + killed.stderr
    assert SECRET not in shown and ACCESS_KEY not in shown
    entry = Ledger(spec.ledger_path).entry(spec.release_id)
    assert (entry.status, entry.state) == ("reserved", state)  # the ledger has not committed
    left = stored(s3_store)
    everything = local_bytes(reference_release)
    prefixes = {name.split("/")[0] for name in left if "/" in name} - {spec.release_id}
    assert all(name.startswith(f".{spec.release_id}.tmp-") for name in prefixes)
    assert len(prefixes) == (hidden != 0)
    hidden_files = in_folder(left, prefixes.pop()) if prefixes else {}
    assert len(hidden_files) == (len(everything) if hidden is None else hidden)
    folder = in_folder(left, spec.release_id)
    assert len(folder) == (len(everything) if final is None else final)
    assert (pending_name(spec.release_id) in left) == marker
    uri = s3_uri(s3_store, f"{PREFIX}/{spec.release_id}")
    if final is not None:
        with pytest.raises(PublicationError, match="is not a complete release"):
            read_release(uri)
    result = run_release(spec, progress=QUIET)
    assert result.outcome == "resumed"
    assert Ledger(spec.ledger_path).entry(spec.release_id).status == "committed"
    final_files = stored(s3_store)
    # No marker and no hidden prefix are left: only the release's folder.
    assert all(name.startswith(f"{spec.release_id}/") for name in final_files)
    assert not os.listdir(Path(spec.ledger_path).parent / "staging")
    assert_same_files(in_folder(final_files, spec.release_id), everything)
    read_release(uri)
