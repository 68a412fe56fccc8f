"""The Spark noise step: persisted true aggregates -> lazy noisy DataFrames, one per query.

Noise is a grouped ``applyInArrow`` over the declared noise partitions running
the shared `dp_pipeline.udfs` code (or the same code on the driver for small
releases), which also completes the domain (every declared cell, zero counts
included), so the release is bit-identical to the pandas engine's and
independent of executors, cores, shuffle partitions and task retries.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as sf
from pyspark.sql.types import (
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from dp_pipeline.query.spec import QuerySpec
from dp_pipeline.udfs.noise import (
    CELL_COLUMN,
    MEASURES,
    PARTITION_COLUMN,
    TABLE_COLUMN,
    arrow_cells_noise_function,
    arrow_noise_function,
    noisy_dense,
    output_value_types,
)

__all__ = [
    "DRIVER_NOISE_CELLS",
    "collect_noisy_cells",
    "noisy_cells",
    "noisy_table",
    "output_schema",
]

# Releases of up to this many declared cells (all tables together) are noised on the
# driver by `collect_noisy_cells`; larger ones by the Spark noise job. The driver
# samples 4-6 million cells a second (one core, the demo's discrete Gaussians,
# 2026-12-01), and the Spark job costs ~1-1.5 s of stage and Arrow overhead whatever
# its size (bench_release: 1.6 s for the demo's 764k cells, of which sampling is
# 0.13-0.2 s). At 10 million cells the driver needs ~2 s, about what the job needs
# with its sampling spread over a few executor cores, so above that the job wins;
# it also spares the driver the dense true-value vectors (8 bytes per cell and measure).
DRIVER_NOISE_CELLS = 10_000_000


def output_schema(df, spec: QuerySpec):
    """(Spark schema of ``spec``'s released table over ``df``, Arrow types of its key columns)."""
    from pyspark.sql.pandas.types import to_arrow_type

    # Key types come from the domains, not the input: int64 or string whatever the
    # input's column types (int32 from a CSV, float64 with NaN from pandas), so every
    # engine and input format publishes the same schema.
    key_fields = [
        StructField(d.column, LongType() if d.kind == "int" else StringType(), nullable=False)
        for d in spec.cells.domains
    ]
    value_fields = [
        StructField(
            name,
            LongType() if str(kind) == "int64" else DoubleType(),
            False,
        )
        for name, kind in output_value_types(spec)
    ]
    key_types = {f.name: to_arrow_type(f.dataType) for f in key_fields}
    return StructType(key_fields + value_fields), key_types


def noisy_table(aggregates, index: int, spec: QuerySpec, df, wrap_udf=None):
    """The lazy noisy DataFrame of query ``index`` of `aggregate_queries`' output.

    One row per declared cell (zero counts included): the key columns with the
    input's types, then the released values. Noise is added per noise partition
    by the shared Arrow UDF (`dp_pipeline.udfs.noise`).
    """
    partitions = min(spec.noise_partitions, spec.cells.total)
    value_names = [name for name, _, _ in spec.measures()]
    source = {"count": "n", "sum": "s"}
    cells = aggregates.filter(
        (sf.col(TABLE_COLUMN) == sf.lit(index)) & (sf.col(CELL_COLUMN) >= 0)
    ).select(
        sf.col(CELL_COLUMN),
        (sf.col(CELL_COLUMN) % sf.lit(spec.noise_partitions)).alias(PARTITION_COLUMN),
        *[
            sf.coalesce(sf.col(source[name]), sf.lit(0)).cast("long").alias(name)
            for name in value_names
        ],
    )
    markers = df.sparkSession.range(partitions).select(
        sf.lit(-1).cast("long").alias(CELL_COLUMN),
        sf.col("id").alias(PARTITION_COLUMN),
        *[sf.lit(0).cast("long").alias(name) for name in value_names],
    )
    schema, key_types = output_schema(df, spec)
    function = arrow_noise_function(spec, key_types)
    if wrap_udf is not None:
        function = wrap_udf(function)
    return cells.unionByName(markers).groupBy(PARTITION_COLUMN).applyInArrow(function, schema)


def noisy_cells(aggregates, specs: Sequence[QuerySpec], spark):
    """One lazy DataFrame with the noisy integer vectors of every query's declared cells.

    Columns ``_dp_table`` (index into ``specs``), ``_cell``, ``count``, ``sum``
    (noisy, before `dp_pipeline.udfs.noise.release_columns`; 0 where a query has
    no such measure). One grouped Arrow UDF over all (query, noise partition)
    groups adds the same noise as `noisy_table` would, query by query; this is
    what a release uses to collect many tables in one Spark job.
    """
    partition = None
    for index, spec in enumerate(specs):
        condition = sf.col(TABLE_COLUMN) == sf.lit(index)
        value = sf.col(CELL_COLUMN) % sf.lit(spec.noise_partitions)
        partition = (
            sf.when(condition, value) if partition is None else partition.when(condition, value)
        )
    cells = aggregates.filter(sf.col(CELL_COLUMN) >= 0).select(
        sf.col(TABLE_COLUMN).cast("int").alias(TABLE_COLUMN),
        sf.col(CELL_COLUMN),
        partition.cast("long").alias(PARTITION_COLUMN),
        sf.coalesce(sf.col("n"), sf.lit(0)).cast("long").alias("count"),
        sf.coalesce(sf.col("s"), sf.lit(0)).cast("long").alias("sum"),
    )
    marker_rows = [
        (index, -1, p, 0, 0)
        for index, spec in enumerate(specs)
        for p in range(min(spec.noise_partitions, spec.cells.total))
    ]
    markers = spark.createDataFrame(
        marker_rows,
        f"{TABLE_COLUMN} int, {CELL_COLUMN} long, {PARTITION_COLUMN} long, count long, sum long",
    )
    schema = StructType(
        [
            StructField(TABLE_COLUMN, IntegerType(), False),
            StructField(CELL_COLUMN, LongType(), False),
        ]
        + [StructField(name, LongType(), False) for name in MEASURES]
    )
    return (
        cells.unionByName(markers)
        .groupBy(TABLE_COLUMN, PARTITION_COLUMN)
        .applyInArrow(arrow_cells_noise_function(list(specs)), schema)
    )


_CELLS_SCHEMA = pa.schema(
    [(TABLE_COLUMN, pa.int32()), (CELL_COLUMN, pa.int64())]
    + [(name, pa.int64()) for name in MEASURES]
)


def collect_noisy_cells(
    aggregates,
    specs: Sequence[QuerySpec],
    spark,
    *,
    truth: bool = False,
    driver_cells: int = DRIVER_NOISE_CELLS,
):
    """(`noisy_cells` collected as an Arrow table, the true cells or None), noised on the driver.

    ``aggregates``: `aggregate_queries`' DataFrame or its ``collect=True`` Arrow table.

    When all queries together declare at most ``driver_cells`` cells, the
    non-empty cells of ``aggregates`` (``_dp_table``, ``_cell``, ``n``, ``s``
    and, with ``truth``, ``true_n``, ``true_s``) are collected in one job and
    the noise is added here by `dp_pipeline.udfs.noise.noisy_dense`: the same
    `noisy_partition` call per (query, noise partition) as the Spark noise job,
    hence bit-identical values, without that job's fixed cost (see
    `DRIVER_NOISE_CELLS`). Larger releases run `noisy_cells` and collect its
    output. The noisy table has one row per declared cell, in (query, cell) order
    when noised here; ``truth`` gives the collected aggregates (non-empty
    cells only, before bounding) for accuracy reports on synthetic data.
    """
    specs = list(specs)
    columns = [TABLE_COLUMN, CELL_COLUMN, "n", "s"] + (["true_n", "true_s"] if truth else [])
    if isinstance(aggregates, pa.Table):  # aggregate_queries(..., collect=True)
        collected = aggregates.filter(pc.greater_equal(aggregates.column(CELL_COLUMN), 0))
        collected = collected.select(columns)
        if sum(spec.cells.total for spec in specs) > driver_cells:
            frame = spark.createDataFrame(aggregates)
            return noisy_cells(frame, specs, spark).toArrow(), (collected if truth else None)
        return _noisy_on_driver(collected, specs), (collected if truth else None)
    valid = aggregates.filter(sf.col(CELL_COLUMN) >= 0)
    if sum(spec.cells.total for spec in specs) > driver_cells:
        true_cells = None
        if truth:
            true_cells = valid.select(TABLE_COLUMN, CELL_COLUMN, "true_n", "true_s").toArrow()
        return noisy_cells(aggregates, specs, spark).toArrow(), true_cells
    collected = valid.select(*columns).toArrow()
    return _noisy_on_driver(collected, specs), (collected if truth else None)


def _noisy_on_driver(collected, specs: Sequence[QuerySpec]):
    """`noisy_cells` output from the collected non-empty cells (``n``, ``s``)."""
    tables = collected.column(TABLE_COLUMN).to_numpy()
    cells = collected.column(CELL_COLUMN).to_numpy()
    present = {
        "count": collected.column("n").fill_null(0).to_numpy(),
        "sum": collected.column("s").fill_null(0).to_numpy(),
    }
    parts = []
    for index, spec in enumerate(specs):
        mine = tables == index
        total = spec.cells.total
        true_values = {}
        for name, _, _ in spec.measures():
            dense = np.zeros(total, dtype=np.int64)
            dense[cells[mine]] = present[name][mine]
            true_values[name] = dense
        noisy = noisy_dense(spec, true_values)
        zeros = np.zeros(total, dtype=np.int64)
        arrays = [pa.array(np.full(total, index, np.int32)), pa.array(np.arange(total))]
        arrays += [pa.array(noisy.get(name, zeros)) for name in MEASURES]
        parts.append(pa.Table.from_arrays(arrays, schema=_CELLS_SCHEMA))
    return pa.concat_tables(parts)
