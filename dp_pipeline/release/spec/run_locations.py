"""``run.ledger`` and ``run.key_file``: the operator decides them, a spec may only agree.

A spec is hostile input. The ledger is what the population's cap is counted
in, and the key file is the key the noise is drawn from: a spec that could name
a fresh ledger would get a fresh cap on the same people, and one that could name
a key file would choose the key. So the operator's configuration decides both:

- the command line (``--ledger``, ``--key-file``), else
- the dp_pipeline home (``$DP_PIPELINE_HOME``, else ``~/.dp_pipeline``):
  its ``ledger.sqlite`` and ``master.key``.

A spec may still write ``run.ledger`` / ``run.key_file`` (relative to its own
folder), as a statement of where it expects them. A flag of the operator's
decides outright (the spec's value is not used, as ``--conf`` overrides
``run.spark_conf``); without one, the spec's value is accepted only when it
names the same ledger or file as the operator's default (`same_location`: the
same file once links are followed, or the same server and database), and
refused otherwise with a `SpecError` naming the field and how the operator sets
it, before anything is read or reserved. Either way the release uses the
operator's choice.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from dp_pipeline.errors import LedgerError
from dp_pipeline.release.ledger_location import LedgerLocation, conninfo_pairs, ledger_location
from dp_pipeline.release.locations import HOME_VARIABLE, spec_relative
from dp_pipeline.release.spec.fields import read_string

__all__ = ["operator_location", "same_location"]

_FIELDS = {
    "ledger": ("--ledger", "ledger.sqlite", "the ledger its budget is counted in"),
    "key_file": ("--key-file", "master.key", "the master key file its noise is drawn from"),
}


def _real(path: str) -> str:
    return os.path.realpath(os.path.abspath(os.path.expanduser(path)))


def _server(location: LedgerLocation) -> tuple[str, int, str]:
    """(host, port, database) of a server ledger: what makes two locations one ledger."""
    text = location.conninfo or ""
    pairs = None if "://" in text else conninfo_pairs(text)
    if pairs is not None:
        named = dict(pairs)
        host = named.get("host") or named.get("hostaddr") or ""
        return host.lower(), int(named.get("port") or 5432), named.get("dbname", "")
    parts = urlsplit(text)
    return (parts.hostname or "").lower(), parts.port or 5432, parts.path.strip("/")


def same_location(first: str, second: str, *, ledger: bool) -> bool:
    """Whether two written locations name one ledger (``ledger``) or one key file.

    Files: the same real path (symbolic links followed), or the same file when both
    exist. Servers: the same host, port and database. Raises `LedgerError` for a
    malformed ledger location.
    """
    if ledger:
        one, other = ledger_location(first), ledger_location(second)
        if one.kind != other.kind:
            return False
        if one.kind == "postgresql":
            return _server(one) == _server(other)
        first, second = str(one.path), str(other.path)
    if _real(first) == _real(second):
        return True
    both = Path(first).exists() and Path(second).exists()
    return both and os.path.samefile(first, second)


def operator_location(
    run: dict,
    name: str,
    operator: str | None,
    default: Callable[[], str],
    base_dir: str | os.PathLike[str] | None,
    problems: list[str],
) -> str:
    """The ledger or key file (``name``) a release uses: ``operator`` (the command
    line's), else ``default()`` (the home's); the spec's ``run.<name>`` only checked
    against it (see the module doc). Appends a problem and returns "" on a refusal."""
    flag, file_name, what = _FIELDS[name]
    written = read_string(run, name, "run", problems)
    try:
        chosen = operator or default()
    except ValueError as error:  # a relative $DP_PIPELINE_HOME or $DP_PIPELINE_LEDGER
        state = "cannot be checked against the operator's" if written else "not set"
        problems.append(f"run.{name}: {state}, and {error}")
        return ""
    if not written or operator:
        # The operator's flag decides outright (as --conf overrides run.spark_conf); only
        # a spec's value that would stand in for the operator's default is checked.
        return chosen
    is_ledger = name == "ledger"
    try:
        # A URL or a libpq string is taken as written; a path is relative to the spec.
        kept = is_ledger and ledger_location(written).kind == "postgresql"
        from_spec = written if kept else spec_relative(written, base_dir)
        agrees = same_location(from_spec, chosen, ledger=is_ledger)
    except LedgerError as error:
        problems.append(f"run.{name}: {error}")
        return ""
    if agrees:
        return chosen
    shown = ledger_location(from_spec).shown if is_ledger else from_spec
    operators = ledger_location(chosen).shown if is_ledger else chosen
    problems.append(
        f"run.{name} = {shown!r}: a spec cannot choose {what}; it must name the "
        f"operator's, {operators!r} ({flag}, else {file_name} in ${HOME_VARIABLE}). "
        f"Remove run.{name} from the spec, or have the operator pass {flag} or set "
        f"{HOME_VARIABLE}"
    )
    return ""
