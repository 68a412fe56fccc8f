"""Attacks through the CLI and the public API, each of which must be refused.

Every test plays an analyst who holds the CLI, a spec and a committed release,
and tries to learn exact confidential values or to spend budget for free:
re-running a committed release id with an edited spec or input, aborting a
published release, re-using library stream labels for another query, reading
the master key out of Spark task closures, planting a key file or setting a
weak one, reading confidential figures in progress lines or errors, crashing
the job with hostile spec values, naming the input as the public hierarchy
mapping, reading a report whose bounds disagree, learning the data from
whether a run publishes or which error it raises, publishing under another
run's reservation, and drawing free noise from killed or aborted runs. The
wrapped-sum attack
(1,030 rows of 2**53) and its refusals are in tests/unit/engines/test_exact_sums.py, the
exponential mechanism's exact ratios in tests/unit/noise/test_exponential.py. See
docs/security_model.md for the threat table these tests back.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import sqlite3
import stat
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from release_specs import SMALL_SPEC, operator_home

from dp_pipeline import DiscreteGaussian, MasterKey
from dp_pipeline.datasets.synthetic import census_chunk, write_census_sample
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.release.cli import main
from dp_pipeline.release.ledger.budget import LedgerError, accountant_type
from dp_pipeline.release.ledger.integrity import LedgerTamperedError, seal
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.run import Progress, apply_overrides, read_release, run_release
from dp_pipeline.release.sources.fingerprint import input_files
from dp_pipeline.release.spec.load import load_spec
from dp_pipeline.release.spec.model import Budget

ROOT = Path(__file__).resolve().parents[3]
QUIET = Progress(quiet=True)
KEY_HEX = "57af74b97b8dca150c88eab838b51b745293770fb15167e0b7f938bd350df2e2"


@pytest.fixture(autouse=True)
def fixed_key(monkeypatch):
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)


def write_spec(folder: Path, text: str | None = None) -> Path:
    """The spec file in ``folder``, whose ledger and key are the operator's: ``folder`` is
    made the dp_pipeline home for the rest of the test (`operator_home`)."""
    operator_home(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "small.toml"
    path.write_text(text if text is not None else SMALL_SPEC.format(tmp=folder))
    return path


def resealed(ledger_path: str) -> None:
    """Seal every row again under the test key: an edit made by a holder of the key, which
    the ledger's own rules (identity digest, recorded bytes) must still refuse."""
    key = MasterKey.from_hex(KEY_HEX)
    with sqlite3.connect(ledger_path) as connection:
        connection.row_factory = sqlite3.Row
        rows = connection.execute("SELECT release_id, population FROM releases").fetchall()
        for row in rows:
            seal(connection, key, row["release_id"], row["population"], ledger_path)


def committed(folder: Path, input_path: Path | None = None):
    """A committed release of the small spec (on ``input_path``, else synthetic)."""
    path = write_spec(folder)
    overrides = {"input_path": str(input_path)} if input_path else {}
    spec = apply_overrides(load_spec(path), **overrides)
    run_release(spec, progress=QUIET)
    return path, spec


def refused_rerun(spec_file: Path, capsys, *arguments: str, status: int = 5) -> str:
    """Runs the CLI on ``spec_file``; it must refuse with ``status`` (5: the release id is
    recorded with another spec, input or key; 2: a spec or key error). Returns its stderr."""
    capsys.readouterr()
    code = main(["run", str(spec_file), "--quiet", *arguments])
    error = capsys.readouterr().err
    assert code == status, error
    return error


# ------------------------------------------------------ 1. spec edits under a committed id


@pytest.mark.parametrize(
    ("edit", "part"),
    [
        # A domain of values that never occur: the re-run would publish pure noise.
        (
            ('tenure = ["owned", "rented", "group_quarters"]', 'tenure = ["X", "Y", "Z"]'),
            "table 'tenure' domain of 'tenure' changed",
        ),
        # The same domain reordered: the noise would be permuted across cells.
        (
            (
                'tenure = ["owned", "rented", "group_quarters"]',
                'tenure = ["rented", "owned", "group_quarters"]',
            ),
            "table 'tenure' domain of 'tenure' changed",
        ),
        # A renamed table: fresh noise on the same data.
        (('name = "tenure"', 'name = "tenure_renamed"'), "table 'tenure' position is absent now"),
        # Other bounds on the summed column.
        (("upper = 200000", "upper = 100000"), "table 'state_income' bounds changed"),
        # Another budget: other noise scales on the same data.
        (("epsilon = 2", "epsilon = 1.5"), "budget changed"),
        (("noise_partitions = 3", "noise_partitions = 4"), "noise changed"),
    ],
)
def test_a_committed_release_id_refuses_any_spec_edit(tmp_path, capsys, edit, part):
    spec_file, spec = committed(tmp_path)
    before = {
        name: frame.copy()
        for name, frame in read_release(Path(spec.output_dir) / spec.release_id).items()
    }
    text = spec_file.read_text()
    assert edit[0] in text
    spec_file.write_text(text.replace(edit[0], edit[1], 1))
    error = refused_rerun(spec_file, capsys)
    assert f"release id '{spec.release_id}' is committed with another spec, input or key" in error
    assert part in error
    # Nothing was spent or published: one ledger row, the published tables unchanged.
    assert len(Ledger(spec.ledger_path).history()) == 1
    after = read_release(Path(spec.output_dir) / spec.release_id)
    for name, frame in before.items():
        pd.testing.assert_frame_equal(frame, after[name])


def test_two_specs_never_share_noise_even_in_separate_ledgers(tmp_path, monkeypatch):
    """Same key, same data, same id and table name, domain reordered: independent noise.

    Separate ledgers of one key are separate hosts (a user home and a dp_pipeline home
    each): the key binds to one ledger wherever its runs can see."""
    data = write_census_sample(tmp_path / "persons.parquet", 3000, seed=7)
    truth = pd.read_parquet(data)["tenure"].value_counts()
    noise = []
    for folder, order in (
        ("a", ["owned", "rented", "group_quarters"]),
        ("b", ["rented", "owned", "group_quarters"]),
    ):
        monkeypatch.setenv("HOME", str(tmp_path / folder / "user"))  # another host's user
        monkeypatch.setenv("DP_PIPELINE_HOME", str(tmp_path / folder / "home"))
        text = SMALL_SPEC.format(tmp=tmp_path / folder).replace(
            'tenure = ["owned", "rented", "group_quarters"]', f"tenure = {json.dumps(order)}"
        )
        spec = apply_overrides(load_spec(write_spec(tmp_path / folder, text)), input_path=str(data))
        table = read_release(run_release(spec, progress=QUIET).output)["tenure"]
        noisy = dict(zip(table["tenure"], table["value"], strict=True))
        noise.append({value: noisy[value] - int(truth.get(value, 0)) for value in order})
    # A stream shared under the permuted domain would give noise[1][rented] ==
    # noise[0][owned] and so on (deterministic: the key is fixed).
    permuted = {
        "rented": noise[0]["owned"],
        "owned": noise[0]["rented"],
        "group_quarters": noise[0]["group_quarters"],
    }
    assert noise[1] != permuted
    assert noise[1] != noise[0]


# ------------------------------------------------------------------ 2. fingerprint gaps


def parquet_folder(folder: Path, seed: int) -> Path:
    folder.mkdir(parents=True)
    write_census_sample(folder / "part-0.parquet", 1500, seed=seed)
    return folder


def test_a_planted_file_the_engine_reads_is_fingerprinted(tmp_path, capsys):
    data = parquet_folder(tmp_path / "input", seed=1)
    spec_file, _ = committed(tmp_path / "release", data)
    # pyarrow (the pandas engine) reads part-1.crc as Parquet: so does the fingerprint.
    write_census_sample(data / "part-1.crc", 50, seed=2)
    assert data / "part-1.crc" in input_files(data, "parquet")
    error = refused_rerun(spec_file, capsys, "--input", str(data))
    assert "these parts differ: input data changed" in error


def test_files_under_a_linked_folder_are_fingerprinted(tmp_path, capsys):
    data = parquet_folder(tmp_path / "input", seed=1)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    write_census_sample(elsewhere / "part-9.parquet", 100, seed=3)
    (data / "linked").symlink_to(elsewhere, target_is_directory=True)
    listed = input_files(data, "parquet")
    assert data / "linked" / "part-9.parquet" in listed
    spec_file, _ = committed(tmp_path / "release", data)
    write_census_sample(elsewhere / "part-9.parquet", 100, seed=4)  # change behind the link
    error = refused_rerun(spec_file, capsys, "--input", str(data))
    assert "input data changed" in error


@pytest.mark.spark
def test_spark_reads_underscore_files_with_an_equals_sign_and_they_are_fingerprinted(
    tmp_path, capsys, spark
):
    from dp_pipeline.release.sources.spark_listing import listed_files

    data = parquet_folder(tmp_path / "input", seed=1)
    write_census_sample(data / "_x=1.parquet", 40, seed=5)  # Spark's listing keeps it
    assert f"file://{data / '_x=1.parquet'}" in listed_files(spark, str(data), "parquet", None)
    text = SMALL_SPEC.format(tmp=tmp_path / "release").replace(
        'engine = "pandas"', 'engine = "spark"'
    )
    spec_file = write_spec(tmp_path / "release", text)
    run_release(apply_overrides(load_spec(spec_file), input_path=str(data)), progress=QUIET)
    write_census_sample(data / "_x=1.parquet", 40, seed=6)
    error = refused_rerun(spec_file, capsys, "--input", str(data))
    assert "input data changed" in error


# --------------------------------------------------------- 3. abort after publication


LAUNCHER = str(ROOT / "tests" / "support" / "protocol_launcher.py")


def killed_run(spec_file: Path, kill_at: str) -> None:
    """Runs the CLI in a process SIGKILLed at the ``kill_at`` point of the protocol."""
    environment = dict(os.environ, PYTHONPATH=str(ROOT), DP_PIPELINE_MASTER_KEY=KEY_HEX)
    killed = subprocess.run(
        [sys.executable, LAUNCHER, kill_at, "kill", "run", str(spec_file), "--quiet"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert killed.returncode == -9, killed.stderr


def test_a_published_release_cannot_be_aborted_and_a_rerun_finishes_it(tmp_path, capsys):
    spec_file = write_spec(tmp_path)
    spec = load_spec(spec_file)
    killed_run(spec_file, "after_publish")
    ledger = Ledger(spec.ledger_path)
    assert ledger.entry(spec.release_id).status == "reserved"
    assert ledger.entry(spec.release_id).published_at is not None
    capsys.readouterr()
    assert main(["ledger", "--ledger", spec.ledger_path, "--abort", spec.release_id]) == 2
    error = capsys.readouterr().err
    assert f"release id '{spec.release_id}' cannot be aborted" in error
    assert "was published" in error and "dp-release run SPEC" in error
    # Removing the output folder does not help: the ledger recorded the publication.
    published = Path(spec.output_dir) / spec.release_id
    renamed = published.with_name("copied-away")
    published.rename(renamed)
    with pytest.raises(LedgerError, match="cannot be aborted"):
        ledger.abort(spec.release_id)
    renamed.rename(published)
    # The documented way out: run it again; same identity, so it is finished.
    result = run_release(spec, progress=QUIET)
    assert result.outcome == "resumed"
    assert ledger.entry(spec.release_id).status == "committed"


def test_a_reservation_that_read_nothing_can_be_aborted(tmp_path):
    spec_file = write_spec(tmp_path)
    spec = load_spec(spec_file)
    killed_run(spec_file, "after_reserve")
    assert main(["ledger", "--ledger", spec.ledger_path, "--abort", spec.release_id]) == 0
    assert Ledger(spec.ledger_path).entry(spec.release_id).state == "aborted"


# ------------------------------------------------------------ 4. library API labels


def counts_and_sums():
    rng = np.random.default_rng(3)  # test data only
    return pd.DataFrame({"g": rng.integers(0, 50, 4000), "one": np.ones(4000, dtype=np.int64)})


def test_a_count_and_a_sum_under_the_same_labels_draw_different_noise():
    df = counts_and_sums()
    common = dict(
        by="g",
        domains={"g": range(50)},
        noise=DiscreteGaussian(Fraction(25, 4)),
        key=MasterKey(bytes(range(32))),
        release_id="r",
        table="t",
        privacy_unit=None,
    )
    counts = df.dp.count(**common)["count"].to_numpy()
    sums = df.dp.sum("one", bounds=(0, 1), **common)["sum"].to_numpy()
    # The true count and the true sum of ones are equal in every cell; shared noise would
    # make count - sum exactly 0 everywhere and reveal that the two agree exactly.
    assert np.count_nonzero(counts - sums) > 25


def test_queries_that_differ_in_anything_computed_have_different_labels():
    base = dict(
        privacy_unit=None,
        by="g",
        domains={"g": ["a", "b", "c"]},
        noise=DiscreteGaussian(4),
        key=MasterKey(bytes(32)),
        release_id="r",
        table="t",
    )
    variants = [
        QuerySpec.build("count", **base),
        QuerySpec.build("count", **{**base, "domains": {"g": ["c", "b", "a"]}}),
        QuerySpec.build("count", **{**base, "noise": DiscreteGaussian(5)}),
        QuerySpec.build("count", **{**base, "privacy_unit": "u", "max_cells": 2}),
        QuerySpec.build("sum", column="v", bounds=(0, 9), **base),
        QuerySpec.build("sum", column="v", bounds=(0, 8), **base),
        QuerySpec.build("mean", column="v", bounds=(0, 9), **base),
    ]
    labels = {spec.stream_labels(name, 0) for spec in variants for name, _, _ in spec.measures()}
    assert len(labels) == sum(len(spec.measures()) for spec in variants)


# ------------------------------------------------------------ 6. key on the executors


def test_the_master_key_is_never_pickled():
    key = MasterKey(bytes(range(32)))
    with pytest.raises(TypeError, match="never pickled"):
        pickle.dumps(key)
    spec = QuerySpec.build(
        "count",
        privacy_unit=None,
        by="g",
        domains={"g": range(4)},
        noise=DiscreteGaussian(4),
        key=key,
        release_id="r",
        table="t",
    )
    with pytest.raises(TypeError, match="never pickled"):
        pickle.dumps(spec)


def test_aggregation_tasks_get_no_key_and_noise_tasks_only_derived_keys():
    cloudpickle = pytest.importorskip("pyspark.cloudpickle")
    from dp_pipeline.engines.spark.parquet_pass import parquet_partials_function
    from dp_pipeline.randomness import StreamKey
    from dp_pipeline.udfs.noise import (
        arrow_cells_noise_function,
        arrow_noise_function,
        noise_stream_keys,
    )

    secret = bytes(range(100, 132))
    key = MasterKey(secret)
    specs = [
        QuerySpec.build(
            "count",
            privacy_unit=None,
            by="g",
            domains={"g": range(8)},
            noise=DiscreteGaussian(4),
            key=key,
            release_id="r",
            table="t",
            noise_partitions=4,
        ),
        QuerySpec.build(
            "sum",
            by="g",
            domains={"g": range(8)},
            noise=DiscreteGaussian(9),
            key=key,
            release_id="r",
            table="u",
            column="v",
            bounds=(0, 5),
            privacy_unit="p",
        ),
    ]
    aggregation = cloudpickle.dumps(parquet_partials_function(specs, "p"))
    assert secret not in aggregation
    derived = [k._key for spec in specs for k in noise_stream_keys(spec).values()]
    assert not any(d in aggregation for d in derived)  # no key material at all
    assert StreamKey.__name__.encode() not in aggregation
    for function in (
        arrow_noise_function(specs[0], {"g": pa.int64()}),
        arrow_cells_noise_function(specs),
    ):
        shipped = cloudpickle.dumps(function)
        assert secret not in shipped
        assert derived[0] in shipped  # the noise task's own derived stream key


@pytest.mark.spark
def test_a_spark_noise_job_runs_with_derived_keys_only(spark):
    from dp_pipeline.engines.pandas.aggregate import run_pandas
    from dp_pipeline.spark import run_queries

    key = MasterKey(bytes(range(32)))
    spec = QuerySpec.build(
        "count",
        privacy_unit=None,
        by="g",
        domains={"g": range(20)},
        noise=DiscreteGaussian(4),
        key=key,
        release_id="r",
        table="t",
        noise_partitions=3,
    )
    df = pd.DataFrame({"g": np.arange(200) % 20})
    ((released, _),) = run_queries(spark.createDataFrame(df), [spec])
    local, _ = run_pandas(df, spec)
    spark_values = released.toPandas().sort_values("g")["count"].to_numpy()
    assert np.array_equal(spark_values, local["count"].to_numpy())


# ------------------------------------------------------------------- 7. key files


def test_a_key_file_others_can_read_is_refused_with_the_fix(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DP_PIPELINE_MASTER_KEY")
    spec_file = write_spec(tmp_path)
    key_file = tmp_path / "master.key"
    key_file.write_text("00" * 32 + "\n")  # a planted, all-zero key
    key_file.chmod(0o644)
    error = refused_rerun(spec_file, capsys, status=2)
    assert f"master key file '{key_file}' has mode 0644" in error
    assert f"chmod 600 {key_file}" in error
    assert Ledger(tmp_path / "ledger.sqlite").history() == []  # nothing reserved or read


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")
def test_a_key_file_owned_by_another_user_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DP_PIPELINE_MASTER_KEY")
    spec_file = write_spec(tmp_path)
    key_file = tmp_path / "master.key"
    key_file.write_text("00" * 32 + "\n")
    key_file.chmod(0o600)
    os.chown(key_file, 12345, -1)
    error = refused_rerun(spec_file, capsys, status=2)
    assert "is owned by user id 12345" in error


def test_a_new_key_folder_is_private(tmp_path, monkeypatch):
    from dp_pipeline.release.keys import load_or_create_master_key

    monkeypatch.delenv("DP_PIPELINE_MASTER_KEY")
    key_file = tmp_path / "fresh" / ".dp_pipeline" / "master.key"
    load_or_create_master_key(key_file)
    assert stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600


# ----------------------------------------------------- 8. confidential figures in logs


def test_progress_lines_and_errors_carry_no_row_counts(tmp_path, capsys):
    data = tmp_path / "persons.parquet"
    write_census_sample(data, 2347, seed=9)  # a row count that appears nowhere else
    spec_file = write_spec(tmp_path / "release")
    capsys.readouterr()
    status = main(["run", str(spec_file), "--input", str(data)])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert "read the input" in captured.err  # the progress lines are there, without figures
    for figure in ("2347", "2,347"):
        assert figure not in captured.err and figure not in captured.out


# ------------------------------------------------------------ 9. exponential mechanism


def test_the_exponential_mechanism_declares_an_upper_bound_and_reads_data_blind():
    """The reported attack: Δu = 1/2 gave an exact ratio 137/17 against e**ε = 4."""
    import mpmath

    from dp_pipeline import BaseTwoExponential
    from tests.unit.noise.test_exponential import bytes_drawn, exact_rounded_pmf, max_ratio

    mechanism = BaseTwoExponential.for_base(1, 4, 1, utility_sensitivity="1/2", monotone=True)
    ratio = max_ratio(
        exact_rounded_pmf(mechanism.base, [Fraction(0), Fraction(3, 2)]),
        exact_rounded_pmf(mechanism.base, [Fraction(0), Fraction(2)]),
    )
    assert ratio == Fraction(137, 17)
    epsilon = mechanism.pure_epsilon
    assert (
        mpmath.log(mpmath.mpf(ratio.numerator) / ratio.denominator)
        <= mpmath.mpf(epsilon.numerator) / epsilon.denominator
    )
    # Two data sets of one size read the same keystream (the rounding included).
    whole = np.arange(200) % 37
    halves = np.array([Fraction(int(w), 2) for w in whole], dtype=object)
    engine = BaseTwoExponential(1, utility_bounds=(0, 40))
    assert bytes_drawn(engine, whole) == bytes_drawn(engine, halves)


# ----------------------------------------------------------------- 10. ledger loading


def test_the_ledger_restores_only_registered_mechanisms(tmp_path):
    _, spec = committed(tmp_path)
    forged = {
        "version": 1,
        "events": [
            {
                "mechanism": {
                    "type": "object",
                    "class": "attack_module_never_imported:Payload",
                    "data": {},
                },
                "sensitivity": [1],
                "count": 1,
            }
        ],
    }
    with sqlite3.connect(spec.ledger_path) as connection:
        connection.execute("UPDATE releases SET accountant = ?", (json.dumps(forged),))
    with pytest.raises(
        ValueError, match="'attack_module_never_imported:Payload' is not registered"
    ):
        Ledger(spec.ledger_path).spent(spec.population)
    assert "attack_module_never_imported" not in sys.modules


def test_a_tampered_identity_is_refused(tmp_path, capsys):
    spec_file, spec = committed(tmp_path)
    with sqlite3.connect(spec.ledger_path) as connection:
        (text,) = connection.execute("SELECT identity FROM releases").fetchone()
        identity = json.loads(text)
        identity["parts"]["input data"] = "0" * 64  # make a changed input look recorded
        connection.execute("UPDATE releases SET identity = ?", (json.dumps(identity),))
    # The row's authentication code refuses the edit first; re-sealed (as by a holder of
    # the key), the identity's own digest still refuses it.
    with pytest.raises(LedgerTamperedError, match="release 'small-1'"):
        run_release(load_spec(spec_file), progress=QUIET)
    resealed(spec.ledger_path)
    with pytest.raises(LedgerError, match="records a corrupt identity"):
        run_release(load_spec(spec_file), progress=QUIET)
    assert refused_rerun(spec_file, capsys).count("corrupt identity") == 1


# ----------------------------------------------------------- 11. what reading the data reveals


def probe_spec(folder: Path, input_path: Path, stop: int, threshold: int = 0) -> Path:
    """The small spec on ``input_path`` with a probe domain ``age < stop`` under "error"."""
    text = (
        SMALL_SPEC.format(tmp=folder)
        .replace("stop = 115 }", f"stop = {stop} }}")
        .replace('share = "1/2"', 'share = "2/5"')
        .replace(
            "[input]\nsynthetic_persons = 3000\n",
            f'[input]\npath = "{input_path}"\non_invalid = "error"\n'
            f'invalid_share = "1/10"\ninvalid_threshold = {threshold}\n',
        )
    )
    return write_spec(folder, text)


def census_csv(path: Path, persons: int = 400, seed: int = 3, max_age: int | None = None) -> Path:
    frame = pd.read_parquet(write_census_sample(path.with_suffix(".parquet"), persons, seed=seed))
    if max_age is not None:
        frame["age"] = frame["age"].clip(upper=max_age)
    frame.to_csv(path, index=False)
    return path


def test_the_invalid_row_rule_is_no_free_oracle_of_the_datas_maximum(tmp_path, capsys, monkeypatch):
    """The binary search of a probe domain: every run that reads is charged, and decided noisily.

    Two inputs that differ only in their maximum age, probed with ``age < 60``: on
    the old code one run was refused before the ledger (nothing spent) with an error
    naming ``age``, the other published, so 8 runs found the maximum exactly. Now
    every run reserves its spend before reading, the decision is a noisy count's, and
    a refusal's text is the same whatever column broke (only the noisy count varies).
    """
    outcomes = {}
    for max_age in (50, 90):
        folder = tmp_path / f"max{max_age}"
        monkeypatch.setenv("HOME", str(folder / "user"))  # one host per ledger
        monkeypatch.setenv("DP_PIPELINE_HOME", str(folder / "home"))
        data = census_csv(folder / "people.csv", max_age=max_age)
        spec_file = probe_spec(folder, data, stop=60, threshold=5)
        capsys.readouterr()
        status = main(["run", str(spec_file), "--quiet"])
        error = capsys.readouterr().err
        spec = load_spec(spec_file)
        entry = Ledger(spec.ledger_path).entry(spec.release_id)
        assert entry is not None and entry.status in ("reserved", "committed"), error
        assert entry.guarantee  # the spend is recorded, refused or not
        assert "'age'" not in error and "age" not in error.replace("privacy units", "")
        outcomes[max_age] = (status, error)
    # Many people above the probe: the noisy count refuses, with a text that names no
    # column; the same text, up to the noisy number, when another column breaks.
    assert outcomes[90][0] == 7  # refused on the noisy invalid-row count
    refused = outcomes[90][1]
    assert "the noisy count of privacy units with an invalid row is" in refused
    folder = tmp_path / "tenure"
    monkeypatch.setenv("HOME", str(folder / "user"))
    monkeypatch.setenv("DP_PIPELINE_HOME", str(folder / "home"))
    data = census_csv(folder / "people.csv", max_age=50)
    frame = pd.read_csv(data)
    frame.loc[frame.index[:200], "tenure"] = "unknown"  # another column breaks instead
    frame.to_csv(data, index=False)
    spec_file = probe_spec(folder, data, stop=60, threshold=5)
    capsys.readouterr()
    assert main(["run", str(spec_file), "--quiet"]) == 7  # refused on the noisy invalid-row count
    other = capsys.readouterr().err

    def template(text: str) -> str:
        return re.sub(r"[0-9]+", "N", text)

    assert template(other).split("problem(s)")[1] == template(refused).split("problem(s)")[1]


CONFIDENTIAL = "SECRET-ROW-4417"


def test_a_ragged_csv_row_is_a_counted_invalid_row_never_quoted(tmp_path, capsys):
    """A row with an extra field used to put the whole record into the CLI's traceback."""
    folder = tmp_path / "ragged"
    data = census_csv(folder / "people.csv")
    with data.open("a") as handle:
        handle.write(f"77,{CONFIDENTIAL},3,F,41,owned,98765,extra\n")
    text = SMALL_SPEC.format(tmp=folder).replace(
        "[input]\nsynthetic_persons = 3000\n", f'[input]\npath = "{data}"\n'
    )
    spec_file = write_spec(folder, text)
    capsys.readouterr()
    status = main(["run", str(spec_file), "--quiet"])
    captured = capsys.readouterr()
    assert CONFIDENTIAL not in captured.err + captured.out and "98765" not in captured.err
    assert status == 0, captured.err  # dropped and counted, the release published
    spec = apply_overrides(load_spec(spec_file), release_id="small-2")
    result = run_release(spec, progress=QUIET)
    assert {d.rows_malformed for d in result.diagnostics.values()} == {1}


def test_a_parquet_folder_with_a_float_in_an_integer_column_is_refused_without_the_value(
    tmp_path, capsys
):
    """Files of one folder with two types for a key: refused before the ledger, no value shown."""
    folder = tmp_path / "typed"
    parts = folder / "parts"
    parts.mkdir(parents=True)
    frame = pd.read_parquet(write_census_sample(folder / "all.parquet", 400, seed=2))
    frame.iloc[:200].to_parquet(parts / "part-0.parquet", index=False)
    later = frame.iloc[200:].astype({"age": "float64"})
    later.loc[later.index[0], "age"] = 41.73519  # the confidential value
    later.to_parquet(parts / "part-1.parquet", index=False)
    text = SMALL_SPEC.format(tmp=folder).replace(
        "[input]\nsynthetic_persons = 3000\n", f'[input]\npath = "{parts}"\n'
    )
    spec_file = write_spec(folder, text)
    capsys.readouterr()
    status = main(["run", str(spec_file), "--quiet"])
    error = capsys.readouterr().err
    assert status == 2, error
    assert "41.73519" not in error and "41.7" not in error
    assert "part-1.parquet" in error and "column 'age' has type double but int32" in error
    spec = load_spec(spec_file)
    assert Ledger(spec.ledger_path).entry(spec.release_id) is None  # refused before reserving


@pytest.mark.spark
def test_spark_reads_a_csv_folder_by_header_and_hides_ragged_rows(tmp_path, capsys, spark):
    """Spark read a CSV folder by position (incomes as unit ids); now each header is checked."""
    folder = tmp_path / "swapped"
    parts = folder / "parts"
    parts.mkdir(parents=True)
    frame = pd.read_csv(census_csv(folder / "people.csv"))
    frame.iloc[:200].to_csv(parts / "part-0.csv", index=False)
    columns = list(frame.columns)
    swapped = [columns[-1], *columns[1:-1], columns[0]]  # income first, person_id last
    frame.iloc[200:][swapped].to_csv(parts / "part-1.csv", index=False)
    text = (
        SMALL_SPEC.format(tmp=folder)
        .replace(
            "[input]\nsynthetic_persons = 3000\n", f'[input]\npath = "{parts}"\nformat = "csv"\n'
        )
        .replace('engine = "pandas"', 'engine = "spark"')
    )
    spec = load_spec(write_spec(folder, text))
    with pytest.raises(Exception) as info:
        run_release(spec, progress=QUIET, spark=spark)
    message = str(info.value)
    assert "part-1.csv" in message and "header differs" in message
    assert Ledger(spec.ledger_path).entry(spec.release_id) is None
    # One header in both files, a ragged row with a confidential field: read by name,
    # the ragged row dropped and counted, nothing quoted.
    frame.iloc[200:].to_csv(parts / "part-1.csv", index=False)
    with (parts / "part-1.csv").open("a") as handle:
        handle.write(f"78,{CONFIDENTIAL},4,F,33,owned\n")
    result = run_release(spec, progress=QUIET, spark=spark)
    assert result.outcome == "reserved"
    # Read by the executors (the Spark SQL path): the ragged row is not among the rows
    # read (it is counted in `rows_malformed` where the driver aggregates, or under
    # on_invalid = "error"; tests/unit/release/sources/test_release_on_invalid.py).
    assert {d.rows_in for d in result.diagnostics.values()} == {len(frame)}


def test_a_planted_synthetic_sample_is_regenerated_before_any_truth(tmp_path):
    """accuracy.json scored the noisy cells against whatever file the cache held."""
    _, spec = committed(tmp_path)
    cached = Path(spec.ledger_path).parent / "samples" / "census_v1_3000_2026.parquet"
    genuine = cached.read_bytes()
    planted = write_census_sample(tmp_path / "real.parquet", 3000, seed=99)  # "real" data
    cached.write_bytes(planted.read_bytes())
    seal = cached.with_name(cached.name + ".seal")
    if seal.exists():
        seal.write_text("00" * 32 + "\n")  # a forged seal: the key is not the attacker's
    result = run_release(spec.with_release_id("small-2"), progress=QUIET)
    assert cached.read_bytes() == genuine  # generated again from the generator
    truth = pd.read_parquet(cached)["tenure"].value_counts()
    accuracy = json.loads((result.output / "accuracy.json").read_text())
    assert accuracy["accuracy_vs_truth"]
    tenure = read_release(result.output)["tenure"]
    margin = result.plan.table("tenure").margin_of_error
    for value, noisy in zip(tenure["tenure"], tenure["value"], strict=True):
        assert abs(noisy - int(truth.get(value, 0))) <= 4 * margin


def test_bytes_that_are_not_utf8_are_a_malformed_row_that_quotes_nothing(tmp_path, capsys):
    """Bytes the CSV reader cannot decode (not UTF-8) in a used field: a malformed row, as
    on Spark (which decodes them to U+FFFD), never a refusal decided by one record."""
    folder = tmp_path / "bytes"
    folder.mkdir()
    data = folder / "people.csv"
    data.write_bytes(
        b"person_id,state,sex,age,tenure,income\n1,3,F,41,owned,5\n"
        b"2,3,\xff" + CONFIDENTIAL.encode() + b"\xfe,41,owned,5\n"
    )
    text = SMALL_SPEC.format(tmp=folder).replace(
        "[input]\nsynthetic_persons = 3000\n", f'[input]\npath = "{data}"\n'
    )
    spec_file = write_spec(folder, text)
    capsys.readouterr()
    assert main(["run", str(spec_file), "--quiet"]) == 0  # on_invalid = "drop": published
    printed = capsys.readouterr()
    message = (printed.out + printed.err).replace(str(tmp_path), "<tmp>")
    assert CONFIDENTIAL not in message
    spec = load_spec(spec_file)
    assert Ledger(spec.ledger_path).entry(spec.release_id).status == "committed"


# ------------------------------------------------------------- 12. the release protocol


def paused_run(spec_file: Path, point: str, go: Path) -> subprocess.Popen:
    """The CLI in a process that stops, alive and holding its lease, at ``point``."""
    environment = dict(os.environ, PYTHONPATH=str(ROOT), DP_PIPELINE_MASTER_KEY=KEY_HEX)
    process = subprocess.Popen(
        [sys.executable, LAUNCHER, point, f"wait:{go}", "run", str(spec_file), "--quiet"],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    reached = go.with_name(go.name + ".reached")
    deadline = time.monotonic() + 600
    while not reached.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the run did not reach its pause point"
        time.sleep(0.05)
    return process


def test_an_aborted_live_run_never_publishes_under_another_reservation(tmp_path, capsys):
    """Run A (ε 2) reserves; the operator aborts it; the same id reserves with ε 0.01;
    A goes on. Before: A published its ε-2 tables and committed the ε-0.01 reservation."""
    spec_file = write_spec(tmp_path)
    spec = load_spec(spec_file)
    small = tmp_path / "b" / "small.toml"
    write_spec(small.parent, spec_file.read_text().replace("epsilon = 2", "epsilon = 0.01"))
    operator_home(tmp_path)  # both specs name the first one's ledger and key
    go = tmp_path / "go"
    run_a = paused_run(spec_file, "after_reserve", go)
    try:
        ledger = Ledger(spec.ledger_path)
        assert ledger.entry(spec.release_id).owner.endswith(f":{run_a.pid}")
        # While A is alive its lease is held: no abort, and no other run of its id.
        capsys.readouterr()
        assert main(["ledger", "--ledger", spec.ledger_path, "--abort", spec.release_id]) == 2
        error = capsys.readouterr().err
        assert "aborting it refused" in error and f":{run_a.pid} holds the lease" in error
        assert ledger.entry(spec.release_id).state == "reserved"
        assert refused_rerun(small, capsys, status=8).count("running it refused") == 1
        assert main(["ledger", "--ledger", spec.ledger_path]) == 0
        assert f":{run_a.pid})" in capsys.readouterr().out  # the listing names the run
    finally:
        go.touch()
        _, err = run_a.communicate(timeout=600)
    assert run_a.returncode == 0, err
    entry = ledger.entry(spec.release_id)
    assert entry.state == "committed"
    assert (
        entry.identity["digest"]
        == json.loads(
            (Path(spec.output_dir) / spec.release_id / "privacy_report.json").read_text()
        )["release_digest"]
    )


def test_a_reservation_taken_over_moves_only_for_its_new_holder(tmp_path):
    """Were A's reservation aborted anyway (a lease that another host cannot see), the
    reservation the same id gets next carries another token and identity: A moves nothing."""
    ledger = Ledger(tmp_path / "ledger.sqlite")
    args = dict(population="p", release_id="r", cap=Budget(rho=Fraction(8)))
    strong, weak = DiscreteGaussian(Fraction(1, 4)), DiscreteGaussian(Fraction(10**6))
    run_a = ledger.reserve(accountant=accountant_of(strong), fingerprint="x", **args)
    ledger.abort("r")  # nothing read, no lease held
    run_b = ledger.reserve(accountant=accountant_of(weak), fingerprint="x", **args)
    assert run_b.outcome == "reserved" and run_b.token != run_a.token
    manifest = {"format": 1, "files": {}}
    for move in (
        lambda: ledger.advance(run_a, "reading"),
        lambda: ledger.mark_publishing(run_a, manifest, "pandas"),
        lambda: ledger.commit(run_a),
    ):
        with pytest.raises(LedgerError, match="this run no longer holds its reservation"):
            move()
    entry = ledger.entry("r")
    assert (entry.state, entry.published_at) == ("reserved", None)


def accountant_of(mechanism):
    result = accountant_type()()
    result.add(mechanism, sensitivity=1, count=1)
    return result


def test_a_run_killed_before_publication_is_charged_and_its_folder_private(tmp_path, capsys):
    """Before: a run killed between writing its outputs and recording publication left a
    readable complete release (0755) and `ledger --abort` refunded it: free noisy draws."""
    spec_file = write_spec(tmp_path)
    spec = load_spec(spec_file)
    killed_run(spec_file, "before_publish")
    (hidden,) = Path(spec.output_dir).glob(f".{spec.release_id}.tmp-*")
    assert stat.S_IMODE(hidden.stat().st_mode) == 0o700
    assert (hidden / "manifest.json").exists()  # complete, but only the owner can read it
    capsys.readouterr()
    assert main(["ledger", "--ledger", spec.ledger_path, "--abort", spec.release_id]) == 2
    error = capsys.readouterr().err
    assert "cannot be aborted: its run reached state 'noised'" in error
    entry = Ledger(spec.ledger_path).entry(spec.release_id)
    assert (entry.status, entry.state) == ("reserved", "noised")
    # The same id resumes it: no new spend, the hidden folder replaced by the release.
    result = run_release(spec, progress=QUIET)
    assert result.outcome == "resumed"
    assert not list(Path(spec.output_dir).glob(".*"))
    assert len(Ledger(spec.ledger_path).history()) == 1


def test_abort_is_refused_while_a_hidden_folder_of_the_release_exists(tmp_path, capsys):
    spec_file = write_spec(tmp_path)
    spec = load_spec(spec_file)
    killed_run(spec_file, "after_reserve")  # nothing read: abort would be allowed
    planted = Path(spec.output_dir) / f".{spec.release_id}.tmp-4242-0123abcd"
    planted.mkdir(parents=True)
    capsys.readouterr()
    assert main(["ledger", "--ledger", spec.ledger_path, "--abort", spec.release_id]) == 2
    assert "hidden folder(s)" in capsys.readouterr().err
    planted.rmdir()
    assert main(["ledger", "--ledger", spec.ledger_path, "--abort", spec.release_id]) == 0


def test_the_package_honours_no_fault_injection_variable(tmp_path):
    """Before: DP_PIPELINE_KILL_AT, read by the installed package, killed any run at will."""
    spec_file = write_spec(tmp_path)
    spec = load_spec(spec_file)
    environment = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        DP_PIPELINE_MASTER_KEY=KEY_HEX,
        DP_PIPELINE_KILL_AT="before_publish",
    )
    finished = subprocess.run(
        [sys.executable, "-m", "dp_pipeline.release", "run", str(spec_file), "--quiet"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert finished.returncode == 0, finished.stderr
    assert Ledger(spec.ledger_path).entry(spec.release_id).state == "committed"
    sources = (ROOT / "dp_pipeline").rglob("*.py")
    assert not [path for path in sources if "KILL_AT" in path.read_text()]


def test_a_rerun_that_would_publish_other_bytes_is_refused(tmp_path, capsys):
    """The recorded digests stand for what was published; a re-run of the id making other
    bytes (another engine parsing the input otherwise, another library version) is refused
    before anything reaches the final folder."""
    spec_file, spec = committed(tmp_path)
    final = Path(spec.output_dir) / spec.release_id
    before = {path.name: path.read_bytes() for path in final.iterdir()}
    with sqlite3.connect(spec.ledger_path) as connection:
        (text,) = connection.execute("SELECT manifest FROM releases").fetchone()
        manifest = json.loads(text)
        manifest["files"]["tenure.parquet"]["sha256"] = "0" * 64
        connection.execute("UPDATE releases SET manifest = ?", (json.dumps(manifest),))
    resealed(spec.ledger_path)  # past the rows' codes, as a holder of the key could
    error = refused_rerun(spec_file, capsys)
    assert "re-emits the same bytes or nothing, so nothing was published" in error
    assert "by the pandas engine" in error and "tenure" not in error
    assert {path.name: path.read_bytes() for path in final.iterdir()} == before
    assert not list(Path(spec.output_dir).glob(".*"))  # the hidden copy is removed
    assert len(Ledger(spec.ledger_path).history()) == 1


def test_a_users_folder_at_the_output_path_is_never_deleted(tmp_path, capsys):
    """Before: publishing replaced whatever folder was at out/<release id>."""
    spec_file = write_spec(tmp_path)
    spec = load_spec(spec_file)
    final = Path(spec.output_dir) / spec.release_id
    final.mkdir(parents=True)
    (final / "notes.txt").write_text("mine")
    error = refused_rerun(spec_file, capsys, status=2)
    assert "exists and is not an earlier copy of this release" in error
    assert (final / "notes.txt").read_text() == "mine"
    assert Ledger(spec.ledger_path).history() == []  # refused before anything is spent
    # A release's folder with a file of the user's added is not a copy either.
    (final / "notes.txt").unlink()
    final.rmdir()
    run_release(spec, progress=QUIET)
    (final / "notes.txt").write_text("mine")
    assert "not an earlier copy" in refused_rerun(spec_file, capsys, status=2)
    assert (final / "notes.txt").read_text() == "mine"
    (final / "notes.txt").unlink()
    assert main(["run", str(spec_file), "--quiet"]) == 3  # the release's own copy: re-emitted


def test_cleaning_up_release_x_leaves_the_hidden_folder_of_x_dot_y(tmp_path):
    """Before: the clean-up of id ``small`` deleted the in-progress folder of ``small.v2``."""
    spec = apply_overrides(load_spec(write_spec(tmp_path)), release_id="small")
    out = Path(spec.output_dir)
    other = out / ".small.v2.tmp-4242-0123abcd"
    other.mkdir(parents=True)
    own = out / ".small.tmp-4242-0123abcd"
    own.mkdir()
    run_release(spec, progress=QUIET)
    assert other.is_dir() and not own.exists()


def test_a_new_ledger_folder_and_file_are_the_owners_only(tmp_path):
    spec = apply_overrides(
        load_spec(write_spec(tmp_path)), ledger_path=str(tmp_path / "state" / "ledger.sqlite")
    )
    run_release(spec, progress=QUIET)
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "state" / "ledger.sqlite").stat().st_mode) == 0o600
    # A published release is readable as any new folder would be.
    published = Path(spec.output_dir) / spec.release_id
    assert stat.S_IMODE(published.stat().st_mode) == 0o777 & ~current_umask()


def current_umask() -> int:
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


# ------------------------------------------------ 13. reports, keys and hostile specs


def bound_pairs(value, where: str = "report"):
    """Every (place, lower, upper) of a JSON value: ``{lower, upper}`` objects and the
    ledger's ``x`` with ``x_lower``."""
    if isinstance(value, dict):
        if value.get("lower") is not None and value.get("upper") is not None:
            yield where, value["lower"], value["upper"]
        for key, item in value.items():
            if key.endswith("_lower") and item is not None and value.get(key[:-6]) is not None:
                yield f"{where}.{key[:-6]}", item, value[key[:-6]]
            yield from bound_pairs(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from bound_pairs(item, f"{where}[{index}]")


@pytest.mark.parametrize(
    "edit",
    [
        None,  # budget (2, 1e-9) under the cap (8, 1e-8): the bounds at two different points
        ("[budget]\nepsilon = 2\ndelta = 1e-9", '[budget]\nrho = "1/20"'),
        ("noise_partitions = 3", 'noise_partitions = 3\nnoise = "discrete_laplace"'),
    ],
)
def test_every_bound_pair_of_a_report_is_ordered(tmp_path, capsys, edit):
    """The cumulative δ's lower bound was this release's δ at the budget's ε,
    its upper the ledger's δ at the cap's ε, and lower > upper in privacy_report.json."""
    text = SMALL_SPEC.format(tmp=tmp_path)
    if edit is not None:
        assert edit[0] in text
        text = text.replace(*edit)
    spec_file = write_spec(tmp_path, text)
    for release_id in ("first", "second"):  # the second composes with an earlier release
        capsys.readouterr()
        assert main(["run", str(spec_file), "--quiet", "--release-id", release_id]) == 0
        report = json.loads((tmp_path / "out" / release_id / "privacy_report.json").read_text())
        pairs = list(bound_pairs(report))
        assert any(".cumulative" in place for place, _, _ in pairs)
        for place, lower, upper in pairs:
            assert float(Fraction(lower)) <= float(Fraction(upper)), (place, lower, upper)
    # The plan's lines show each lower bound beside its upper bound, at the same point.
    capsys.readouterr()
    assert main(["plan", str(spec_file)]) == 0
    for upper, lower in re.findall(
        r": (?:tight )?([0-9.e+-]+) \([a-z_0-9]+, lower bound "
        r"([0-9.e+-]+)",
        capsys.readouterr().out,
    ):
        assert float(lower) <= float(upper)


WEAK_KEYS = {
    "all zero": "00" * 32,
    "one byte": "3c" * 32,
    "a counter": bytes(range(32)).hex(),
    "a word four times": "deadbeefcafe0001" * 4,
    "a passphrase": b"password" * 4,
}


@pytest.mark.parametrize("where", ["file", "environment"])
@pytest.mark.parametrize("name", list(WEAK_KEYS))
def test_a_weak_key_is_refused_without_showing_it(tmp_path, capsys, monkeypatch, where, name):
    """An all-zero or patterned key was accepted, and its public fingerprint
    (computable by anyone for such a key) identified it in every report."""
    key = WEAK_KEYS[name]
    raw = key if isinstance(key, bytes) else bytes.fromhex(key)
    spec_file = write_spec(tmp_path)
    if where == "file":
        monkeypatch.delenv("DP_PIPELINE_MASTER_KEY")
        key_file = tmp_path / "master.key"
        key_file.write_bytes(key if isinstance(key, bytes) else key.encode() + b"\n")
        key_file.chmod(0o600)
    else:
        monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", raw.hex())
    error = refused_rerun(spec_file, capsys, status=2)
    assert "is weak" in error and "secrets.token_hex(32)" in error, error
    fingerprint = MasterKey(raw).fingerprint
    for shown in (raw.hex(), raw.hex().upper(), fingerprint):
        assert shown not in error
    assert not (tmp_path / "ledger.sqlite").exists()  # refused before the ledger


def test_key_ledger_and_cache_folders_are_private_whatever_creates_them(
    tmp_path, capsys, monkeypatch
):
    """``.dp_pipeline/`` was created 0755 by the ledger or the sample cache,
    and the parents of a nested key file with the umask's mode."""
    previous = os.umask(0)  # the most permissive umask: every mode must be set explicitly
    try:
        # The environment's key, so the sample cache is the first to create .dp_pipeline/.
        text = SMALL_SPEC.format(tmp=tmp_path).replace(
            f'ledger = "{tmp_path}/ledger.sqlite"', f'ledger = "{tmp_path}/.dp_pipeline/l.sqlite"'
        )
        spec_file = write_spec(tmp_path / "spec", text)
        monkeypatch.setenv("DP_PIPELINE_HOME", str(tmp_path))  # the spec's key is the home's
        ledger_flag = ["--ledger", f"{tmp_path}/.dp_pipeline/l.sqlite"]
        assert main(["run", str(spec_file), "--quiet", *ledger_flag]) == 0
        # A file key under new folders (run), and a ledger under new ones (opened directly:
        # the ledger command reads a ledger and never creates one).
        monkeypatch.delenv("DP_PIPELINE_MASTER_KEY")
        # Another operator (user and home): a new key beside the first home's is refused.
        monkeypatch.setenv("HOME", str(tmp_path / "another-user"))
        monkeypatch.setenv("DP_PIPELINE_HOME", str(tmp_path / "other"))
        key_file = tmp_path / "keys" / "nested" / "master.key"
        text = SMALL_SPEC.format(tmp=tmp_path / "other")
        spec_file = write_spec(
            tmp_path / "other", text.replace(f'key_file = "{tmp_path}/other/master.key"\n', "")
        )
        assert main(["run", str(spec_file), "--quiet", "--key-file", str(key_file)]) == 0
        ledger = tmp_path / "audit" / ".dp_pipeline" / "ledger.sqlite"
        Ledger(ledger).close()
        assert main(["ledger", "--ledger", str(ledger)]) == 0
    finally:
        os.umask(previous)
    for folder in (
        tmp_path / ".dp_pipeline",
        tmp_path / ".dp_pipeline" / "samples",
        tmp_path / "keys",
        tmp_path / "keys" / "nested",
        tmp_path / "audit",
        tmp_path / "audit" / ".dp_pipeline",
    ):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600


HOSTILE_RUNS = [
    (("delta = 1e-9", "delta = 0"), "budget.delta = 0: discrete_gaussian noise"),
    (("epsilon = 2", "epsilon = 1e-100000"), "budget.epsilon = 1E-100000: too many digits"),
    (("epsilon = 2", "epsilon = 1e100000"), "budget.epsilon = 1E+100000: too many digits"),
    (
        (
            "age = {{ start = 0, stop = 115 }}",
            "age = {{ start = -9223372036854775808, stop = 9223372036854775807 }}",
        ),
        "above the 1,099,511,627,776 (2**40)",
    ),
    (('value = "income"', 'value = "state"'), "the summed column cannot also be one"),
    (('dir = "{tmp}/out"', 'dir = "{tmp}/small.toml"'), "is an existing file"),
]


@pytest.mark.parametrize("edit, fragment", HOSTILE_RUNS)
def test_a_hostile_spec_is_refused_before_anything_is_read(tmp_path, capsys, edit, fragment):
    """These ended in tracebacks, some after the ledger reserved the budget."""
    monkeypatch_free = SMALL_SPEC.replace(edit[0], edit[1])
    assert monkeypatch_free != SMALL_SPEC
    spec_file = write_spec(tmp_path, monkeypatch_free.format(tmp=tmp_path))
    for command in (["plan", str(spec_file)], ["run", str(spec_file), "--quiet"]):
        capsys.readouterr()
        assert main(command) == 2
        error = capsys.readouterr().err
        assert fragment in error and "Traceback" not in error, error
    assert not (tmp_path / "ledger.sqlite").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("key", ["value", "raw_value"])
def test_a_key_named_like_an_output_column_is_refused_at_plan_time(tmp_path, capsys, key):
    """A key named ``value`` passed validation; the run reserved the budget,
    read the data, added noise and crashed building the published table."""
    data = tmp_path / "persons.csv"
    persons = census_chunk(5, 0, 400).to_pandas()
    persons[key] = np.where(persons["person_id"] % 2 == 0, "a", "b")
    persons.to_csv(data, index=False)
    text = (
        SMALL_SPEC.format(tmp=tmp_path)
        .replace('keys = ["tenure"]', f'keys = ["{key}"]')
        .replace('sex = ["F", "M"]', f'sex = ["F", "M"]\n{key} = ["a", "b"]')
    )
    spec_file = write_spec(tmp_path, text)
    error = refused_rerun(spec_file, capsys, "--input", str(data), status=2)
    assert f"tables[1].keys: table 'tenure' has key column {key!r}" in error, error
    assert "cannot be named value, raw_value" in error
    assert not (tmp_path / "ledger.sqlite").exists()  # nothing reserved, nothing read


HIERARCHY_SPEC = """
[release]
id = "geo-1"
[population]
name = "people"
cap = {{ rho = 1 }}
[privacy_unit]
column = "person_id"
[budget]
rho = "1/2"
[input]
path = "{input}"
[run]
engine = "pandas"
ledger = "{tmp}/ledger.sqlite"
key_file = "{tmp}/master.key"
[domains]
county = {{ start = 1, stop = 4 }}
state = ["a", "b"]
[hierarchy]
levels = ["state", "county"]
mapping = "{mapping}"
[postprocess]
consistent = true
[[tables]]
name = "county"
keys = ["county"]
share = "1/2"
[[tables]]
name = "state"
keys = ["state"]
share = "1/2"
"""


def test_a_mapping_that_is_the_input_is_refused_unread(tmp_path, capsys):
    """``[hierarchy] mapping`` naming the confidential input made the free
    ``plan`` quote its values and line numbers (county 9173 on line 3)."""
    persons = tmp_path / "persons.csv"
    persons.write_text("person_id,county,state\n1,1,a\n2,9173,zz-secret\n3,2,b\n")
    mapping = tmp_path / "map.csv"
    mapping.write_text("county,state\n1,a\n2,a\n3,b\n4,b\n")
    leaks = ("9173", "zz-secret", "line 3", "line")

    def refused(spec_text: str, *arguments: str) -> str:
        spec_file = tmp_path / "geo.toml"
        spec_file.write_text(spec_text)
        capsys.readouterr()
        assert main([*arguments[:1], str(spec_file), *arguments[1:]]) == 2
        return capsys.readouterr().err

    # The mapping is the input: refused before it is opened, by plan and by run.
    same = HIERARCHY_SPEC.format(tmp=tmp_path, input=persons, mapping=persons)
    for command in ("plan", "run"):
        error = refused(same, command)
        assert "hierarchy.mapping" in error and "is the input" in error, error
        message = error.replace(str(tmp_path), "<tmp>")
        assert not any(leak in message for leak in leaks), error
    # The mapping lies in the input folder.
    folder = tmp_path / "input"
    folder.mkdir()
    inside = folder / "part.csv"
    inside.write_text(persons.read_text())
    error = refused(HIERARCHY_SPEC.format(tmp=tmp_path, input=folder, mapping=inside), "plan")
    message = error.replace(str(tmp_path), "<tmp>")
    assert "is the input" in error and not any(leak in message for leak in leaks), error
    # --input names the mapping after the spec was read.
    spec = HIERARCHY_SPEC.format(tmp=tmp_path, input=persons, mapping=mapping)
    error = refused(spec, "run", "--quiet", "--input", str(mapping))
    assert "is the input" in error, error
    # A confidential file named as the mapping (the input elsewhere): its errors name
    # the rule and the column, never its text or line numbers.
    spec = HIERARCHY_SPEC.format(tmp=tmp_path, input=mapping, mapping=persons)
    error = refused(spec.replace(f'path = "{mapping}"', 'path = ""'), "plan")
    assert "column 'county' holds a value outside domains.county" in error, error
    message = error.replace(str(tmp_path), "<tmp>")
    assert not any(leak in message for leak in leaks), error
    assert not (tmp_path / "ledger.sqlite").exists()


def test_another_engine_parsing_the_input_otherwise_never_changes_published_bytes(
    tmp_path, capsys, spark
):
    """A CSV field holding a quoted newline whose second line looks like a row: engines that
    parse it differently make other tables under the same identity (the same noise). The
    committed release id then re-emits the same bytes or publishes nothing."""
    frame = pd.read_parquet(write_census_sample(tmp_path / "p.parquet", 300, seed=1))
    lines = frame.to_csv(index=False).splitlines()
    row = lines[1].split(",")
    row[lines[0].split(",").index("tenure")] = '"owned\n' + lines[2] + '"'
    lines[1] = ",".join(row)
    data = tmp_path / "persons.csv"
    data.write_text("\n".join(lines) + "\n")
    spec_file, spec = committed(tmp_path, input_path=data)
    final = Path(spec.output_dir) / spec.release_id
    published = {path.name: path.read_bytes() for path in final.iterdir()}
    rerun = apply_overrides(load_spec(spec_file), input_path=str(data), engine="spark")
    try:
        assert run_release(rerun, progress=QUIET, spark=spark).outcome == "already_committed"
    except LedgerError as error:
        assert "re-emits the same bytes or nothing, so nothing was published" in str(error)
        assert "by the pandas engine" in str(error) and "(spark engine)" in str(error)
    assert {path.name: path.read_bytes() for path in final.iterdir()} == published
    assert not list(Path(spec.output_dir).glob(".*"))
