"""Releases published to file systems without an atomic rename (viewfs://, file:// URIs).

The protocol (`dp_pipeline.release.publish.remote`): files under ``<output>/<id>/``,
``manifest.json`` last, the ledger committing only after it; a folder without its
manifest is never trusted and a resume overwrites it. The viewfs tests mount a
local folder (``spark.hadoop.fs.viewfs.mounttable.<cluster>.link./<dir>``) and use
the session's Hadoop FileSystem; the ``file://`` tests use ``pyarrow.fs`` (the
pandas engine, no session).
"""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from release_specs import SMALL_SPEC, operator_home, operator_paths

from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.publish.filesystems import (
    ArrowFileSystem,
    HadoopFileSystem,
    OutputLocationError,
    display_uri,
    open_filesystem,
)
from dp_pipeline.release.publish.manifest import PublicationError, write_manifest
from dp_pipeline.release.publish.probe import check_output
from dp_pipeline.release.publish.remote import (
    RemoteReleaseDirectory,
    check_remote_replaceable,
    clean_remote_stale,
    pending_name,
    read_remote_manifest,
    remote_hidden_folders,
)
from dp_pipeline.release.run import Progress, apply_overrides, read_release, run_release
from dp_pipeline.release.spec.load import load_spec
from dp_pipeline.release.spec.model import SpecError

ROOT = Path(__file__).resolve().parents[3]
QUIET = Progress(quiet=True)
KEY_HEX = "b59163f6516e8ee81ecc2cfc05e6ebbc7d81b82a9ae660ea6820b535d9e12845"
CLUSTER = "dpcluster"
LAUNCHER = str(ROOT / "tests" / "support" / "protocol_launcher.py")


@pytest.fixture(autouse=True)
def fixed_key(monkeypatch):
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)


def small_spec(folder: Path, **overrides):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "small.toml"
    path.write_text(
        SMALL_SPEC.format(tmp=folder).replace("synthetic_persons = 3000", "synthetic_persons = 600")
    )
    return apply_overrides(load_spec(path, **operator_paths(folder)), **overrides)


def local_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def assert_same_release(folder: Path, reference: Path) -> None:
    """The same files and bytes, but for the reservation's time in the privacy report
    (and so the report's line in the manifest): two ledgers reserved them."""
    assert_same_files(local_bytes(folder), local_bytes(reference))


def assert_same_files(got: dict[str, bytes], expected: dict[str, bytes]) -> None:
    """`assert_same_release` on the files' bytes by name."""
    assert set(got) == set(expected)  # no checksum or temporary companions
    moments = ("privacy_report.json", "manifest.json")
    assert {k: v for k, v in got.items() if k not in moments} == {
        k: v for k, v in expected.items() if k not in moments
    }
    reports = [json.loads(files["privacy_report.json"]) for files in (got, expected)]
    for report in reports:
        del report["ledger"]["reserved_at"]
    assert reports[0] == reports[1]


# ---------------------------------------------------------------- file:// (pyarrow.fs)


def test_file_uri_release_is_byte_identical_to_a_local_release(tmp_path):
    # The same key on two ledgers: each ledger is its own operator's, with its own home
    # (and key binding), as two deployments would be.
    operator_home(tmp_path / "local")
    local = small_spec(tmp_path / "local")
    local_result = run_release(local, progress=QUIET)
    operator_home(tmp_path / "remote")
    target = tmp_path / "remote-out"
    remote = small_spec(tmp_path / "remote", output_dir=f"file://{target}")
    result = run_release(remote, progress=QUIET)
    assert result.outcome == "reserved"
    assert result.output == f"file://{target}/{remote.release_id}"
    folder = target / remote.release_id
    assert_same_release(folder, local_result.output)
    assert not (target / pending_name(remote.release_id)).exists()
    ledger = Ledger(remote.ledger_path)
    entry = ledger.entry(remote.release_id)
    assert entry.status == "committed"
    assert entry.manifest == json.loads((folder / "manifest.json").read_text())
    for name, frame in read_release(result.output).items():
        pd.testing.assert_frame_equal(frame, read_release(local_result.output)[name])
    # The staging copy is gone; nothing but the release is in the output.
    assert os.listdir(target) == [remote.release_id]
    assert not os.listdir(Path(remote.ledger_path).parent / "staging")
    # A re-run of the committed id finds the same bytes and writes nothing.
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    again = run_release(remote, progress=QUIET)
    assert again.outcome == "already_committed"
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before


def test_a_damaged_copy_of_the_same_release_is_repaired_and_a_reader_refuses_it(tmp_path):
    target = tmp_path / "remote-out"
    spec = small_spec(tmp_path / "remote", output_dir=f"file://{target}")
    result = run_release(spec, progress=QUIET)
    folder = target / spec.release_id
    good = local_bytes(folder)
    table = folder / "tenure.parquet"
    table.write_bytes(table.read_bytes()[:-1] + b"!")
    with pytest.raises(PublicationError, match=r"tenure\.parquet' differs from the release's"):
        read_release(result.output)
    untouched = folder / "state_income.parquet"
    mtime = untouched.stat().st_mtime_ns
    assert run_release(spec, progress=QUIET).outcome == "already_committed"
    assert local_bytes(folder) == good
    assert untouched.stat().st_mtime_ns == mtime  # only the file that differed was written
    (folder / "manifest.json").unlink()
    with pytest.raises(PublicationError, match=r"is not a complete release: it has no manifest"):
        read_release(result.output)


def test_a_folder_that_is_not_this_release_is_refused_before_the_reservation(tmp_path):
    target = tmp_path / "remote-out"
    spec = small_spec(tmp_path / "remote", output_dir=f"file://{target}")
    (target / spec.release_id).mkdir(parents=True)
    (target / spec.release_id / "mine.txt").write_text("a user's file\n")
    with pytest.raises(PublicationError, match=r"exists and is not a copy of this release"):
        run_release(spec, progress=QUIET)
    assert (target / spec.release_id / "mine.txt").read_text() == "a user's file\n"
    assert Ledger(spec.ledger_path).history() == []  # nothing reserved


def test_an_unwritable_local_output_is_refused_before_the_reservation(tmp_path):
    if not Path("/proc/self").is_dir():
        pytest.skip("needs /proc, where no file can be created")
    spec = small_spec(tmp_path / "p", output_dir="/proc/dp-release-out")
    with pytest.raises(SpecError) as raised:
        run_release(spec, progress=QUIET)
    (problem,) = raised.value.problems
    assert problem.startswith(
        "output.dir = '/proc/dp-release-out' (or --output): cannot be written"
    )
    assert "grant this job write access there or name another folder" in problem
    assert "\n" not in problem
    assert not Path(spec.ledger_path).exists()  # nothing reserved, no ledger made


def test_an_output_scheme_without_a_session_is_refused_naming_the_fix(tmp_path):
    spec = small_spec(tmp_path / "p", output_dir="viewfs://user:secret@cluster/out")
    with pytest.raises(SpecError) as raised:
        check_output(spec, None)
    (problem,) = raised.value.problems
    assert problem.startswith("output.dir = 'viewfs://cluster/out' (or --output): viewfs://")
    assert "classic session" in problem and "secret" not in problem and "\n" not in problem
    with pytest.raises(SpecError):
        run_release(spec, progress=QUIET)
    assert not Path(spec.ledger_path).exists()


def test_display_uri_drops_credentials():
    assert display_uri("s3a://AKIA:s3cr3t@bucket/out") == "s3a://bucket/out"
    assert display_uri("out/local") == "out/local"


def test_arrow_file_system_interface(tmp_path):
    fs = open_filesystem(f"file://{tmp_path}/root")
    assert isinstance(fs, ArrowFileSystem)
    fs.mkdirs("a", owner_only=True)
    assert stat.S_IMODE((tmp_path / "root" / "a").stat().st_mode) == 0o700
    fs.write_bytes("a/x.bin", [b"ab", b"cd"])
    assert fs.read_bytes("a/x.bin") == b"abcd" and fs.exists("a/x.bin")
    assert fs.list("a") == ["x.bin"] and fs.list("missing") == []
    fs.delete("a/x.bin")
    assert not fs.exists("a/x.bin")
    with pytest.raises(OutputLocationError, match=r"reading '.*a/x\.bin' failed"):
        fs.read_bytes("a/x.bin")


# ------------------------------------------- the protocol's steps, in process (file://)

RELEASE = "r-1"
DIGEST = "d" * 64


class CopyingFileSystem(ArrowFileSystem):
    """``file://`` as an object store is published: no atomic rename, so the copy path."""

    def renames_atomically(self) -> bool:
        return False


class Killed(BaseException):
    """Stands for SIGKILL at a checkpoint: nothing after it runs, no clean-up either."""


def staged(directory: RemoteReleaseDirectory) -> dict:
    """Stage a two-file release in ``directory`` (entered, never left: a kill leaves no
    clean-up); its manifest."""
    folder = directory.__enter__()
    (folder / "a.parquet").write_bytes(b"a" * 10)
    (folder / "b.parquet").write_bytes(b"b" * 20)
    return write_manifest(folder, RELEASE, DIGEST)


def file_system(kind, root: Path):
    return (ArrowFileSystem if kind == "rename" else CopyingFileSystem)(f"file://{root}")


def check_publication_steps(fs, out: Path, tmp_path: Path, kind: str) -> None:
    """Publish a staged release to ``fs`` (rooted at the local folder ``out``), looking at
    the output at each step as a reader listing it would."""
    fs.mkdirs("")
    directory = RemoteReleaseDirectory(fs, RELEASE, DIGEST, tmp_path / "staging")
    manifest = staged(directory)
    expected = local_bytes(directory.temporary)
    upload = ["before_upload", "mid_upload", "mid_upload", "after_hidden_manifest"]
    seen: list[tuple[str, list[str], dict | None]] = []

    def checkpoint(name: str) -> None:
        listing = fs.list("")
        if name in upload:  # owner-only while it is written
            (hidden,) = [n for n in listing if n.startswith(f".{RELEASE}.tmp-")]
            assert stat.S_IMODE((out / hidden).stat().st_mode) == 0o700
        seen.append((name, listing, read_remote_manifest(fs, RELEASE)))

    assert directory.publish(manifest, checkpoint) == fs.where(RELEASE)
    directory.__exit__(None, None, None)
    steps = [name for name, _, _ in seen]
    middle = ["before_final", "mid_copy", "mid_copy"] if kind == "copy" else ["before_final"]
    assert steps == [*upload, *middle, "after_manifest"]
    for name, listing, trusted in seen:
        if name == "after_manifest":
            assert trusted == manifest
        elif kind == "rename" or name in upload:
            assert RELEASE not in listing  # the files are only under the hidden prefix
        else:  # copied one by one, beside the marker, without a manifest until the last
            assert RELEASE in listing and pending_name(RELEASE) in listing and trusted is None
    assert os.listdir(out) == [RELEASE]
    assert local_bytes(out / RELEASE) == expected  # no checksum companions either


@pytest.mark.parametrize("kind", ["rename", "copy"])
def test_a_reader_listing_the_output_sees_no_release_folder_before_its_manifest(tmp_path, kind):
    check_publication_steps(file_system(kind, tmp_path / "out"), tmp_path / "out", tmp_path, kind)


STEPS = ["before_upload", "mid_upload", "after_hidden_manifest", "before_final", "after_manifest"]


@pytest.mark.parametrize(
    ("kind", "step"),
    [("rename", step) for step in STEPS] + [("copy", step) for step in [*STEPS, "mid_copy"]],
)
def test_a_publication_killed_at_any_step_is_not_trusted_and_the_rerun_completes_it(
    tmp_path, kind, step
):
    out = tmp_path / "out"
    fs = file_system(kind, out)
    fs.mkdirs("")
    killed = RemoteReleaseDirectory(fs, RELEASE, DIGEST, tmp_path / "staging")
    manifest = staged(killed)
    expected = local_bytes(killed.temporary)

    def kill(name: str) -> None:
        if name == step:
            raise Killed

    with pytest.raises(Killed):
        killed.publish(manifest, kill)
    trusted = read_remote_manifest(fs, RELEASE)
    assert (trusted is not None) == (step == "after_manifest")
    if kind == "rename" and step != "after_manifest":
        assert not (out / RELEASE).exists()
    renamed = kind == "rename" and step == "after_manifest"
    hidden = [n for n in os.listdir(out) if n.startswith(f".{RELEASE}.tmp-")]
    assert len(hidden) == (0 if renamed else 1)
    # The next run of the release (holding its lease) removes the hidden leftovers first.
    assert clean_remote_stale(fs, RELEASE) == [f"file://{out}/{name}" for name in hidden]
    check_remote_replaceable(fs, RELEASE, DIGEST)
    again = RemoteReleaseDirectory(fs, RELEASE, DIGEST, tmp_path / "staging2")
    assert staged(again) == manifest
    again.publish(manifest)
    again.__exit__(None, None, None)
    assert os.listdir(out) == [RELEASE]
    assert local_bytes(out / RELEASE) == expected
    assert read_remote_manifest(fs, RELEASE) == manifest


def test_a_folder_left_by_a_killed_copy_is_replaced_whole_by_one_rename(tmp_path):
    """A partial copy beside its marker (an object store's step, or a killed repair) is
    this release's: a file system that renames removes it and renames the new copy in."""
    out = tmp_path / "out"
    copying = CopyingFileSystem(f"file://{out}")
    copying.mkdirs("")
    killed = RemoteReleaseDirectory(copying, RELEASE, DIGEST, tmp_path / "staging")
    manifest = staged(killed)
    expected = local_bytes(killed.temporary)

    def kill(name: str) -> None:
        if name == "mid_copy":
            raise Killed

    with pytest.raises(Killed):
        killed.publish(manifest, kill)
    assert (out / pending_name(RELEASE)).exists() and len(os.listdir(out / RELEASE)) == 1
    renaming = ArrowFileSystem(f"file://{out}")
    clean_remote_stale(renaming, RELEASE)
    check_remote_replaceable(renaming, RELEASE, DIGEST)
    with pytest.raises(PublicationError, match="exists and is not a copy of this release"):
        check_remote_replaceable(renaming, RELEASE, "e" * 64)  # another release's digest
    again = RemoteReleaseDirectory(renaming, RELEASE, DIGEST, tmp_path / "staging2")
    staged(again)
    again.publish(manifest)
    assert os.listdir(out) == [RELEASE]  # the marker is gone with the partial copy
    assert local_bytes(out / RELEASE) == expected


def test_hidden_leftovers_are_those_of_exactly_the_release(tmp_path):
    fs = ArrowFileSystem(f"file://{tmp_path}")
    for name in (".r-1.tmp-12-ab12", ".r-1.old-3-ff", ".r-1.x.tmp-12-ab12", "r-1", ".r-1.tmp-x"):
        fs.mkdirs(name)
    assert remote_hidden_folders(fs, "r-1") == [".r-1.old-3-ff", ".r-1.tmp-12-ab12"]
    clean_remote_stale(fs, "r-1")
    assert sorted(os.listdir(tmp_path)) == [".r-1.tmp-x", ".r-1.x.tmp-12-ab12", "r-1"]


def test_a_folder_created_meanwhile_at_the_release_is_never_renamed_over(tmp_path):
    fs = ArrowFileSystem(f"file://{tmp_path}")
    fs.mkdirs("hidden")
    fs.mkdirs("taken")
    with pytest.raises(OutputLocationError, match=r"renaming to '.*taken': it exists"):
        fs.rename("hidden", "taken")
    assert fs.exists("hidden") and fs.list("taken") == []


# ---------------------------------------------------------------- viewfs:// (Hadoop)


def mount(spark, local: Path, name: str = "out") -> str:
    """Mount ``local`` at ``viewfs://dpcluster/<name>`` in ``spark``'s Hadoop configuration."""
    local.mkdir(parents=True, exist_ok=True)
    spark.conf.set(f"spark.hadoop.fs.viewfs.mounttable.{CLUSTER}.link./{name}", f"file://{local}")
    spark._jsc.hadoopConfiguration().set(
        f"fs.viewfs.mounttable.{CLUSTER}.link./{name}", f"file://{local}"
    )
    return f"viewfs://{CLUSTER}/{name}"


@pytest.mark.spark
def test_viewfs_release_is_byte_identical_to_a_local_release(tmp_path, spark):
    uri = mount(spark, tmp_path / "mounted")
    # The same key on two ledgers: each ledger is its own operator's, with its own home.
    operator_home(tmp_path / "local")
    local = small_spec(tmp_path / "local", engine="spark")
    local_result = run_release(local, progress=QUIET, spark=spark)
    operator_home(tmp_path / "remote")
    remote = small_spec(tmp_path / "remote", engine="spark", output_dir=uri)
    result = run_release(remote, progress=QUIET, spark=spark)
    assert result.output == f"{uri}/{remote.release_id}"
    folder = tmp_path / "mounted" / remote.release_id
    assert_same_release(folder, local_result.output)  # no .crc companions
    assert Ledger(remote.ledger_path).entry(remote.release_id).status == "committed"
    for name, frame in read_release(result.output, spark=spark).items():
        pd.testing.assert_frame_equal(frame, read_release(local_result.output)[name])
    fs = open_filesystem(uri, spark)
    assert isinstance(fs, HadoopFileSystem)
    assert fs.renames_atomically()  # the mount link's target is a local disk
    assert fs.list(remote.release_id) == sorted(local_bytes(folder))
    # A file system's own message is never quoted (it can hold credentials): its class is.
    with pytest.raises(OutputLocationError) as raised:
        fs.read_bytes("missing/file.bin")
    assert str(raised.value) == (
        f"reading '{uri}/missing/file.bin' failed on its file system (FileNotFoundException)"
    )
    fs.close()


@pytest.mark.spark
def test_an_unwritable_viewfs_output_is_refused_before_the_reservation(tmp_path, spark):
    mount(spark, tmp_path / "mounted")
    # Outside every mount link: the mount table's internal folders are read-only.
    spec = small_spec(
        tmp_path / "p", engine="spark", output_dir=f"viewfs://{CLUSTER}/unmounted/out"
    )
    with pytest.raises(SpecError) as raised:
        run_release(spec, progress=QUIET, spark=spark)
    (problem,) = raised.value.problems
    assert problem.startswith(
        f"output.dir = 'viewfs://{CLUSTER}/unmounted/out' (or --output): cannot be written"
    )
    # Hadoop's FileNotFoundException (no /unmounted in the mount table): named with its fix.
    assert "no such file, folder or bucket on its file system" in problem
    assert "give an output whose bucket or parent folder exists" in problem
    assert "\n" not in problem and "Exception" not in problem
    assert Ledger(spec.ledger_path).history() == []


@pytest.mark.spark
@pytest.mark.parametrize("kind", ["rename", "copy"])
def test_viewfs_publication_steps_through_the_hadoop_file_system(tmp_path, spark, kind):
    """The Hadoop FileSystem's rename (viewfs onto a local disk) and, as on an object
    store's connector, its copy (``FileUtil.copy``), step by step."""
    out = tmp_path / "mounted"
    fs = open_filesystem(mount(spark, out, f"steps{kind}"), spark)
    try:
        if kind == "copy":  # as a mount link onto an object store would be
            fs.renames_atomically = lambda: False  # type: ignore[method-assign]
        check_publication_steps(fs, out, tmp_path, kind)
    finally:
        fs.close()


def run_killed(arguments, kill_at, submit_args):
    """The CLI in a child process (its own Spark session, with the viewfs mount), killed
    at ``kill_at``."""
    environment = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        DP_PIPELINE_MASTER_KEY=KEY_HEX,
        PYSPARK_SUBMIT_ARGS=f"{submit_args} pyspark-shell",
    )
    return subprocess.run(
        [sys.executable, LAUNCHER, kill_at, "kill", *arguments],
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def reference_release(tmp_path_factory, spark):
    """The small release on the Spark engine, uninterrupted, to a local folder."""
    folder = tmp_path_factory.mktemp("reference")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)
        patch.setenv("DP_PIPELINE_HOME", str(folder))  # its own key binding
        patch.setenv("HOME", str(folder / "user"))  # a user of its own (made again per worker)
        spec = small_spec(folder, engine="spark")
        return run_release(spec, progress=QUIET, spark=spark).output


@pytest.mark.spark
@pytest.mark.parametrize(
    ("kill_at", "state", "hidden", "final"),
    [
        ("after_reserve", "reserved", False, False),
        ("after_noise", "noised", False, False),
        ("before_publish", "noised", False, False),
        ("before_upload", "publishing", True, False),
        ("mid_upload", "publishing", True, False),
        ("after_hidden_manifest", "publishing", True, False),
        ("before_final", "publishing", True, False),
        ("after_manifest", "publishing", False, True),
        ("after_publish", "publishing", False, True),
    ],
)
def test_killed_viewfs_publication_is_not_trusted_and_the_resume_completes_it(
    tmp_path, spark, kill_at, state, hidden, final, reference_release
):
    """A viewfs mount onto a local disk renames a folder atomically: the release folder
    exists only whole, with its manifest; until then the files are under a hidden prefix."""
    mounted = tmp_path / "mounted"
    uri = mount(spark, mounted)
    spec = small_spec(tmp_path / "remote", engine="spark", output_dir=uri)
    # The spec names remote/ledger.sqlite and remote/master.key: the killed CLI (and the
    # resume) run as the operator whose home is remote/, so the spec names its defaults.
    operator_home(tmp_path / "remote")
    link = f"spark.hadoop.fs.viewfs.mounttable.{CLUSTER}.link./out=file://{mounted}"
    killed = run_killed(
        ["run", str(tmp_path / "remote" / "small.toml"), "--output", uri, "--engine", "spark"],
        kill_at,
        f"--conf {link}",
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    entry = Ledger(spec.ledger_path).entry(spec.release_id)
    assert (entry.status, entry.state) == ("reserved", state)  # the ledger has not committed
    folder = mounted / spec.release_id
    assert folder.exists() == final  # a reader listing the output sees no partial release
    assert not (mounted / pending_name(spec.release_id)).exists()  # no marker: a rename
    (leftover,) = [p for p in mounted.iterdir() if p.name != spec.release_id] or [None]
    assert (leftover is not None) == hidden
    if hidden:
        assert leftover.name.startswith(f".{spec.release_id}.tmp-")
        if kill_at != "before_final":  # owner-only until it is made a plain folder
            assert stat.S_IMODE(leftover.stat().st_mode) == 0o700
        if kill_at in ("after_hidden_manifest", "before_final"):
            assert (leftover / "manifest.json").exists()
    if final:
        assert (folder / "manifest.json").exists()
    else:
        with pytest.raises(PublicationError, match="is not a complete release"):
            read_release(f"{uri}/{spec.release_id}", spark=spark)
    if kill_at == "before_publish":  # the staged copy is private and local
        (staged,) = (Path(spec.ledger_path).parent / "staging").iterdir()
        assert stat.S_IMODE(staged.stat().st_mode) == 0o700
    lines = io.StringIO()
    result = run_release(spec, progress=Progress(stream=lines), spark=spark)
    assert result.outcome == "resumed"
    if hidden:  # the hidden leftovers of exactly this release, removed under its lease
        assert f"removed {uri}/{leftover.name}, left by an interrupted run" in lines.getvalue()
    assert Ledger(spec.ledger_path).entry(spec.release_id).status == "committed"
    assert os.listdir(mounted) == [spec.release_id]  # no hidden leftovers
    assert not os.listdir(Path(spec.ledger_path).parent / "staging")
    assert_same_release(folder, reference_release)
