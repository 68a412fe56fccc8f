"""Input fingerprints: a keyed HMAC of the input's bytes, never the data itself.

The ledger stores the fingerprint to refuse a release id on different data.
It is HMAC-SHA256 under a subkey of the `MasterKey` (label
``input-fingerprint``) of a SHA-256 digest over every file of the input, in
sorted relative-path order, each framed by its path and length. Without the
key the fingerprint reveals nothing about the data (HMAC is a PRF), and it
cannot be used to test guesses of the input.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from dp_pipeline.randomness import MasterKey

__all__ = ["input_fingerprint"]

_BLOCK = 1 << 20


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if path.is_dir():
        # Skip Spark/Hadoop bookkeeping files (_SUCCESS, .crc): not data.
        return sorted(
            p
            for p in path.rglob("*")
            if p.is_file() and not p.name.startswith(("_", ".")) and not p.name.endswith(".crc")
        )
    raise FileNotFoundError(f"input path {str(path)!r} does not exist")


def input_fingerprint(master: MasterKey, path: str | os.PathLike[str]) -> str:
    """The keyed fingerprint (64 hex digits) of the file or directory at ``path``."""
    root = Path(path)
    digest = hashlib.sha256()
    files = _files(root)
    if not files:
        raise FileNotFoundError(f"input path {str(root)!r} holds no data files")
    for file in files:
        name = (file.relative_to(root) if root.is_dir() else Path(file.name)).as_posix()
        digest.update(len(name).to_bytes(8, "big") + name.encode())
        digest.update(file.stat().st_size.to_bytes(8, "big"))
        with file.open("rb") as handle:
            while block := handle.read(_BLOCK):
                digest.update(block)
    return master.hmac_sha256(b"input-fingerprint", digest.digest()).hex()
