"""PostgreSQL ledger errors by kind: each one line naming the fix, exit 2, nothing spent.

A role without rights on the ledger's tables, a misspelt database name (whose password
the password file does not hold), a wrong password and an unreachable server, on the
throw-away server of tests/support/postgres_cluster.py; from the library (`Ledger`,
`read_ledger`) and from ``dp-release`` (``ledger``, ``plan``, ``run``).
"""

from __future__ import annotations

import secrets
from fractions import Fraction
from pathlib import Path

import pytest
from release_specs import SMALL_SPEC

from dp_pipeline.mechanisms import DiscreteGaussian
from dp_pipeline.release.cli import main
from dp_pipeline.release.ledger.budget import LedgerError, accountant_type
from dp_pipeline.release.ledger.store import Ledger, read_ledger
from dp_pipeline.release.ledger_location import mask_url
from dp_pipeline.release.spec.model import Budget

RHO_CAP = Budget(rho=Fraction(1))
GRANT = "GRANT SELECT, INSERT, UPDATE ON ledger_meta, populations, releases TO"
FIXES = {  # the fix each kind of failure names
    "wrong password": "credentials come from the URL, PGPASSWORD or the password file",
    "unknown database": "create it, e.g. createdb, or fix the URL",
    "unreachable": "check the host and port in the URL, that the server is running",
}


def accountant():
    result = accountant_type()()
    result.add(DiscreteGaussian(Fraction(4)), sensitivity=1, count=1)
    return result


def reserve(ledger: Ledger, release_id: str = "r1"):
    return ledger.reserve(
        population="p", release_id=release_id, accountant=accountant(), fingerprint="a", cap=RHO_CAP
    )


def role(server, database: str, *grants: str) -> tuple[str, str]:
    """A new login role with a random password and ``grants`` in ``database``; its URL."""
    import psycopg

    name = f"analyst_{secrets.token_hex(4)}"
    password = secrets.token_hex(12)
    with server.admin() as admin:
        admin.execute(f"CREATE ROLE {name} LOGIN PASSWORD '{password}'")
    with psycopg.connect(server.url(database), autocommit=True) as owner:
        for grant in grants:
            owner.execute(grant.format(role=name))
    return name, f"postgresql://{name}:{password}@127.0.0.1:{server.port}/{database}"


@pytest.fixture
def ledger_database(postgres_server):
    """A database holding a ledger with one reservation, made by the superuser."""
    database = postgres_server.create_database()
    with Ledger(postgres_server.url(database)) as ledger:
        reserve(ledger)
    yield database
    postgres_server.drop_database(database)


def history(server, database: str) -> list[str]:
    with Ledger(server.url(database)) as ledger:
        return [entry.release_id for entry in ledger.history()]


def small_spec(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "small.toml"
    path.write_text(SMALL_SPEC.format(tmp=folder))
    return path


# ----------------------------------------------------------------------------- privileges


def test_a_role_without_privileges_is_told_which_grants_it_needs(postgres_server, ledger_database):
    name, url = role(postgres_server, ledger_database)
    with pytest.raises(LedgerError) as opened:
        Ledger(url)
    message = str(opened.value)
    assert message.startswith(
        f"ledger {mask_url(url)!r}: user {name!r} may not use the ledger's tables while "
        "opening the ledger (permission denied for table"
    ), message
    assert f"GRANT USAGE ON SCHEMA public TO {name}; {GRANT} {name}" in message
    assert "\n" not in message and url.split(":")[2].split("@")[0] not in message
    # `plan` reads the ledger the same way: the same kind, never "connection lost".
    with pytest.raises(LedgerError) as read:
        read_ledger(url, "p", "r2")
    assert "may not use the ledger's tables while reading the ledger" in str(read.value)
    assert "connection to the server was lost" not in str(read.value)


def test_a_role_that_may_read_but_not_write_spends_nothing(postgres_server, ledger_database):
    name, url = role(
        postgres_server,
        ledger_database,
        "GRANT SELECT ON ledger_meta, populations, releases TO {role}",
    )
    with Ledger(url) as ledger:
        assert [entry.release_id for entry in ledger.history()] == ["r1"]
        with pytest.raises(LedgerError) as refused:
            reserve(ledger, "r2")
    message = str(refused.value)
    assert f"user {name!r} may not use the ledger's tables while" in message
    assert "nothing was recorded" in message and f"{GRANT} {name}" in message
    assert history(postgres_server, ledger_database) == ["r1"]


def test_the_granted_privileges_are_enough(postgres_server, ledger_database):
    """The grants the message names let the role reserve (so the advice is complete)."""
    _, url = role(
        postgres_server,
        ledger_database,
        "GRANT USAGE ON SCHEMA public TO {role}",
        GRANT + " {role}",
    )
    with Ledger(url) as ledger:
        assert reserve(ledger, "r2").outcome == "reserved"
    assert history(postgres_server, ledger_database) == ["r1", "r2"]


def test_the_cli_answers_a_role_without_privileges_with_exit_2_and_one_line(
    postgres_server, ledger_database, tmp_path, capsys
):
    _, url = role(postgres_server, ledger_database)
    spec_file = small_spec(tmp_path)
    for command in (
        ["ledger", "--ledger", url],
        ["plan", str(spec_file), "--ledger", url],
        ["run", str(spec_file), "--ledger", url, "--quiet"],
    ):
        code = main(command)
        captured = capsys.readouterr()
        text = captured.out + captured.err
        assert code == 2, (command, text)
        assert "may not use the ledger's tables" in text and GRANT in text, (command, text)
        assert "Traceback" not in text and "connection to the server was lost" not in text
    assert history(postgres_server, ledger_database) == ["r1"]
    assert not (tmp_path / "out").exists() and not (tmp_path / "master.key").exists()


# ----------------------------------------------------------------------------- connection


def test_a_misspelt_database_with_a_password_file_says_to_check_its_name(
    postgres_server, ledger_database, tmp_path, monkeypatch
):
    server = postgres_server
    password_file = tmp_path / "pgpass"
    password_file.write_text(
        f"127.0.0.1:{server.port}:{ledger_database}:dp_test:{server.password}\n"
    )
    password_file.chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(password_file))
    monkeypatch.delenv("PGPASSWORD", raising=False)
    right = f"postgresql://dp_test@127.0.0.1:{server.port}/{ledger_database}"
    with Ledger(right) as ledger:
        assert [entry.release_id for entry in ledger.history()] == ["r1"]
    misspelt = right + "x"
    with pytest.raises(LedgerError) as refused:
        Ledger(misspelt)
    message = str(refused.value)
    assert message.startswith(
        f"ledger {misspelt!r} cannot be opened: the server refused the credentials: no "
        "password was found for this database and user (a password-file line names its "
        "database: check the database name in the URL too)"
    ), message
    assert "\n" not in message and server.password not in message


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("wrong password", "the server refused the credentials: wrong password"),
        ("unknown database", "the database does not exist (create it"),
        ("unreachable", "the server cannot be reached"),
    ],
)
def test_each_connection_failure_is_one_line_exit_2_nothing_spent(
    postgres_server, ledger_database, tmp_path, capsys, kind, reason
):
    server = postgres_server
    url = {
        "wrong password": server.url(ledger_database, password="wrong-Pa55"),
        "unknown database": server.url(ledger_database + "_misspelt"),
        "unreachable": f"postgresql://dp_test:{server.password}@127.0.0.1:1/x?connect_timeout=3",
    }[kind]
    spec_file = small_spec(tmp_path)
    for command in (
        ["ledger", "--ledger", url],
        ["run", str(spec_file), "--ledger", url, "--quiet"],
    ):
        assert main(command) == 2, command
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and reason in lines[0], (command, err)
        assert FIXES[kind] in lines[0], (command, err)
        assert server.password not in err and "wrong-Pa55" not in err
    assert history(server, ledger_database) == ["r1"]
    assert not (tmp_path / "out").exists()


def test_a_role_that_may_not_connect_to_the_database_is_told_so(postgres_server, ledger_database):
    name, url = role(postgres_server, ledger_database)
    with postgres_server.admin() as admin:
        admin.execute(f'REVOKE CONNECT ON DATABASE "{ledger_database}" FROM PUBLIC')
    with pytest.raises(LedgerError) as refused:
        Ledger(url)
    message = str(refused.value)
    assert "cannot be opened: the user may not connect to this database (have its owner run " in (
        message
    )
    assert f"GRANT CONNECT ON DATABASE {ledger_database} TO {name})" in message
    assert "cannot be reached" not in message
    assert "\n" not in message
