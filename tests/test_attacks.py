"""Attacks through the CLI and the public API, each of which must be refused.

Every test plays an analyst who holds the CLI, a spec and a committed release,
and tries to learn exact confidential values or to spend budget for free:
re-running a committed release id with an edited spec or input, aborting a
published release, re-using library stream labels for another query, reading
the master key out of Spark task closures, planting a key file or setting a
weak one, reading confidential figures in progress lines or errors, crashing
the job with hostile spec values, naming the input as the public hierarchy
mapping, and reading a report whose bounds disagree. The wrapped-sum attack
(1,030 rows of 2**53) and its refusals are in tests/test_exact_sums.py, the
exponential mechanism's exact ratios in tests/test_exponential.py. See
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
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from release_specs import SMALL_SPEC

from dp_pipeline import DiscreteGaussian, MasterKey
from dp_pipeline.datasets.synthetic import census_chunk, write_census_sample
from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.release.budget import LedgerError
from dp_pipeline.release.cli import main
from dp_pipeline.release.fingerprint import input_files
from dp_pipeline.release.ledger import Ledger
from dp_pipeline.release.run import Progress, apply_overrides, read_release, run_release
from dp_pipeline.release.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
QUIET = Progress(quiet=True)
KEY_HEX = "57af74b97b8dca150c88eab838b51b745293770fb15167e0b7f938bd350df2e2"


@pytest.fixture(autouse=True)
def fixed_key(monkeypatch):
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)


def write_spec(folder: Path, text: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "small.toml"
    path.write_text(text if text is not None else SMALL_SPEC.format(tmp=folder))
    return path


def committed(folder: Path, input_path: Path | None = None):
    """A committed release of the small spec (on ``input_path``, else synthetic)."""
    path = write_spec(folder)
    overrides = {"input_path": str(input_path)} if input_path else {}
    spec = apply_overrides(load_spec(path), **overrides)
    run_release(spec, progress=QUIET)
    return path, spec


def refused_rerun(spec_file: Path, capsys, *arguments: str) -> str:
    """Runs the CLI on ``spec_file``; it must refuse with status 2. Returns its stderr."""
    capsys.readouterr()
    status = main(["run", str(spec_file), "--quiet", *arguments])
    error = capsys.readouterr().err
    assert status == 2, error
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


def test_two_specs_never_share_noise_even_in_separate_ledgers(tmp_path):
    """Same key, same data, same id and table name, domain reordered: independent noise."""
    data = write_census_sample(tmp_path / "persons.parquet", 3000, seed=7)
    truth = pd.read_parquet(data)["tenure"].value_counts()
    noise = []
    for folder, order in (
        ("a", ["owned", "rented", "group_quarters"]),
        ("b", ["rented", "owned", "group_quarters"]),
    ):
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
    from dp_pipeline.release.fingerprint import spark_input_files

    data = parquet_folder(tmp_path / "input", seed=1)
    write_census_sample(data / "_x=1.parquet", 40, seed=5)  # Spark's listing keeps it
    assert data / "_x=1.parquet" in spark_input_files(spark, data, "parquet")
    text = SMALL_SPEC.format(tmp=tmp_path / "release").replace(
        'engine = "pandas"', 'engine = "spark"'
    )
    spec_file = write_spec(tmp_path / "release", text)
    run_release(apply_overrides(load_spec(spec_file), input_path=str(data)), progress=QUIET)
    write_census_sample(data / "_x=1.parquet", 40, seed=6)
    error = refused_rerun(spec_file, capsys, "--input", str(data))
    assert "input data changed" in error


# --------------------------------------------------------- 3. abort after publication


def killed_run(spec_file: Path, kill_at: str) -> None:
    """Runs the CLI in a process that kills itself (SIGKILL) at the ``kill_at`` checkpoint."""
    environment = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        DP_PIPELINE_MASTER_KEY=KEY_HEX,
        DP_PIPELINE_KILL_AT=kill_at,
    )
    killed = subprocess.run(
        [sys.executable, "-m", "dp_pipeline.release", "run", str(spec_file), "--quiet"],
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


def test_a_reservation_that_published_nothing_can_be_aborted(tmp_path):
    spec_file = write_spec(tmp_path)
    spec = load_spec(spec_file)
    killed_run(spec_file, "after_noise")
    assert main(["ledger", "--ledger", spec.ledger_path, "--abort", spec.release_id]) == 0
    assert Ledger(spec.ledger_path).entry(spec.release_id).status == "aborted"


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
    )
    counts = df.dp.count(**common)["count"].to_numpy()
    sums = df.dp.sum("one", bounds=(0, 1), **common)["sum"].to_numpy()
    # The true count and the true sum of ones are equal in every cell; shared noise would
    # make count - sum exactly 0 everywhere and reveal that the two agree exactly.
    assert np.count_nonzero(counts - sums) > 25


def test_queries_that_differ_in_anything_computed_have_different_labels():
    base = dict(
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
    error = refused_rerun(spec_file, capsys)
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
    error = refused_rerun(spec_file, capsys)
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
    from test_exponential import bytes_drawn, exact_rounded_pmf, max_ratio

    from dp_pipeline import BaseTwoExponential

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
    with pytest.raises(LedgerError, match="records a corrupt identity"):
        run_release(load_spec(spec_file), progress=QUIET)
    assert refused_rerun(spec_file, capsys).count("corrupt identity") == 1


# ------------------------------------------------ 10. reports, keys and hostile specs


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
    error = refused_rerun(spec_file, capsys)
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
        assert main(["run", str(write_spec(tmp_path / "spec", text)), "--quiet"]) == 0
        # A file key under new folders (run), and a ledger under new ones (ledger command).
        monkeypatch.delenv("DP_PIPELINE_MASTER_KEY")
        key_file = tmp_path / "keys" / "nested" / "master.key"
        spec_file = write_spec(tmp_path / "other")
        assert main(["run", str(spec_file), "--quiet", "--key-file", str(key_file)]) == 0
        ledger = tmp_path / "audit" / ".dp_pipeline" / "ledger.sqlite"
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
    error = refused_rerun(spec_file, capsys, "--input", str(data))
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
        assert not any(leak in error for leak in leaks), error
    # The mapping lies in the input folder.
    folder = tmp_path / "input"
    folder.mkdir()
    inside = folder / "part.csv"
    inside.write_text(persons.read_text())
    error = refused(HIERARCHY_SPEC.format(tmp=tmp_path, input=folder, mapping=inside), "plan")
    assert "is the input" in error and not any(leak in error for leak in leaks), error
    # --input names the mapping after the spec was read.
    spec = HIERARCHY_SPEC.format(tmp=tmp_path, input=persons, mapping=mapping)
    error = refused(spec, "run", "--quiet", "--input", str(mapping))
    assert "is the input" in error, error
    # A confidential file named as the mapping (the input elsewhere): its errors name
    # the rule and the column, never its text or line numbers.
    spec = HIERARCHY_SPEC.format(tmp=tmp_path, input=mapping, mapping=persons)
    error = refused(spec.replace(f'path = "{mapping}"', 'path = ""'), "plan")
    assert "column 'county' holds a value outside domains.county" in error, error
    assert not any(leak in error for leak in leaks), error
    assert not (tmp_path / "ledger.sqlite").exists()
