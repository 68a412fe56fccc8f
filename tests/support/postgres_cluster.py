"""A throw-away PostgreSQL cluster for the server-ledger tests and benchmark.

`PostgresCluster.start()` runs ``initdb`` in a new temporary folder, then ``pg_ctl
start`` with the server listening on 127.0.0.1 only, on a free port, its Unix
sockets in the same folder, password (SCRAM) authentication for a superuser whose
password is drawn at random. ``stop()`` stops the server and removes the folder.
When the tests run as root (initdb refuses root), the folder belongs to the
``postgres`` user and the server's commands run as that user (``runuser``).

The binaries are looked up on PATH, then in Debian's layout
(``/usr/lib/postgresql/<version>/bin``, newest version first): the Debian
``postgresql`` package (which .ci/run installs when they are missing).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import stat
import subprocess
import tempfile
import uuid
from pathlib import Path

__all__ = ["PostgresCluster", "postgres_binaries"]

SUPERUSER = "dp_test"


def postgres_binaries() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``, or None when PostgreSQL is not installed."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    debian = Path("/usr/lib/postgresql")
    if debian.is_dir():
        versions = sorted(
            (p for p in debian.iterdir() if (p / "bin" / "initdb").exists()),
            key=lambda p: [int(x) if x.isdigit() else 0 for x in p.name.split(".")],
            reverse=True,
        )
        if versions:
            return versions[0] / "bin"
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _reachable_by_all(folder: Path) -> bool:
    """Whether every folder from the root down to ``folder`` lets others in (o+x)."""
    return all(
        stat.S_IMODE(path.stat().st_mode) & 0o001 for path in (folder.resolve(), *folder.parents)
    )


class PostgresCluster:
    """A PostgreSQL server of its own in a temporary folder (see the module docstring)."""

    def __init__(self, fsync: bool = False, max_connections: int = 200) -> None:
        self.binaries = postgres_binaries()
        if self.binaries is None:
            raise FileNotFoundError("PostgreSQL server binaries (initdb, pg_ctl) not found")
        self.fsync = fsync
        self.max_connections = max_connections
        self.password = secrets.token_hex(16)
        self.port = 0
        self.folder: Path | None = None
        self._as_postgres = hasattr(os, "geteuid") and os.geteuid() == 0

    def _command(self, *arguments: str) -> list[str]:
        # runuser lives in sbin, which a non-login PATH may leave out.
        runuser = shutil.which("runuser") or next(
            (str(p) for p in (Path("/usr/sbin/runuser"), Path("/sbin/runuser")) if p.exists()),
            "runuser",
        )
        prefix = [runuser, "-u", "postgres", "--"] if self._as_postgres else []
        return [*prefix, *arguments]

    def _run(self, *arguments: str) -> None:
        done = subprocess.run(
            self._command(*arguments),
            capture_output=True,
            text=True,
            timeout=300,
            cwd=self.folder,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{Path(arguments[0]).name} failed: {done.stderr[-2000:]}")

    def start(self) -> PostgresCluster:
        # The server user must reach the folder: a temporary root others may enter.
        candidates = [Path(tempfile.gettempdir()), Path("/tmp"), Path("/dev/shm")]
        parent = next(
            (
                p
                for p in candidates
                if p.is_dir() and (not self._as_postgres or _reachable_by_all(p))
            ),
            None,
        )
        self.folder = Path(tempfile.mkdtemp(prefix="dp-pipeline-pg-", dir=parent))
        password_file = self.folder / "password"
        password_file.write_text(self.password + "\n")
        if self._as_postgres:
            shutil.chown(self.folder, "postgres")
            shutil.chown(password_file, "postgres")
        data = self.folder / "data"
        self._run(
            str(self.binaries / "initdb"),
            "-D",
            str(data),
            "-U",
            SUPERUSER,
            f"--pwfile={password_file}",
            "--auth=scram-sha-256",
            "-E",
            "UTF8",
            "--no-instructions",
        )
        password_file.unlink()
        for attempt in range(5):
            self.port = _free_port()
            options = (
                f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.folder} "
                f"-c max_connections={self.max_connections} "
                f"-c fsync={'on' if self.fsync else 'off'}"
            )
            try:
                self._run(
                    str(self.binaries / "pg_ctl"),
                    "-D",
                    str(data),
                    "-o",
                    options,
                    "-l",
                    str(self.folder / "server.log"),
                    "-w",
                    "-t",
                    "120",
                    "start",
                )
                return self
            except RuntimeError:
                if attempt == 4:
                    raise
        return self

    def url(self, database: str = "postgres", password: str | None = None) -> str:
        """A URL for ``database`` as the superuser (``password`` overrides the right one)."""
        secret = self.password if password is None else password
        return f"postgresql://{SUPERUSER}:{secret}@127.0.0.1:{self.port}/{database}"

    def admin(self):
        import psycopg

        return psycopg.connect(self.url(), autocommit=True)

    def create_database(self, prefix: str = "ledger") -> str:
        """A new empty database; returns its name."""
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with self.admin() as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return name

    def drop_database(self, name: str) -> None:
        with self.admin() as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def terminate(self, database: str, application_prefix: str = "dp-release") -> int:
        """End dp-release's connections to ``database`` (a lost connection); returns how many."""
        with self.admin() as connection:
            rows = connection.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND application_name LIKE %s",
                (database, application_prefix + "%"),
            ).fetchall()
        return len(rows)

    def stop(self) -> None:
        if self.folder is None:
            return
        try:
            data = self.folder / "data"
            if (data / "postmaster.pid").exists():
                self._run(str(self.binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
