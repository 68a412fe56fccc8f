"""Where a ledger lives: `dp_pipeline.release.ledger_location`, kept importable here."""

from dp_pipeline.release.ledger_location import (
    LedgerLocation,
    conninfo_pairs,
    ledger_location,
    local_ledger_folder,
    mask_url,
    public_conninfo,
)

__all__ = [
    "LedgerLocation",
    "conninfo_pairs",
    "ledger_location",
    "local_ledger_folder",
    "mask_url",
    "public_conninfo",
]
