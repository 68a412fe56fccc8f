"""``dp-release ledger``: what a ledger records, read without changing it, or one abort.

Reading never creates a ledger (nor its folder); ``--abort`` needs the ledger's key
(its rows are sealed under it) and is the ledger's own rule (`Ledger.abort`).
"""

from __future__ import annotations

import json
from fractions import Fraction

from dp_pipeline.errors import LedgerError
from dp_pipeline.release.key_command import existing_key
from dp_pipeline.release.ledger.phrases import spend_phrase
from dp_pipeline.release.ledger.store import Ledger
from dp_pipeline.release.ledger_location import ledger_location
from dp_pipeline.release.ledger_report import summaries, summary_table
from dp_pipeline.release.locations import default_key_file, default_ledger
from dp_pipeline.release.outcome import public_location
from dp_pipeline.release.plan.text import exact_and_decimal
from dp_pipeline.release.protocol import HELD
from dp_pipeline.release.spec.load import load_spec
from dp_pipeline.release.spec.model import SpecError

__all__ = ["ledger_command"]


def _cap(cap: dict) -> str:
    """A cap's exact fractions with their decimals: ``epsilon=4, delta=1/10000 (0.0001)``."""
    if cap.get("rho") is not None:
        return f"rho={exact_and_decimal(Fraction(cap['rho']))}"
    epsilon, delta = (exact_and_decimal(Fraction(cap[name])) for name in ("epsilon", "delta"))
    return f"epsilon={epsilon}, delta={delta}"


def ledger_command(arguments) -> int:
    """``dp-release ledger``: the ledger's populations and releases, or ``--abort ID``."""
    if arguments.ledger_path is None and arguments.spec is not None:
        arguments.ledger_path = load_spec(arguments.spec).ledger_path  # as run finds it
    if arguments.ledger_path is None:
        arguments.ledger_path = _default(default_ledger, "--ledger")
    location = ledger_location(str(arguments.ledger_path))
    if location.path is not None and not location.path.exists():
        # Reading a ledger never creates one (nor its folder): a mistyped path leaves
        # nothing behind for a later run to reserve in.
        return _no_ledger(arguments, location)
    # The key verifies the rows (and an abort needs it); never created by reading.
    key = existing_key(arguments.key_file or _default(default_key_file, "--key-file"))
    with Ledger(arguments.ledger_path, key=key) as ledger:
        return _ledger_report(arguments, ledger)


def _no_ledger(arguments, location) -> int:
    """What `dp-release ledger` says of a SQLite path that holds no ledger (yet)."""
    missing = (
        f"no ledger at {location.shown} (the first `dp-release run` that reserves creates "
        "it; check the path or $DP_PIPELINE_HOME)"
    )
    if arguments.abort or arguments.population:
        flag = f"--abort {arguments.abort}" if arguments.abort else "--population"
        raise LedgerError(f"{flag}: {missing}")
    if arguments.json:
        described = {"ledger": public_location(str(arguments.ledger_path)), "populations": []}
        print(json.dumps(described, sort_keys=True, default=str))
    else:
        print(f"{missing}: no releases yet")
    return 0


def _ledger_report(arguments, ledger: Ledger) -> int:
    if arguments.abort:
        ledger.abort(arguments.abort)
        print(
            f"release {arguments.abort}: aborted (its run read nothing); its reservation no "
            "longer counts"
        )
        return 0
    populations = ledger.populations()
    if arguments.population:
        if arguments.population not in populations:
            raise LedgerError(
                f"--population {arguments.population!r}: not in the ledger "
                f"{ledger.location} (known: {', '.join(populations) or 'none'})"
            )
        populations = {arguments.population: populations[arguments.population]}
    rows = ledger.rows_check(populations)  # before any sum: verified, or said not to be
    found = summaries(ledger, arguments.population)
    if arguments.json:
        described = {
            "ledger": public_location(str(arguments.ledger_path)),
            "rows": rows.to_dict(),
            "populations": [item.to_dict() for item in found],
        }
        print(json.dumps(described, sort_keys=True, default=str))
        return 0
    if not populations:
        print(f"ledger {ledger.location}: no releases yet")
    else:
        print(summary_table(found))
        print(rows.text)
        print()
    for name, cap in populations.items():
        _, left = ledger.spent(name)
        print(f"population {name} (cap {_cap(cap)}): {left}")
        print(f"  {'release id':<28}{'state':<12}{'reserved at':<27}{'cumulative after'}")
        for entry in ledger.history(name):
            # An open reservation names the run (host:pid) that last held it.
            held = entry.state in HELD
            print(
                f"  {entry.release_id:<28}{entry.state:<12}{entry.reserved_at:<27}"
                f"{spend_phrase(entry.cumulative, cap)}" + (f" (run {entry.owner})" if held else "")
            )
    return 0


def _default(location, flag: str) -> str:
    """The dp_pipeline home's file, or a `SpecError` naming the flag that avoids it."""
    try:
        return location()
    except ValueError as error:  # a relative $DP_PIPELINE_HOME
        raise SpecError([f"{flag}: not given, and {error}"], "command line") from None
