"""``dp-release key``: create a master key on purpose, or move its ledger binding on purpose.

- ``dp-release key [--key-file PATH]`` writes a new random 32-byte key (64 hex digits)
  to PATH (default: ``master.key`` in the dp_pipeline home) with mode 0600, its missing
  folders 0700, and prints the key's public fingerprint, never the key. An existing file
  is never overwritten: the releases made under it could no longer be re-run or audited.
  A new key beside a home whose key already has releases is refused
  (`dp_pipeline.release.home_registry`): it would start a second cap on the same people.
- ``dp-release key --new-home [--key-file PATH]`` creates the key all the same, on
  purpose: a separate cap, recorded in the user's registry of homes (when, beside which
  homes, under which key fingerprint).
- ``dp-release key --bind LEDGER [--key-file PATH]`` moves the key's binding
  (`dp_pipeline.release.key_binding`) to LEDGER, recording the move in the old ledger,
  the new one and the home: the one way to use a key with another ledger.

``dp-release ledger --abort`` on a ledger whose rows are authenticated needs the key
too (`existing_key`): an abort changes what the population has spent.
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import UTC, datetime
from pathlib import Path

from dp_pipeline.randomness import MasterKey
from dp_pipeline.release.home_registry import check_new_key, register_home, used_homes
from dp_pipeline.release.key_binding import move_binding
from dp_pipeline.release.keys import (
    ENVIRONMENT_VARIABLE,
    KeyFileError,
    check_key_file,
    create_key_file,
    load_or_create_master_key,
)
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.locations import default_key_file, dp_pipeline_home

__all__ = ["add_key_command", "existing_key", "key_command"]


def add_key_command(commands) -> argparse.ArgumentParser:
    """The ``key`` subcommand of ``dp-release``."""
    command = commands.add_parser(
        "key",
        help="create a master key file (0600) and print its fingerprint; or move its ledger",
        description=(
            "Create a random master key file (mode 0600, folder 0700; never overwrites) and "
            "print its public fingerprint, or, with --bind, move the key's ledger binding."
        ),
    )
    command.add_argument(
        "--key-file",
        help="the key file (default: master.key in the dp_pipeline home)",
    )
    command.add_argument(
        "--bind",
        metavar="LEDGER",
        help=(
            "move the key's binding to this ledger (a path, sqlite:///path or "
            "postgresql://...), recorded in the old ledger, the new one and the home"
        ),
    )
    command.add_argument(
        "--new-home",
        action="store_true",
        help=(
            "create the key even though another home of this user holds a key with "
            "releases: a separate cap on purpose, recorded in ~/.dp_pipeline/homes.json"
        ),
    )
    command.add_argument("--json", action="store_true", help="print one JSON object")
    return command


def existing_key(key_file: str | None) -> MasterKey | None:
    """The key of ``$DP_PIPELINE_MASTER_KEY``, else of ``key_file`` (default: the home's),
    if there is one; never creates one."""
    path = Path(key_file or default_key_file())
    if not os.environ.get(ENVIRONMENT_VARIABLE) and not path.is_file():
        return None
    return load_or_create_master_key(path)


def key_command(arguments) -> int:
    """``dp-release key``: 0 on success (a refusal raises `KeyFileError` / `LedgerError`)."""
    path = Path(arguments.key_file or default_key_file())
    if arguments.bind is None:
        if path.exists() or path.is_symlink():
            raise KeyFileError(
                f"--key-file {str(path)!r}: a file exists there; a key file is never "
                "overwritten (the releases made under it could no longer be re-run). Name "
                "a new file with --key-file PATH"
            )
        beside = [home for home, _, _ in used_homes()] if arguments.new_home else []
        if not arguments.new_home:
            check_new_key(path, "dp-release key")
        try:
            key = create_key_file(path)
        except FileExistsError:  # created meanwhile by another process
            raise KeyFileError(
                f"--key-file {str(path)!r}: a file was created there meanwhile; a key file "
                "is never overwritten. Name a new file with --key-file PATH"
            ) from None
        check_key_file(path)
        if arguments.new_home:
            new_cap = {"key_file": str(path), "fingerprint": key.fingerprint, "beside": beside}
            register_home(dp_pipeline_home(), new_cap={**new_cap, "at": _now()})
        _say(
            arguments,
            {
                "key_file": str(path),
                "fingerprint": key.fingerprint,
                "created": True,
                **({"new_home": True} if arguments.new_home else {}),
            },
            f"created master key {str(path)!r} (fingerprint {key.fingerprint}); keep it "
            "secret and backed up: re-running a release id needs the same key"
            + (
                "; a separate cap on purpose, recorded in the user's registry of homes"
                if arguments.new_home
                else ""
            ),
        )
        return 0
    key = existing_key(arguments.key_file)
    if key is None:
        raise KeyFileError(
            f"--bind: no master key at {str(path)!r} and ${ENVIRONMENT_VARIABLE} is not set; "
            "give the key to bind (--key-file PATH)"
        )
    with Ledger(arguments.bind, key=key) as target:
        previous = move_binding(key, target, key_file=path)
        shown = target.location.shown
    was = "bound to no ledger" if previous is None else f"bound to {previous['place']!r}"
    _say(
        arguments,
        {
            "fingerprint": key.fingerprint,
            "ledger": shown,
            "previous": None if previous is None else previous["place"],
        },
        f"master key {key.fingerprint} ({was}) is now bound to the ledger {shown!r}; the "
        "move is recorded in both ledgers and the dp_pipeline home"
        + (
            " (the old ledger could not be opened to record it: this run has no "
            "credentials for it, e.g. PGPASSWORD or the password file; until the move is "
            "recorded there it still takes runs from a key file or home that names it, "
            "so drop it or keep its credentials from those runs)"
            if previous is not None and previous.get("unreached")
            else ""
        ),
    )
    return 0


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _say(arguments, described: dict, line: str) -> None:
    print(json.dumps(described, sort_keys=True) if arguments.json else line)
