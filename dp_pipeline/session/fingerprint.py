"""A session query's keyed fingerprint of the DataFrame it reads: the same rows, the same one.

Guarantee. `frame_fingerprint` is HMAC-SHA256, under a subkey of the `MasterKey` (label
``session-data``), of an order-independent digest of the rows of the columns a query
reads (sorted by name), so that the same data gives the same fingerprint however its
rows are ordered or partitioned, and other data (a row added, removed or changed) gives
another one, except with negligible probability. The ledger records it as the query's
input fingerprint: the same data under a renamed population is refused there
(`Ledger.record_input`). The noise is salted with the ledger's id instead
(`dp_pipeline.session.plan.session_digest`), which is the same on every engine: the
digests below differ between pandas and Spark. Keyed: the ledger holds no plain
digest of the data that could confirm a guess of it.

- pandas: pandas' own 64-bit row hashes (``hash_pandas_object``, SipHash of each row's
  values, their dtypes included), sorted, then SHA-256 of them and the row count:
  vectorized, one pass, the rows stay in the process.
- Spark: each row's SHA-256 (of its JSON, in the JVM, on the executors), summed exactly
  as four 60-bit integers (DECIMAL(38,0)), with the row count, in one aggregation job:
  order-independent, and no row is collected to the driver, only five numbers.

It recognises a copy of the same rows, not a near copy: an analyst who changes the data
on purpose gets another fingerprint, and those rows are then charged as other data.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Sequence

import numpy as np
import pandas as pd

from dp_pipeline.randomness import MasterKey

__all__ = ["frame_fingerprint"]

_LABEL = b"session-data"
_SPARK_PARTS = 4  # 60-bit pieces of each row's SHA-256 summed (240 bits in all)


def frame_fingerprint(df, columns: Sequence[str], engine: str, key: MasterKey) -> str:
    """The keyed fingerprint (64 hex digits) of ``df``'s rows in ``columns``."""
    names = sorted(dict.fromkeys(columns))
    summary = _spark_summary(df, names) if engine == "spark" else _pandas_summary(df, names)
    framed = json.dumps([engine, names, summary], separators=(",", ":")).encode()
    return key.hmac_sha256(_LABEL, framed).hex()


def _pandas_summary(df: pd.DataFrame, names: list[str]) -> list:
    hashes = pd.util.hash_pandas_object(df[names], index=False).to_numpy(dtype=np.uint64)
    ordered = np.sort(hashes)  # the row order is not part of the data
    dtypes = [str(df[name].dtype) for name in names]
    return [len(ordered), dtypes, hashlib.sha256(ordered.astype(">u8").tobytes()).hexdigest()]


def _spark_summary(df, names: list[str]) -> list:
    F = importlib.import_module("pyspark.sql.functions")  # optional: only for Spark frames

    row = F.sha2(F.to_json(F.struct(*[F.col(f"`{name}`") for name in names])), 256)
    sums = [
        F.sum(F.conv(F.substring(row, 1 + 15 * part, 15), 16, 10).cast("decimal(38,0)"))
        for part in range(_SPARK_PARTS)
    ]
    (result,) = df.agg(F.count(F.lit(1)), *sums).collect()
    dtypes = [df.schema[name].dataType.simpleString() for name in names]
    return [int(result[0]), dtypes, [str(value) for value in result[1:]]]
