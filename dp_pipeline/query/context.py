"""Where a query runs: the master key, the stream labels' names and the noise partitions.

Kept apart from what is computed (`dp_pipeline.query.aggregations`, the selections'
parameters) so that a release plan can build and cost every query before any key
is loaded. The key never leaves the driver: `without_key` is the copy Spark tasks get.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dp_pipeline.errors import DPTypeError, DPValueError, InternalError
from dp_pipeline.query.domain import positive_int
from dp_pipeline.randomness import MasterKey

__all__ = ["DEFAULT_NOISE_PARTITIONS", "RunContext"]

DEFAULT_NOISE_PARTITIONS = 16


@dataclass(frozen=True)
class RunContext:
    """The key, the labels (release id, table, release digest) and the noise partitions.

    ``release_digest`` is the digest of the release a query belongs to
    (`dp_pipeline.release.ledger.identity`); empty in the library API, where the query's
    own digest identifies it. ``key`` is None only in copies shipped to Spark tasks.
    """

    key: MasterKey | None
    release_id: str
    table: str
    release_digest: str = ""
    noise_partitions: int = DEFAULT_NOISE_PARTITIONS

    @classmethod
    def build(
        cls,
        *,
        key: MasterKey,
        release_id: str,
        table: str,
        noise_partitions: int = DEFAULT_NOISE_PARTITIONS,
        release_digest: str = "",
    ) -> RunContext:
        """Validate the key and the names; raise naming the argument before any work."""
        if not isinstance(key, MasterKey):
            raise DPTypeError(f"key must be a dp_pipeline MasterKey, got {type(key).__name__}")
        for name, value in (("release_id", release_id), ("table", table)):
            if not isinstance(value, str) or not value:
                raise DPValueError(f"{name} must be a non-empty string, got {value!r}")
        return cls(
            key=key,
            release_id=release_id,
            table=table,
            release_digest=release_digest,
            noise_partitions=positive_int(noise_partitions, "noise_partitions"),
        )

    def without_key(self) -> RunContext:
        """This context without its master key (what Spark tasks receive)."""
        return replace(self, key=None)

    def master_key(self) -> MasterKey:
        """The master key (driver only); an internal error on a shipped copy."""
        if self.key is None:
            raise InternalError(
                f"query {self.table!r}: the master key was needed on a copy made for Spark tasks"
            )
        return self.key
