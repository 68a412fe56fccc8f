"""The ledger's tables, the same on SQLite and PostgreSQL, and their version.

Version 1 is the schema before versions were recorded (no ``ledger_meta``
table; the ``releases`` columns of `ADDED_COLUMNS` possibly missing). Version 2
adds ``ledger_meta`` (the schema version and the master key's public
fingerprint), the column ``input_override`` (populations a release's input was
declared shared with) and an index on the input fingerprint. Version 3 adds the
columns ``content`` (the input's keyed content digest, names excluded, compared by
the one-population-per-input rule) and ``mac`` (each row's authentication code under the master key:
`dp_pipeline.release.ledger.integrity`) and the ledger's random id (``ledger_meta``
row ``ledger_id``, drawn when the ledger is created or migrated: what a key's home
records as the ledger the key is bound to). A ledger of an
older version is migrated by the backend in one transaction when it is opened
for writing; one of a newer version (written by a newer dp_pipeline) is
refused, since this version cannot know its rules.
"""

from __future__ import annotations

__all__ = [
    "ADDED_COLUMNS",
    "POSTGRES_SCHEMA",
    "SCHEMA_VERSION",
    "SQLITE_SCHEMA",
    "newer_schema_text",
    "statements",
]

SCHEMA_VERSION = 3

# Columns added to ``releases`` after the first schema; migration adds the missing ones.
ADDED_COLUMNS = {
    "identity": "TEXT",
    "published_at": "TEXT",
    "state": "TEXT",  # one of STATES or "aborted"
    "token": "TEXT",  # the run token of the run that holds the reservation
    "engine": "TEXT",  # the engine of the last run that reserved or published it
    "manifest": "TEXT",  # the published files' digests (manifest.json), from publication on
    "input_override": "TEXT",  # populations the input was declared shared with (JSON list)
    "mac": "TEXT",  # the row's authentication code under the master key (integrity.py)
    "content": "TEXT",  # the input's keyed content digest, names excluded
}

_RELEASE_COLUMNS = """
    release_id TEXT PRIMARY KEY,
    population TEXT NOT NULL REFERENCES populations(name),
    status TEXT NOT NULL CHECK (status IN ('reserved', 'committed', 'aborted')),
    fingerprint TEXT NOT NULL,
    accountant TEXT NOT NULL,
    guarantee TEXT NOT NULL,
    cumulative TEXT NOT NULL,
    reserved_at TEXT NOT NULL,
    finished_at TEXT,
    owner TEXT NOT NULL,
    output TEXT"""

_COMMON = """
CREATE TABLE IF NOT EXISTS ledger_meta (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS populations (
    name TEXT PRIMARY KEY,
    cap TEXT NOT NULL,
    created_at TEXT NOT NULL
);
"""

_INDEXES = """
CREATE INDEX IF NOT EXISTS releases_population ON releases(population);
CREATE INDEX IF NOT EXISTS releases_fingerprint ON releases(fingerprint);
CREATE INDEX IF NOT EXISTS releases_content ON releases(content);
"""

_ADDED = "".join(f",\n    {name} {kind}" for name, kind in ADDED_COLUMNS.items())

# SQLite orders history by its implicit rowid.
SQLITE_SCHEMA = (
    _COMMON + f"CREATE TABLE IF NOT EXISTS releases ({_RELEASE_COLUMNS}{_ADDED}\n);\n" + _INDEXES
)

# PostgreSQL has no rowid: ``seq`` keeps the order in which releases were first reserved.
POSTGRES_SCHEMA = (
    _COMMON
    + "CREATE TABLE IF NOT EXISTS releases (\n"
    + "    seq BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,"
    + f"{_RELEASE_COLUMNS}{_ADDED}\n);\n"
    + _INDEXES
)


def statements(script: str) -> list[str]:
    """The statements of a schema script (none holds a semicolon inside)."""
    return [part.strip() for part in script.split(";") if part.strip()]


def newer_schema_text(shown: str, version: int) -> str:
    """The refusal of a ledger whose schema is newer than this library's."""
    return (
        f"ledger {shown!r} has schema version {version}, newer than this dp_pipeline's "
        f"({SCHEMA_VERSION}): it was written by a newer version, whose rules this one does "
        "not know; upgrade dp_pipeline (pip install -U dp-pipeline) to use it"
    )
