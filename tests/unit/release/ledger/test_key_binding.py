"""A master key is bound to one ledger, both ways (dp_pipeline.release.key_binding); keys are
created on purpose by ``dp-release key`` and never beside a ledger that records releases."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from release_specs import SMALL_SPEC

import dp_pipeline.release.run as run_module
from dp_pipeline import Budget, DiscreteGaussian, MasterKey, Session
from dp_pipeline.release.cli import main
from dp_pipeline.release.key_binding import KeyBindingError
from dp_pipeline.release.ledger.records import InputReuseError
from dp_pipeline.release.ledger.store import Ledger

KEY_HEX = "6c2f8e1a9b3d5f7c0e4a2b6d8f1c3e5a7b9d0f2e4c6a8b1d3f5e7a9c0b2d4f6e"


def small_spec(folder: Path, ledger: str | None = None) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    text = SMALL_SPEC.format(tmp=folder)
    if ledger is not None:
        text = text.replace(f'ledger = "{folder}/ledger.sqlite"', f'ledger = "{ledger}"')
    path = folder / "release.toml"
    path.write_text(text)
    return str(path)


def bindings() -> dict:
    return json.loads((Path(os.environ["DP_PIPELINE_HOME"]) / "bindings.json").read_text())


def test_a_key_used_with_a_second_ledger_is_refused_before_anything_starts(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)
    spec_file = small_spec(tmp_path)
    assert main(["run", spec_file, "--quiet"]) == 0
    home = Path(os.environ["DP_PIPELINE_HOME"])
    assert stat.S_IMODE((home / "bindings.json").stat().st_mode) == 0o600
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    (bound,) = bindings().values()
    assert bound["place"] == str((tmp_path / "ledger.sqlite").resolve())
    assert KEY_HEX not in (home / "bindings.json").read_text()
    capsys.readouterr()

    def no_engine(*args, **kwargs):
        raise AssertionError("the engine started")

    monkeypatch.setattr(run_module, "open_input", no_engine)
    other = tmp_path / "other.sqlite"
    status = main(["run", spec_file, "--quiet", "--release-id", "small-2", "--ledger", str(other)])
    assert status == 2
    error = capsys.readouterr().err
    assert "is bound to the ledger" in error and repr(str(other)) in error
    assert f"dp-release key --bind {other}" in error and "Nothing was read or reserved" in error
    assert not other.exists()


def test_a_replaced_ledger_at_the_same_place_is_another_ledger(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)
    spec_file = small_spec(tmp_path)
    assert main(["run", spec_file, "--quiet"]) == 0
    (tmp_path / "ledger.sqlite").rename(tmp_path / "hidden.sqlite")  # a fresh cap?
    capsys.readouterr()
    assert main(["run", spec_file, "--quiet", "--release-id", "small-2"]) == 2
    error = capsys.readouterr().err
    assert "the same place but another ledger (the file or database was replaced" in error
    assert Ledger(tmp_path / "ledger.sqlite").history() == []


def test_a_key_moves_to_another_ledger_only_on_purpose_recorded_in_three_places(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)
    spec_file = small_spec(tmp_path)
    assert main(["run", spec_file, "--quiet"]) == 0
    new = tmp_path / "new" / "ledger.sqlite"
    capsys.readouterr()
    assert main(["key", "--bind", str(new)]) == 0
    said = capsys.readouterr().out
    assert f"is now bound to the ledger {str(new)!r}" in said
    assert "recorded in both ledgers and the dp_pipeline home" in said
    (bound,) = bindings().values()
    assert bound["place"] == str(new.resolve())
    assert bound["moves"][0]["from"] == str((tmp_path / "ledger.sqlite").resolve())
    with Ledger(tmp_path / "ledger.sqlite") as old, Ledger(new) as moved:
        assert json.loads(old.meta("moved_to"))[0]["to"] == str(new.resolve())
        assert json.loads(moved.meta("moved_from"))[0]["from"] == bound["moves"][0]["from"]
        assert moved.key_fingerprint() == MasterKey.from_hex(KEY_HEX).fingerprint
    args = ["run", spec_file, "--quiet", "--release-id", "small-2"]
    assert main([*args, "--ledger", str(new)]) == 0
    assert main([*args, "--release-id", "small-3"]) == 2  # the old ledger: retired
    error = capsys.readouterr().err
    assert "is not where its releases were recorded: it was moved to" in error
    assert "this copy stayed behind" in error and "Nothing was read or reserved" in error


def test_a_session_with_a_bound_key_on_another_ledger_is_refused(tmp_path):
    key = MasterKey(hashlib.sha256(b"binding tests").digest())
    people = pd.DataFrame({"person_id": range(50), "sex": ["F", "M"] * 25})
    arguments = dict(key=key, population="p", privacy_unit="person_id", budget=Budget(rho=1))
    first = Session(**arguments, cap=Budget(rho=1), ledger=tmp_path / "a.sqlite")
    first.count(people, by="sex", domains={"sex": ["F", "M"]}, rho=Fraction(1, 10))
    with pytest.raises(KeyBindingError) as refused:
        Session(**arguments, cap=Budget(rho=1), ledger=tmp_path / "b.sqlite")
    message = str(refused.value)
    assert f"master key {key.fingerprint} is bound to the ledger" in message
    assert "dp-release key --bind" in message
    assert not (tmp_path / "b.sqlite").exists() or Ledger(tmp_path / "b.sqlite").history() == []


def test_dp_release_key_creates_a_private_key_once_and_prints_its_fingerprint(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.delenv("DP_PIPELINE_MASTER_KEY", raising=False)
    path = tmp_path / "keys" / "job" / "master.key"
    assert main(["key", "--key-file", str(path), "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    key = MasterKey.from_file(path)
    assert said == {"created": True, "fingerprint": key.fingerprint, "key_file": str(path)}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "keys").stat().st_mode) == 0o700
    before = path.read_bytes()
    assert main(["key", "--key-file", str(path)]) == 2
    error = capsys.readouterr().err
    assert "a file exists there; a key file is never overwritten" in error
    assert "--key-file PATH" in error and before.decode().strip() not in error
    assert path.read_bytes() == before
    # The default place is the dp_pipeline home's master.key.
    assert main(["key"]) == 0
    assert (Path(os.environ["DP_PIPELINE_HOME"]) / "master.key").is_file()
    assert "fingerprint" in capsys.readouterr().out


@pytest.mark.postgresql
def test_a_host_without_the_key_on_a_server_ledger_is_refused_before_the_engine(
    postgres_server, tmp_path, monkeypatch, capsys
):
    url = postgres_server.url(postgres_server.create_database())
    spec_file = small_spec(tmp_path, ledger=url)
    # The operators of both hosts choose the server ledger (the spec's run.ledger agrees).
    monkeypatch.setenv("DP_PIPELINE_LEDGER", url)
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)
    assert main(["run", spec_file, "--quiet"]) == 0  # the first host, with the key
    capsys.readouterr()
    monkeypatch.delenv("DP_PIPELINE_MASTER_KEY")  # a second host, without it

    def no_engine(*args, **kwargs):
        raise AssertionError("the engine started")

    monkeypatch.setattr(run_module, "open_input", no_engine)
    missing = tmp_path / "host2" / "master.key"
    args = ["run", spec_file, "--quiet", "--release-id", "small-2", "--key-file", str(missing)]
    assert main(args) == 2
    error = capsys.readouterr().err
    assert f"no master key at {str(missing)!r}, but the ledger" in error
    assert "already records releases" in error and "--key-file PATH" in error
    assert postgres_server.password not in error
    assert not missing.exists() and not missing.parent.exists()


# ----------------------------------------------------------------- one population per input


def census(rows: int = 400) -> pd.DataFrame:
    rng = np.random.default_rng(5)  # test data only
    return pd.DataFrame(
        {
            "person_id": np.arange(rows),
            "state": rng.integers(1, 51, rows),
            "sex": rng.choice(["F", "M"], rows),
            "age": rng.integers(0, 115, rows),
            "tenure": rng.choice(["owned", "rented", "group_quarters"], rows),
            "income": rng.integers(0, 200_000, rows),
        }
    )


@pytest.mark.parametrize("copy_into", ["another name", "a folder"])
def test_a_byte_identical_copy_is_the_same_input_under_a_new_population(
    tmp_path, monkeypatch, capsys, copy_into
):
    monkeypatch.setenv("DP_PIPELINE_MASTER_KEY", KEY_HEX)
    original = tmp_path / "data" / "people.parquet"
    original.parent.mkdir()
    census().to_parquet(original)
    spec_file = small_spec(tmp_path)
    assert main(["run", spec_file, "--quiet", "--input", str(original)]) == 0
    if copy_into == "another name":
        copy = tmp_path / "data" / "people-copy.parquet"
    else:
        copy = tmp_path / "elsewhere" / "part-0.parquet"
        copy.parent.mkdir()
    copy.write_bytes(original.read_bytes())
    renamed = Path(spec_file).read_text().replace('name = "small-people"', 'name = "others"')
    Path(spec_file).write_text(renamed)
    capsys.readouterr()
    where = copy if copy_into == "another name" else copy.parent
    status = main(["run", spec_file, "--quiet", "--input", str(where), "--release-id", "b-1"])
    assert status != 0
    error = capsys.readouterr().err
    assert "its input is already recorded under population 'small-people'" in error
    assert 'shares_input_with = ["small-people"]' in error
    assert [e.release_id for e in Ledger(tmp_path / "ledger.sqlite").history()] == ["small-1"]
    # The ledger holds keyed digests only: not the file's plain SHA-256.
    plain = hashlib.sha256(original.read_bytes()).hexdigest()
    with Ledger(tmp_path / "ledger.sqlite") as ledger:
        assert plain not in json.dumps([vars(e) for e in ledger.history()])


# ----------------------------------------------------------------- sessions


def people(n: int = 400) -> pd.DataFrame:
    rng = np.random.default_rng(7)  # test data only
    ages, sexes = rng.integers(0, 100, n), rng.choice(["F", "M"], n)
    return pd.DataFrame({"person_id": np.arange(n), "age": ages, "sex": sexes})


def test_a_release_id_reused_in_another_ledger_on_changed_data_draws_other_noise(
    tmp_path, monkeypatch
):
    key = MasterKey(hashlib.sha256(b"session salt tests").digest())
    query = dict(by="age", domains={"age": range(100)}, noise=DiscreteGaussian(100))
    arguments = dict(key=key, population="p", privacy_unit="person_id", budget=Budget(rho=1))
    first = Session(**arguments, cap=Budget(rho=1), ledger=tmp_path / "a.sqlite", release_id="r")
    before = first.count(people(), **query)["count"].to_numpy()
    # Another host (its own user home and dp_pipeline home), another ledger, the same
    # release id; one person changed.
    monkeypatch.setenv("HOME", str(tmp_path / "host2"))
    monkeypatch.setenv("DP_PIPELINE_HOME", str(tmp_path / "host2" / ".dp_pipeline"))
    changed = people()
    changed.loc[0, "age"] = (changed.loc[0, "age"] + 1) % 100
    second = Session(**arguments, cap=Budget(rho=1), ledger=tmp_path / "b.sqlite", release_id="r")
    after = second.count(changed, **query)["count"].to_numpy()
    # Same noise would differ in the two changed cells only (by exactly one person).
    assert np.count_nonzero(after - before) > 50


def test_the_same_data_under_a_renamed_population_is_refused(tmp_path):
    key = MasterKey(hashlib.sha256(b"session rename tests").digest())
    common = dict(key=key, privacy_unit="person_id", budget=Budget(rho=1), cap=Budget(rho=1))
    ledger = tmp_path / "ledger.sqlite"
    sex = dict(by="sex", domains={"sex": ["F", "M"]}, rho=Fraction(1, 10))
    Session(**common, population="people", ledger=ledger, release_id="a").count(people(), **sex)
    renamed = Session(**common, population="people-2", ledger=ledger, release_id="b")
    shuffled = people().sample(frac=1, random_state=3)  # the same rows in another order
    with pytest.raises(InputReuseError) as refused:
        renamed.count(shuffled, **sex)
    message = str(refused.value)
    assert "holds the same rows as release 'a/0' of population 'people'" in message
    assert "query them under population='people'" in message
    assert "stays charged to 'people-2'" in message
    assert renamed.queries[0].state == "reading"  # read, so charged
    # Other rows (of the columns the query reads) under a new name: another population.
    other = people(300)
    Session(**common, population="people-3", ledger=ledger, release_id="c").count(other, **sex)
