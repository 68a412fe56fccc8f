"""Where a release's `MasterKey` comes from.

Noise streams are keyed by (master key, release id, table, noise partition),
so a re-run of a release id must use the same key: re-emission then redraws
identical noise instead of a second, independent (and privacy-costly) draw.
The key is therefore persistent: the environment variable
``DP_PIPELINE_MASTER_KEY`` (64 hex digits) if set, otherwise the spec's
``run.key_file``, created on first use from the OS CSPRNG with mode 0600.
The key's bytes are never printed; only its public fingerprint is.
"""

from __future__ import annotations

import os
from pathlib import Path

from dp_pipeline.randomness import MasterKey

__all__ = ["ENVIRONMENT_VARIABLE", "load_or_create_master_key"]

ENVIRONMENT_VARIABLE = "DP_PIPELINE_MASTER_KEY"


def load_or_create_master_key(key_file: str | os.PathLike[str], progress=None) -> MasterKey:
    """The master key from ``$DP_PIPELINE_MASTER_KEY``, else ``key_file`` (created if absent)."""
    if os.environ.get(ENVIRONMENT_VARIABLE):
        return MasterKey.from_env(ENVIRONMENT_VARIABLE)
    path = Path(key_file)
    if path.exists():
        return MasterKey.from_file(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    key = MasterKey.generate()
    # O_EXCL: two first runs racing cannot each write a different key.
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return MasterKey.from_file(path)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(_hex(key) + "\n")
    if progress is not None:
        progress(
            f"created a new master key at {path} (fingerprint {key.fingerprint}); keep it "
            "secret and backed up: re-running a release id needs the same key"
        )
    return key


def _hex(key: MasterKey) -> str:
    # The only place the key's bytes leave memory: into its own 0600 file.
    return key._key.hex()
