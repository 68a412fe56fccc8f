"""Where a release's ledger and master key live: stable places, never the working directory.

The budget is anchored to the data and the key, so the ledger and the key a
spec uses must not depend on the folder a job happens to start in (a cron job
starts in the home folder, an Airflow task in a temporary one): a new folder
would silently mean a new, empty ledger and a new key, and the population's
cap would start again from nothing. Hence:

- ``run.ledger`` and ``run.key_file`` written relative in a spec are relative
  to the spec file's folder, like ``hierarchy.mapping``;
- the operator decides both (a spec's own must agree,
  `dp_pipeline.release.spec.run_locations`): the command line (``--ledger``,
  ``--key-file``, taken as given), else ``$DP_PIPELINE_LEDGER`` for the ledger
  (a URL or an absolute path), else the dp_pipeline home: ``$DP_PIPELINE_HOME``
  (an absolute path) if set, else ``~/.dp_pipeline``, holding
  ``ledger.sqlite`` and ``master.key``.

Earlier versions defaulted to ``.dp_pipeline/`` in the working directory; a run
on the default ledger refuses to start while such a folder holds a ledger
(`legacy_ledger_problem`), naming both places, so that its record is never
left behind silently.
"""

from __future__ import annotations

import os
from pathlib import Path

from dp_pipeline.errors import DPValueError

__all__ = [
    "HOME_VARIABLE",
    "KEY_NAME",
    "LEDGER_NAME",
    "LEDGER_VARIABLE",
    "LEGACY_FOLDER",
    "default_key_file",
    "default_ledger",
    "dp_pipeline_home",
    "legacy_ledger_problem",
    "spec_relative",
]

HOME_VARIABLE = "DP_PIPELINE_HOME"
LEDGER_VARIABLE = "DP_PIPELINE_LEDGER"
LEDGER_NAME = "ledger.sqlite"
KEY_NAME = "master.key"
LEGACY_FOLDER = ".dp_pipeline"  # the working-directory default of earlier versions


def dp_pipeline_home() -> Path:
    """``$DP_PIPELINE_HOME`` if set, else ``~/.dp_pipeline`` (not created here).

    A relative ``$DP_PIPELINE_HOME`` is refused: it would make the ledger depend on
    the working directory again.
    """
    value = os.environ.get(HOME_VARIABLE)
    if value:
        home = Path(value).expanduser()
        if not home.is_absolute():
            # The caller turns it into its own kind of error (a spec or command-line one).
            raise DPValueError(
                f"${HOME_VARIABLE} = {value!r}: must be an absolute path (a relative one "
                "would give each working directory its own ledger and key); write e.g. "
                f"{HOME_VARIABLE}=$HOME/.dp_pipeline"
            )
        return home
    return Path.home() / LEGACY_FOLDER


def default_ledger() -> str:
    """The operator's ledger when no ``--ledger`` is given: ``$DP_PIPELINE_LEDGER`` (a URL,
    a libpq string or an absolute path) if set, else ``<home>/ledger.sqlite``.

    A relative ``$DP_PIPELINE_LEDGER`` path is refused, as a relative home is.
    """
    value = os.environ.get(LEDGER_VARIABLE)
    if value:
        remote = "=" in value or "://" in value  # a URL or a libpq string
        if not remote and not Path(value).expanduser().is_absolute():
            raise DPValueError(
                f"${LEDGER_VARIABLE}: must be a URL or an absolute path (a relative one "
                "would give each working directory its own ledger); write e.g. "
                f"{LEDGER_VARIABLE}=$HOME/.dp_pipeline/ledger.sqlite"
            )
        return value if remote else str(Path(value).expanduser())
    return str(dp_pipeline_home() / LEDGER_NAME)


def default_key_file() -> str:
    """The key file of a spec without ``run.key_file``: ``<home>/master.key``."""
    return str(dp_pipeline_home() / KEY_NAME)


def spec_relative(value: str, base_dir: str | os.PathLike[str] | None) -> str:
    """``value`` as a spec names it: ``~`` expanded, a relative path under ``base_dir``
    (made absolute, so a later change of working directory does not move it).

    A URL (``scheme://...``) is returned unchanged. ``base_dir`` None: the spec was not
    read from a file, and a relative path stays relative to the working directory.
    """
    if "://" in value:
        return value
    path = Path(value).expanduser()
    if path.is_absolute() or base_dir is None:
        return str(path)
    return os.path.abspath(Path(base_dir) / path)


def legacy_ledger_problem(ledger: str, key_file: str, cwd: Path | None = None) -> str | None:
    """Why a run on ``ledger`` must not start while the old default ledger exists, or None.

    Only when ``ledger`` is the home default: then a ``.dp_pipeline/ledger.sqlite``
    in the working directory (the default of earlier versions) that is another file
    holds spend this run would not see.
    """
    cwd = Path.cwd() if cwd is None else cwd
    legacy = cwd / LEGACY_FOLDER / LEDGER_NAME
    if "://" in ledger or Path(ledger) != Path(default_ledger()) or not legacy.is_file():
        return None
    if Path(ledger).exists() and os.path.samefile(ledger, legacy):
        return None
    legacy_key = cwd / LEGACY_FOLDER / KEY_NAME
    return (
        f"run.ledger: not set, so the ledger is the default {ledger!r}, but the working "
        f"directory holds a ledger {str(legacy)!r} (the default of earlier versions, "
        "relative to the working directory); its releases would not count against this "
        "run's cap. Name the ledger and key to use: pass --ledger "
        f"{str(legacy)!r} --key-file {str(legacy_key)!r} (or set "
        f"{HOME_VARIABLE}={str(cwd / LEGACY_FOLDER)!r}), "
        f"or move that folder's ledger and key to {str(Path(ledger).parent)!r}"
    )
