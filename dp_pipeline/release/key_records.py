"""A key file carries the ledger its key is bound to: a copy of the file carries it too.

The dp_pipeline home's ``bindings.json`` records which ledger each key is bound to, but
a home is one folder: a copied key file, another ``$DP_PIPELINE_HOME`` or another
``$HOME`` would not see it. So when a key read from a key file is bound to a ledger (or
moved to another one on purpose, ``dp-release key --bind``), a line is appended to the
key file itself:

``# dp_pipeline binding v1 {"ledger_id": ..., "place": ..., "site": ..., ...} MAC``

where MAC is an HMAC-SHA256 under a secret derived from the key (`MasterKey.hmac_sha256`,
label `RECORD_LABEL`) of the JSON text. The key's 64 hex digits stay the file's first
line and are never rewritten: the line is appended in place (same file, same inode, a
symbolic link followed), so a key is never lost to a failed write. The last line is the
key's binding; `MasterKey.from_file` ignores lines starting with ``#``.

Guarantee. `key_file_binding` returns the last recorded binding only if its code
verifies under the key; a line whose code does not (edited by hand, or copied from
another key's file) raises `KeyBindingError`, never a binding taken on trust. A key file
that cannot carry a line (32 raw bytes, or a file the user cannot write, such as a
read-only secret mount) is left as it is: its binding lives in the homes only, like a
key from ``$DP_PIPELINE_MASTER_KEY`` (`dp_pipeline.release.key_binding`).
"""

from __future__ import annotations

import hmac
import json
import os
from pathlib import Path

from dp_pipeline.errors import LedgerError
from dp_pipeline.randomness import MasterKey

__all__ = [
    "RECORD_LABEL",
    "RECORD_PREFIX",
    "KeyBindingError",
    "append_key_file_binding",
    "key_file_binding",
]

RECORD_PREFIX = "# dp_pipeline binding v1 "
RECORD_LABEL = b"dp_pipeline/key-file-binding/v1"
_KEY_TEXT = 64  # the key's hex digits: the first line of a key file that can carry records


class KeyBindingError(LedgerError):
    """A master key used with a ledger other than the one it is bound to."""


def _code(key: MasterKey, text: str) -> str:
    return key.hmac_sha256(RECORD_LABEL, text.encode()).hex()


def _record_lines(path: Path) -> list[str] | None:
    """The record lines of a key file (oldest first); None: it cannot carry records."""
    data = path.read_bytes()
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        return None  # 32 raw bytes
    lines = text.splitlines()
    if not lines or len(lines[0].strip()) != _KEY_TEXT:
        return None  # a key written otherwise (raw bytes, split lines): left as it is
    return [line for line in lines[1:] if line.startswith(RECORD_PREFIX)]


def key_file_binding(path: str | os.PathLike[str], key: MasterKey) -> dict | None:
    """The binding the key file at ``path`` records for ``key`` (its last line), or None.

    Raises `KeyBindingError` when a record's code does not verify under ``key``.
    """
    path = Path(path)
    lines = _record_lines(path) or []
    found = None
    for number, line in enumerate(lines, start=2):
        text, _, code = line[len(RECORD_PREFIX) :].rpartition(" ")
        try:
            record = json.loads(text)
        except ValueError:
            record = None
        if not isinstance(record, dict) or not hmac.compare_digest(code, _code(key, text)):
            raise KeyBindingError(
                f"master key file {str(path)!r}: its binding record on line {number} does "
                f"not verify under the key (fingerprint {key.fingerprint}): it was edited "
                "by hand or copied from another key's file, so the ledger the key is bound "
                "to cannot be told. Restore the key file from its backup; nothing was read "
                "or reserved"
            )
        found = record
    return found


def append_key_file_binding(path: str | os.PathLike[str], key: MasterKey, record: dict) -> bool:
    """Append ``record`` (authenticated under ``key``) to the key file at ``path``.

    Returns False, changing nothing, when the file cannot carry it (`_record_lines`) or
    cannot be written; then the homes alone record the binding.
    """
    path = Path(path)
    try:
        if _record_lines(path) is None:
            return False
        text = json.dumps(record, sort_keys=True, separators=(",", ":"))
        line = f"{RECORD_PREFIX}{text} {_code(key, text)}\n"
        # O_APPEND on the file itself: the key's line is never rewritten, the inode and
        # any link to the file stay; a file without a final newline gets one first.
        descriptor = os.open(path, os.O_WRONLY | os.O_APPEND)
    except OSError:
        return False
    with os.fdopen(descriptor, "a") as handle:
        if not path.read_bytes().endswith(b"\n"):
            handle.write("\n")
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())
    return True
