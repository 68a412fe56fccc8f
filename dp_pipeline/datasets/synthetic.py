"""Deterministic synthetic census microdata (TEST DATA: numpy Generator, never noise).

One row per person with the columns the demo spec tabulates: ``person_id``,
``county`` (1..3143, skewed sizes), ``state`` (1..51, derived from county),
``age`` (0..115), ``sex``, ``race``, ``hispanic``, ``household_size`` (1..7),
``tenure`` and ``income`` (integer dollars; a few are above the demo's
clamping bound on purpose). Rows are generated in chunks of ``CHUNK_ROWS``,
each from its own seed ``(seed, chunk index)``, so any size is reproducible
bit for bit and a larger file starts with the rows of a smaller one.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dp_pipeline.errors import DPValueError

__all__ = ["CHUNK_ROWS", "census_chunk", "write_census_sample"]

CHUNK_ROWS = 1_000_000
COUNTIES = 3143
STATES = 51
SEXES = ("F", "M")
RACES = ("white", "black", "aian", "asian", "nhpi", "other", "multiple")
RACE_WEIGHTS = (0.60, 0.13, 0.01, 0.06, 0.003, 0.087, 0.11)
TENURES = ("owned", "rented", "group_quarters")
TENURE_WEIGHTS = (0.64, 0.33, 0.03)
GENERATOR_VERSION = 1


def _county_weights() -> np.ndarray:
    # Zipf-like county sizes, shuffled deterministically so big counties spread over states.
    sizes = 1.0 / np.arange(1, COUNTIES + 1) ** 0.9
    order = np.random.Generator(np.random.PCG64(12345)).permutation(COUNTIES)
    return sizes[order] / sizes.sum()


def _age_weights() -> np.ndarray:
    ages = np.arange(116)
    weights = np.where(ages < 65, 1.0, np.exp(-(ages - 65) / 9.0))
    return weights / weights.sum()


def census_chunk(seed: int, index: int, rows: int) -> pa.Table:
    """Chunk ``index`` of the sample: ``rows`` persons, ids from index * CHUNK_ROWS."""
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, index])))
    county = rng.choice(COUNTIES, size=rows, p=_county_weights()).astype(np.int32) + 1
    state = ((county - 1) * STATES // COUNTIES + 1).astype(np.int32)
    age = rng.choice(116, size=rows, p=_age_weights()).astype(np.int32)
    sex = rng.integers(0, 2, size=rows).astype(np.int8)
    race = rng.choice(len(RACES), size=rows, p=np.array(RACE_WEIGHTS) / sum(RACE_WEIGHTS))
    hispanic = (rng.random(rows) < 0.19).astype(np.int8)
    household = np.minimum(rng.poisson(1.6, size=rows) + 1, 7).astype(np.int32)
    tenure = rng.choice(3, size=rows, p=TENURE_WEIGHTS)
    income = np.where(age >= 16, np.round(rng.lognormal(10.4, 0.9, size=rows)), 0).astype(np.int64)
    ids = np.arange(index * CHUNK_ROWS, index * CHUNK_ROWS + rows, dtype=np.int64)

    def labels(codes, values):
        return pa.DictionaryArray.from_arrays(
            pa.array(codes.astype(np.int8)), pa.array(values)
        ).dictionary_decode()

    return pa.table(
        {
            "person_id": ids,
            "county": county,
            "state": state,
            "age": age,
            "sex": labels(sex, SEXES),
            "race": labels(race, RACES),
            "hispanic": labels(hispanic, ("no", "yes")),
            "household_size": household,
            "tenure": labels(tenure, TENURES),
            "income": income,
        }
    )


def write_census_sample(
    path: str | os.PathLike[str], persons: int, seed: int = 2026, progress=None
) -> Path:
    """Write ``persons`` synthetic persons to one Parquet file at ``path`` (atomically)."""
    if persons < 1:
        raise DPValueError(f"persons must be >= 1, got {persons}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    chunks = (persons + CHUNK_ROWS - 1) // CHUNK_ROWS
    writer = None
    try:
        for index in range(chunks):
            rows = min(CHUNK_ROWS, persons - index * CHUNK_ROWS)
            table = census_chunk(seed, index, rows)
            if writer is None:
                writer = pq.ParquetWriter(temporary, table.schema)
            writer.write_table(table, row_group_size=min(rows, 256 * 1024))
            if progress is not None:
                progress(f"synthetic census: {index * CHUNK_ROWS + rows:,} / {persons:,} persons")
        writer.close()
        writer = None
        os.replace(temporary, path)
    finally:
        if writer is not None:
            writer.close()
        if temporary.exists():
            temporary.unlink()
    return path


def cached_census_sample(cache_dir: str | os.PathLike[str], persons: int, seed: int, progress=None):
    """The sample for (persons, seed) under ``cache_dir``, generated on first use.

    Test data for benchmarks: the file found in the cache is used as it is. A release
    uses `dp_pipeline.release.sources.synthetic.sealed_census_sample`, which verifies it.
    """
    path = Path(cache_dir) / f"census_v{GENERATOR_VERSION}_{persons}_{seed}.parquet"
    if not path.exists():
        write_census_sample(path, persons, seed, progress)
    return path
