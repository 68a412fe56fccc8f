"""The synthetic input of a release without one: generated, sealed under the key, verified.

A release on synthetic census microdata publishes ``accuracy.json``, its noisy
cells scored against the true ones. The truth is computed from the cached
sample file, so a file planted in the cache (real microdata renamed as the
sample) would publish exact errors against real data. The cache is therefore
trusted only through a seal: when the sample is generated, an HMAC of its
keyed fingerprint (`dp_pipeline.release.sources.fingerprint.files_fingerprint`)
under the master key (label ``synthetic-sample-seal``, so no published
fingerprint is a seal) is written beside it. Without the key a seal cannot be
made for other bytes (HMAC is a PRF). A sample whose seal is missing or wrong
is generated again; the release then checks that the file it fingerprints
before reading is the sealed one (`check_sample`).
"""

from __future__ import annotations

import hmac
import os
from pathlib import Path

from dp_pipeline.datasets.synthetic import GENERATOR_VERSION, write_census_sample
from dp_pipeline.randomness import MasterKey
from dp_pipeline.release.sources.fingerprint import files_fingerprint
from dp_pipeline.release.spec.model import SpecError

__all__ = ["check_sample", "sealed_census_sample"]

_LABEL = b"synthetic-sample-seal"


def _seal(master: MasterKey, fingerprint: str) -> str:
    return master.hmac_sha256(_LABEL, bytes.fromhex(fingerprint)).hex()


def sealed_census_sample(
    cache_dir: str | os.PathLike[str], persons: int, seed: int, master: MasterKey, progress=None
) -> tuple[Path, str]:
    """The sample for (persons, seed) under ``cache_dir`` and its keyed fingerprint.

    The cached file is used only when its seal verifies under ``master``; otherwise
    it is generated again (atomically) and sealed. Returns the path and the file's
    keyed fingerprint, which the release's own fingerprint must equal.
    """
    path = Path(cache_dir) / f"census_v{GENERATOR_VERSION}_{persons}_{seed}.parquet"
    seal = path.with_name(path.name + ".seal")
    if path.is_file() and seal.is_file():
        fingerprint = files_fingerprint(master, path, (path,))
        if hmac.compare_digest(seal.read_text().strip(), _seal(master, fingerprint)):
            return path, fingerprint
        if progress is not None:
            progress(
                "synthetic census: the cached sample is not sealed under this key; "
                "generating it again"
            )
    write_census_sample(path, persons, seed, progress)
    fingerprint = files_fingerprint(master, path, (path,))
    temporary = seal.with_name(f".{seal.name}.tmp-{os.getpid()}")
    temporary.write_text(_seal(master, fingerprint) + "\n")
    os.replace(temporary, seal)
    return path, fingerprint


def check_sample(path: Path, expected: str | None, fingerprint: str) -> None:
    """Refuse a synthetic sample whose fingerprint is not the sealed one (changed meanwhile)."""
    if expected is not None and not hmac.compare_digest(expected, fingerprint):
        raise SpecError(
            [
                "the synthetic sample changed after it was verified against its seal; "
                "nothing was reserved or read; run again (it is then generated anew)"
            ],
            source=f"input {str(path)!r}",
        )
